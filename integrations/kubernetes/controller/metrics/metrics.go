// Package metrics are the controller's Prometheus metrics, served on the
// manager's metrics endpoint (--metrics-addr, /metrics).
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rankgate/rankgate/verdict"
)

// Metrics, served on the manager's metrics endpoint (--metrics-addr,
// /metrics). Names and labels are documented in docs/controller.md (Metrics and probes).
var (
	Verdicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rankgate_gang_verdicts_total",
		Help: "Gang verdicts decided by this controller, by verdict (pass, warn, fail).",
	}, []string{"verdict"})
	VerdictRules = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rankgate_gang_verdict_rules_total",
		Help: "Findings in decided gang verdicts, by rule ID and severity (one per verdict and rule).",
	}, []string{"rule", "severity"})
	DecisionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rankgate_gang_decision_seconds",
		Help:    "Time from a gang's first rank report to its recorded verdict.",
		Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 120, 300, 600, 1200, 3600},
	})
	LastReportSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rankgate_gang_last_report_to_verdict_seconds",
		Help:    "Time from the report that completed a gang to its recorded verdict (the gate's own latency).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
	ApplyLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rankgate_verdict_apply_lag_seconds",
		Help:    "Time from a verdict's decision (ranks answered) to its annotations and action being on the job.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})
	Unapplied = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rankgate_verdicts_unapplied",
		Help: "Verdicts recorded and answered whose annotations and action are not on their job yet.",
	})
	Waiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rankgate_ranks_waiting",
		Help: "Ranks that reported and wait for their gang's verdict.",
	})
	Gangs = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rankgate_gangs_open",
		Help: "Gangs the leader tracks that have no verdict yet (a rank reported or polled).",
	})
	Requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rankgate_gate_request_seconds",
		Help:    "Gate API requests by endpoint and answer code (long polls included).",
		Buckets: []float64{.005, .01, .05, .1, .5, 1, 5, 30, 60},
	}, []string{"endpoint", "code"})
	APIErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rankgate_job_update_errors_total",
		Help: "Failed writes to jobs (verdict, action), by operation.",
	}, []string{"op"})
)

var registerOnce sync.Once

// Register adds the collectors to controller-runtime's registry once
// per process (tests start several controllers).
func Register() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(Collectors()...)
	})
}

func ObserveVerdict(r verdict.Report, first, last time.Time, at time.Time) {
	Verdicts.WithLabelValues(string(r.Verdict)).Inc()
	seen := map[string]bool{}
	for _, f := range r.Findings {
		k := f.Rule + "/" + string(f.Severity)
		if !seen[k] {
			seen[k] = true
			VerdictRules.WithLabelValues(f.Rule, string(f.Severity)).Inc()
		}
	}
	if !first.IsZero() {
		DecisionSeconds.Observe(at.Sub(first).Seconds())
	}
	if !last.IsZero() {
		LastReportSeconds.Observe(at.Sub(last).Seconds())
	}
}

func ObserveRequest(endpoint, code string, d time.Duration) {
	Requests.WithLabelValues(endpoint, code).Observe(d.Seconds())
}

// Collectors are every metric of this package.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{Verdicts, VerdictRules, DecisionSeconds, LastReportSeconds, ApplyLag, Unapplied, Waiting, Gangs, Requests, APIErrors}
}
