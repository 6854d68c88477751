package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"openxet/limits"
	"openxet/load"
)

// loadCommand is `openxet load`: a load scenario against a running server.
func loadCommand(env Env) *cli.Command {
	scenarios := make([]string, len(load.Scenarios))
	for i, s := range load.Scenarios {
		scenarios[i] = string(s)
	}
	size := func(name string, def int64, usage string) cli.Flag {
		return &cli.StringFlag{Name: name, Value: limits.FormatBytes(def), Usage: usage}
	}
	return &cli.Command{
		Name:      "load",
		Usage:     "run a load scenario against a running server and report fairness, latency and memory",
		UsageText: "openxet load --scenario many_tenants|abuse|public [--server URL[,URL…]] [--server-cpus 0 --load-cpus 1] [--duration 60s] [--report FILE] [--json]",
		Description: "Creates its own tenants and credentials through the admin API (admin token in OPENXET_TOKEN),\n" +
			"drives real protocol traffic (xorb and shard uploads, reconstructions, fetch-URL range reads,\n" +
			"dedup queries), checks every downloaded byte against what was uploaded, and revokes its\n" +
			"credentials at the end; with --cleanup (the default) it also removes its tenants' limits\n" +
			"records. Every loop stops by itself.\n\n" +
			"  many_tenants  honest tenants at moderate rates within the default limits, one phase\n" +
			"  abuse         the same honest tenants alone (baseline), then beside one tenant that floods\n" +
			"                requests, holds hundreds of slow reads open and uploads over its quota, and\n" +
			"                a client address (--spray-addr) that sprays bad tokens\n\n" +
			"The run fails (exit 1) only on correctness: an honest request refused (403, 429, 503) or\n" +
			"answered wrongly, a downloaded byte that differs, a limit that let more through than it\n" +
			"allows, a tenant's usage that differs from what it stored, or server RSS over its memory\n" +
			"budget plus --rss-overhead. Timings never fail it.\n" +
			"Only loopback servers are loaded unless --allow-remote is given.\n\n" +
			"Several nodes of one deployment (sharing one index and bucket) are loaded together with\n" +
			"--server URL1,URL2,…: admin calls go to the first, every tenant's requests and every attack\n" +
			"are spread over all of them, and the checks follow the scale-out rules: rate limits,\n" +
			"in-flight caps and memory budgets per node (each node against its own; N nodes may admit N\n" +
			"times one node's rate), quotas and usage over all nodes. The report shows each node and the\n" +
			"sum. See docs/scale-out.md.\n\n" +
			"Pin the server and the load apart, or the load's own CPU use (the abuser's included) is part\n" +
			"of what the honest tenants feel: on a 2-CPU machine\n" +
			"  taskset -c 0 openxet serve … &\n" +
			"  openxet load --scenario abuse --server-cpus 0 --load-cpus 1 …\n" +
			"The report states the layout that produced it (the server reports its CPUs in /metrics).\n" +
			"The abuser runs in a child process at the lowest CPU priority (SCHED_IDLE) on the load's CPUs,\n" +
			"so that its client gets only the CPU the honest tenants' clients leave (--abuser-process).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "scenario", Required: true, Usage: "scenario to run: " + strings.Join(scenarios, " or ")},
			&cli.StringFlag{Name: "server", Usage: "base URL of the server, or comma-separated base URLs of several nodes of one deployment (env OPENXET_SERVER, default http://" + DefaultListen + ")"},
			&cli.StringFlag{Name: "token", Usage: "admin token (env OPENXET_TOKEN; prefer the env var, flags show in ps)"},
			&cli.StringFlag{Name: "metrics", Usage: "URL of the server's Prometheus metrics, scraped with the admin token; with several nodes, one URL per node in --server order (default <node>/metrics for each)"},
			&cli.BoolFlag{Name: "allow-remote", Usage: "allow a --server that is not a loopback address"},
			&cli.BoolFlag{Name: "cleanup", Value: true, Usage: "at the end, remove the run's tenants' limits records (and, once the server deletes tenants, the tenants); --cleanup=false keeps them for inspection. Credentials are revoked either way"},
			&cli.StringFlag{Name: "server-cpus", Usage: "CPUs the server must run on (e.g. 0, as `taskset -c 0 openxet serve` gives it; with several nodes, all of theirs together); the run stops unless the server reports exactly these"},
			&cli.StringFlag{Name: "load-cpus", Usage: "pin the load generator to these CPUs (e.g. 1; Linux), apart from the server's"},
			&cli.DurationFlag{Name: "duration", Value: load.DefaultDuration, Usage: "length of each phase (abuse runs two)"},
			&cli.IntFlag{Name: "tenants", Value: load.DefaultTenants, Usage: "honest tenants"},
			&cli.IntFlag{Name: "credentials-per-tenant", Value: load.DefaultCredentialsPerTenant, Usage: "credentials per honest tenant, each running its own loop"},
			&cli.DurationFlag{Name: "think-min", Value: load.DefaultThinkMin, Usage: "shortest wait between two operations of one credential"},
			&cli.DurationFlag{Name: "think-max", Value: load.DefaultThinkMax, Usage: "longest wait between two operations of one credential"},
			size("xorb-min", load.DefaultXorbMinBytes, "smallest honest xorb"),
			size("xorb-max", load.DefaultXorbMaxBytes, "largest honest xorb"),
			&cli.StringFlag{Name: "rss-overhead", Value: limits.FormatBytes(load.DefaultRSSOverheadBytes), Usage: "resident memory the server may use beyond its memory budget before the run fails, or off"},
			&cli.DurationFlag{Name: "drain-timeout", Value: load.DefaultDrainTimeout, Usage: "time operations still running at the end get to finish; one still running after it fails the run"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed for the generated data and choices; 0 takes one from the clock"},
			&cli.Float64Flag{Name: "flood-rate", Value: load.DefaultFloodRate, Usage: "abuse: requests per second of the flooding credential"},
			&cli.IntFlag{Name: "readers", Value: load.DefaultReaders, Usage: "abuse: slow reads of the big xorb held open at once"},
			size("big-xorb", load.DefaultBigXorbBytes, "abuse: size of the xorb the slow reads fetch"),
			size("read-rate", load.DefaultReadBytesPerSecond, "abuse: bytes per second each slow read consumes"),
			size("quota-headroom", load.DefaultQuotaHeadroomBytes, "abuse: the abuser's quota is its usage after setup plus this"),
			&cli.Float64Flag{Name: "quota-rate", Value: load.DefaultQuotaRate, Usage: "abuse: over-quota uploads per second"},
			&cli.Float64Flag{Name: "spray-rate", Value: load.DefaultSprayRate, Usage: "abuse: bad-token requests per second"},
			&cli.StringFlag{Name: "spray-addr", Value: load.DefaultSprayAddr, Usage: "abuse: local address the bad tokens come from (must differ from the honest tenants'), or none"},
			&cli.IntFlag{Name: "auth-failures-per-minute", Value: load.DefaultAuthFailuresPerMinute, Usage: "abuse: the server's limits.auth_failures_per_minute, to check the sprayer against"},
			&cli.BoolFlag{Name: "abuser-process", Value: true, Usage: "abuse: run the abuser in a child process at the lowest CPU priority (Linux SCHED_IDLE) on the load's CPUs, so that its own client takes none of the CPU the honest tenants' clients want; --abuser-process=false runs it in the load process"},
			&cli.IntFlag{Name: "public-readers", Value: load.DefaultPublicReaders, Usage: "public: readers without a token, each from its own address of 127.0.0.0/8 (the server needs --hub-anonymous-reads)"},
			size("public-file", load.DefaultPublicFileBytes, "public: size of the public file the readers download"),
			&cli.StringFlag{Name: "report", Usage: "write a self-contained HTML report with plots to this file"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON instead of tables"},
		},
		Action: func(c *cli.Context) error {
			return runLoad(c, env)
		},
	}
}

// runLoad is `openxet load`: it runs the scenario, prints the report (and writes --report) and exits 1 on a correctness failure.
func runLoad(c *cli.Context, env Env) error {
	cfg, err := loadConfigFrom(c, env)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	cfg.Progress = c.App.ErrWriter
	if len(cfg.LoadCPUs) > 0 {
		if err := pinProcess(cfg.LoadCPUs); err != nil {
			return cli.Exit("--load-cpus: "+err.Error(), 2)
		}
	}
	if cpus, err := processCPUs(); err == nil {
		cfg.LoadCPUs = cpus
	}
	if cfg.Scenario == load.Abuse && c.Bool("abuser-process") {
		if cfg.AbuserCommand, err = abuserCommand(c.App.ErrWriter); err != nil {
			return cli.Exit(err.Error(), 2)
		}
	}
	rep, err := load.Run(c.Context, cfg)
	if err != nil {
		code := 1
		if errors.Is(err, load.ErrRemote) || errors.Is(err, load.ErrLayout) {
			code = 2
		}
		return cli.Exit(err.Error(), code)
	}
	if path := c.String("report"); path != "" {
		if err := writeReport(path, rep); err != nil {
			return cli.Exit(err.Error(), 1)
		}
		fmt.Fprintf(c.App.ErrWriter, "load: report written to %s\n", path)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := rep.WriteText(c.App.Writer); err != nil {
		return err
	}
	switch {
	case !rep.OK:
		return cli.Exit(fmt.Sprintf("load %s: %d correctness failures", rep.Scenario, rep.Failed()), 1)
	case rep.Interrupted:
		return cli.Exit("load: interrupted", 1)
	}
	return nil
}

// loadConfigFrom reads the flags and environment into a load.Config.
func loadConfigFrom(c *cli.Context, env Env) (load.Config, error) {
	cfg := load.Config{
		Scenario:             load.Scenario(c.String("scenario")),
		AdminToken:           c.String("token"),
		AllowRemote:          c.Bool("allow-remote"),
		KeepTenants:          !c.Bool("cleanup"),
		Duration:             c.Duration("duration"),
		Tenants:              c.Int("tenants"),
		CredentialsPerTenant: c.Int("credentials-per-tenant"),
		ThinkMin:             c.Duration("think-min"),
		ThinkMax:             c.Duration("think-max"),
		DrainTimeout:         c.Duration("drain-timeout"),
		Seed:                 c.Uint64("seed"),
		Public:               load.PublicConfig{Readers: c.Int("public-readers")},
		Abuser: load.AbuserConfig{
			FloodRate:             c.Float64("flood-rate"),
			Readers:               c.Int("readers"),
			QuotaRate:             c.Float64("quota-rate"),
			SprayRate:             c.Float64("spray-rate"),
			SprayAddr:             c.String("spray-addr"),
			AuthFailuresPerMinute: c.Int("auth-failures-per-minute"),
		},
	}
	server, from := c.String("server"), "--server"
	if server == "" {
		server, _ = env("OPENXET_SERVER")
		from = "OPENXET_SERVER"
	}
	if server == "" {
		server = "http://" + DefaultListen
	}
	var err error
	if cfg.Servers, err = load.ParseServers(server); err != nil {
		return cfg, fmt.Errorf("%s: %w", from, err)
	}
	if m := c.String("metrics"); m != "" {
		if cfg.MetricsURLs, err = load.ParseServers(m); err != nil {
			return cfg, fmt.Errorf("--metrics: %w", err)
		}
		if len(cfg.MetricsURLs) != len(cfg.Servers) {
			return cfg, fmt.Errorf("--metrics: %d URLs for %d nodes; give one per node, in --server order, or none (each node's /metrics)", len(cfg.MetricsURLs), len(cfg.Servers))
		}
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken, _ = env("OPENXET_TOKEN")
	}
	if cfg.AdminToken == "" {
		return cfg, errors.New("an admin token is needed: set OPENXET_TOKEN (or --token)")
	}
	for _, f := range []struct {
		flag string
		dst  *load.CPUSet
	}{{"server-cpus", &cfg.ServerCPUs}, {"load-cpus", &cfg.LoadCPUs}} {
		if v := c.String(f.flag); v != "" {
			set, err := load.ParseCPUSet(v)
			if err != nil {
				return cfg, fmt.Errorf("--%s: %w", f.flag, err)
			}
			*f.dst = set
		}
	}
	if cfg.ServerCPUs.Overlaps(cfg.LoadCPUs) {
		return cfg, fmt.Errorf("--server-cpus %s and --load-cpus %s share a CPU; pin them apart", cfg.ServerCPUs, cfg.LoadCPUs)
	}
	sizes := []struct {
		flag string
		dst  *int64
	}{
		{"xorb-min", &cfg.XorbMinBytes}, {"xorb-max", &cfg.XorbMaxBytes},
		{"big-xorb", &cfg.Abuser.BigXorbBytes}, {"public-file", &cfg.Public.FileBytes}, {"read-rate", &cfg.Abuser.ReadBytesPerSecond},
		{"quota-headroom", &cfg.Abuser.QuotaHeadroomBytes},
	}
	for _, s := range sizes {
		n, err := ParseSize(c.String(s.flag))
		if err != nil {
			return cfg, fmt.Errorf("--%s: %w", s.flag, err)
		}
		*s.dst = n
	}
	if v := c.String("rss-overhead"); strings.EqualFold(v, "off") {
		cfg.RSSOverheadBytes = -1
	} else {
		n, err := ParseSize(v)
		if err != nil {
			return cfg, fmt.Errorf("--rss-overhead: %w", err)
		}
		cfg.RSSOverheadBytes = n
	}
	// Zero means "default" to load.Config; say so rather than surprise.
	if cfg.Abuser.Readers == 0 {
		return cfg, errors.New("--readers: want at least 1")
	}
	return cfg, cfg.WithDefaults().Validate()
}

// writeReport writes the HTML report next to its final name and renames it
// into place, so a reader never sees half a file.
func writeReport(path string, rep *load.Report) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".openxet-load-*.html")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := rep.WriteHTML(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("report: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
