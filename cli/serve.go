package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"

	"openxet/budget"
	"openxet/limits"
	"openxet/server"
	"openxet/store"
	"openxet/work"
)

func serveCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the server",
		Description: "Serves the Xet CAS API, the Hub API and the admin API. On first start with an empty store it\n" +
			"prints one admin credential. Stops gracefully on SIGINT or SIGTERM.",
		Flags: configFlags(nil),
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c, env)
			if err != nil {
				return err
			}
			return serve(c.Context, cfg, c.App.Writer, c.App.ErrWriter)
		},
	}
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
		PublicURL:      cfg.PublicURL,
		TrustedProxies: cfg.TrustedProxies,
		DedupScope:     cfg.DedupScope,
		SigningKey:     key,
		TokenTTL:       cfg.TokenTTL,
		FetchURLTTL:    cfg.FetchURLTTL,
		Limits: limits.Limits{
			TenantRate:               limits.Rate{PerSecond: cfg.TenantRequestsPerSecond, Burst: cfg.TenantBurst},
			CredentialRate:           limits.Rate{PerSecond: cfg.CredentialRequestsPerSecond, Burst: cfg.CredentialBurst},
			MaxInFlightPerCredential: cfg.MaxInFlightPerCredential,
			QuotaBytes:               cfg.DefaultTenantQuota,
		},
		LimitsCacheTTL:        cfg.LimitsCacheTTL,
		AuthFailuresPerMinute: cfg.AuthFailuresPerMinute,
		Budget: budget.Config{
			TotalBytes:      cfg.MemoryBudget,
			CredentialShare: cfg.CredentialMemoryShare,
			TenantShare:     cfg.TenantMemoryShare,
			Wait:            cfg.MemoryWait,
		},
		Work:              work.Config{Slots: cfg.WorkSlots, TenantShare: cfg.TenantWorkShare, Wait: cfg.WorkWait},
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		BodyReadTimeout:   cfg.BodyReadTimeout,
		ShutdownTimeout:   cfg.ShutdownTimeout,
		MaxHeaderBytes:    int(cfg.MaxHeaderBytes),
		MetricsOnMain:     cfg.MetricsListen == "",
	}
}

func openStore(ctx context.Context, cfg Config) (*store.Store, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", cfg.DataDir, err)
	}
	st, err := store.Open(ctx, store.Config{IndexPath: cfg.Index, BucketURL: cfg.Bucket})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// signingKey reads the data directory's signing key, creating it on first
// start. Processes sharing a data directory share the key, so CAS tokens and
// fetch URLs made by one verify on the others.
func signingKey(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, "signing.key")
	if b, err := os.ReadFile(path); err == nil {
		key, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(key) < 32 {
			return nil, fmt.Errorf("signing key %s is damaged; delete it to make a new one (outstanding CAS tokens and fetch URLs stop working)", path)
		}
		return key, nil
	}
	key := make([]byte, 32)
	rand.Read(key)
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	// Link fails if another process made the key first; then use theirs.
	if err := os.Link(tmp, path); err != nil {
		os.Remove(tmp)
		if errors.Is(err, os.ErrExist) {
			return signingKey(dataDir)
		}
		return nil, fmt.Errorf("signing key: %w", err)
	}
	os.Remove(tmp)
	return key, nil
}

func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	st, err := openStore(ctx, cfg)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer st.Close()
	key, err := signingKey(cfg.DataDir)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if err := bootstrapAdmin(ctx, st, stdout); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerCPUs(reg)
	srv, err := server.New(serverConfig(cfg, key), st, log, reg)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return cli.Exit(fmt.Sprintf("listen on %s: %v", cfg.Listen, err), 1)
	}
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return cli.Exit(fmt.Sprintf("listen on %s: %v", cfg.MetricsListen, err), 1)
		}
		ms := &http.Server{Handler: srv.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		go ms.Serve(mln)
		defer ms.Close()
	}
	log.Info("openxet serving", "version", Version, "addr", "http://"+ln.Addr().String(), "data_dir", cfg.DataDir,
		"memory_budget", FormatSize(cfg.MemoryBudget))
	err = srv.Serve(ctx, ln)
	log.Info("openxet stopped")
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return cli.Exit(err.Error(), 1)
	}
	return nil
}

// bootstrapAdmin makes one admin credential when the store has none and
// prints its token once.
func bootstrapAdmin(ctx context.Context, st *store.Store, w io.Writer) error {
	n, err := st.CountCredentials(ctx)
	if err != nil || n > 0 {
		return err
	}
	cred, tok, err := st.CreateCredential(ctx, "admin", []string{store.ScopeAdmin, store.ScopeWrite})
	if err != nil {
		return fmt.Errorf("first admin credential: %w", err)
	}
	fmt.Fprintf(w, "First start: created admin credential %s for tenant %q (scopes %s).\n", cred.ID, cred.Tenant, strings.Join(cred.Scopes, ","))
	fmt.Fprintf(w, "Token (shown once, store it now): %s\n", tok)
	return nil
}
