package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// remoteFlags select the admin API of a running server.
func remoteFlags(env Env) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "server", Usage: "base URL of a running openxet (env OPENXET_SERVER)"},
		&cli.StringFlag{Name: "token", Usage: "admin token for --server (env OPENXET_TOKEN; prefer the env var, flags show in ps)"},
	}
}

type adminClient struct {
	base, token string
	http        *http.Client
}

func newAdminClient(c *cli.Context, env Env, required bool) (*adminClient, error) {
	base := c.String("server")
	if base == "" {
		base, _ = env("OPENXET_SERVER")
	}
	if base == "" {
		if !required {
			return nil, nil
		}
		base = "http://" + DefaultListen
	}
	tok := c.String("token")
	if tok == "" {
		tok, _ = env("OPENXET_TOKEN")
	}
	if tok == "" {
		return nil, cli.Exit("an admin token is needed: set OPENXET_TOKEN (or --token)", 2)
	}
	return &adminClient{base: strings.TrimRight(base, "/"), token: tok, http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// do sends a JSON request to the admin API and decodes a JSON answer into
// out; a refusal becomes an error carrying the server's message and hint.
func (a *adminClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+"/api/openxet/v1/admin"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.http.Do(req)
	if err != nil {
		return cli.Exit(fmt.Sprintf("%s %s: %v", method, a.base, err), 1)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if res.StatusCode >= 300 {
		var e struct{ Error, Message, Hint string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg := fmt.Sprintf("server refused (%d %s): %s", res.StatusCode, e.Error, e.Message)
			if e.Hint != "" {
				msg += "\nhint: " + e.Hint
			}
			return cli.Exit(msg, 1)
		}
		return cli.Exit(fmt.Sprintf("server answered %s", res.Status), 1)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
	}
	return nil
}
