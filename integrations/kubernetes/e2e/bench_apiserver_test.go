package e2e

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

// apiServerMetrics reads the envtest kube-apiserver's own /metrics.
func apiServerMetrics(t *testing.T) map[string]*dto.MetricFamily {
	hc, err := rest.HTTPClientFor(restCfg)
	require.NoError(t, err)
	res, err := hc.Get(strings.TrimSuffix(restCfg.Host, "/") + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	return mfs
}

// serverHistogram sums the buckets of histogram name over the series whose
// labels include want, as read in after minus those in before.
type serverHistogram struct {
	bounds []float64
	counts []float64 // cumulative
	total  float64
}

func histogramBetween(before, after map[string]*dto.MetricFamily, name string, want map[string]string) serverHistogram {
	sum := func(mfs map[string]*dto.MetricFamily) serverHistogram {
		var h serverHistogram
		mf := mfs[name]
		if mf == nil {
			return h
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			hist := m.GetHistogram()
			if h.bounds == nil {
				for _, b := range hist.GetBucket() {
					h.bounds = append(h.bounds, b.GetUpperBound())
				}
				h.counts = make([]float64, len(h.bounds))
			}
			for i, b := range hist.GetBucket() {
				if i < len(h.counts) {
					h.counts[i] += float64(b.GetCumulativeCount())
				}
			}
			h.total += float64(hist.GetSampleCount())
		}
		return h
	}
	a, b := sum(before), sum(after)
	if a.bounds != nil && len(a.counts) == len(b.counts) {
		for i := range b.counts {
			b.counts[i] -= a.counts[i]
		}
		b.total -= a.total
	}
	return b
}

// quantile is the upper bound of the bucket that holds quantile q.
func (h serverHistogram) quantile(q float64) string {
	if h.total == 0 {
		return "n/a"
	}
	for i, c := range h.counts {
		if c >= q*h.total {
			if math.IsInf(h.bounds[i], 1) {
				break
			}
			return fmt.Sprintf("le %gms", h.bounds[i]*1000)
		}
	}
	return "> last bucket"
}

// logServerLatency logs, for the API server's handling of Gang status
// updates and TokenReviews between two readings, how long the requests
// took inside it and how long etcd took: where a verdict write's time goes.
func logServerLatency(t *testing.T, before, after map[string]*dto.MetricFamily) {
	for _, s := range []struct {
		what, name string
		want       map[string]string
	}{
		{"PUT gangs/status in the API server", "apiserver_request_duration_seconds", map[string]string{"verb": "PUT", "resource": "gangs", "subresource": "status"}},
		{"POST tokenreviews in the API server", "apiserver_request_duration_seconds", map[string]string{"verb": "POST", "resource": "tokenreviews"}},
		{"etcd update of gangs", "etcd_request_duration_seconds", map[string]string{"operation": "update", "group": "rankgate.io", "resource": "gangs"}},
	} {
		h := histogramBetween(before, after, s.name, s.want)
		t.Logf("server latency %-40s n=%-6.0f p50 %-10s p90 %-10s p99 %s", s.what, h.total, h.quantile(.5), h.quantile(.9), h.quantile(.99))
	}
}

// logSlowestGangs logs, for the three jobs whose ranks waited longest
// after their last report, where the time went: the last rank's own round
// trip (its report's TLS, TokenReview and answer), the latest of the other
// ranks' answers, and the controller's log line for the verdict (time from
// the last report to the verdict, and the verdict write).
func logSlowestGangs(t *testing.T, ns string, sent, held [][]time.Time, lat []time.Duration, logs string) {
	order := make([]int, len(lat))
	for j := range order {
		order[j] = j
	}
	sort.Slice(order, func(a, b int) bool { return lat[order[a]] > lat[order[b]] })
	for _, j := range order[:min(3, len(order))] {
		last := 0
		for i := range sent[j] {
			if sent[j][i].After(sent[j][last]) {
				last = i
			}
		}
		var others time.Duration
		for i := range held[j] {
			if i != last {
				others = max(others, held[j][i].Sub(sent[j][last]))
			}
		}
		line := ""
		key := fmt.Sprintf(`"job"="%s/PyTorchJob/job-%03d"`, ns, j)
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, key) && strings.Contains(l, `"gang decided"`) {
				line = l[strings.Index(l, `"sinceLastReport"`):]
			}
		}
		t.Logf("slow job-%03d: %s; last rank %d round trip %s, other ranks answered %s after it reported; controller: %s",
			j, lat[j].Round(time.Microsecond), last, held[j][last].Sub(sent[j][last]).Round(time.Microsecond), others.Round(time.Microsecond), line)
	}
}
