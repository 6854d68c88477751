package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"openxet/store"
	"openxet/xet"

	"openxet/store/accounts"
)

// The lifecycle's routes (docs/design.md §9): usage, file and tenant deletion, a
// collection pass on demand; and the collector loop `serve` runs.

// Defaults of the collector loop.
const (
	// DefaultGCInterval is how often serve runs a full collection pass.
	DefaultGCInterval = time.Hour
	// gcReleaseCheck is how often the loop looks for released files whose
	// xorbs no pass has released yet, so quota comes back within about a
	// minute of a deletion on any process.
	gcReleaseCheck = time.Minute
)

// collector runs passes for the server: the loop, the admin route, and the
// deletions that want their quota back soon. Its metrics count the passes
// this process ran.
type collector struct {
	s    *Server
	kick chan struct{}
	mu   sync.Mutex // one pass at a time in this process (the lease covers the others)

	passes      *prometheus.CounterVec
	released    prometheus.Counter
	owners      prometheus.Counter
	deleted     *prometheus.CounterVec
	deletedB    prometheus.Counter
	duration    prometheus.Histogram
	lastSuccess prometheus.Gauge
	waiting     prometheus.Gauge
}

func newCollector(s *Server, reg prometheus.Registerer) *collector {
	c := &collector{
		s:    s,
		kick: make(chan struct{}, 1),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "openxet_gc_passes_total",
			Help: "Collection passes this process ran, by result (ok, busy: another process held the lease, error, dry_run)."}, []string{"result"}),
		released: prometheus.NewCounter(prometheus.CounterOpts{Name: "openxet_gc_released_bytes_total", Help: "Usage given back by releasing xorb owners."}),
		owners:   prometheus.NewCounter(prometheus.CounterOpts{Name: "openxet_gc_released_owners_total", Help: "Xorb owners released."}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "openxet_gc_deleted_objects_total",
			Help: "Objects deleted from the bucket, by kind (xorb, shard, blob)."}, []string{"kind"}),
		deletedB: prometheus.NewCounter(prometheus.CounterOpts{Name: "openxet_gc_deleted_bytes_total", Help: "Bytes of the objects deleted from the bucket."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "openxet_gc_pass_duration_seconds", Help: "Duration of collection passes.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "openxet_gc_last_success_timestamp_seconds", Help: "When the last successful pass of this process ended (Unix time)."}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "openxet_gc_waiting_bytes",
			Help: "Bytes of objects nobody owns or references still in their grace period, at the last pass."}),
	}
	// Every label value exists from the start, so a scrape shows 0 rather
	// than nothing before the first pass.
	for _, r := range []string{"ok", "busy", "error", "dry_run"} {
		c.passes.WithLabelValues(r)
	}
	for _, k := range []string{"xorb", "shard", "blob"} {
		c.deleted.WithLabelValues(k)
	}
	reg.MustRegister(c.passes, c.released, c.owners, c.deleted, c.deletedB, c.duration, c.lastSuccess, c.waiting)
	return c
}

// run runs one pass and counts it.
func (c *collector) run(ctx context.Context, dryRun bool) (store.GCReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep, err := c.s.store.Collect(ctx, store.GCConfig{Grace: c.s.cfg.GCGrace, DryRun: dryRun})
	switch {
	case errors.Is(err, store.ErrCollectorBusy):
		c.passes.WithLabelValues("busy").Inc()
		return rep, err
	case err != nil:
		c.passes.WithLabelValues("error").Inc()
		c.s.log.Error("collection pass failed", "err", err, "released_bytes", rep.ReleasedBytes, "deleted_bytes", rep.DeletedBytes)
		return rep, err
	case dryRun:
		c.passes.WithLabelValues("dry_run").Inc()
		return rep, nil
	}
	c.passes.WithLabelValues("ok").Inc()
	c.released.Add(float64(rep.ReleasedBytes))
	c.owners.Add(float64(rep.ReleasedOwners))
	c.deleted.WithLabelValues("xorb").Add(float64(rep.DeletedXorbs))
	c.deleted.WithLabelValues("shard").Add(float64(rep.DeletedShards))
	c.deleted.WithLabelValues("blob").Add(float64(rep.DeletedBlobs))
	c.deletedB.Add(float64(rep.DeletedBytes))
	c.duration.Observe(rep.Duration.Seconds())
	c.lastSuccess.Set(float64(c.s.now().Unix()))
	c.waiting.Set(float64(rep.WaitingBytes))
	c.s.log.Info("collection pass", "released_owners", rep.ReleasedOwners, "released_bytes", rep.ReleasedBytes,
		"deleted_xorbs", rep.DeletedXorbs, "deleted_shards", rep.DeletedShards, "deleted_blobs", rep.DeletedBlobs,
		"deleted_bytes", rep.DeletedBytes, "resumed", rep.Resumed, "deferred", rep.Deferred, "duration", rep.Duration)
	return rep, nil
}

// poke asks the loop for a pass soon (a deletion wants its quota back).
func (c *collector) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// loop runs a pass every GCInterval, and sooner when poked or when another
// process released files, until ctx is done.
func (c *collector) loop(ctx context.Context, interval time.Duration) {
	full := time.NewTicker(interval)
	defer full.Stop()
	check := time.NewTicker(min(gcReleaseCheck, interval))
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-full.C:
		case <-c.kick:
		case <-check.C:
			waiting, err := c.s.store.ReleasesWaiting(ctx)
			if err != nil || !waiting {
				continue
			}
		}
		c.run(ctx, false)
	}
}

// UsageView is the usage report with each tenant's effective quota.
type UsageView struct {
	Tenants                []TenantUsageView `json:"tenants"`
	UnownedReferencedXorbs int               `json:"unowned_referenced_xorbs"`
	UnownedReferencedBytes int64             `json:"unowned_referenced_bytes"`
	UnreferencedXorbs      int               `json:"unreferenced_xorbs"`
	UnreferencedBytes      int64             `json:"unreferenced_bytes"`
	StoredXorbBytes        int64             `json:"stored_xorb_bytes"`
}

// TenantUsageView is one tenant's usage with its quota (-1: unlimited).
type TenantUsageView struct {
	store.TenantUsage
	QuotaBytes int64 `json:"quota_bytes"`
}

// DeletedTenantView answers a tenant deletion.
type DeletedTenantView struct {
	store.TenantDeletion
	// Collection is the pass that ran after the deletion, nil when
	// another process held the collector lease (its next pass releases).
	Collection *store.GCReport `json:"collection"`
}

// ReleasedFileView answers a file deletion.
type ReleasedFileView struct {
	Tenant   string `json:"tenant"`
	File     string `json:"file"`
	Released bool   `json:"released"`
	Note     string `json:"note"`
}

func (s *Server) lifecycleRoutes(e *echo.Echo) {
	g := e.Group("/api/openxet/v1/admin", s.guard(accounts.ScopeAdmin))
	g.GET("/usage", s.adminUsage)
	g.GET("/tenants/:tenant/usage", s.adminTenantUsage)
	g.DELETE("/tenants/:tenant", s.deleteTenant)
	g.DELETE("/tenants/:tenant/files/:file", s.adminDeleteFile)
	g.POST("/gc", s.postGC)
	e.GET("/api/openxet/v1/usage", s.ownUsage, s.guardOwn(accounts.ScopeRead))
	e.DELETE("/api/openxet/v1/files/:file", s.deleteOwnFile, s.guardOwn(accounts.ScopeWrite))
}

func (s *Server) usageView(ctx context.Context, tenant string) (UsageView, error) {
	rep, err := s.store.UsageReport(ctx, tenant)
	if err != nil {
		return UsageView{}, err
	}
	v := UsageView{Tenants: make([]TenantUsageView, 0, len(rep.Tenants)),
		UnownedReferencedXorbs: rep.UnownedReferencedXorbs, UnownedReferencedBytes: rep.UnownedReferencedBytes,
		UnreferencedXorbs: rep.UnreferencedXorbs, UnreferencedBytes: rep.UnreferencedBytes, StoredXorbBytes: rep.StoredXorbBytes}
	for _, u := range rep.Tenants {
		lim, _, err := s.effective.For(ctx, u.Tenant)
		if err != nil {
			return UsageView{}, err
		}
		v.Tenants = append(v.Tenants, TenantUsageView{TenantUsage: u, QuotaBytes: lim.QuotaBytes})
	}
	return v, nil
}

// adminUsage: GET /api/openxet/v1/admin/usage[?tenant=T].
func (s *Server) adminUsage(c echo.Context) error {
	t := c.QueryParam("tenant")
	if t != "" {
		if err := accounts.ValidTenant(t); err != nil {
			return err
		}
		ok, err := s.store.TenantKnown(c.Request().Context(), t)
		if err != nil {
			return err
		}
		if !ok {
			return refuse(errNotFound, "tenant %s is not known to this deployment", t)
		}
	}
	v, err := s.usageView(c.Request().Context(), t)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// adminTenantUsage: GET /api/openxet/v1/admin/tenants/{tenant}/usage.
func (s *Server) adminTenantUsage(c echo.Context) error {
	t, err := s.knownTenant(c, false)
	if err != nil {
		return err
	}
	v, err := s.usageView(c.Request().Context(), t)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v.Tenants[0])
}

// ownUsage: GET /api/openxet/v1/usage, the caller's tenant.
func (s *Server) ownUsage(c echo.Context) error {
	id := identityOf(c)
	v, err := s.usageView(c.Request().Context(), id.Tenant)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v.Tenants[0])
}

// deleteTenant: DELETE /api/openxet/v1/admin/tenants/{tenant}, then a pass
// that gives its usage back.
func (s *Server) deleteTenant(c echo.Context) error {
	t, err := tenantParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	del, err := s.store.DeleteTenant(ctx, t)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return refuse(errNotFound, "tenant %s is not known to this deployment", t)
		}
		return err
	}
	for _, id := range del.CredentialIDs {
		s.creds.forget(id)
	}
	s.effective.Invalidate(t)
	out := DeletedTenantView{TenantDeletion: del}
	if rep, err := s.gc.run(ctx, false); err == nil {
		out.Collection = &rep
	} else if !errors.Is(err, store.ErrCollectorBusy) {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func fileParam(c echo.Context) (xet.Hash, error) {
	return xet.ParseHash(c.Param("file"))
}

func (s *Server) releaseFile(c echo.Context, tenant string) error {
	h, err := fileParam(c)
	if err != nil {
		return err
	}
	if err := s.store.ReleaseFile(c.Request().Context(), tenant, h); err != nil {
		return err
	}
	s.gc.poke()
	return c.JSON(http.StatusOK, ReleasedFileView{Tenant: tenant, File: h.String(), Released: true,
		Note: "the file is no longer readable; its bytes leave the tenant's usage at the next collection pass"})
}

// adminDeleteFile: DELETE /api/openxet/v1/admin/tenants/{tenant}/files/{file}.
func (s *Server) adminDeleteFile(c echo.Context) error {
	t, err := s.knownTenant(c, false)
	if err != nil {
		return err
	}
	return s.releaseFile(c, t)
}

// deleteOwnFile: DELETE /api/openxet/v1/files/{file}, a file of the
// caller's tenant.
func (s *Server) deleteOwnFile(c echo.Context) error {
	return s.releaseFile(c, identityOf(c).Tenant)
}

// postGC: POST /api/openxet/v1/admin/gc[?dry_run=true], one pass.
func (s *Server) postGC(c echo.Context) error {
	dry := false
	if v := c.QueryParam("dry_run"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return refuse(errBadRequest, "dry_run=%q is not true or false", v)
		}
		dry = b
	}
	rep, err := s.gc.run(c.Request().Context(), dry)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}
