package service

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/otlpexport"
)

// metrics are the daemon's Prometheus metrics. Totals add what finished
// sessions ended with to what the running ones reported last (every
// second).
type metrics struct {
	s   *Server
	reg *prometheus.Registry

	mu                      sync.Mutex
	total, refusedN         uint64
	events, lost, demotions uint64 // of finished sessions
}

// Metric names, as docs and tests name them.
const (
	MetricSessionsActive    = "kprofd_sessions_active"
	MetricSessionsTotal     = "kprofd_sessions_total"
	MetricSessionsRefused   = "kprofd_sessions_refused_total"
	MetricEvents            = "kprofd_events_total"
	MetricEventsLost        = "kprofd_events_lost_total"
	MetricProbes            = "kprofd_probes_attached"
	MetricDemotions         = "kprofd_demotions_total"
	MetricPredictedOverhead = "kprofd_session_predicted_overhead_ratio"
	MetricSessionNodes      = "kprofd_session_tree_nodes"
	MetricCalibrationAge    = "kprofd_calibration_age_seconds"
	MetricOTLPPushes        = "kprofd_otlp_pushes_total"
)

func newMetrics(s *Server) *metrics {
	m := &metrics{s: s, reg: prometheus.NewRegistry()}
	live := func(f func(daemon.Progress) float64) float64 {
		var sum float64
		s.eachRunning(func(_ *session, p daemon.Progress) { sum += f(p) })
		return sum
	}
	// A total reads the finished sessions' part and the running ones'
	// under the server's lock, which finish holds while a session moves
	// from one to the other: the counter never goes back.
	counted := func(finished *uint64, f func(daemon.Progress) float64) func() float64 {
		return func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			m.mu.Lock()
			n := float64(*finished)
			m.mu.Unlock()
			s.eachRunningLocked(func(_ *session, p daemon.Progress) { n += f(p) })
			return n
		}
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricSessionsActive, Help: "Sessions running."},
			func() float64 { return live(func(daemon.Progress) float64 { return 1 }) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricSessionsTotal, Help: "Sessions started."},
			func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(m.total) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricSessionsRefused, Help: "Session requests refused (bad request, not allowed, over a limit)."},
			func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(m.refusedN) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricEvents, Help: "Probe events processed, all sessions."},
			counted(&m.events, func(p daemon.Progress) float64 { return float64(p.Events) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricEventsLost, Help: "Probe events the ring buffers dropped, all sessions."},
			counted(&m.lost, func(p daemon.Progress) float64 { return float64(p.Lost) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricDemotions, Help: "Functions hybrid mode demoted, all sessions."},
			counted(&m.demotions, func(p daemon.Progress) float64 { return float64(p.Demotions) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricProbes, Help: "Uprobes attached now, all sessions."},
			func() float64 { return live(func(p daemon.Progress) float64 { return float64(p.Probes) }) }),
	)
	if cal := s.Calibration; cal != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricCalibrationAge, Help: "Age of the probe cost calibration the sessions use."},
			func() float64 { return time.Since(cal.Time).Seconds() }))
	}
	return m
}

// otlp counts the pushes of e, by result: sent or dropped.
func (m *metrics) otlp(e *otlpexport.Exporter) {
	for _, r := range []struct {
		result string
		count  func() float64
	}{
		{"sent", func() float64 { sent, _ := e.Stats(); return float64(sent) }},
		{"dropped", func() float64 { _, dropped := e.Stats(); return float64(dropped) }},
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricOTLPPushes,
			Help:        "Profiles pushed to the OTLP collector (kprofd serve --otlp-endpoint), by result: sent, or dropped after the retries or with the queue full.",
			ConstLabels: prometheus.Labels{"result": r.result}}, r.count))
	}
}

func (m *metrics) started() { m.mu.Lock(); m.total++; m.mu.Unlock() }
func (m *metrics) refused() { m.mu.Lock(); m.refusedN++; m.mu.Unlock() }

// finished adds a session's last numbers to the totals; called with the
// server's lock held, as the session stops counting as running.
func (m *metrics) finished(p daemon.Progress) {
	m.mu.Lock()
	m.events += p.Events
	m.lost += p.Lost
	m.demotions += uint64(p.Demotions)
	m.mu.Unlock()
}

// eachRunning calls f with every running session and its last progress.
func (s *Server) eachRunning(f func(*session, daemon.Progress)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eachRunningLocked(f)
}

func (s *Server) eachRunningLocked(f func(*session, daemon.Progress)) {
	for _, x := range s.sessions {
		x.mu.Lock()
		running, p := x.running, x.progress
		x.mu.Unlock()
		if running {
			f(x, p)
		}
	}
}

// sessionCollector reports each running session's predicted overhead and
// the size of its calling-context tree (its memory, which --max-nodes
// bounds), for the sessions of one user (all for root).
type sessionCollector struct {
	s   *Server
	uid uint32
}

var (
	overheadDesc = prometheus.NewDesc(MetricPredictedOverhead,
		"Hybrid mode's predicted probe overhead per running session, as a fraction of the target's own CPU time.",
		[]string{"session", "pid"}, nil)
	nodesDesc = prometheus.NewDesc(MetricSessionNodes,
		"Calling contexts each running session keeps (at most kprofd serve --max-nodes).",
		[]string{"session", "pid"}, nil)
)

func (c sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- overheadDesc
	ch <- nodesDesc
}

func (c sessionCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.eachRunning(func(x *session, p daemon.Progress) {
		if c.uid != 0 && x.owner.UID != c.uid {
			return
		}
		pid := strconv.Itoa(x.req.PID)
		ch <- prometheus.MustNewConstMetric(overheadDesc, prometheus.GaugeValue, p.PredictedOverhead, x.id, pid)
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(p.Nodes), x.id, pid)
	})
}

// MetricsHandler serves the metrics in Prometheus' text format, without
// any session's own series: the daemon's totals, for a TCP address
// anyone may reach.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}

// socketMetrics serves the totals and the caller's own sessions' series
// (every session's for root): a session's id and target pid are its
// user's alone.
func (s *Server) socketMetrics(w http.ResponseWriter, r *http.Request) {
	who, ok := peer(r)
	if !ok {
		s.MetricsHandler().ServeHTTP(w, r)
		return
	}
	own := prometheus.NewRegistry()
	own.MustRegister(sessionCollector{s: s, uid: who.UID})
	promhttp.HandlerFor(prometheus.Gatherers{s.metrics.reg, own}, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
