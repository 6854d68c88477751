package hub

import (
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"openxet/store"

	"openxet/store/accounts"
)

// whoami answers GET /api/whoami-v2 as the Hub does for a user access
// token, so that `hf auth login`, `hf auth whoami`, HfApi.whoami and
// @huggingface/hub's whoAmI work with an openxet credential: the user is
// the tenant, the token's role follows the credential's scopes, and it
// belongs to no organisation.
func (h *Hub) whoami(c echo.Context) error {
	id := h.cfg.Principal(c)
	cred, err := h.cfg.Credential(c.Request().Context(), id.CredentialID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{
		"type":          "user",
		"id":            store.HashName(id.Tenant)[:24],
		"name":          id.Tenant,
		"fullname":      id.Tenant,
		"email":         nil,
		"emailVerified": false,
		"isPro":         false,
		"canPay":        false,
		"periodEnd":     nil,
		"avatarUrl":     "",
		"orgs":          []any{},
		"auth": map[string]any{
			"type": "access_token",
			"accessToken": map[string]any{
				// huggingface_hub stores a login under this name.
				"displayName": "openxet-" + id.Tenant + "-" + id.CredentialID,
				"role":        tokenRole(id.Scopes),
				"createdAt":   cred.Created.UTC().Format(hubTime),
			},
		},
		"openxet": map[string]any{"tenant": id.Tenant, "credential": id.CredentialID, "scopes": id.Scopes},
	})
}

// tokenRole names a credential's scopes as a Hub token role: "admin" for an
// admin credential, else "write" or "read".
func tokenRole(scopes []string) string {
	switch {
	case slices.Contains(scopes, accounts.ScopeAdmin):
		return "admin"
	case slices.Contains(scopes, accounts.ScopeWrite):
		return "write"
	}
	return "read"
}
