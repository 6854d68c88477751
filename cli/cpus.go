package cli

import (
	"github.com/prometheus/client_golang/prometheus"
)

// registerCPUs exports the CPUs this process may run on, as read at start,
// as openxet_process_cpus{cpus="0-1"} = their count, so that `openxet load`
// can say (and check) which CPUs the server had. Nothing is registered
// where the affinity cannot be read.
func registerCPUs(reg prometheus.Registerer) {
	cpus, err := processCPUs()
	if err != nil || len(cpus) == 0 {
		return
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "openxet_process_cpus",
		Help:        "CPUs this process may run on (its affinity at start): their count, listed in the cpus label.",
		ConstLabels: prometheus.Labels{"cpus": cpus.String()}})
	g.Set(float64(len(cpus)))
	reg.MustRegister(g)
}
