package controller

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller/metrics"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
)

// metricName finds the names of series a PromQL expression or a dashboard
// panel reads.
var metricName = regexp.MustCompile(`\b(rankgate_[a-z_]+|apiserver_[a-z_]+)\b`)

// exported are the metric names the controller serves: every collector of
// this package, after the controller registered them where the manager's
// /metrics reads (a collector registered twice is refused, which proves
// each is there), with the series a histogram adds.
func exported(t *testing.T) []string {
	t.Helper()
	metrics.Register()
	registerEndpointOnce.Do(func() { crmetrics.Registry.MustRegister(metricEndpointReady) })
	var names []string
	for _, c := range []prometheus.Collector{metrics.Verdicts, metrics.VerdictRules, metrics.DecisionSeconds, metrics.LastReportSeconds, metrics.ApplyLag,
		metrics.Unapplied, metrics.Waiting, metrics.Gangs, metrics.Requests, metrics.APIErrors, metricEndpointReady} {
		var are prometheus.AlreadyRegisteredError
		require.True(t, errors.As(crmetrics.Registry.Register(c), &are), "a collector is not registered")
		ch := make(chan *prometheus.Desc, 4)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]
			names = append(names, name)
			if _, ok := c.(prometheus.Histogram); ok || isHistogramVec(c) {
				names = append(names, name+"_bucket", name+"_count", name+"_sum")
			}
		}
	}
	return names
}

func isHistogramVec(c prometheus.Collector) bool {
	_, ok := c.(*prometheus.HistogramVec)
	return ok
}

// The shipped alerts and dashboard (configs/components/servicemonitor, also
// the chart's) read only metrics that exist: the controller's own, and the
// API server's admission webhook metric, found in the kube-apiserver binary
// the tests run.
func TestAlertsAndDashboardNameExportedMetrics(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	dir := filepath.Join(root, "configs", "components", "servicemonitor")
	ours := exported(t)
	for _, f := range []string{"prometheusrule.yaml", "rankgate-dashboard.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, m := range metricName.FindAllString(string(b), -1) {
			seen[m] = true
		}
		require.NotEmpty(t, seen, f)
		for name := range seen {
			if strings.HasPrefix(name, "rankgate_") {
				require.Contains(t, ours, name, "%s names a metric the controller does not export", f)
				continue
			}
			apiserver := filepath.Join(root, "bin", "k8s", "kube-apiserver")
			bin, err := os.ReadFile(apiserver)
			if err != nil {
				t.Logf("%s: %s not checked (no %s)", f, name, apiserver)
				continue
			}
			// The API server builds the name from its subsystem and metric
			// parts: apiserver_admission_ + webhook_fail_open_count.
			part := strings.TrimPrefix(name, "apiserver_admission_")
			require.NotEqual(t, name, part, "%s: %s is not an admission metric", f, name)
			require.True(t, bytes.Contains(bin, []byte(part)), "%s: kube-apiserver has no metric %s", f, name)
		}
		// Every rankgate metric that says something is wrong is on the dashboard.
		if f == "rankgate-dashboard.json" {
			for _, want := range []string{"rankgate_verdicts_unapplied", "rankgate_gangs_open", "rankgate_job_update_errors_total", "rankgate_gate_endpoint_ready"} {
				require.True(t, seen[want], "the dashboard does not show %s", want)
			}
		}
	}
	require.True(t, slices.Contains(ours, "rankgate_gate_request_seconds_count"))
}
