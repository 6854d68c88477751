package server

import (
	"context"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"openxet/work"
)

// workSlot waits for one of the node's work slots for the request's tenant
// (package work: a share per tenant, served in turn). Handlers hold a slot
// only for a section of index or CPU work: never while reading the body,
// writing the answer or waiting for memory. The caller releases it, as soon
// as the section ends and by defer on every other path.
func (s *Server) workSlot(c echo.Context) (work.Slot, error) {
	return s.timedSlot(c, s.work.Acquire)
}

// answerSlot is workSlot for the next piece of an answer already under
// way (sendShared): it waits in the same turn until a slot is granted or
// the request ends, never 503, since the answer's status is sent.
func (s *Server) answerSlot(c echo.Context) (work.Slot, error) {
	return s.timedSlot(c, s.work.AcquireUntilDone)
}

// timedSlot takes a slot for the request's tenant with acquire and counts
// the wait in the request's work_wait stage and the wait histogram.
func (s *Server) timedSlot(c echo.Context, acquire func(context.Context, string) (work.Slot, error)) (work.Slot, error) {
	tenant := ""
	if id := identityOf(c); id != nil {
		tenant = id.Account
	}
	start := time.Now()
	slot, err := acquire(c.Request().Context(), tenant)
	stagesOf(c).since(stageWork, start)
	s.workWait.Observe(time.Since(start).Seconds())
	return slot, err
}

// workMetrics registers the work slots' metrics and returns the wait
// histogram workSlot observes.
func workMetrics(reg prometheus.Registerer, p *work.Pool) prometheus.Histogram {
	wait := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "openxet_work_wait_seconds",
		Help:    "Time a section of request work waited for a work slot (server.work_slots), granted or not.",
		Buckets: []float64{0.0001, 0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10}})
	reg.MustRegister(wait)
	gauge := func(name, help string, f func(work.Stats) int) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(f(p.Stats())) }))
	}
	counter := func(name, help string, f func(work.Stats) uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(p.Stats())) }))
	}
	gauge("openxet_work_slots", "The node's work slots (server.work_slots).", func(st work.Stats) int { return st.Slots })
	gauge("openxet_work_slots_held", "Work slots held now.", func(st work.Stats) int { return st.Held })
	gauge("openxet_work_waiting", "Sections of request work waiting for a slot now.", func(st work.Stats) int { return st.Waiting })
	counter("openxet_work_waits_total", "Sections of request work that had to wait for a slot.", func(st work.Stats) uint64 { return st.Waited })
	counter("openxet_work_refusals_total", "Requests refused with 503 after waiting server.work_wait for a slot.", func(st work.Stats) uint64 { return st.Busy })
	return wait
}
