// Package admin is a client of openxet's admin API
// (/api/openxet/v1/admin/…): the `openxet credentials` and `openxet limits`
// commands and the load scenarios use it. It knows the wire shape of a
// refusal and nothing of the server's internals.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client calls the admin API of one server with an admin token. The zero
// HTTP field means a client with a 30s timeout per request.
type Client struct {
	Base  string // the server's base URL, without a trailing slash
	Token string
	HTTP  *http.Client
}

// Error is a refusal the server answered, with the fields of docs/design.md §7.
type Error struct {
	Status  int
	Code    string
	Message string
	Hint    string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("server refused (%d %s): %s", e.Status, e.Code, e.Message)
	if e.Hint != "" {
		msg += "\nhint: " + e.Hint
	}
	return msg
}

// Do sends a JSON request to path under the admin API and decodes a JSON
// answer into out (when not nil). A refusal is an *Error.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Base, "/")+"/api/openxet/v1/admin"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if res.StatusCode >= 300 {
		var e struct{ Error, Message, Hint string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return &Error{Status: res.StatusCode, Code: e.Error, Message: e.Message, Hint: e.Hint}
		}
		return &Error{Status: res.StatusCode, Code: strings.ToLower(strings.ReplaceAll(http.StatusText(res.StatusCode), " ", "_")),
			Message: string(bytes.TrimSpace(data))}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// RepoVisibility is a repo's visibility as the admin API answers it.
type RepoVisibility struct {
	Repo       string `json:"repo"` // tenant/name
	Type       string `json:"type"` // model, dataset or space
	Visibility string `json:"visibility"`
}

// RepoVisibility reads the visibility of the repo tenant/name of type typ
// (model, dataset or space).
func (c *Client) RepoVisibility(ctx context.Context, typ, tenant, name string) (RepoVisibility, error) {
	var v RepoVisibility
	err := c.Do(ctx, "GET", "/repos/"+typ+"/"+tenant+"/"+name+"/visibility", nil, &v)
	return v, err
}

// SetRepoVisibility sets it: private, internal, public or protected.
func (c *Client) SetRepoVisibility(ctx context.Context, typ, tenant, name, visibility string) (RepoVisibility, error) {
	var v RepoVisibility
	err := c.Do(ctx, "PUT", "/repos/"+typ+"/"+tenant+"/"+name+"/visibility", map[string]string{"visibility": visibility}, &v)
	return v, err
}
