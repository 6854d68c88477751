package cli

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"openxet/admin"
	"openxet/limits"
	"openxet/server"
)

func limitsCommand(env Env) *cli.Command {
	tenantFlag := &cli.StringFlag{Name: "tenant", Required: true, Usage: "tenant name"}
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON"}
	return &cli.Command{
		Name:  "limits",
		Usage: "show and change tenants' quotas and rate limits (through the admin API)",
		Description: "Talks to the admin API of a running server: --server (or OPENXET_SERVER, default\n" +
			"http://127.0.0.1:8080) and an admin token in OPENXET_TOKEN. The server that takes a change\n" +
			"applies it at once; other servers within 10s.",
		Subcommands: []*cli.Command{
			{
				Name:  "set",
				Usage: "override a tenant's limits (flags not given keep their value)",
				Description: "Each flag given sets that override; flags not given keep the tenant's current\n" +
					"override, and --reset NAME drops one so the server default applies again.\n" +
					"A tenant the server does not know (no credentials, stored data, repos or limits)\n" +
					"is refused, so that a typo sets nothing; give --create to set limits for a new tenant.\n" +
					"--suspend stops every request of the tenant's credentials (403 tenant_suspended) without\n" +
					"revoking them, until --resume; the admin API stays open to its admin credentials.",
				Flags: append([]cli.Flag{
					tenantFlag,
					&cli.StringFlag{Name: "quota", DefaultText: notChanged, Usage: "stored bytes, e.g. 10GiB, or unlimited"},
					&cli.Float64Flag{Name: "requests-per-second", DefaultText: notChanged, Usage: "tenant requests per second per node; 0 means unlimited, else 0.001 to 1e9"},
					&cli.IntFlag{Name: "burst", DefaultText: notChanged, Usage: "tenant burst per node, at least 1"},
					&cli.Float64Flag{Name: "credential-requests-per-second", DefaultText: notChanged, Usage: "requests per second per credential per node; 0 means unlimited, else 0.001 to 1e9"},
					&cli.IntFlag{Name: "credential-burst", DefaultText: notChanged, Usage: "burst per credential per node, at least 1"},
					&cli.IntFlag{Name: "max-in-flight", DefaultText: notChanged, Usage: "requests in progress per credential per node; 0 means unlimited"},
					&cli.StringSliceFlag{Name: "reset", Usage: "drop an override so the server default applies (quota, requests-per-second, burst, credential-requests-per-second, credential-burst, max-in-flight); repeat for several"},
					&cli.BoolFlag{Name: "create", Usage: "set limits even if the server does not know the tenant yet"},
					&cli.BoolFlag{Name: "suspend", Usage: "refuse every request of the tenant's credentials until --resume (they are not revoked)"},
					&cli.BoolFlag{Name: "resume", Usage: "lift a suspension"},
					jsonFlag,
				}, remoteFlags(env)...),
				Action: func(c *cli.Context) error {
					return limitsSet(c, env)
				},
			},
			{
				Name:  "get",
				Usage: "show a tenant's effective limits, where each comes from, and its usage",
				Flags: append([]cli.Flag{tenantFlag, jsonFlag}, remoteFlags(env)...),
				Action: func(c *cli.Context) error {
					return limitsGet(c, env)
				},
			},
			{
				Name:  "list",
				Usage: "list every tenant with its usage and limits",
				Flags: append([]cli.Flag{jsonFlag}, remoteFlags(env)...),
				Action: func(c *cli.Context) error {
					return limitsList(c, env)
				},
			},
		},
	}
}

// limitsSet is `limits set`: it changes a tenant's limit overrides and prints the limits that result.
func limitsSet(c *cli.Context, env Env) error {
	if c.Bool("suspend") && c.Bool("resume") {
		return cli.Exit("--suspend and --resume: give one of them", 2)
	}
	a, err := newAdminClient(c, env, true)
	if err != nil {
		return err
	}
	path := "/tenants/" + url.PathEscape(c.String("tenant")) + "/limits"
	var cur server.EffectiveLimits
	if err := a.c.Do(c.Context, "GET", path, nil, &cur); err != nil {
		var ae *admin.Error
		if !c.Bool("create") || !errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Code != "not_found" {
			return a.exit("GET", err)
		}
		// An unknown tenant: nothing to keep.
	}
	doc := cur.Overrides
	for _, o := range overrideFlags {
		if c.IsSet(o.flag) {
			if err := o.set(c, &doc); err != nil {
				return cli.Exit("--"+o.flag+": "+err.Error(), 2)
			}
		}
	}
resets:
	for _, r := range c.StringSlice("reset") {
		for _, o := range overrideFlags {
			if o.flag == r {
				o.set(nil, &doc)
				continue resets
			}
		}
		return cli.Exit(fmt.Sprintf("--reset: unknown limit %q", r), 2)
	}
	switch {
	case c.Bool("suspend"):
		doc.Suspended = true
	case c.Bool("resume"):
		doc.Suspended = false
	}
	if c.Bool("create") {
		path += "?create=1"
	}
	var out server.EffectiveLimits
	if err := a.do(c.Context, "PUT", path, doc, &out); err != nil {
		return err
	}
	return printLimits(c.App.Writer, c.Bool("json"), out)
}

// limitsGet is `limits get`: it prints a tenant's effective limits, their sources and its usage.
func limitsGet(c *cli.Context, env Env) error {
	a, err := newAdminClient(c, env, true)
	if err != nil {
		return err
	}
	var out server.EffectiveLimits
	if err := a.do(c.Context, "GET", "/tenants/"+url.PathEscape(c.String("tenant"))+"/limits", nil, &out); err != nil {
		return err
	}
	return printLimits(c.App.Writer, c.Bool("json"), out)
}

// limitsList is `limits list`: it prints every tenant with its usage and limits.
func limitsList(c *cli.Context, env Env) error {
	a, err := newAdminClient(c, env, true)
	if err != nil {
		return err
	}
	var out struct{ Tenants []server.EffectiveLimits }
	if err := a.do(c.Context, "GET", "/tenants", nil, &out); err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, out.Tenants)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tUSAGE\tQUOTA\tREQ/S\tBURST\tCRED REQ/S\tCRED BURST\tIN FLIGHT\tSTATE")
	for _, t := range out.Tenants {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", t.Tenant, limits.HumanBytes(t.UsageBytes), limits.HumanBytes(t.QuotaBytes),
			num(t.TenantRequestsPerSecond), t.TenantBurst, num(t.CredentialRequestsPerSecond), t.CredentialBurst, t.MaxInFlightPerCredential, state(t.Suspended))
	}
	return tw.Flush()
}

// notChanged is the help's default of a `limits set` flag: not given, it
// keeps the tenant's current override.
const notChanged = "not changed"

// overrideFlags are the flags of `limits set`, each bound to its override;
// set with a nil context drops the override (--reset).
var overrideFlags = []struct {
	flag string
	set  func(c *cli.Context, d *server.LimitsDoc) error
}{
	{"quota", func(c *cli.Context, d *server.LimitsDoc) error {
		if c == nil {
			d.QuotaBytes = nil
			return nil
		}
		q, err := ParseQuota(c.String("quota"))
		if err != nil {
			return err
		}
		d.QuotaBytes = &q
		return nil
	}},
	{"requests-per-second", floatOverride("requests-per-second", func(d *server.LimitsDoc) **float64 { return &d.TenantRequestsPerSecond })},
	{"burst", intOverride("burst", func(d *server.LimitsDoc) **int { return &d.TenantBurst })},
	{"credential-requests-per-second", floatOverride("credential-requests-per-second", func(d *server.LimitsDoc) **float64 { return &d.CredentialRequestsPerSecond })},
	{"credential-burst", intOverride("credential-burst", func(d *server.LimitsDoc) **int { return &d.CredentialBurst })},
	{"max-in-flight", intOverride("max-in-flight", func(d *server.LimitsDoc) **int { return &d.MaxInFlightPerCredential })},
}

func floatOverride(flag string, field func(*server.LimitsDoc) **float64) func(*cli.Context, *server.LimitsDoc) error {
	return func(c *cli.Context, d *server.LimitsDoc) error {
		if c == nil {
			*field(d) = nil
			return nil
		}
		v := c.Float64(flag)
		if err := limits.CheckRate(v); err != nil {
			return err
		}
		*field(d) = &v
		return nil
	}
}

func intOverride(flag string, field func(*server.LimitsDoc) **int) func(*cli.Context, *server.LimitsDoc) error {
	return func(c *cli.Context, d *server.LimitsDoc) error {
		if c == nil {
			*field(d) = nil
			return nil
		}
		v := c.Int(flag)
		*field(d) = &v
		return nil
	}
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// state is a tenant's STATE in `limits list`.
func state(suspended bool) string {
	if suspended {
		return "suspended"
	}
	return "active"
}

// sizeCell is a size in `limits get`: rounded for reading, exact beside.
func sizeCell(n int64) string {
	if n < 0 {
		return limits.HumanBytes(n)
	}
	return fmt.Sprintf("%s (%d bytes)", limits.HumanBytes(n), n)
}

func printLimits(w io.Writer, asJSON bool, l server.EffectiveLimits) error {
	if asJSON {
		return printJSON(w, l)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "tenant\t%s\t\n", l.Tenant)
	if l.Suspended {
		fmt.Fprintf(tw, "state\tsuspended\t(every request refused; openxet limits set --tenant %s --resume lifts it)\n", l.Tenant)
	} else {
		fmt.Fprintf(tw, "state\tactive\t\n")
	}
	fmt.Fprintf(tw, "usage\t%s\t\n", sizeCell(l.UsageBytes))
	fmt.Fprintf(tw, "quota\t%s\t%s\n", sizeCell(l.QuotaBytes), l.Source["quota_bytes"])
	fmt.Fprintf(tw, "requests per second\t%s\t%s\n", num(l.TenantRequestsPerSecond), l.Source["tenant_requests_per_second"])
	fmt.Fprintf(tw, "burst\t%d\t%s\n", l.TenantBurst, l.Source["tenant_burst"])
	fmt.Fprintf(tw, "credential requests per second\t%s\t%s\n", num(l.CredentialRequestsPerSecond), l.Source["credential_requests_per_second"])
	fmt.Fprintf(tw, "credential burst\t%d\t%s\n", l.CredentialBurst, l.Source["credential_burst"])
	fmt.Fprintf(tw, "max in flight per credential\t%d\t%s\n", l.MaxInFlightPerCredential, l.Source["max_in_flight_per_credential"])
	return tw.Flush()
}
