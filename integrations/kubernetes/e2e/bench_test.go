package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/e2e/cpupin"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// The performance checks of the README (The cluster gate). They create tens of
// thousands of objects, so they run only when asked:
//
//	RANKGATE_BENCH=1 go test -run TestBench -v -timeout 30m ./integrations/kubernetes/e2e/
//
// Sizes can be changed with RANKGATE_BENCH_JOBS, _RANKS, _NODES, _PODS,
// _PENDING_JOBS, _OPEN_GANGS (the last two: 0 means none).

func benchOnly(t *testing.T) {
	if os.Getenv("RANKGATE_BENCH") != "1" {
		t.Skip("set RANKGATE_BENCH=1 to run the performance checks")
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// parallel runs f(0..n-1) on w workers and returns the first error.
func parallel(n, w int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return e.(error)
	}
	return nil
}

func percentile(xs []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// TestBenchGangLatency: 200 jobs of 8 ranks at once. Every rank reports at
// a random moment of a window (RANKGATE_BENCH_WINDOW, default 20s), so all
// 200 gangs are open together for most of it (maxOpenGangs says how many
// were); for each job, the time from its last rank's report to every rank
// holding the verdict. Ranks are gate clients in this process (one TLS
// connection and one pod-bound token each, each token new to the gate), so
// the number measures the gate, TokenReview and the verdict write, not
// process start-up. Goal: p99 <= 100 ms.
func TestBenchGangLatency(t *testing.T) {
	benchOnly(t)
	jobs, ranks := envInt("RANKGATE_BENCH_JOBS", 200), envInt("RANKGATE_BENCH_RANKS", 8)
	ctx := context.Background()
	ns := newNamespace(t, "bench-latency", true)
	begin := time.Now()

	type rankRef struct {
		pod   *corev1.Pod
		token string
	}
	all := make([][]rankRef, jobs)
	err := parallel(jobs, 8, func(j int) error {
		job, err := createBenchJob(ctx, ns, j, ranks)
		if err != nil {
			return err
		}
		all[j] = make([]rankRef, ranks)
		for i := 0; i < ranks; i++ {
			p, tok, err := benchRankPod(ctx, job, i, fmt.Sprintf("node-%d", i))
			if err != nil {
				return err
			}
			all[j][i] = rankRef{p, tok}
		}
		return nil
	})
	require.NoError(t, err)
	t.Logf("setup: %d jobs, %d pods, %d tokens in %s", jobs, jobs*ranks, jobs*ranks, time.Since(begin).Round(time.Millisecond))

	// Every waiting rank holds a connection: with more ranks than the gate's
	// default bound, raise it as an operator would (--gate-max-connections).
	conns := max(controller.DefaultGateMaxConnections, jobs*ranks+64)
	// RANKGATE_BENCH_KUBE_QPS raises the controller's client-side limit
	// towards the API server (--kube-api-qps; burst twice that).
	qps := envInt("RANKGATE_BENCH_KUBE_QPS", controller.DefaultQPS)
	reqBefore, metricsBefore := apiRequests(t), apiServerMetrics(t)
	c := startController(t, controller.Options{GangTimeout: 10 * time.Minute, GateMaxConnections: conns, AppliedDelay: ptr.To(controller.DefaultAppliedDelay),
		QPS: float32(qps), Burst: max(controller.DefaultBurst, 2*qps)})
	require.Eventually(t, c.IsLeader, 30*time.Second, 20*time.Millisecond)
	time.Sleep(time.Second) // caches synced, reconcilers started

	window := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("RANKGATE_BENCH_WINDOW")); err == nil && d > 0 {
		window = d
	}
	// The ranks run in a second process (this test binary again, in
	// TestBenchRankClients), as they would on other machines: their TLS
	// connections, buffers and garbage are not the controller's.
	spec := clientSpec{URL: c.URL, CAFile: certs.CAFile, Namespace: ns, Window: window}
	for j := range all {
		var js []clientRank
		for _, rr := range all[j] {
			js = append(js, clientRank{Pod: rr.pod.Name, Node: rr.pod.Spec.NodeName, Token: rr.token})
		}
		spec.Jobs = append(spec.Jobs, js)
	}
	specFile := filepath.Join(t.TempDir(), "clients.json")
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(specFile, b, 0o600))
	// With RANKGATE_BENCH_CLIENT_CPUS the clients run on CPUs of their own.
	pinned := checkPinning(t)
	cmd, err := cpupin.Command(os.Getenv(envClientCPUs), os.Args[0], "-test.run", "^TestBenchRankClients$", "-test.v", "-test.timeout", "10m")
	require.NoError(t, err)
	cmd.Env = append(os.Environ(), "RANKGATE_BENCH_CLIENTS="+specFile)
	loadBefore := loadAverage()
	profiled := profileAPIServer(t, window)
	stopProfile := profileSelf(t, "controller-cpu.pprof")
	out, err := cmd.CombinedOutput()
	stopProfile()
	<-profiled
	require.NoError(t, err, "rank clients:\n%s", out)
	var res clientResult
	b, err = os.ReadFile(specFile + ".out")
	require.NoError(t, err, string(out))
	require.NoError(t, json.Unmarshal(b, &res))
	require.Zero(t, res.Fails, string(out))
	if list := os.Getenv(envClientCPUs); list != "" {
		want, err := cpupin.ParseList(list)
		require.NoError(t, err)
		require.Equal(t, cpupin.FormatList(want), res.CPUs, "the rank clients ran on other CPUs than %s", envClientCPUs)
		pinned["rank clients"] = res.CPUs
	}
	sent, held := res.Sent, res.Held
	var lat []time.Duration
	type edge struct {
		at   time.Time
		open int
	}
	var edges []edge
	for j := range all {
		first, last, done := sent[j][0], time.Time{}, time.Time{}
		for i := range all[j] {
			if sent[j][i].Before(first) {
				first = sent[j][i]
			}
			if sent[j][i].After(last) {
				last = sent[j][i]
			}
			if held[j][i].After(done) {
				done = held[j][i]
			}
		}
		lat = append(lat, done.Sub(last))
		edges = append(edges, edge{first, 1}, edge{done, -1})
	}
	logSlowestGangs(t, ns, sent, held, lat, c.logs.String())
	// How many gangs were open (a rank waiting, no verdict yet) at once.
	sort.Slice(edges, func(i, j int) bool { return edges[i].at.Before(edges[j].at) })
	open, maxOpen := 0, 0
	for _, e := range edges {
		open += e.open
		maxOpen = max(maxOpen, open)
	}
	// The verdicts reach the jobs (annotations, Event) after the ranks have
	// them, paced: how long after the last rank held its verdict the last
	// job carried it.
	var lastHeld time.Time
	for j := range held {
		for _, h := range held[j] {
			if h.After(lastHeld) {
				lastHeld = h
			}
		}
	}
	require.Eventually(t, func() bool {
		list := &kubeflowv1.PyTorchJobList{}
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false
		}
		n := 0
		for _, j := range list.Items {
			if j.Annotations[contract.AnnotationVerdict] != "" {
				n++
			}
		}
		return n == jobs
	}, time.Minute, 20*time.Millisecond, "verdicts not applied to every job")
	appliedAfter := time.Since(lastHeld)
	summary := map[string]any{
		"jobs": jobs, "ranksPerJob": ranks, "window": window.String(), "cpus": runtime.NumCPU(), "pinnedCPUs": pinned, "maxOpenGangs": maxOpen,
		"loadAvgBefore": loadBefore, "loadAvgAfter": loadAverage(), "gateMaxConnections": conns, "kubeAPIQPS": qps,
		"p50": percentile(lat, .50).String(), "p90": percentile(lat, .90).String(),
		"p99": percentile(lat, .99).String(), "max": percentile(lat, 1).String(),
		"decisions": c.Decisions(),
		// The controller's own part, from its histogram: the report that
		// completed the gang to the verdict recorded (ranks answered).
		"serverP50": histogramQuantile(t, "rankgate_gang_last_report_to_verdict_seconds", .5),
		"serverP99": histogramQuantile(t, "rankgate_gang_last_report_to_verdict_seconds", .99),
	}
	summary["allJobsAnnotatedAfterLastVerdict"] = appliedAfter.Round(time.Millisecond).String()
	summary["applyLagP99"] = histogramQuantile(t, "rankgate_verdict_apply_lag_seconds", .99)
	b, _ = json.Marshal(summary)
	t.Logf("last report -> all ranks hold the verdict: %s", b)
	logRequestsSince(t, reqBefore, apiRequests(t))
	logServerLatency(t, metricsBefore, apiServerMetrics(t))
	writeBenchResult(t, "gang-latency", b)
	require.EqualValues(t, jobs, c.Decisions())
	// The goals: p99 at most 50 ms for 200 jobs x 8 ranks, 100 ms for
	// 1,000 jobs arriving within 60 s.
	goal := 50 * time.Millisecond
	if jobs > 200 {
		goal = 100 * time.Millisecond
	}
	require.LessOrEqual(t, percentile(lat, .99), goal, "p99 above the %s goal", goal)
}

// profileAPIServer, with RANKGATE_BENCH_OUT set, records a CPU profile of
// the envtest kube-apiserver over the middle of the reporting window
// (apiserver-cpu.pprof), to see what the verdict writes compete with. The
// returned channel closes when it is written (at once without the setting).
func profileAPIServer(t *testing.T, window time.Duration) <-chan struct{} {
	done := make(chan struct{})
	dir := os.Getenv("RANKGATE_BENCH_OUT")
	if dir == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		hc, err := rest.HTTPClientFor(restCfg)
		if err != nil {
			t.Logf("apiserver profile: %v", err)
			return
		}
		// RANKGATE_BENCH_PROFILE_FROM (a fraction of the window, default
		// 0.25) moves the profile's start; it lasts half the window.
		from := 0.25
		if f, err := strconv.ParseFloat(os.Getenv("RANKGATE_BENCH_PROFILE_FROM"), 64); err == nil && f >= 0 && f < 1 {
			from = f
		}
		time.Sleep(time.Duration(from * float64(window)))
		saveAPIServerProfile(t, hc, max(1, int(window/2/time.Second)), filepath.Join(dir, "apiserver-cpu.pprof"))
	}()
	return done
}

// saveAPIServerProfile records a CPU profile of the envtest kube-apiserver
// for secs seconds into file (a failure is logged: it is a diagnostic).
func saveAPIServerProfile(t *testing.T, hc *http.Client, secs int, file string) {
	res, err := hc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(restCfg.Host, "/"), secs))
	if err != nil {
		t.Logf("apiserver profile: %v", err)
		return
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Logf("apiserver profile: HTTP %d %v", res.StatusCode, err)
		return
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Logf("apiserver profile: %v", err)
	}
}

// profileSelf, with RANKGATE_BENCH_OUT set, records a CPU profile of this
// process (the controller) until the returned function is called.
func profileSelf(t *testing.T, name string) func() {
	dir := os.Getenv("RANKGATE_BENCH_OUT")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name))
	require.NoError(t, err)
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Logf("controller profile: %v", err)
		_ = f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// createBenchJob creates job-<j> of the gang benchmarks: a PyTorchJob of
// a Master and ranks-1 Workers.
func createBenchJob(ctx context.Context, ns string, j, ranks int) (*kubeflowv1.PyTorchJob, error) {
	job := &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%03d", j), Namespace: ns},
		Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: minimalTemplate},
			kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(ranks - 1)), Template: minimalTemplate},
		}}}
	return job, k8s.Create(ctx, job)
}

var minimalTemplate = corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "pytorch/pytorch"}}}}

// histogramQuantile reads a histogram of this process's controller-runtime
// registry and returns the upper bound of the bucket holding quantile q.
func histogramQuantile(t *testing.T, name string, q float64) string {
	mfs, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		want := q * float64(h.GetSampleCount())
		for _, b := range h.GetBucket() {
			if float64(b.GetCumulativeCount()) >= want {
				return "le " + time.Duration(b.GetUpperBound()*float64(time.Second)).String()
			}
		}
		return "> last bucket"
	}
	return "n/a"
}

// gaugeValue reads a gauge of this process's controller-runtime registry.
func gaugeValue(t *testing.T, name string) float64 {
	mfs, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

type clientRank struct{ Pod, Node, Token string }

type clientSpec struct {
	URL, CAFile, Namespace string
	Window                 time.Duration
	Jobs                   [][]clientRank
}

type clientResult struct {
	Sent, Held [][]time.Time
	Fails      int
	CPUs       string // where the client process could run
}

// TestBenchRankClients is the rank side of TestBenchGangLatency, run in its
// own process. Each rank does what rankgate init does: at a random moment
// of the window a verdict poll without wait (connection, token review),
// 500 ms of simulated device discovery, then the report and its long poll.
func TestBenchRankClients(t *testing.T) {
	specFile := os.Getenv("RANKGATE_BENCH_CLIENTS")
	if specFile == "" {
		t.Skip("the rank side of TestBenchGangLatency")
	}
	b, err := os.ReadFile(specFile)
	require.NoError(t, err)
	var spec clientSpec
	require.NoError(t, json.Unmarshal(b, &spec))
	pool := caPool(t, spec.CAFile)
	ctx := context.Background()
	res := clientResult{Sent: make([][]time.Time, len(spec.Jobs)), Held: make([][]time.Time, len(spec.Jobs))}
	k := 0 // ranks so far: each dials from its own loopback address
	var fails atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	for j, ranks := range spec.Jobs {
		res.Sent[j] = make([]time.Time, len(ranks))
		res.Held[j] = make([]time.Time, len(ranks))
		for i, rr := range ranks {
			wg.Add(1)
			delay := time.Duration(rand.Int64N(int64(spec.Window)))
			// Each rank from its own address, as from its own node: the
			// gate limits TokenReviews per client address. Its connection
			// closes when it holds the verdict, as rankgate init exits.
			tr := sourceTransport(pool, sourceIP(3, k))
			k++
			go func() {
				defer wg.Done()
				defer tr.CloseIdleConnections()
				cl, err := gate.NewClient(gate.ClientOptions{URL: spec.URL, Token: rr.Token, Transport: tr})
				if err != nil {
					fails.Add(1)
					return
				}
				time.Sleep(time.Until(start.Add(delay)))
				if _, err := cl.Verdict(ctx, spec.Namespace, rr.Pod, 0); err != nil {
					t.Logf("warm-up: %v", err)
				}
				time.Sleep(500 * time.Millisecond)
				req := &gate.ReportRequest{Namespace: spec.Namespace, Pod: rr.Pod, Node: rr.Node, DriverVersion: "570.172.08", CUDADriverVersion: "12.8",
					Report: benchRankReport(rr.Node)}
				res.Sent[j][i] = time.Now()
				actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				r, err := cl.Await(actx, req, gate.AwaitOptions{Poll: 30 * time.Second})
				res.Held[j][i] = time.Now()
				if err != nil || r.Verdict.Verdict != verdict.VerdictPass {
					fails.Add(1)
					t.Logf("job %d rank %d: %v", j, i, err)
				}
			}()
		}
	}
	wg.Wait()
	res.Fails = int(fails.Load())
	res.CPUs = ownCPUs(t)
	b, err = json.Marshal(res)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(specFile+".out", b, 0o600))
}

func benchPod(owner client.Object, typ string, idx int, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%s-%d", owner.GetName(), typ, idx), Namespace: owner.GetNamespace(),
			Labels: map[string]string{controller.LabelJobName: owner.GetName(), controller.LabelReplicaType: typ, controller.LabelReplicaIndex: strconv.Itoa(idx)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: owner.GetName(), UID: owner.GetUID(),
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, NodeName: node, Containers: []corev1.Container{{Name: "train", Image: "pytorch/pytorch"}}},
	}
}

func benchRankReport(node string) verdict.Report {
	r := verdict.NewReport("node "+node, nil)
	r.Devices = []verdict.DeviceSummary{{ID: "GPU-" + node + "-0", Kind: "gpu", GPU: 0, GPUUUID: "GPU-" + node + "-0", Profile: "full", SMs: 108, MemoryMiB: 81920}}
	return r
}

func writeBenchResult(t *testing.T, name string, b []byte) {
	if dir := os.Getenv("RANKGATE_BENCH_OUT"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644))
	}
}

// TestBenchControllerMemory: 5,000 GPU nodes and 20,000 Kubeflow replica
// pods (2,500 PyTorchJobs of 8) with realistic specs; the `rankgate
// controller` binary starts against them, and its resident memory is read
// from /proc once its caches are synced, without and with the GOMEMLIMIT
// of configs/deploy. Goal: <= 200 MB. With RANKGATE_BENCH_FULL=1 the same
// run is repeated without cache trimming.
//
// Two loads within the 20,000 pods: 500 Pending gated jobs (below), and
// open gangs (RANKGATE_BENCH_OPEN_GANGS, default 0): gated jobs of 8 bound
// pods whose first 7 ranks report through the gate, so the leader holds
// 1,000 open gangs and their reports. The steady RSS is asserted for the
// shipped configuration; the peak is reported.
//
//	RANKGATE_BENCH=1 go test -run TestBenchControllerMemory -v -timeout 40m ./integrations/kubernetes/e2e/
//	RANKGATE_BENCH=1 RANKGATE_BENCH_PENDING_JOBS=0 RANKGATE_BENCH_OPEN_GANGS=1000 ...
func TestBenchControllerMemory(t *testing.T) {
	benchOnly(t)
	nodes, pods := envInt("RANKGATE_BENCH_NODES", 5000), envInt("RANKGATE_BENCH_PODS", 20000)
	const perJob = 8
	ctx := context.Background()
	ns := newNamespace(t, "bench-memory", true)
	begin := time.Now()
	require.NoError(t, parallel(nodes, 32, func(i int) error {
		n := benchNode(i)
		st := n.Status
		if err := k8s.Create(ctx, n); err != nil {
			return err
		}
		n.Status = st
		return k8s.Status().Update(ctx, n)
	}))
	t.Logf("%d nodes in %s", nodes, time.Since(begin).Round(time.Second))
	if os.Getenv("RANKGATE_BENCH_DRA") == "1" {
		createBenchDRA(t, ns, nodes, envInt("RANKGATE_BENCH_DRA_CLAIMS", pods)) // bench_dra_test.go
	}
	// Pending gated jobs (RANKGATE_BENCH_PENDING_JOBS, default 500) of 4
	// pods each, counted within the pods: every pod marked unschedulable a
	// minute ago. Each pod asks 150 cpu and 2 mig-3g.40gb: every node has
	// both (192 cpu, 8 mig-3g.40gb), but the bound pods hold 64 cpu of each
	// node, so the jobs wait for capacity (WAIT_CAPACITY), none is hopeless.
	pendingJobs := envCount("RANKGATE_BENCH_PENDING_JOBS", 500)
	const pendingPer = 4
	pending := make([]string, pendingJobs)
	require.NoError(t, parallel(pendingJobs, 32, func(j int) error {
		pending[j] = fmt.Sprintf("wait-%04d", j)
		job := &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: pending[j], Namespace: ns},
			Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
				kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: corev1.PodTemplateSpec{Spec: benchPodSpec(0, "")}},
				kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(pendingPer - 1)), Template: corev1.PodTemplateSpec{Spec: benchPodSpec(0, "")}},
			}}}
		if err := k8s.Create(ctx, job); err != nil {
			return err
		}
		for i := 0; i < pendingPer; i++ {
			typ, idx := "worker", i-1
			if i == 0 {
				typ, idx = "master", 0
			}
			p := benchPod(job, typ, idx, "")
			p.Spec = benchPendingPodSpec(j)
			if err := k8s.Create(ctx, p); err != nil {
				return err
			}
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/5000 nodes are available: 5000 Insufficient cpu.",
				LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))}}
			if err := k8s.Status().Update(ctx, p); err != nil {
				return err
			}
		}
		return nil
	}))
	t.Logf("%d pending jobs, %d unschedulable pods in %s", pendingJobs, pendingJobs*pendingPer, time.Since(begin).Round(time.Second))
	openGangs := envCount("RANKGATE_BENCH_OPEN_GANGS", 0)
	gangs := createOpenGangs(t, ns, openGangs, perJob, nodes, 0)
	t.Logf("%d open gangs of %d bound pods, %d tokens in %s", openGangs, perJob, openGangs*(perJob-1), time.Since(begin).Round(time.Second))
	jobs := (pods - pendingJobs*pendingPer - openGangs*perJob) / perJob
	require.NoError(t, parallel(jobs, 32, func(j int) error {
		job := &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("llm-%04d", j), Namespace: ns},
			Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
				kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: corev1.PodTemplateSpec{Spec: benchPodSpec(0, "")}},
				kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(perJob - 1)), Template: corev1.PodTemplateSpec{Spec: benchPodSpec(0, "")}},
			}}}
		if err := k8s.Create(ctx, job); err != nil {
			return err
		}
		for i := 0; i < perJob; i++ {
			typ, idx := "worker", i-1
			if i == 0 {
				typ, idx = "master", 0
			}
			p := benchPod(job, typ, idx, "")
			p.Spec = benchPodSpec(j, fmt.Sprintf("gpu-node-%04d", (openGangs*perJob+j*perJob+i)%nodes))
			p.Annotations = map[string]string{"sidecar.istio.io/inject": "false", "kubectl.kubernetes.io/default-container": "pytorch",
				"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
			if err := k8s.Create(ctx, p); err != nil {
				return err
			}
		}
		return nil
	}))
	t.Logf("%d jobs, %d pods in %s", jobs, jobs*perJob, time.Since(begin).Round(time.Second))
	sizes := objectSizes(t, ns)
	t.Logf("object sizes as served (JSON): %s", sizes)

	res := map[string]any{"nodes": nodes, "pods": (jobs+openGangs)*perJob + pendingJobs*pendingPer, "jobs": jobs, "pendingJobs": pendingJobs,
		"pendingPods": pendingJobs * pendingPer, "openGangs": openGangs, "objectSizes": sizes}
	res["trimmedMemLimit"] = measureController(t, true, "120MiB", ns, pending, gangs)
	// RANKGATE_BENCH_SHIPPED_ONLY=1: only the shipped configuration.
	if os.Getenv("RANKGATE_BENCH_SHIPPED_ONLY") != "1" {
		res["trimmed"] = measureController(t, true, "", ns, pending, gangs)
	}
	if os.Getenv("RANKGATE_BENCH_FULL") == "1" {
		res["untrimmed"] = measureController(t, false, "", ns, pending, gangs)
	}
	b, _ := json.Marshal(res)
	t.Logf("controller memory: %s", b)
	writeBenchResult(t, "controller-memory", b)
	// The goal holds for the configuration configs/deploy ships (GOMEMLIMIT).
	shipped := res["trimmedMemLimit"].(map[string]any)
	rss, peak := shipped["rssMiB"].(float64), shipped["peakRssMiB"].(float64)
	t.Logf("shipped configuration: steady RSS %.1f MiB (%.0f MB), peak %.1f MiB (%.0f MB)", rss, rss*1.048576, peak, peak*1.048576)
	require.LessOrEqual(t, rss*1024*1024, 200e6, "RSS above the 200 MB goal")
}

// measureController runs the binary until its caches are synced and, with
// pending jobs, until it has judged every one of them (each carries
// rankgate.io/waiting-for, cleared before the start), with open gangs,
// until their reports are in and recorded in their Gangs, and returns its
// memory.
func measureController(t *testing.T, trim bool, memLimit, ns string, pending []string, gangs []openGangLoad) map[string]any {
	t.Helper()
	ctx := context.Background()
	waitingFor := func() (waiting, failed int, sample string) {
		list := &kubeflowv1.PyTorchJobList{}
		require.NoError(t, k8s.List(ctx, list, client.InNamespace(ns)))
		for _, j := range list.Items {
			if !strings.HasPrefix(j.Name, "wait-") {
				continue
			}
			if w := j.Annotations[contract.AnnotationWaitingFor]; w != "" {
				waiting++
				sample = w
			}
			if j.Annotations[contract.AnnotationVerdict] == "fail" {
				failed++
			}
		}
		return waiting, failed, sample
	}
	require.NoError(t, parallel(len(pending), 32, func(j int) error {
		job := &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: pending[j], Namespace: ns}}
		patch := []byte(`{"metadata":{"annotations":{"` + contract.AnnotationWaitingFor + `":null}}}`)
		return k8s.Patch(ctx, job, client.RawPatch(types.MergePatchType, patch))
	}))
	if w, _, _ := waitingFor(); w != 0 {
		t.Fatalf("%d jobs still carry %s", w, contract.AnnotationWaitingFor)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: restCfg.Host, CertificateAuthorityData: restCfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: restCfg.CertData, ClientKeyData: restCfg.KeyData, Token: restCfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	require.NoError(t, clientcmd.WriteToFile(*kc, kubeconfig))
	metrics, health, gateAddr := freePort(t), freePort(t), freePort(t)
	// The gang timeout is above the run's length: the open gangs stay open.
	cmd := exec.Command(binary, "controller", "--kubeconfig", kubeconfig, "--leader-elect=false", "--gate-addr", gateAddr, "--gang-timeout", "1h",
		"--cert-dir", certs.Dir, "--manage-certs=false", "--metrics-addr", metrics, "--health-addr", health, "--log-level", "warn",
		fmt.Sprintf("--trim-caches=%v", trim), "--profiling", "--webhook-addr", "0", "--pending-grace", "0")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if memLimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+memLimit)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	require.Eventually(t, func() bool {
		r, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	}, 5*time.Minute, 100*time.Millisecond, "controller never ready: %s", stderr.String())
	synced := time.Since(start)
	var judged time.Duration
	var waiting, failed int
	var sample string
	if len(pending) > 0 {
		require.Eventually(t, func() bool {
			waiting, failed, sample = waitingFor()
			return waiting+failed >= len(pending)
		}, 15*time.Minute, 2*time.Second, "%d of %d pending jobs judged", waiting+failed, len(pending))
		judged = time.Since(start)
		t.Logf("%d pending jobs waiting, %d failed after %s; e.g. %s", waiting, failed, judged.Round(time.Second), sample)
	}
	var reported time.Duration
	var openNow, ranksWaiting float64
	if len(gangs) > 0 {
		per := int32(len(gangs[0].tokens))
		before := gangsReported(t, ns, per)
		reportOpenGangs(t, "https://"+gateAddr, ns, gangs)
		// Settled: every gang open at the leader and its reports recorded
		// in its Gang (status writes are batched).
		require.Eventually(t, func() bool {
			openNow = metricValue(t, metrics, "rankgate_gangs_open")
			ranksWaiting = metricValue(t, metrics, "rankgate_ranks_waiting")
			return int(openNow) >= len(gangs) && gangsReported(t, ns, per) >= before+len(gangs)
		}, 10*time.Minute, 2*time.Second, "open gangs %v, ranks waiting %v", openNow, ranksWaiting)
		reported = time.Since(start)
		t.Logf("%v gangs open, %v ranks waiting after %s", openNow, ranksWaiting, reported.Round(time.Second))
	}
	// Steady state: let the post-sync garbage be collected.
	var rss, hwm float64
	for i := 0; i < 20; i++ {
		time.Sleep(500 * time.Millisecond)
		rss, hwm = procMemMiB(t, cmd.Process.Pid)
	}
	heap := metricValue(t, metrics, "go_memstats_heap_inuse_bytes") / (1 << 20)
	// The live heap: force a collection (pprof's gc=1), then read it.
	r, err := http.Get("http://" + metrics + "/debug/pprof/heap?gc=1")
	require.NoError(t, err)
	prof, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if dir := os.Getenv("RANKGATE_BENCH_OUT"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("heap-trim-%v%s.pb.gz", trim, memLimit)), prof, 0o644)
	}
	live := metricValue(t, metrics, "go_memstats_heap_alloc_bytes") / (1 << 20)
	// The Go runtime's memory besides the heap (stacks, spans, GC metadata).
	runtimeOther := (metricValue(t, metrics, "go_memstats_sys_bytes") - metricValue(t, metrics, "go_memstats_heap_sys_bytes")) / (1 << 20)
	_, _, anon, file := procMem(t, cmd.Process.Pid)
	if dir := os.Getenv("RANKGATE_BENCH_OUT"); dir != "" {
		smaps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", cmd.Process.Pid))
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("smaps-trim-%v%s", trim, memLimit)), smaps, 0o644)
	}
	if len(gangs) > 0 {
		require.EqualValues(t, len(gangs), metricValue(t, metrics, "rankgate_gangs_open"), "open gangs at the end")
	}
	out := map[string]any{"trim": trim, "gomemlimit": memLimit, "readyAfter": synced.Round(time.Millisecond).String(),
		"judgedAfter": judged.Round(time.Second).String(), "pendingWaiting": waiting, "pendingFailed": failed, "waitingFor": sample,
		"openGangs": openNow, "ranksWaiting": ranksWaiting, "reportedAfter": reported.Round(time.Second).String(), "loadAvg": loadAverage(),
		"rssMiB": rss, "peakRssMiB": hwm, "goRuntimeNonHeapMiB": runtimeOther, "rssAnonMiB": anon, "rssFileMiB": file, "heapInuseMiB": heap, "liveHeapMiB": live}
	t.Logf("controller (trim=%v, GOMEMLIMIT=%q): %v", trim, memLimit, out)
	return out
}

func procMemMiB(t *testing.T, pid int) (rss, hwm float64) {
	rss, hwm, _, _ = procMem(t, pid)
	return rss, hwm
}

// procMem reads VmRSS, VmHWM, RssAnon and RssFile in MiB.
func procMem(t *testing.T, pid int) (rss, hwm, anon, file float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		case "RssAnon:":
			anon = kb / 1024
		case "RssFile:":
			file = kb / 1024
		}
	}
	return rss, hwm, anon, file
}

func metricValue(t *testing.T, addr, name string) float64 {
	r, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name)), 64)
			return v
		}
	}
	return 0
}

// objectSizes: the average JSON size of a node, pod and job.
func objectSizes(t *testing.T, ns string) string {
	ctx := context.Background()
	avg := func(list client.ObjectList, opts ...client.ListOption) int {
		require.NoError(t, k8s.List(ctx, list, append(opts, client.Limit(200))...))
		b, _ := json.Marshal(list)
		var m struct{ Items []json.RawMessage }
		_ = json.Unmarshal(b, &m)
		if len(m.Items) == 0 {
			return 0
		}
		return len(b) / len(m.Items)
	}
	return fmt.Sprintf("node %d B, pod %d B, PyTorchJob %d B", avg(&corev1.NodeList{}), avg(&corev1.PodList{}, client.InNamespace(ns)),
		avg(&kubeflowv1.PyTorchJobList{}, client.InNamespace(ns)))
}

// benchNode is a GPU node as GPU feature discovery and the kubelet leave
// it: GFD labels, allocatable, conditions, addresses, images.
func benchNode(i int) *corev1.Node {
	name := fmt.Sprintf("gpu-node-%04d", i)
	labels := map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"node.kubernetes.io/instance-type": "p5.48xlarge", "topology.kubernetes.io/zone": "us-east-1a", "topology.kubernetes.io/region": "us-east-1",
		"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559",
		"nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
		"nvidia.com/cuda.driver-version.full": "580.65.06", "nvidia.com/cuda.driver-version.major": "580",
		"nvidia.com/cuda.driver-version.minor": "65", "nvidia.com/cuda.driver-version.revision": "06",
		"nvidia.com/cuda.runtime-version.full": "13.0", "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
		"nvidia.com/mig.config": "all-balanced", "nvidia.com/mig.config.state": "success", "nvidia.com/gpu.present": "true",
		"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
		"nvidia.com/gpu.deploy.dcgm-exporter": "true", "nvidia.com/gpu.deploy.mig-manager": "true",
		"nvidia.com/mig-1g.10gb.count": "16", "nvidia.com/mig-2g.20gb.count": "8", "nvidia.com/mig-3g.40gb.count": "8",
		"feature.node.kubernetes.io/cpu-model.vendor_id": "Intel", "feature.node.kubernetes.io/kernel-version.full": "6.8.0-1015-aws",
	}
	var images []corev1.ContainerImage
	for k := 0; k < 25; k++ {
		images = append(images, corev1.ContainerImage{Names: []string{
			fmt.Sprintf("nvcr.io/nvidia/pytorch@sha256:%064d", k), fmt.Sprintf("nvcr.io/nvidia/pytorch:25.%02d-py3", k)}, SizeBytes: 9_000_000_000})
	}
	q := resource.MustParse
	rl := corev1.ResourceList{"cpu": q("192"), "memory": q("2063937Mi"), "pods": q("110"), "ephemeral-storage": q("3750Gi"),
		"nvidia.com/gpu": q("0"), "nvidia.com/mig-1g.10gb": q("16"), "nvidia.com/mig-2g.20gb": q("8"), "nvidia.com/mig-3g.40gb": q("8")}
	now := metav1.Now()
	var conds []corev1.NodeCondition
	for _, c := range []corev1.NodeConditionType{"MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable", corev1.NodeReady} {
		st := corev1.ConditionFalse
		if c == corev1.NodeReady {
			st = corev1.ConditionTrue
		}
		conds = append(conds, corev1.NodeCondition{Type: c, Status: st, Reason: "Kubelet" + string(c), Message: "kubelet reports " + string(c), LastHeartbeatTime: now, LastTransitionTime: now})
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{
			"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
			"csi.volume.kubernetes.io/nodeid": `{"ebs.csi.aws.com":"i-0123456789abcdef0"}`}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-0123456789abcdef0", PodCIDR: "10.0.0.0/24"},
		Status: corev1.NodeStatus{Capacity: rl, Allocatable: rl, Conditions: conds, Images: images,
			Addresses: []corev1.NodeAddress{{Type: "InternalIP", Address: "10.0.12.34"}, {Type: "Hostname", Address: name}},
			NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", ContainerRuntimeVersion: "containerd://2.1.0", OSImage: "Ubuntu 24.04 LTS", KernelVersion: "6.8.0", Architecture: "amd64", OperatingSystem: "linux"}},
	}
}

// benchPendingPodSpec is benchPodSpec asking 150 cpu and 2 mig-3g.40gb:
// more cpu than a bench node has free, less than it has.
func benchPendingPodSpec(j int) corev1.PodSpec {
	q := resource.MustParse
	s := benchPodSpec(j, "")
	r := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"cpu": q("150"), "memory": q("200Gi"), "nvidia.com/mig-3g.40gb": q("2")},
		Limits:   corev1.ResourceList{"memory": q("200Gi"), "nvidia.com/mig-3g.40gb": q("2")},
	}
	s.InitContainers[0].Resources, s.Containers[0].Resources = r, r
	// The API server taints new nodes not-ready; no kubelet lifts it here.
	s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	return s
}

// benchPodSpec is a rank pod as people write them: an init container
// (rankgate), the trainer with env, mounts, resources, volumes.
func benchPodSpec(j int, node string) corev1.PodSpec {
	q := resource.MustParse
	gpu := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"cpu": q("16"), "memory": q("200Gi"), "nvidia.com/gpu": q("8")},
		Limits:   corev1.ResourceList{"memory": q("200Gi"), "nvidia.com/gpu": q("8")},
	}
	var env []corev1.EnvVar
	for _, kv := range [][2]string{{"NCCL_DEBUG", "INFO"}, {"NCCL_SOCKET_IFNAME", "eth0"}, {"NCCL_IB_DISABLE", "0"}, {"OMP_NUM_THREADS", "8"},
		{"HF_HOME", "/cache/hf"}, {"WANDB_PROJECT", fmt.Sprintf("llm-%04d", j)}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}, {"PYTHONUNBUFFERED", "1"}} {
		env = append(env, corev1.EnvVar{Name: kv[0], Value: kv[1]})
	}
	env = append(env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	mounts := []corev1.VolumeMount{{Name: "dshm", MountPath: "/dev/shm"}, {Name: "cache", MountPath: "/cache"}, {Name: "data", MountPath: "/data", ReadOnly: true}}
	return corev1.PodSpec{
		NodeName: node, ServiceAccountName: serviceAccount, RestartPolicy: corev1.RestartPolicyNever,
		InitContainers: []corev1.Container{{Name: "rankgate-init", Image: "ghcr.io/rankgate/rankgate:v0.1.0",
			Args: []string{"init", "--gate-url", "https://rankgate-gate.rankgate-system.svc:443", "--ca-file", "/var/run/rankgate/ca.crt"},
			Env:  env[len(env)-1:], Resources: gpu,
			VolumeMounts: []corev1.VolumeMount{{Name: "rankgate-token", MountPath: "/var/run/secrets/rankgate"}, {Name: "rankgate-ca", MountPath: "/var/run/rankgate"}}}},
		Containers: []corev1.Container{{Name: "pytorch", Image: "nvcr.io/nvidia/pytorch:25.10-py3",
			Command: []string{"torchrun"}, Args: []string{"--nproc-per-node=8", "train.py", "--config", "/data/config.yaml", "--bf16"},
			Env: env, Resources: gpu, VolumeMounts: mounts, Ports: []corev1.ContainerPort{{Name: "pytorchjob-port", ContainerPort: 23456}}}},
		Volumes: []corev1.Volume{
			{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			{Name: "cache", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/mnt/cache"}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "datasets"}}},
			{Name: "rankgate-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "rankgate-ca"}}}},
			{Name: "rankgate-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: gate.Audience, ExpirationSeconds: ptr.To(int64(3600)), Path: "token"}}}}}},
		},
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
}

// apiRequests reads the API server's request counts
// (apiserver_request_total) by verb and resource.
func apiRequests(t *testing.T) map[string]float64 {
	hc, err := rest.HTTPClientFor(restCfg)
	require.NoError(t, err)
	res, err := hc.Get(strings.TrimSuffix(restCfg.Host, "/") + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	re := regexp.MustCompile(`^apiserver_request_total\{(.*)\} ([0-9.e+]+)$`)
	lab := regexp.MustCompile(`(\w+)="([^"]*)"`)
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		l := map[string]string{}
		for _, x := range lab.FindAllStringSubmatch(m[1], -1) {
			l[x[1]] = x[2]
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		out[l["verb"]+" "+l["resource"]+"/"+l["subresource"]] += v
	}
	return out
}

// logRequestsSince logs the API requests made between two apiRequests
// readings (20 or more of a kind): which writes the run cost.
func logRequestsSince(t *testing.T, a, b map[string]float64) {
	var keys []string
	for k := range b {
		if b[k]-a[k] >= 20 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("requests %-50s %6.0f", k, b[k]-a[k])
	}
}
