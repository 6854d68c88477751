package cli

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"openxet/admin"
)

// reposCommand is `openxet repos`: what an operator changes of a tenant's
// repos through the admin API (docs/sharing.md).
func reposCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "repos",
		Usage: "show and change a repo's visibility (through the admin API)",
		Description: "Talks to the admin API of a running server: --server (or OPENXET_SERVER, default\n" +
			"http://127.0.0.1:8080) and an admin token in OPENXET_TOKEN. A change applies to the next\n" +
			"request on every node (docs/sharing.md).",
		Subcommands: []*cli.Command{{
			Name:      "visibility",
			Usage:     "print a repo's visibility, or set it: private, internal, public or protected",
			ArgsUsage: "TENANT/NAME [VISIBILITY]",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "repo-type", Value: "model", Usage: "model, dataset or space"},
			}, remoteFlags(env)...),
			Action: func(c *cli.Context) error {
				if c.NArg() < 1 || c.NArg() > 2 {
					return cli.Exit("give TENANT/NAME and, to change it, a visibility (private, internal, public or protected)", 2)
				}
				tenant, name, ok := strings.Cut(c.Args().Get(0), "/")
				if !ok || tenant == "" || name == "" || strings.Contains(name, "/") {
					return cli.Exit(fmt.Sprintf("%q is not TENANT/NAME", c.Args().Get(0)), 2)
				}
				a, err := newAdminClient(c, env, true)
				if err != nil {
					return err
				}
				typ, method := c.String("repo-type"), "GET"
				var v admin.RepoVisibility
				if c.NArg() == 2 {
					method = "PUT"
					v, err = a.c.SetRepoVisibility(c.Context, typ, tenant, name, c.Args().Get(1))
				} else {
					v, err = a.c.RepoVisibility(c.Context, typ, tenant, name)
				}
				if err != nil {
					return a.exit(method, err)
				}
				fmt.Fprintf(c.App.Writer, "%s %s: %s\n", v.Type, v.Repo, v.Visibility)
				return nil
			},
		}},
	}
}
