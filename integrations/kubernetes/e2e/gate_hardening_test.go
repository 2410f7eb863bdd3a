package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// gateHTTP is an HTTPS client that trusts the test CA.
func gateHTTP(t *testing.T) *http.Client {
	t.Helper()
	pool := caPool(t, certs.CAFile)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16}}
}

// postReport sends body (with no Content-Length, as a stream) with the
// token in file tokenFile and returns the status and error body.
func postReport(t *testing.T, hc *http.Client, url, tokenFile string, body []byte) (int, gate.ErrorBody) {
	t.Helper()
	tok, err := os.ReadFile(tokenFile)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, url+gate.PathReport, io.MultiReader(bytes.NewReader(body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	res, err := hc.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var e gate.ErrorBody
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	if res.StatusCode != http.StatusOK {
		require.NoError(t, json.Unmarshal(data, &e), string(data))
	}
	return res.StatusCode, e
}

// emptyFindingsBody is a report of n bytes, nearly all of it empty
// findings.
func emptyFindingsBody(ns, pod string, n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"apiVersion":%q,"namespace":%q,"pod":%q,"report":{"verdict":"pass","findings":[{}`, gate.APIVersion, ns, pod)
	for b.Len() < n-4 {
		b.WriteString(",{}")
	}
	b.WriteString("]}}")
	return b.Bytes()
}

// (issue 9, item 1) A pod with a valid projected token that is not a rank
// sends 1 MiB bodies of empty findings, eight at once: each is refused
// before its body is read, and the controller's allocations stay small
// (the old decoder allocated about 290 MB per body). A rank's report
// beyond the bounds is refused with a BadRequest naming the bound.
func TestE2EGateNonRankBodyNotRead(t *testing.T) {
	ns := newNamespace(t, "e2e-gate-body", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := pytorchJob(t, ns, "body", false, 2, nil)
	rank0 := rankPod(t, job, "worker", 0, "node-1", "")
	intruder := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns},
		Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, Containers: []corev1.Container{{Name: "x", Image: "busybox"}}}}
	require.NoError(t, k8s.Create(context.Background(), intruder))
	tok := token(t, intruder, gate.Audience)
	hc := gateHTTP(t)
	body := emptyFindingsBody(ns, intruder.Name, 1<<20)

	// Warm up (controller start, token review, caches) before measuring.
	var code int
	var e gate.ErrorBody
	require.Eventually(t, func() bool {
		code, e = postReport(t, hc, c.URL, tok, body)
		return code != http.StatusServiceUnavailable
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, http.StatusUnprocessableEntity, code, e.Message)
	require.Equal(t, gate.CodeNotARank, e.Code)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Refused as not a rank, or (past the pod's limit of
			// requests in progress) as too many: never read.
			code, e := postReport(t, hc, c.URL, tok, body)
			require.Contains(t, []string{gate.CodeNotARank, gate.CodeTooManyRequests}, e.Code, "HTTP %d: %s", code, e.Message)
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("8 refused 1 MiB bodies: %d KiB allocated in the test process (client and controller)", alloc>>10)
	require.Zero(t, c.GateReportsRead(), "report bodies read for a pod that is not a rank")
	require.Less(t, alloc, uint64(64<<20), "allocated while refusing")

	// A rank's report beyond the bounds: read, refused, nothing recorded.
	rtok := token(t, rank0, gate.Audience)
	over := gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: ns, Pod: rank0.Name, Report: verdict.NewReport("node-1", nil)}
	over.Report.Devices = make([]verdict.DeviceSummary, gate.MaxReportDevices+1)
	data, err := json.Marshal(over)
	require.NoError(t, err)
	code, e = postReport(t, hc, c.URL, rtok, data)
	require.Equal(t, http.StatusBadRequest, code, e.Message)
	require.Equal(t, gate.CodeBadRequest, e.Code)
	require.Equal(t, "report.devices: 257 entries exceed the limit of 256", e.Message)
	code, e = postReport(t, hc, c.URL, rtok, emptyFindingsBody(ns, rank0.Name, 1<<20))
	require.Equal(t, http.StatusBadRequest, code, e.Message)
	require.Contains(t, e.Message, "exceeds the limit of 262144 bytes")
	require.EqualValues(t, 2, c.GateReportsRead())
	require.Empty(t, firstReportAt(t, job))
}

// tokenReviews reads the API server's count of TokenReview creations.
func tokenReviews(t *testing.T) int {
	t.Helper()
	raw, err := clientset.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "apiserver_request_total{") && strings.Contains(l, `resource="tokenreviews"`) && strings.Contains(l, `verb="POST"`) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			require.NoError(t, err)
			n += int(v)
		}
	}
	return n
}

// (issue 9, item 5) 1000 requests with garbage tokens cause no
// TokenReview; 300 with a well-formed token of a deleted pod cause one.
func TestE2EGateTokenReviewsBounded(t *testing.T) {
	ns := newNamespace(t, "e2e-gate-tokens", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := pytorchJob(t, ns, "tok", false, 1, nil)
	p := rankPod(t, job, "worker", 0, "node-1", "")
	revoked := token(t, p, gate.Audience)
	require.NoError(t, k8s.Delete(context.Background(), p, client.GracePeriodSeconds(0))) // the token dies with its pod
	dir := t.TempDir()
	garbage := dir + "/garbage"
	hc := gateHTTP(t)
	verdict := func(tokFile string) (int, gate.ErrorBody) {
		tok, err := os.ReadFile(tokFile)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodGet, c.URL+gate.PathVerdict+"?namespace="+ns+"&pod="+p.Name, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		res, err := hc.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var e gate.ErrorBody
		require.NoError(t, json.NewDecoder(res.Body).Decode(&e))
		return res.StatusCode, e
	}
	start := tokenReviews(t)
	for i := 0; i < 1000; i++ {
		require.NoError(t, os.WriteFile(garbage, []byte(fmt.Sprintf("garbage.%d.token", i)), 0o600))
		code, e := verdict(garbage)
		require.Equal(t, http.StatusUnauthorized, code, e.Message)
	}
	require.Equal(t, start, tokenReviews(t), "TokenReviews for 1000 garbage tokens")
	for i := 0; i < 300; i++ {
		code, e := verdict(revoked)
		require.Equal(t, http.StatusUnauthorized, code, e.Message)
		require.Equal(t, gate.CodeUnauthenticated, e.Code)
	}
	require.Equal(t, start+1, tokenReviews(t), "TokenReviews for 300 requests with one revoked token")
}

// (issue 9, item 7) A gang of 5000 ranks with one reported: the verdict
// lists the first missing ranks and counts the rest, rankgate init reads
// it and fails with exit 1 (not 4 on an answer it cannot decode).
func TestE2EGateThousandsOfMissingRanks(t *testing.T) {
	ns := newNamespace(t, "e2e-gate-missing", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := pytorchJob(t, ns, "huge", false, 5000, map[string]string{contract.AnnotationGangTimeout: "3s"})
	p := rankPod(t, job, "worker", 0, "node-1", "")
	r := startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...)
	require.Equal(t, verdict.ExitFail, r.wait(t, 60*time.Second), r.String())
	rep := decodeVerdict(t, r)
	require.Equal(t, verdict.VerdictFail, rep.Verdict)
	require.Equal(t, verdict.RuleGangIncomplete, rep.Findings[0].Rule)
	require.Contains(t, rep.Findings[0].Message, "1 of 5000 ranks reported; missing ranks 1-20 and 4979 more (4999 in all)")
	require.Len(t, rep.Findings[0].Ranks, preflight.MaxListedRanks)
	require.Less(t, r.stdout.Len(), 32<<10, "verdict printed by rankgate init")
	require.Contains(t, r.termination(), "4979 more")
}
