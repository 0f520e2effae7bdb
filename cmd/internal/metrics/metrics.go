// Package metrics is sandcell's Prometheus metrics: what the server ran,
// refused and holds, in the text exposition format on the HTTP listener's
// /metrics (behind the same auth and Origin rules as /mcp).
//
// Invariant: a counter is incremented once per request, by the executor's
// Event (executor.Options.Observe), whatever path the request took (MCP,
// a REST adapter); the gauges are read at scrape time from their owners,
// so they can never drift from the state they describe.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/oci/backend"
)

// Sources are the gauges' owners, read at each scrape. A nil func leaves
// its gauge out.
type Sources struct {
	// Live is the number of sandboxes that exist now (prepared, running or
	// being destroyed).
	Live func() int
	// Sessions is the number of sessions on disk.
	Sessions func() int
	// Pool is the warm pool's counters and its idle containers.
	Pool func() (backend.PoolStats, int)
	// Kernels is the number of live interpreter kernels.
	Kernels func() int
}

// Metrics are the server's metrics.
type Metrics struct {
	reg      *prometheus.Registry
	runs     *prometheus.CounterVec
	refused  *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	queue    prometheus.Histogram
	egressNo *prometheus.CounterVec
}

// New makes the metrics, with the gauges of src and the Go runtime's.
func New(src Sources) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandcell_runs_total",
		Help: "Requests that ran, by language, isolation and status (ok, error, timeout, memory_limit, output_limit, cancelled, internal_error)."},
		[]string{"language", "isolation", "status"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandcell_refused_total",
		Help: "Requests refused before they ran, by reason: invalid (the caller can fix it), busy (the gate was full), cancelled, failed."},
		[]string{"reason"})
	m.seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sandcell_run_seconds",
		Help:    "Wall time of a request through the executor (admission, install, compile and run phases), by language and isolation.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}},
		[]string{"language", "isolation"})
	m.queue = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sandcell_queue_wait_seconds",
		Help:    "Time a request waited for admission (a slot of the run gate).",
		Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30}})
	m.egressNo = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandcell_egress_refused_total",
		Help: "Connections of dependency installs that the egress proxy refused, by reason."}, []string{"reason"})
	m.reg.MustRegister(m.runs, m.refused, m.seconds, m.queue, m.egressNo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	if src.Live != nil {
		gauge("sandcell_sandboxes", "Sandboxes that exist now (prepared, running or being destroyed).", func() float64 { return float64(src.Live()) })
	}
	if src.Sessions != nil {
		gauge("sandcell_sessions", "Sessions on disk.", func() float64 { return float64(src.Sessions()) })
	}
	if src.Kernels != nil {
		gauge("sandcell_kernels", "Live interpreter kernels.", func() float64 { return float64(src.Kernels()) })
	}
	if src.Pool != nil {
		stat := func(f func(backend.PoolStats, int) float64) func() float64 {
			return func() float64 { s, idle := src.Pool(); return f(s, idle) }
		}
		gauge("sandcell_pool_idle", "Containers prepared ahead and waiting for a request.", stat(func(_ backend.PoolStats, idle int) float64 { return float64(idle) }))
		counter := func(name, help string, f func(backend.PoolStats) uint64) {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
				stat(func(s backend.PoolStats, _ int) float64 { return float64(f(s)) })))
		}
		counter("sandcell_pool_hits_total", "Requests served by a container prepared ahead.", func(s backend.PoolStats) uint64 { return s.Hits })
		counter("sandcell_pool_misses_total", "Requests of a pool key that found no container prepared.", func(s backend.PoolStats) uint64 { return s.Misses })
		counter("sandcell_pool_prepared_total", "Containers prepared ahead.", func(s backend.PoolStats) uint64 { return s.Prepared })
	}
	return m
}

// Observe counts one request: executor.Options.Observe.
func (m *Metrics) Observe(e executor.Event) {
	lang := e.Language
	if lang == "" {
		lang = "unknown"
	}
	if e.Status == "" {
		m.refused.WithLabelValues(e.Refused).Inc()
	} else {
		m.runs.WithLabelValues(lang, e.Isolation, string(e.Status)).Inc()
		m.seconds.WithLabelValues(lang, e.Isolation).Observe(e.Wall.Seconds())
	}
	if e.Queue > 0 {
		m.queue.Observe(e.Queue.Seconds())
	}
}

// EgressRefused counts a connection the egress proxy refused.
func (m *Metrics) EgressRefused(reason string) { m.egressNo.WithLabelValues(reason).Inc() }

// Handler serves the metrics in the text exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
