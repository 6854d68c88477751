package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"openxet/admin"
)

// remoteFlags select the admin API of a running server.
func remoteFlags(env Env) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "server", Usage: "base URL of a running openxet (env OPENXET_SERVER)"},
		&cli.StringFlag{Name: "token", Usage: "admin token for --server (env OPENXET_TOKEN; prefer the env var, flags show in ps)"},
	}
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
	return &adminClient{admin.Client{Base: strings.TrimRight(base, "/"), Token: tok}}, nil
}

// adminClient turns the admin API's refusals and transport errors into the
// command's exit.
type adminClient struct{ c admin.Client }

func (a *adminClient) do(ctx context.Context, method, path string, in, out any) error {
	if err := a.c.Do(ctx, method, path, in, out); err != nil {
		return a.exit(method, err)
	}
	return nil
}

// exit is the command's exit for an error of a call to the admin API.
func (a *adminClient) exit(method string, err error) error {
	return cli.Exit(fmt.Sprintf("%s %s: %v", method, a.c.Base, err), 1)
}
