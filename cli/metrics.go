package cli

import (
	"regexp"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newRegistry is the registry serve exposes on /metrics, with the Go
// runtime, process and build-info families; server.New adds its own. The
// Go families include go_sched_latencies_seconds, how long goroutines
// waited for a CPU: on a server pinned to few CPUs, the part of a request's
// time spent waiting its turn (`openxet load` reports it per phase).
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	goc := collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$`)}))
	reg.MustRegister(goc, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	registerCPUs(reg)
	return reg
}

// buildInfo is openxet_build_info: always 1, labelled with the release,
// the Go version and the commit ("unknown" when not recorded).
func buildInfo() prometheus.Collector {
	rev := revision()
	if rev == "" {
		rev = "unknown"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "openxet_build_info",
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": Version, "go_version": runtime.Version(), "revision": rev},
	})
	g.Set(1)
	return g
}
