package hub

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"openxet/refusal"
	"openxet/store"
)

// orgMembers answers GET /api/organizations/{org}/members, as
// HfApi.list_organization_members reads it: each member as the Hub lists
// a user ("user", "fullname", "avatarUrl", "type"), with their role, in
// one page. Only those who read the organization as members (its members,
// its robot credentials) may list them; to anyone else, and for a name
// that is no organization, it is not found, as an unknown repo is.
func (h *Hub) orgMembers(c echo.Context) error {
	org := c.Param("org")
	id := h.cfg.Principal(c)
	if !id.Member(org) {
		return refusal.Wrap(refusal.ErrNotFound, "organization %s not found", org)
	}
	ms, err := h.store.Members(c.Request().Context(), org)
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(ms))
	for _, m := range ms {
		out = append(out, map[string]any{"user": m.User, "fullname": m.User, "avatarUrl": "", "type": "user",
			"isPro": false, "role": m.Role, "_id": store.HashName(m.User)[:24]})
	}
	return c.JSON(http.StatusOK, out)
}
