package server

import (
	"errors"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"openxet/limits"
	"openxet/turns"
)

// takeTurn makes a request of a busy tenant, one with more than
// server.turns_above_in_flight requests in progress on this node (all its
// credentials together, limits.Admission.TenantInFlight), wait for a turn
// before its handler runs (package turns: turns come through the network
// poller, so the tenant's requests run between everyone else's, not in a
// batch ahead of them). Other requests go on at once.
// The wait is the request's turn_wait stage.
//
// It returns an error only when the request's context ended while it
// waited (the client went away). A Turnstile closed by shutdown, or one
// that could not make its pipe, lets the request go on: a turn is an
// ordering, never a reason to refuse.
func (s *Server) takeTurn(c echo.Context, adm limits.Admission) error {
	if s.cfg.TurnsAboveInFlight <= 0 || adm.TenantInFlight <= s.cfg.TurnsAboveInFlight {
		return nil
	}
	start := time.Now()
	err := s.turns.Wait(c.Request().Context())
	stagesOf(c).since(stageTurn, start)
	s.turnWait.Observe(time.Since(start).Seconds())
	if err != nil && c.Request().Context().Err() != nil {
		return err
	}
	if err != nil && !errors.Is(err, turns.ErrClosed) {
		s.log.Warn("turn skipped", "err", err)
	}
	return nil
}

// turnMetrics registers the turns' metrics and returns the wait histogram
// takeTurn observes.
func turnMetrics(reg prometheus.Registerer, t *turns.Turnstile) prometheus.Histogram {
	wait := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "openxet_turn_wait_seconds",
		Help:    "Time a request of a busy tenant (over server.turns_above_in_flight in progress) waited for its turn.",
		Buckets: []float64{0.0001, 0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10}})
	reg.MustRegister(wait)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "openxet_turns_waiting",
		Help: "Requests of busy tenants waiting for a turn now."},
		func() float64 { return float64(t.Stats().Waiting) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "openxet_turns_total",
		Help: "Turns given to requests of busy tenants."},
		func() float64 { return float64(t.Stats().Turns) }))
	return wait
}
