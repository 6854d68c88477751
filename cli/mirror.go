package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"openxet/mirror"
	"openxet/mirror/upstream"
	"openxet/server"
	"openxet/store"
)

// The mirror of an upstream Hub (docs/mirror.md): built here from
// [mirror], handed to the server, and driven by `openxet mirror pull` and
// `openxet mirror ls`.

var _ server.Mirror = (*mirror.Mirror)(nil)

// newMirror builds the mirror of cfg over st; nil when mirror.upstream is
// off. released tells the collector that evicted revisions dropped files.
func newMirror(cfg Config, st *store.Store, log *slog.Logger, released func()) (*mirror.Mirror, error) {
	if cfg.MirrorUpstream == "" {
		return nil, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("server.data_dir: %w", err)
	}
	cl, err := upstream.New(upstream.Options{BaseURL: cfg.MirrorUpstream, Token: cfg.MirrorUpstreamToken,
		MaxConns: cfg.MirrorMaxUpstreamConnections, UserAgent: "openxet-mirror/" + Version, AllowedHosts: cfg.MirrorAllowedHosts,
		// Relay spools are unlinked as they are made: nothing to clean up.
		SpoolDir: cfg.DataDir})
	if err != nil {
		return nil, fmt.Errorf("mirror.upstream: %w", err)
	}
	quota := cfg.MirrorQuota
	if quota < 0 {
		quota = 0
	}
	return mirror.New(mirror.Config{Store: st, Upstream: cl, UpstreamName: cfg.MirrorUpstream, Tenant: cfg.MirrorTenant,
		Visibility: cfg.MirrorVisibility, Refresh: cfg.MirrorRefresh, QuotaBytes: quota,
		MaxUpstreamConnections: cfg.MirrorMaxUpstreamConnections, DedupGlobal: cfg.DedupScope == "global",
		Released: released, Logger: log})
}

// mirrorKeys selects the keys the mirror commands read.
func mirrorKeys(s setting) bool {
	return storeKeys(s) || strings.HasPrefix(s.key, "mirror.") || s.key == "server.dedup_scope"
}

func mirrorCommand(env Env) *cli.Command {
	flags := func(extra ...cli.Flag) []cli.Flag {
		return append(append(extra, configFlags(mirrorKeys)...), remoteFlags(env)...)
	}
	return &cli.Command{
		Name:  "mirror",
		Usage: "pre-fetch and list what this server mirrors of mirror.upstream",
		Description: "Works through the admin API of a running server (--server, OPENXET_SERVER, OPENXET_TOKEN) or,\n" +
			"without one, on the data directory with the [mirror] settings.",
		Subcommands: []*cli.Command{
			{
				Name:      "pull",
				Usage:     "pre-fetch a revision of an upstream repo: its file list and every file",
				ArgsUsage: "NS/NAME[@REVISION]",
				Flags: flags(&cli.StringFlag{Name: "type", Value: "model", Usage: "repo type: model, dataset or space"},
					&cli.BoolFlag{Name: "json", Usage: "print the revision as JSON"}),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("usage: openxet mirror pull NS/NAME[@REVISION]", 2)
					}
					repo, rev, _ := strings.Cut(c.Args().First(), "@")
					ns, name, ok := strings.Cut(repo, "/")
					if !ok || ns == "" || name == "" {
						return cli.Exit(fmt.Sprintf("%q is not NS/NAME[@REVISION]", c.Args().First()), 2)
					}
					if rev == "" {
						rev = "main"
					}
					var out server.MirroredView
					err := remoteOrLocal(c, env, func(a *adminClient) error {
						return a.do(c.Context, "POST", "/mirror/pull", server.PullRequest{Repo: repo, Type: c.String("type"), Revision: rev}, &out)
					}, func(st *store.Store, cfg Config) error {
						m, err := localMirror(cfg, st)
						if err != nil {
							return err
						}
						mv, err := m.Pull(c.Context, cfg.MirrorTenant, c.String("type"), ns, name, rev, nil)
						if err != nil {
							return cli.Exit(err.Error(), 1)
						}
						out = server.ViewMirrored(mv)
						return nil
					})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, out)
					}
					printMirrored(c.App.Writer, []server.MirroredView{out})
					return nil
				},
			},
			{
				Name:  "ls",
				Usage: "list the mirrored revisions, their size and last use, least recently used first",
				Flags: flags(&cli.BoolFlag{Name: "json", Usage: "print the list as JSON"}),
				Action: func(c *cli.Context) error {
					var out struct {
						Revisions []server.MirroredView `json:"revisions"`
					}
					err := remoteOrLocal(c, env, func(a *adminClient) error {
						return a.do(c.Context, "GET", "/mirror", nil, &out)
					}, func(st *store.Store, cfg Config) error {
						m, err := localMirror(cfg, st)
						if err != nil {
							return err
						}
						list, err := m.List(c.Context)
						if err != nil {
							return cli.Exit(err.Error(), 1)
						}
						for _, mv := range list {
							out.Revisions = append(out.Revisions, server.ViewMirrored(mv))
						}
						return nil
					})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, out)
					}
					printMirrored(c.App.Writer, out.Revisions)
					return nil
				},
			},
		},
	}
}

// localMirror is the mirror of the data directory, for the commands run
// without --server.
func localMirror(cfg Config, st *store.Store) (*mirror.Mirror, error) {
	m, err := newMirror(cfg, st, nil, nil)
	if err != nil {
		return nil, cli.Exit(err.Error(), 2)
	}
	if m == nil {
		return nil, cli.Exit("mirror.upstream is not set (OPENXET_MIRROR_UPSTREAM, --mirror-upstream or [mirror] upstream)", 2)
	}
	return m, nil
}

func printMirrored(w io.Writer, list []server.MirroredView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPO\tTYPE\tREVISION\tSHA\tFILES\tSIZE\tPULLED\tLAST USE")
	for _, v := range list {
		names := strings.Join(v.Names, ",")
		if names == "" {
			names = "-"
		}
		last := v.LastUsed
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", v.Repo, v.Type, names, v.SHA[:min(12, len(v.SHA))],
			v.PulledFiles, v.Files, humanSize(v.SizeBytes), humanSize(v.PulledBytes), last)
	}
	tw.Flush()
}
