package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"openxet/limits"
	"openxet/server"
	"openxet/store"
	"openxet/work"
	"openxet/xet"

	"openxet/store/accounts"
)

func serveCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the server",
		Description: "Serves the Xet CAS API, the Hub API and the admin API. On first start with an empty store it\n" +
			"prints one admin credential. Stops gracefully on SIGINT or SIGTERM.",
		Flags: append(configFlags(nil), &cli.BoolFlag{Name: "print-config", Usage: "print the effective configuration and where each value came from, then exit (as `openxet config check`)"}),
		Action: func(c *cli.Context) error {
			if c.Bool("print-config") {
				return printConfig(c, env)
			}
			cfg, err := loadConfig(c, env)
			if err != nil {
				return err
			}
			cfg.GoMemoryLimit = goMemoryLimit(cfg.MemoryBudget, env)
			return serve(c.Context, cfg, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// GoMemoryLimitOverhead is what the Go runtime may hold beyond the memory
// budget before its garbage collector works harder to stay under the soft
// limit: garbage not collected yet, goroutine stacks, caches, the runtime
// itself. The documented RSS allowance is the budget plus 256 MiB; the rest
// of it is SQLite's own memory (outside the Go heap) and the binary.
const GoMemoryLimitOverhead = 128 << 20

// goMemoryLimit is the soft memory limit serve sets: the budget plus
// GoMemoryLimitOverhead, or 0 (leave it) when the environment sets
// GOMEMLIMIT (to a size or "off"), which the runtime read at start.
func goMemoryLimit(budgetBytes int64, env Env) int64 {
	if v, ok := env("GOMEMLIMIT"); ok && v != "" {
		return 0
	}
	return budgetBytes + GoMemoryLimitOverhead
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serverConfig turns the configuration into the server's own struct.
func serverConfig(cfg Config, key []byte) server.Config {
	return server.Config{
		PublicURL:         cfg.PublicURL,
		TrustedProxies:    cfg.TrustedProxies,
		DedupScope:        cfg.DedupScope,
		SigningKey:        key,
		TokenTTL:          cfg.TokenTTL,
		FetchURLTTL:       cfg.FetchURLTTL,
		AnonymousReads:    cfg.AnonymousReads,
		DefaultVisibility: cfg.DefaultVisibility,
		Limits: limits.Limits{
			TenantRate:               limits.Rate{PerSecond: cfg.TenantRequestsPerSecond, Burst: cfg.TenantBurst},
			CredentialRate:           limits.Rate{PerSecond: cfg.CredentialRequestsPerSecond, Burst: cfg.CredentialBurst},
			MaxInFlightPerCredential: cfg.MaxInFlightPerCredential,
			QuotaBytes:               cfg.DefaultTenantQuota,
		},
		Anonymous: limits.Anonymous{
			AddressRate:        limits.Rate{PerSecond: cfg.AnonymousRequestsPerSecond, Burst: cfg.AnonymousBurst},
			AddressMaxInFlight: cfg.AnonymousMaxInFlight,
			PoolRate:           limits.Rate{PerSecond: cfg.AnonymousPoolRequestsPerSecond, Burst: cfg.AnonymousPoolBurst},
			PoolMaxInFlight:    cfg.AnonymousPoolMaxInFlight,
		},
		AnonymousMemoryShare:        cfg.AnonymousMemoryShare,
		AnonymousPoolBytesPerSecond: float64(cfg.AnonymousPoolBytesPerSecond),
		LimitsCacheTTL:              cfg.LimitsCacheTTL,
		AuthFailuresPerMinute:       cfg.AuthFailuresPerMinute,
		RefusalPause:                cfg.RefusalPause,
		TurnsAboveInFlight:          cfg.TurnsAboveInFlight,
		Budget:                      cfg.budgetConfig(),
		Work:                        work.Config{Slots: cfg.WorkSlots, TenantShare: cfg.TenantWorkShare, Wait: cfg.WorkWait},

		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		BodyReadTimeout:   cfg.BodyReadTimeout,
		ShutdownTimeout:   cfg.ShutdownTimeout,
		MaxHeaderBytes:    int(cfg.MaxHeaderBytes),
		MetricsOnMain:     cfg.MetricsListen == "",
		MetricsTenants:    cfg.MetricsTenants,
		GCInterval:        cfg.GCInterval,
		GCGrace:           cfg.GCGrace,
		Version:           versionString(),
	}
}

// checkpointEvery is store.Config.CheckpointEvery for
// server.index_checkpoint, whose 0 means no background checkpoints.
func checkpointEvery(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// openStore opens the store of cfg; log receives what it finds on its
// own (a lost index lock), nil discards it.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (*store.Store, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", cfg.DataDir, err)
	}
	st, err := store.Open(ctx, store.Config{IndexPath: cfg.Index, BucketURL: cfg.Bucket, BusyTimeout: cfg.IndexBusyTimeout,
		LockCheck: cfg.IndexLockCheck, CheckpointEvery: checkpointEvery(cfg.IndexCheckpoint), Log: log})
	if err != nil {
		return nil, explainStoreError(err)
	}
	return st, nil
}

func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	tlsConf, stopTLS, err := startTLS(cfg, log)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	defer stopTLS()
	// Bind first: a start that cannot listen changes nothing in the store
	// (in particular it creates no first admin credential).
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return cli.Exit(fmt.Sprintf("listen on %s: %v", cfg.Listen, err), 1)
	}
	defer ln.Close() // Serve closes it too; a second Close is harmless
	mln, err := listenAside(cfg.MetricsListen)
	if err != nil {
		return err
	}
	defer closeAside(mln)
	dln, err := listenAside(cfg.DebugListen)
	if err != nil {
		return err
	}
	defer closeAside(dln)
	st, err := openStoreWaiting(ctx, cfg, log, ln, tlsConf)
	if err != nil {
		if ctx.Err() != nil {
			log.Info("openxet stopped while waiting for its index")
			return nil
		}
		return cli.Exit(err.Error(), 1)
	}
	defer st.Close()
	key, err := sharedSigningKey(ctx, st, cfg.DataDir, log)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	reg := newRegistry()
	scfg := serverConfig(cfg, key)
	var srv *server.Server
	m, err := newMirror(cfg, st, log, func() {
		if srv != nil {
			srv.CollectSoon()
		}
	})
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	if m != nil {
		scfg.Mirror = m
		log.Info("mirroring", "upstream", cfg.MirrorUpstream, "tenant", cfg.MirrorTenant, "visibility", cfg.MirrorVisibility)
	}
	srv, err = server.New(scfg, st, log, reg)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	if err := bootstrapAdmin(ctx, st, stdout); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
	defer serveAside(mln, srv.MetricsHandler())()
	defer serveAside(dln, debugHandler())()
	if dln != nil {
		log.Info("profiler listening", "addr", "http://"+dln.Addr().String()+"/debug/pprof/")
	}
	if cfg.GoMemoryLimit > 0 {
		prev := debug.SetMemoryLimit(cfg.GoMemoryLimit)
		defer debug.SetMemoryLimit(prev)
	}
	log.Info("openxet serving", "version", Version, "addr", listenerScheme(cfg)+"://"+ln.Addr().String(), "data_dir", cfg.DataDir,
		"memory_budget", limits.FormatBytes(cfg.MemoryBudget), "go_memory_limit", limits.FormatBytes(debug.SetMemoryLimit(-1)), "hash_kernel", xet.HashKernel())
	err = srv.Serve(ctx, ln)
	log.Info("openxet stopped")
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return cli.Exit(err.Error(), 1)
	}
	return nil
}

// bootstrapAdmin makes one admin credential when the store has none and
// prints its token once. Of several processes starting on an empty store,
// only the one whose credential the index took prints anything.
func bootstrapAdmin(ctx context.Context, st *store.Store, w io.Writer) error {
	cred, tok, created, err := st.CreateFirstCredential(ctx, "admin", []string{accounts.ScopeAdmin, accounts.ScopeWrite})
	if err != nil {
		return fmt.Errorf("first admin credential: %w (make one with: openxet credentials create --tenant admin --scope admin --scope write)", err)
	}
	if !created {
		return nil
	}
	fmt.Fprintf(w, "First start: created admin credential %s for tenant %q (scopes %s).\n", cred.ID, cred.Tenant, strings.Join(cred.Scopes, ","))
	fmt.Fprintf(w, "Token (shown once, store it now): %s\n", tok)
	return nil
}

// debugHandler serves Go's profiler (net/http/pprof) under /debug/pprof/,
// for server.debug_listen.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// listenAside binds a side listener (server.metrics_listen,
// server.debug_listen): nil for addr "", an exit error when it cannot.
func listenAside(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("listen on %s: %v", addr, err), 1)
	}
	return ln, nil
}

// closeAside closes a side listener, if any.
func closeAside(ln net.Listener) {
	if ln != nil {
		ln.Close()
	}
}

// serveAside serves h on a side listener (none for nil) until the
// function it returns is called.
func serveAside(ln net.Listener, h http.Handler) (stop func()) {
	if ln == nil {
		return func() {}
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return func() { hs.Close() }
}
