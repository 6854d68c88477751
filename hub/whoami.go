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
// @huggingface/hub's whoAmI work with an openxet credential. For a
// personal token the user is its owner, with the organizations they
// belong to and their role in each, and the token's role (read, write or
// fineGrained, with its grants as the Hub's scoped entries). For a robot
// credential the user is its organization (the tenant), the token's role
// follows its scopes, and it belongs to no organization.
func (h *Hub) whoami(c echo.Context) error {
	id := h.cfg.Principal(c)
	cred, err := h.cfg.Credential(c.Request().Context(), id.CredentialID)
	if err != nil {
		return err
	}
	if id.User != nil {
		return c.JSON(http.StatusOK, personalWhoami(id, cred))
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

// personalWhoami is whoami's answer for a personal token of id.User.
func personalWhoami(id *Principal, cred accounts.Credential) map[string]any {
	u := id.User.User
	orgs := []any{}
	names := make([]string, 0, len(id.User.Roles))
	for org := range id.User.Roles {
		names = append(names, org)
	}
	slices.Sort(names)
	for _, org := range names {
		orgs = append(orgs, map[string]any{"type": "org", "name": org, "fullname": org,
			"id": store.HashName(org)[:24], "roleInOrg": id.User.Roles[org].String(), "isEnterprise": false, "avatarUrl": ""})
	}
	token := map[string]any{
		"displayName": cred.Name,
		"role":        tokenRole(id.Scopes),
		"createdAt":   cred.Created.UTC().Format(hubTime),
	}
	if len(cred.Grants) > 0 {
		token["role"] = "fineGrained"
		scoped := make([]any, 0, len(cred.Grants))
		for _, g := range cred.Grants {
			entity := map[string]any{"type": "org", "name": g.Namespace}
			if g.Name != "" {
				entity = map[string]any{"type": g.Type, "name": g.Namespace + "/" + g.Name}
			} else if g.Namespace == u.Name {
				entity["type"] = "user"
			}
			perms := []string{"repo.content.read"}
			if g.Role == accounts.RoleWrite {
				perms = append(perms, "repo.write")
			}
			scoped = append(scoped, map[string]any{"entity": entity, "permissions": perms})
		}
		token["fineGrained"] = map[string]any{"scoped": scoped, "global": []string{}, "canReadGatedRepos": false}
	}
	var email any
	if u.Email != "" {
		email = u.Email
	}
	return map[string]any{
		"type": "user", "id": store.HashName(u.Name)[:24], "name": u.Name, "fullname": u.Name,
		"email": email, "emailVerified": false, "isPro": false, "canPay": false, "periodEnd": nil, "avatarUrl": "",
		"orgs":    orgs,
		"auth":    map[string]any{"type": "access_token", "accessToken": token},
		"openxet": map[string]any{"user": u.Name, "token": id.CredentialID, "admin": u.Admin},
	}
}
