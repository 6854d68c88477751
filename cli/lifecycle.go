package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"openxet/server"
	"openxet/store"
	"openxet/xet"

	"openxet/store/accounts"
)

// The lifecycle commands: gc, usage, files delete, tenants delete. Like
// `credentials`, each works on the data directory (safe while servers run
// on it: one collector at a time through the lease in the index) or,
// with --server (OPENXET_SERVER) and OPENXET_TOKEN, through the admin API.

// gcKeys selects the keys the lifecycle commands read.
func gcKeys(s setting) bool {
	return storeKeys(s) || s.key == "gc.grace" || s.key == "limits.default_tenant_quota"
}

func lifecycleFlags(env Env, extra ...cli.Flag) []cli.Flag {
	return append(append(extra, configFlags(gcKeys)...), remoteFlags(env)...)
}

func gcCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "gc",
		Usage: "run one collection pass: release what no retained file needs, delete what nobody owns or references",
		Description: "Releases the xorb owners no retained file of their tenant needs (giving the usage back), then\n" +
			"deletes the objects (xorbs, shards, regular-file blobs) nobody owns or references once their\n" +
			"grace period (gc.grace, --gc-grace) is over. Safe while servers run on the same data directory:\n" +
			"one collector at a time (a lease in the index); `serve` runs passes itself every gc.interval.\n" +
			"Prints what it released and deleted; with --dry-run only what it would.",
		Flags: lifecycleFlags(env,
			&cli.BoolFlag{Name: "dry-run", Usage: "report what a pass would do; change nothing"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"}),
		Action: func(c *cli.Context) error {
			var rep store.GCReport
			if err := remoteOrLocal(c, env, func(a *adminClient) error {
				path := "/gc"
				if c.Bool("dry-run") {
					path += "?dry_run=true"
				}
				return a.do(c.Context, "POST", path, nil, &rep)
			}, func(st *store.Store, cfg Config) error {
				var err error
				rep, err = st.Collect(c.Context, store.GCConfig{Grace: cfg.GCGrace, DryRun: c.Bool("dry-run"), Progress: progressPrinter(c.App.ErrWriter)})
				if errors.Is(err, store.ErrCollectorBusy) {
					return cli.Exit(err.Error()+"; try again when its pass is done", 1)
				}
				if err != nil {
					return cli.Exit(err.Error(), 1)
				}
				return nil
			}); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, rep)
			}
			printGCReport(c.App.Writer, rep)
			return nil
		},
	}
}

func printGCReport(w io.Writer, rep store.GCReport) {
	verb, del := "released", "deleted"
	if rep.DryRun {
		verb, del = "would release", "would delete"
	}
	var tenants []string
	for t, n := range rep.ReleasedByTenant {
		tenants = append(tenants, fmt.Sprintf("%s %s", t, humanSize(n)))
	}
	sort.Strings(tenants)
	line := fmt.Sprintf("%s %d xorb owners (%s of usage)", verb, rep.ReleasedOwners, humanSize(rep.ReleasedBytes))
	if len(tenants) > 0 {
		line += ": " + strings.Join(tenants, ", ")
	}
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, "%s %d shard owners\n", verb, rep.ReleasedShardOwners)
	fmt.Fprintf(w, "%s %d xorbs, %d shards, %d blobs (%s)\n", del, rep.DeletedXorbs, rep.DeletedShards, rep.DeletedBlobs, humanSize(rep.DeletedBytes))
	fmt.Fprintf(w, "waiting out their grace period: %d objects (%s)\n", rep.Waiting, humanSize(rep.WaitingBytes))
	if rep.Resumed > 0 || rep.Deferred > 0 {
		fmt.Fprintf(w, "finished from an interrupted pass: %d; deferred (touched during the pass): %d\n", rep.Resumed, rep.Deferred)
	}
	fmt.Fprintf(w, "took %s\n", rep.Duration)
}

func usageCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "usage",
		Usage: "show stored bytes per tenant: owned, retained by files, releasable, and bytes nobody pays for",
		Description: "usage = the sizes of the xorbs a tenant owns (what its quota counts). retained = owned xorbs\n" +
			"its retained files reference; releasable = the rest (collection passes release them). dedup =\n" +
			"bytes its files reference that other tenants own; unowned = bytes its files reference that\n" +
			"nobody owns (kept, unpaid). --json adds each tenant's repos.",
		Flags: lifecycleFlags(env,
			&cli.StringFlag{Name: "tenant", Usage: "only this tenant"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON (with per-repo figures)"}),
		Action: func(c *cli.Context) error {
			var v server.UsageView
			tenant := c.String("tenant")
			if err := remoteOrLocal(c, env, func(a *adminClient) error {
				path := "/usage"
				if tenant != "" {
					path += "?tenant=" + url.QueryEscape(tenant)
				}
				return a.do(c.Context, "GET", path, nil, &v)
			}, func(st *store.Store, cfg Config) error {
				var err error
				v, err = localUsage(c.Context, st, tenant, cfg.DefaultTenantQuota)
				return err
			}); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, v)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tUSAGE\tQUOTA\tRETAINED\tRELEASABLE\tDEDUP\tUNOWNED\tFILES\tCAS-ONLY FILES")
			for _, t := range v.Tenants {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", t.Tenant, humanSize(t.UsageBytes), quotaText(t.QuotaBytes),
					humanSize(t.RetainedBytes), humanSize(t.ReleasableBytes), humanSize(t.DedupBytes), humanSize(t.ReferencedUnownedBytes),
					t.Files, t.CASOnlyFiles)
			}
			tw.Flush()
			if tenant == "" {
				fmt.Fprintf(c.App.Writer, "\nstored xorbs: %s; unowned but referenced: %d xorbs (%s); unreferenced, awaiting collection: %d xorbs (%s)\n",
					humanSize(v.StoredXorbBytes), v.UnownedReferencedXorbs, humanSize(v.UnownedReferencedBytes), v.UnreferencedXorbs, humanSize(v.UnreferencedBytes))
			}
			return nil
		},
	}
}

// localUsage is the admin route's view, computed on the data directory.
func localUsage(ctx context.Context, st *store.Store, tenant string, defaultQuota int64) (server.UsageView, error) {
	var v server.UsageView
	if tenant != "" {
		if err := accounts.ValidTenant(tenant); err != nil {
			return v, cli.Exit(err.Error(), 2)
		}
		ok, err := st.TenantKnown(ctx, tenant)
		if err != nil {
			return v, cli.Exit(err.Error(), 1)
		}
		if !ok {
			return v, cli.Exit(fmt.Sprintf("tenant %s is not known to this deployment", tenant), 1)
		}
	}
	rep, err := st.UsageReport(ctx, tenant)
	if err != nil {
		return v, cli.Exit(err.Error(), 1)
	}
	v = server.UsageView{Tenants: []server.TenantUsageView{}, UnownedReferencedXorbs: rep.UnownedReferencedXorbs, UnownedReferencedBytes: rep.UnownedReferencedBytes,
		UnreferencedXorbs: rep.UnreferencedXorbs, UnreferencedBytes: rep.UnreferencedBytes, StoredXorbBytes: rep.StoredXorbBytes}
	for _, u := range rep.Tenants {
		q := defaultQuota
		if doc, ok, err := st.TenantLimits(ctx, u.Tenant); err == nil && ok {
			var d server.LimitsDoc
			if json.Unmarshal(doc, &d) == nil && d.QuotaBytes != nil {
				q = *d.QuotaBytes
			}
		}
		v.Tenants = append(v.Tenants, server.TenantUsageView{TenantUsage: u, QuotaBytes: q})
	}
	return v, nil
}

func filesCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "files",
		Usage: "manage files registered through the CAS API",
		Subcommands: []*cli.Command{{
			Name:      "delete",
			Usage:     "release a file a tenant registered and no revision of its repos references",
			ArgsUsage: "XET_HASH",
			Description: "A file registered through the CAS API alone is kept until it is deleted (so an acknowledged\n" +
				"upload is never lost). Deleting it makes it unreadable at once; its bytes leave the tenant's\n" +
				"usage at the next collection pass. A file a revision references is refused: delete it from\n" +
				"the repo and squash the history, or delete the branch or repo.",
			Flags: lifecycleFlags(env, &cli.StringFlag{Name: "tenant", Required: true, Usage: "the tenant that registered it"}),
			Action: func(c *cli.Context) error {
				tenant, arg := c.String("tenant"), c.Args().First()
				if c.NArg() != 1 {
					return cli.Exit("files delete needs one xet hash", 2)
				}
				h, err := xet.ParseHash(arg)
				if err != nil {
					return cli.Exit(err.Error(), 2)
				}
				if err := remoteOrLocal(c, env, func(a *adminClient) error {
					return a.do(c.Context, "DELETE", "/tenants/"+url.PathEscape(tenant)+"/files/"+h.String(), nil, nil)
				}, func(st *store.Store, _ Config) error {
					if err := st.ReleaseFile(c.Context, tenant, h); err != nil {
						return cli.Exit(err.Error(), 1)
					}
					return nil
				}); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "released file %s of %s; its bytes leave the usage at the next collection pass (openxet gc)\n", h, tenant)
				return nil
			},
		}},
	}
}

func tenantsCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "tenants",
		Usage: "manage tenants",
		Subcommands: []*cli.Command{{
			Name:      "delete",
			Usage:     "delete a tenant: its credentials, repos, files and limits; release everything it owns",
			ArgsUsage: "TENANT",
			Description: "Revokes and deletes the tenant's credentials, deletes its repos, releases every file it\n" +
				"registered, removes its limits, then runs a collection pass that gives its usage back (the\n" +
				"bytes go when their grace period is over). Other tenants' files that share its xorbs through\n" +
				"dedup keep them. Irreversible: needs --yes.",
			Flags: lifecycleFlags(env, &cli.BoolFlag{Name: "yes", Usage: "really delete"}, &cli.BoolFlag{Name: "json", Usage: "print JSON"}),
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cli.Exit("tenants delete needs one tenant name", 2)
				}
				tenant := c.Args().First()
				if err := accounts.ValidTenant(tenant); err != nil {
					return cli.Exit(err.Error(), 2)
				}
				if !c.Bool("yes") {
					return cli.Exit(fmt.Sprintf("deleting tenant %s removes its credentials, repos and files for good; run again with --yes", tenant), 2)
				}
				var out server.DeletedTenantView
				if err := remoteOrLocal(c, env, func(a *adminClient) error {
					return a.do(c.Context, "DELETE", "/tenants/"+url.PathEscape(tenant), nil, &out)
				}, func(st *store.Store, cfg Config) error {
					del, err := st.DeleteTenant(c.Context, tenant)
					if err != nil {
						return cli.Exit(err.Error(), 1)
					}
					out.TenantDeletion = del
					rep, err := st.Collect(c.Context, store.GCConfig{Grace: cfg.GCGrace})
					if err == nil {
						out.Collection = &rep
					} else if !errors.Is(err, store.ErrCollectorBusy) {
						return cli.Exit(err.Error(), 1)
					}
					return nil
				}); err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, out)
				}
				fmt.Fprintf(c.App.Writer, "deleted tenant %s: %d credentials, %d repos, %d files released, limits removed: %v\n",
					out.Tenant, out.Credentials, len(out.Repos), out.ReleasedFiles, out.LimitsRemoved)
				if out.Collection != nil {
					printGCReport(c.App.Writer, *out.Collection)
				} else {
					fmt.Fprintf(c.App.Writer, "another process is collecting; its next pass gives back the %s %s owns\n", humanSize(out.OwnedBytes), tenant)
				}
				return nil
			},
		}},
	}
}

func quotaText(q int64) string {
	if q < 0 {
		return "unlimited"
	}
	return humanSize(q)
}

// humanSize prints bytes in binary units with one decimal.
func humanSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, unit := float64(n), 0
	for f >= 1024 && unit < 5 {
		f /= 1024
		unit++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[unit-1])
}
