package server

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"openxet/store"
)

// storeMetricsRefresh is how long a scrape reuses the stored-bytes figures
// of an earlier one: summing them reads every xorb row of the index.
const storeMetricsRefresh = 30 * time.Second

// readyTimeout bounds a readiness check: /readyz, openxet_ready and the
// landing page's.
const readyTimeout = 5 * time.Second

// storeCollector exports readiness (checked on every scrape), the stored
// bytes of the index, and per tenant (up
// to Config.MetricsTenants of them, nearest their quota first) usage and
// quota. Figures are read on a scrape, at most once per
// storeMetricsRefresh; when the index cannot be read the families are
// left out of that scrape (and openxet_store_metrics_errors_total counts it).
type storeCollector struct {
	s *Server

	ready, xorbBytes, chargedBytes, tenantUsage, tenantQuota *prometheus.Desc
	errors                                                   prometheus.Counter

	mu   sync.Mutex
	at   time.Time // of snap; zero: none yet
	snap store.UsageSummary
}

func newStoreCollector(s *Server) *storeCollector {
	return &storeCollector{
		s: s,
		ready: prometheus.NewDesc("openxet_ready",
			"1 when the index and the bucket answered this scrape (what /readyz checks), else 0.", nil, nil),
		xorbBytes: prometheus.NewDesc("openxet_stored_xorb_bytes",
			"Bytes of every xorb in the index, each counted once however many tenants own it.", nil, nil),
		chargedBytes: prometheus.NewDesc("openxet_tenants_usage_bytes",
			"Sum of every tenant's usage (a xorb owned by two tenants counts twice, as quotas do).", nil, nil),
		tenantUsage: prometheus.NewDesc("openxet_tenant_usage_bytes",
			"A tenant's usage, for up to server.metrics_tenants tenants, nearest their quota first.", []string{"tenant"}, nil),
		tenantQuota: prometheus.NewDesc("openxet_tenant_quota_bytes",
			"A tenant's effective quota, for the tenants of openxet_tenant_usage_bytes that have one.", []string{"tenant"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "openxet_store_metrics_errors_total",
			Help: "Scrapes that could not read the stored-bytes figures from the index."}),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ready
	ch <- c.xorbBytes
	ch <- c.chargedBytes
	ch <- c.tenantUsage
	ch <- c.tenantQuota
	c.errors.Describe(ch)
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ready := 0.0
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	if c.s.store.Ping(ctx) == nil {
		ready = 1
	}
	cancel()
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, ready)
	if snap, ok := c.summary(); ok {
		ch <- prometheus.MustNewConstMetric(c.xorbBytes, prometheus.GaugeValue, float64(snap.XorbBytes))
		ch <- prometheus.MustNewConstMetric(c.chargedBytes, prometheus.GaugeValue, float64(snap.ChargedBytes))
		for _, t := range snap.Tenants {
			ch <- prometheus.MustNewConstMetric(c.tenantUsage, prometheus.GaugeValue, float64(t.UsageBytes), t.Name)
			if t.QuotaBytes >= 0 {
				ch <- prometheus.MustNewConstMetric(c.tenantQuota, prometheus.GaugeValue, float64(t.QuotaBytes), t.Name)
			}
		}
	}
	c.errors.Collect(ch)
}

// summary returns the figures, read again when older than the refresh.
func (c *storeCollector) summary() (store.UsageSummary, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.s.now()
	if !c.at.IsZero() && now.Sub(c.at) < storeMetricsRefresh {
		return c.snap, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, err := c.s.store.UsageSummary(ctx, c.s.cfg.MetricsTenants, c.s.cfg.Limits.QuotaBytes)
	if err != nil {
		c.errors.Inc()
		c.s.log.Warn("metrics: stored bytes not read", "err", err)
		return store.UsageSummary{}, false
	}
	c.at, c.snap = now, snap
	return snap, true
}
