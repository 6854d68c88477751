package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"openxet/budget"
	"openxet/limits"
	"openxet/store"
)

// metrics are registered on the registry the caller passes in; no global
// registry is used.
type metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	uploadedBytes prometheus.Counter
	servedBytes   prometheus.Counter
	refusalCodes  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "openxet_http_requests_total", Help: "HTTP requests by route and status class."}, []string{"route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "openxet_http_request_duration_seconds", Help: "HTTP request duration by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"route"}),
		uploadedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "openxet_xorb_bytes_stored_total", Help: "Bytes of new xorbs stored."}),
		servedBytes:   prometheus.NewCounter(prometheus.CounterOpts{Name: "openxet_fetch_bytes_served_total", Help: "Bytes served through fetch URLs."}),
		refusalCodes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "openxet_refusals_total",
			Help: "Refused requests by error code (the fixed set of docs/api.md)."}, []string{"code"}),
	}
	reg.MustRegister(m.requests, m.duration, m.uploadedBytes, m.servedBytes, m.refusalCodes, newStoreCollector(s))
	for _, l := range limits.LimitNames() {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "openxet_rate_limit_refusals_total",
			Help: "Requests refused by a rate limit, by limit.", ConstLabels: prometheus.Labels{"limit": l}},
			func() float64 { return float64(s.gate.Refusals.Load(l)) }))
	}
	st := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	st("openxet_index_lock_held", "1 while this node holds its shared lock on the index, else 0: it refuses writes (503) until it takes the lock again.", func() float64 {
		if s.store.IndexLockHeld() {
			return 1
		}
		return 0
	})
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "openxet_index_lock_losses_total",
		Help: "Times this node found its shared lock on a PostgreSQL index lost (the session holding it ended)."},
		func() float64 { return float64(s.store.IndexLockLosses()) }))
	for name, c := range map[string]struct {
		help string
		f    func(store.CheckpointStats) float64
	}{
		"openxet_index_checkpoints_total":        {"Background checkpoints of a SQLite index (server.index_checkpoint).", func(c store.CheckpointStats) float64 { return float64(c.Checkpoints) }},
		"openxet_index_checkpoints_slow_total":   {"Background checkpoints of a SQLite index that took 100 ms or more (each logged at INFO).", func(c store.CheckpointStats) float64 { return float64(c.Slow) }},
		"openxet_index_checkpoint_seconds_total": {"Seconds the background checkpoints of a SQLite index took.", func(c store.CheckpointStats) float64 { return c.Time.Seconds() }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: c.help},
			func() float64 { return c.f(s.store.CheckpointStats()) }))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "openxet_anonymous_paced_seconds_total",
		Help: "Seconds anonymous answers waited for limits.anonymous_pool_bytes_per_second while tenants' requests were in progress."},
		s.anonPace.waitedSeconds))
	st("openxet_paused_connections", "Keep-alive connections left unread after a request-rate refusal (limits.refusal_pause), now.", func() float64 { return float64(s.paused.Load()) })
	st("openxet_memory_reserved_bytes", "Bytes of the memory budget reserved now.", func() float64 { return float64(s.budget.Stats().ReservedBytes) })
	st("openxet_memory_reserved_high_water_bytes", "Highest reserved bytes seen.", func() float64 { return float64(s.budget.Stats().HighWaterBytes) })
	st("openxet_memory_budget_bytes", "The memory budget.", func() float64 { return float64(s.cfg.Budget.TotalBytes) })
	st("openxet_memory_waiting", "Reservations queued for memory now.", func() float64 { return float64(s.budget.Stats().Waiting) })
	st("openxet_memory_pooled_bytes", "Bytes of released buffers kept for reuse (within the budget, not reserved).", func() float64 { return float64(s.budget.Stats().PooledBytes) })
	counter := func(name, help string, labels prometheus.Labels, f func(budget.Stats) uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f(s.budget.Stats())) }))
	}
	counter("openxet_memory_waits_total", "Reservations that had to wait for memory.", nil, func(st budget.Stats) uint64 { return st.Waited })
	counter("openxet_memory_buffer_reuses_total", "Body and read buffers served from the pool of released buffers.", nil, func(st budget.Stats) uint64 { return st.BufferHits })
	counter("openxet_memory_buffer_allocations_total", "Body and read buffers the pool could not serve.", nil, func(st budget.Stats) uint64 { return st.BufferMisses })
	for share, pick := range map[string]func(budget.ByShare) uint64{
		budget.ShareBudget:     func(b budget.ByShare) uint64 { return b.Budget },
		budget.ShareCredential: func(b budget.ByShare) uint64 { return b.Credential },
		budget.ShareTenant:     func(b budget.ByShare) uint64 { return b.Tenant },
	} {
		counter("openxet_memory_refusals_total", "Reservations refused, by reason (busy: waited memory_wait; too_large: could never fit) and share kind.",
			prometheus.Labels{"reason": "busy", "share": share}, func(st budget.Stats) uint64 { return pick(st.Busy) })
		counter("openxet_memory_refusals_total", "Reservations refused, by reason (busy: waited memory_wait; too_large: could never fit) and share kind.",
			prometheus.Labels{"reason": "too_large", "share": share}, func(st budget.Stats) uint64 { return pick(st.TooLarge) })
	}
	return m
}
