package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"openxet/server"
	"openxet/store"

	"openxet/store/accounts"
)

func credentialsCommand(env Env) *cli.Command {
	common := append(configFlags(storeKeys), remoteFlags(env)...)
	return &cli.Command{
		Name:  "credentials",
		Usage: "create, list and revoke credentials",
		Description: "Works offline against the data directory, or through the admin API of a running server when\n" +
			"--server (or OPENXET_SERVER) and OPENXET_TOKEN are given.",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "make a credential; its token is printed once",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "tenant", Required: true, Usage: "tenant the credential belongs to"},
					&cli.StringSliceFlag{Name: "scope", Value: cli.NewStringSlice("read"), Usage: "read, write (implies read) or admin; repeat for several"},
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				}, common...),
				Action: func(c *cli.Context) error {
					return credentialsCreate(c, env)
				},
			},
			{
				Name:  "list",
				Usage: "list credentials (never their secrets)",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "tenant", Usage: "only this tenant's"},
					&cli.BoolFlag{Name: "active", Usage: "only credentials that are not revoked"},
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				}, common...),
				Action: func(c *cli.Context) error {
					return credentialsList(c, env)
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke a credential by id",
				ArgsUsage: "ID",
				Flags:     common,
				Action: func(c *cli.Context) error {
					return credentialsRevoke(c, env)
				},
			},
		},
	}
}

// credentialsCreate is `credentials create`: it makes a credential and prints it with its token, once.
func credentialsCreate(c *cli.Context, env Env) error {
	var view server.CredentialView
	if err := remoteOrLocal(c, env, func(a *adminClient) error {
		return a.do(c.Context, "POST", "/credentials", map[string]any{"tenant": c.String("tenant"), "scopes": c.StringSlice("scope")}, &view)
	}, func(st *store.Store, _ Config) error {
		cred, tok, err := st.CreateCredential(c.Context, c.String("tenant"), c.StringSlice("scope"))
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		view = credentialView(cred)
		view.Token = tok
		return nil
	}); err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, view)
	}
	fmt.Fprintf(c.App.Writer, "id:     %s\ntenant: %s\nscopes: %s\ntoken:  %s\n(the token is shown once; store it now)\n",
		view.ID, view.Tenant, strings.Join(view.Scopes, ","), view.Token)
	return nil
}

// credentialsList is `credentials list`: it prints the credentials, optionally one tenant's or only active ones.
func credentialsList(c *cli.Context, env Env) error {
	var views []server.CredentialView
	if err := remoteOrLocal(c, env, func(a *adminClient) error {
		var out struct{ Credentials []server.CredentialView }
		path := "/credentials"
		if t := c.String("tenant"); t != "" {
			path += "?tenant=" + t
		}
		if err := a.do(c.Context, "GET", path, nil, &out); err != nil {
			return err
		}
		views = out.Credentials
		return nil
	}, func(st *store.Store, _ Config) error {
		cs, err := st.Credentials(c.Context, c.String("tenant"))
		if err != nil {
			return err
		}
		for _, cr := range cs {
			views = append(views, credentialView(cr))
		}
		return nil
	}); err != nil {
		return err
	}
	if c.Bool("active") {
		views = slices.DeleteFunc(views, func(v server.CredentialView) bool { return !v.Revoked.IsZero() })
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, views)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tSCOPES\tCREATED\tREVOKED")
	for _, v := range views {
		rev := "-"
		if !v.Revoked.IsZero() {
			rev = v.Revoked.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.ID, v.Tenant, strings.Join(v.Scopes, ","), v.Created.Format(time.RFC3339), rev)
	}
	return tw.Flush()
}

// credentialsRevoke is `credentials revoke`: it revokes the credential whose id is the argument.
func credentialsRevoke(c *cli.Context, env Env) error {
	id := c.Args().First()
	if id == "" {
		return cli.Exit("revoke needs the credential id", 2)
	}
	if err := remoteOrLocal(c, env, func(a *adminClient) error {
		return a.do(c.Context, "DELETE", "/credentials/"+id, nil, nil)
	}, func(st *store.Store, _ Config) error {
		if _, err := st.RevokeCredential(c.Context, id); err != nil {
			return cli.Exit(err.Error(), 1)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "revoked %s (servers on other processes stop accepting it within 10s)\n", id)
	return nil
}

func credentialView(c accounts.Credential) server.CredentialView {
	return server.CredentialView{ID: c.ID, Tenant: c.Tenant, Scopes: c.Scopes, Created: c.Created, Revoked: c.Revoked}
}

// remoteOrLocal runs remote through the admin API when --server (or
// OPENXET_SERVER) is set, else local on the store of the configured data
// directory, which it closes afterwards.
func remoteOrLocal(c *cli.Context, env Env, remote func(*adminClient) error, local func(*store.Store, Config) error) error {
	a, err := newAdminClient(c, env, false)
	if err != nil {
		return err
	}
	if a != nil {
		return remote(a)
	}
	cfg, err := loadConfig(c, env)
	if err != nil {
		return err
	}
	if err := existingIndex(cfg); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	st, err := openStore(c.Context, cfg, nil)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer st.Close()
	return local(st, cfg)
}

// existingIndex refuses a local command on a SQLite index that does not
// exist: run from another directory, it would make a fresh empty data
// directory and answer from it (a credential the real server rejects).
// Only serve creates an index; a postgres:// index is checked by opening it.
func existingIndex(cfg Config) error {
	if strings.HasPrefix(cfg.Index, "postgres://") || strings.HasPrefix(cfg.Index, "postgresql://") {
		return nil
	}
	if _, err := os.Stat(cfg.Index); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no index at %s: this command works on the data of an existing server. Run it where `openxet serve` keeps its data "+
			"(server.data_dir, now %s), give --data-dir or --config, or reach a running server with --server URL; nothing was created", cfg.Index, cfg.DataDir)
	} else if err != nil {
		return fmt.Errorf("index %s: %w", cfg.Index, err)
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
