package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"openxet/budget"
	"openxet/hub"
	"openxet/limits"
	"openxet/mirror"
	"openxet/store"
	"openxet/turns"
	"openxet/work"

	"openxet/store/accounts"
	"openxet/xet"
)

// Config is what the server needs; cli fills it from the configuration.
type Config struct {
	// PublicURL is the base URL clients reach the server at, without a
	// trailing slash; "" means http://<listener address>.
	PublicURL      string
	TrustedProxies []netip.Prefix
	// DedupScope is "global" (any tenant's chunks may be offered) or "tenant".
	DedupScope string
	// SigningKey signs CAS tokens and fetch URLs; processes that share a
	// data directory share it.
	SigningKey  []byte
	TokenTTL    time.Duration
	FetchURLTTL time.Duration
	// AnonymousReads serves the Hub's read routes of public repos to
	// requests without a token (hub.anonymous_reads, docs/sharing.md).
	AnonymousReads bool
	// Anonymous are the limits of anonymous readers, per client address
	// and for all of them together (limits.anonymous_*); the zero value
	// means limits.DefaultAnonymous().
	Anonymous limits.Anonymous
	// AnonymousMemoryShare is the fraction of the memory budget all
	// anonymous readers together may hold (limits.anonymous_memory_share,
	// budget.MinShare to budget.MaxShare); 0 means
	// DefaultAnonymousMemoryShare. It applies only with AnonymousReads.
	AnonymousMemoryShare float64
	// AnonymousPoolBytesPerSecond is the rate the bytes written to all
	// anonymous answers together are paced to while a tenant's request is
	// in progress (limits.anonymous_pool_bytes_per_second, anonpace.go);
	// 0: never paced. It applies only with AnonymousReads.
	AnonymousPoolBytesPerSecond float64
	// DefaultVisibility is the visibility of a repo created without one
	// (hub.default_visibility): private (also for ""), internal or public.
	DefaultVisibility string

	Limits                limits.Limits // defaults for every tenant
	LimitsCacheTTL        time.Duration
	AuthFailuresPerMinute int
	Budget                budget.Config
	// Work sizes the node's work slots; zero fields take work's defaults.
	Work work.Config
	// RefusalPause is how long a connection whose request a request-rate
	// limit refused goes unread after the answer (pauseRefused), at most
	// the answer's Retry-After; 0: never paused.
	RefusalPause time.Duration
	// TurnsAboveInFlight: a request of a tenant that has more than this
	// many requests in progress on the node (itself included, all the
	// tenant's credentials together) waits for a turn (takeTurn, package
	// turns) before its handler runs; 0: never.
	TurnsAboveInFlight int

	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	BodyReadTimeout   time.Duration
	ShutdownTimeout   time.Duration
	MaxHeaderBytes    int
	// MetricsOnMain serves /metrics on the main listener behind admin auth.
	MetricsOnMain bool
	// MemoryTrimInterval is how often Serve gives idle memory back to the
	// operating system (see trimMemory); 0 means DefaultMemoryTrimInterval,
	// a negative value never.
	MemoryTrimInterval time.Duration
	// MetricsTenants is how many tenants /metrics shows usage and quota of,
	// those nearest their quota first; 0: none (totals only).
	MetricsTenants int

	// GCInterval is how often Serve runs a collection pass (0: never;
	// the admin route and deletions still run passes). GCGrace is the
	// grace period of every pass (store.GCConfig.Grace).
	GCInterval time.Duration
	GCGrace    time.Duration
	// Version is shown on the landing page.
	Version string
	// Mirror serves an upstream Hub's repos (mirror.upstream,
	// docs/mirror.md); nil: no mirror.
	Mirror Mirror
}

// Mirror is the mirror of an upstream Hub as the server uses it: the Hub's
// part (hub.Mirror), and the pull of a file a CAS token for a mirrored repo
// asks for before it is stored. Package mirror implements it; cli builds
// it.
type Mirror interface {
	hub.Mirror
	// PullFile makes the Xet file h of local (a mirrored repo) stored,
	// pulling it for a request of tenant; store.ErrNotFound unless a
	// revision of local names it.
	PullFile(ctx context.Context, tenant string, local store.RepoID, h xet.Hash, reserve func(n int64) ([]byte, func(), error)) error
	// RelayPlan answers the reconstruction of a window (an HTTP Range) of
	// such a file while it is not stored, from the upstream's plan of it,
	// and starts its pull; ok is false when the store answers instead.
	RelayPlan(ctx context.Context, tenant string, local store.RepoID, h xet.Hash, rangeHeader string, reserve func(n int64) ([]byte, func(), error)) (rec xet.Reconstruction, until time.Time, ok bool, err error)
	// Relay opens bytes [start, end] of the upstream xorb x that a plan of
	// RelayPlan for the file h named.
	Relay(ctx context.Context, tenant string, h, x xet.Hash, start, end uint64) (io.ReadCloser, error)
	// Pull pre-fetches a revision of an upstream repo (the admin route).
	Pull(ctx context.Context, tenant, typ, ns, name, rev string, reserve func(n int64) ([]byte, func(), error)) (mirror.Mirrored, error)
	// List is every mirrored revision, the least recently used first.
	List(ctx context.Context) ([]mirror.Mirrored, error)
	// Served counts a file read answered from what the mirror stored,
	// that did not go through Fetch (a Xet download's reconstruction).
	Served()
	// Stats counts what the mirror did.
	Stats() mirror.Stats
	// UpstreamWaiting is how many upstream streams wait for a connection.
	UpstreamWaiting() int
}

// CollectSoon tells the collector that revisions were dropped, so that a
// pass soon gives their bytes back (the mirror's evictions).
func (s *Server) CollectSoon() { s.gc.poke() }

// Defaults for Config fields left zero.
const (
	DefaultTokenTTL       = time.Hour
	DefaultFetchURLTTL    = time.Hour
	DefaultLimitsCacheTTL = 10 * time.Second
	// DefaultAnonymousMemoryShare is the anonymous pool's share of the
	// memory budget.
	DefaultAnonymousMemoryShare = 0.25
	maxIPKeys                   = 100_000
	maxLimiterKeys              = 1_000_000
	fetchBufferBytes            = 256 << 10
	dedupAnswerXorbs            = 32
)

const (
	// DefaultMemoryTrimInterval: a pool unused for one interval is dropped
	// at the next, so memory goes back within two intervals of a burst.
	DefaultMemoryTrimInterval = 20 * time.Second
	// maxUnsentBytes is how much of an answer a connection's socket may
	// hold unsent (limitUnsent). Without a cap, each slow reader of a
	// large answer made the kernel take up to a whole send buffer (4 MiB)
	// from the server at once: 320 held reads made the server copy 1.2 GB
	// into socket memory, outside the memory budget, in the second they
	// connected, while every other request waited for its CPU.
	maxUnsentBytes = 256 << 10
	// trimAfterBytes is how much the heap must have allocated since the
	// last trim for an idle budget to trigger one.
	trimAfterBytes = 64 << 20
)

// Server is the HTTP application. Create it with New, run it with Serve.
type Server struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
	reg   *prometheus.Registry
	now   func() time.Time
	echo  *echo.Echo
	// anonPace paces anonymous answers beside tenants' requests (nil:
	// never, also with anonymous reads off).
	anonPace *anonPacer

	signer    signer
	creds     *credentialCache
	persons   *ttlCache[accounts.Person]
	effective *limits.Effective
	gate      *limits.Gate
	pending   *limits.Pending
	budget    *budget.Budget
	work      *work.Pool
	workWait  prometheus.Histogram
	turns     turns.Turnstile
	turnWait  prometheus.Histogram
	metrics   *metrics
	// readTerms reads a window of a file's term list (store.FileWindow);
	// tests wrap it to count the lists read.
	readTerms func(ctx context.Context, tenant string, f store.File, start, end uint64) ([]xet.Term, uint64, error)
	gc        *collector
	hub       *hub.Hub

	publicURL string

	trimAllocs uint64 // heap bytes allocated at the last trim (trimMemory)

	// paused counts the connections pauseRefused holds now; shuttingDown
	// closes when Serve starts shutting down, which ends every pause.
	paused       atomic.Int64
	shuttingDown chan struct{}
}

// New builds the server; it does no I/O.
func New(cfg Config, st *store.Store, log *slog.Logger, reg *prometheus.Registry) (*Server, error) {
	if st == nil || log == nil || reg == nil {
		return nil, errors.New("server.New: store, logger and registry are required")
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if cfg.FetchURLTTL == 0 {
		cfg.FetchURLTTL = DefaultFetchURLTTL
	}
	if cfg.LimitsCacheTTL == 0 {
		cfg.LimitsCacheTTL = DefaultLimitsCacheTTL
	}
	if cfg.MemoryTrimInterval == 0 {
		cfg.MemoryTrimInterval = DefaultMemoryTrimInterval
	}
	if cfg.DedupScope == "" {
		cfg.DedupScope = "global"
	}
	if len(cfg.SigningKey) == 0 {
		cfg.SigningKey = make([]byte, 32)
		rand.Read(cfg.SigningKey)
	}
	if cfg.Anonymous == (limits.Anonymous{}) {
		cfg.Anonymous = limits.DefaultAnonymous()
	}
	if cfg.AnonymousMemoryShare == 0 {
		cfg.AnonymousMemoryShare = DefaultAnonymousMemoryShare
	}
	if cfg.AnonymousReads {
		shares := map[string]float64{anonymousTenant: cfg.AnonymousMemoryShare}
		for t, v := range cfg.Budget.TenantShares {
			shares[t] = v
		}
		cfg.Budget.TenantShares = shares
	}
	if err := cfg.Budget.Validate(maxBodyBytes); err != nil {
		return nil, err
	}
	cfg.Work = cfg.Work.WithDefaults()
	if err := cfg.Work.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:    cfg,
		store:  st,
		log:    log,
		reg:    reg,
		now:    time.Now,
		signer: newSigner(cfg.SigningKey),
		gate: limits.NewGate(limits.GateConfig{MaxCredentials: maxLimiterKeys, MaxTenants: maxLimiterKeys, MaxIPs: maxIPKeys,
			AuthFailuresPerMinute: max(cfg.AuthFailuresPerMinute, 1)}),
		pending:   &limits.Pending{},
		budget:    budget.New(cfg.Budget),
		readTerms: st.FileWindow,
		work:      work.New(cfg.Work),
		publicURL: strings.TrimRight(cfg.PublicURL, "/"),

		shuttingDown: make(chan struct{}),
	}
	if cfg.AnonymousReads { // no anonymous answer to pace: tenants' requests go uncounted
		s.anonPace = newAnonPacer(cfg.AnonymousPoolBytesPerSecond, func() time.Time { return s.now() })
	}
	// The caches read the clock through s, whose tests set it later.
	clock := func() time.Time { return s.now() }
	s.creds = newCredentialCache(st, cfg.LimitsCacheTTL, clock)
	s.persons = newTTLCache(personSource(st).Person, cfg.LimitsCacheTTL, clock)
	s.effective = limits.NewEffective(cfg.Limits, overrideSource{st}, cfg.LimitsCacheTTL)
	s.metrics = newMetrics(reg, s)
	if cfg.Mirror != nil {
		registerMirrorMetrics(reg, cfg.Mirror)
	}
	s.gc = newCollector(s, reg)
	s.workWait = workMetrics(reg, s.work)
	s.turnWait = turnMetrics(reg, &s.turns)
	h, err := s.newHub()
	if err != nil {
		return nil, err
	}
	s.hub = h
	s.echo = s.routes()
	return s, nil
}

// Handler returns the whole HTTP application.
func (s *Server) Handler() http.Handler { return s.echo }

// MetricsHandler serves /metrics without auth, for a separate listener.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
}

// noSniff marks every answer, pages, JSON and refusals included, with
// X-Content-Type-Options: nosniff, so that a browser takes each for the
// type it names and never runs bytes it guessed were a page or a script.
// The answers carrying a repo's files set more (hub's userContent).
func noSniff(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("X-Content-Type-Options", "nosniff")
		return next(c)
	}
}

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.IPExtractor = ipExtractor(s.cfg.TrustedProxies)
	e.Use(noSniff, s.pauseRefused, s.requestID, s.requestLog, s.recoverPanics)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	if s.cfg.MetricsOnMain {
		e.GET("/metrics", echo.WrapHandler(s.MetricsHandler()), s.guard("admin"))
	}

	read, write := s.guardOwn("read"), s.guardOwn("write")
	// CAS API, current paths and the aliases older hf_xet releases use.
	for _, p := range []string{"/v1/xorbs", "/xorbs", "/xorb"} {
		e.POST(p+"/:prefix/:hash", s.postXorb, write)
		e.HEAD(p+"/:prefix/:hash", s.headXorb, read)
	}
	for _, p := range []string{"/v1/shards", "/shards"} {
		e.POST(p, s.postShard, write)
	}
	e.POST("/shard/:prefix/:hash", s.postShard, write)
	e.PUT("/shard/:prefix/:hash", s.postShard, write)
	e.POST("/v2/shards", s.postShardV2, write)
	for _, p := range []string{"/v1/reconstructions", "/reconstructions", "/reconstruction"} {
		e.GET(p+"/:file", s.getReconstruction, read)
	}
	e.GET("/v2/reconstructions/:file", s.getReconstructionV2, read)
	for _, p := range []string{"/v1/chunks", "/chunks", "/chunk"} {
		e.GET(p+"/:prefix/:hash", s.getChunk, read)
	}
	e.GET("/v1/fetch/:xorb", s.getFetch)
	e.POST("/v1/telemetry", s.postTelemetry, s.authOnly("read"))
	e.Any("/v2/*", func(c echo.Context) error { return refuse(errNotFound, "no such v2 route") })

	s.adminRoutes(e)
	s.lifecycleRoutes(e)
	s.hub.Mount(e)
	return e
}

// ipExtractor returns the client IP: the TCP peer, unless the peer is one
// of the trusted proxies, in which case X-Forwarded-For is read.
func ipExtractor(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		_, n, err := net.ParseCIDR(p.String())
		if err == nil {
			opts = append(opts, echo.TrustIPRange(n))
		}
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

func (s *Server) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return next(c)
	}
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		return &apiError{Status: 503, Code: "unavailable", Message: err.Error(), Hint: "check the index file and the bucket", RetryAfter: 1, Cause: err}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// base returns the public base URL for a request.
func (s *Server) base(c echo.Context) string {
	if s.publicURL != "" {
		return s.publicURL
	}
	scheme := "http"
	if c.Request().TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + c.Request().Host
}

// Serve answers on ln until ctx is done, then shuts down gracefully: it stops
// accepting, lets requests in progress finish (up to ShutdownTimeout) and
// returns. The caller closes the store afterwards.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// ReadTimeout bounds reading every request's body, not only the xorb
	// and shard bodies readBody reads (it sets its own deadline): without
	// it a client that stalls mid-body holds its connection for ever, even
	// on routes that never read the body (net/http drains up to 256KiB of
	// it before answering). net/http clears the deadline once the body is
	// read, so long answers are not cut.
	hs := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.BodyReadTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			limitUnsent(c, maxUnsentBytes)
			return withConn(ctx, c)
		},
	}
	hs.RegisterOnShutdown(sync.OnceFunc(func() { close(s.shuttingDown) }))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	trimCtx, stopTrim := context.WithCancel(ctx)
	trimDone := make(chan struct{})
	go func() {
		defer close(trimDone)
		s.trimLoop(trimCtx)
	}()
	defer func() {
		stopTrim()
		<-trimDone
	}()
	gcCtx, stopGC := context.WithCancel(ctx)
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		if s.cfg.GCInterval > 0 {
			s.gc.loop(gcCtx, s.cfg.GCInterval)
		}
	}()
	defer func() { stopGC(); <-gcDone }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), max(s.cfg.ShutdownTimeout, time.Second))
	defer cancel()
	err := hs.Shutdown(sctx)
	<-errc
	s.turns.Close() // every request has ended: nobody waits for a turn
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// trimLoop runs trimMemory every MemoryTrimInterval until ctx ends.
func (s *Server) trimLoop(ctx context.Context) {
	if s.cfg.MemoryTrimInterval < 0 {
		return
	}
	t := time.NewTicker(s.cfg.MemoryTrimInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.trimMemory()
		}
	}
}

// trimMemory gives memory the process no longer uses back to the operating
// system, so that RSS falls back towards idle after a burst: the Go runtime
// alone keeps freed heap mapped for minutes, and collects nothing while the
// process is idle. It drops the budget's pool of released buffers once that
// went unused for a whole interval, and returns freed memory to the system
// (debug.FreeOSMemory, a forced collection) when buffers were dropped or,
// with nothing reserved, when the heap allocated trimAfterBytes since the
// last trim. Serve calls it every MemoryTrimInterval; it reports whether it
// returned memory.
func (s *Server) trimMemory() bool {
	dropped := s.budget.TrimBuffers()
	sample := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	rtmetrics.Read(sample)
	var allocs uint64
	if sample[0].Value.Kind() == rtmetrics.KindUint64 {
		allocs = sample[0].Value.Uint64()
	}
	idle := s.budget.Stats().Reservations == 0
	if dropped == 0 && !(idle && allocs-s.trimAllocs >= trimAfterBytes) {
		return false
	}
	debug.FreeOSMemory()
	s.trimAllocs = allocs
	return true
}
