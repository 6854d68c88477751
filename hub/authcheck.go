package hub

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/refusal"

	"openxet/store/accounts"
)

// GET /api/{type}s/{ns}/{name}/auth-check[/write] (HfApi.auth_check): 200
// {} when the caller may read the repo (or change it, for /write), and
// otherwise the answer every repo route gives (repoID): 404 RepoNotFound
// for a repo it cannot see, existing or not; 403 for a write to one it may
// only read (another tenant's shared repo, or a credential without the
// write scope); without a token, 401 RepoNotFound unless an anonymous
// reader may read it.

func (h *Hub) authCheck(acc access) echo.HandlerFunc {
	return func(c echo.Context) error {
		r, err := h.apiRepo(c, acc)
		if err != nil {
			return err
		}
		if p := h.cfg.Principal(c); acc == forWrite && !(accounts.Credential{Scopes: p.Scopes}).Has(accounts.ScopeWrite) {
			return refusal.Wrap(refusal.ErrForbidden, "this credential of tenant %s may read %s but not change it: it has scope %s, writing needs write",
				p.Tenant, h.shown(r), strings.Join(p.Scopes, ", "))
		}
		return c.JSON(http.StatusOK, map[string]any{})
	}
}
