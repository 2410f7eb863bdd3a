package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// kubeProxy stands in for kube-proxy, which envtest does not run: it
// listens on a local port and sends each new TCP connection to a random
// ready endpoint of a Service, read from the Service's EndpointSlices as
// kube-proxy watches them; with no ready endpoint it closes the connection
// at once (kube-proxy rejects it). With fixed backends instead it picks
// among all of them, as a Service that selects every replica does.
//
// The API server refuses loopback addresses in EndpointSlices, so test
// replicas publish pod IPs from TEST-NET-1 (podIP) and the proxy reaches
// them on loopback, at the published port (the pod network, so to speak).
type kubeProxy struct {
	Addr string

	mu      sync.Mutex
	ready   []string // host:port
	history []endpointChange
	fixed   []string
	routes  map[string]route // by client address: its first connection
}

// route: where a client's first connection went, and when.
type route struct {
	at      time.Time
	backend string // pod IP:port; "" when refused
}

// endpointChange is the proxy's view of the ready endpoints from a moment on.
type endpointChange struct {
	at    time.Time
	ready []string
}

// startSliceProxy proxies to the ready endpoints of Service svc in ns.
func startSliceProxy(t testing.TB, ns, svc string) *kubeProxy {
	t.Helper()
	p := &kubeProxy{}
	f := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = controller.LabelServiceName + "=" + svc }))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	resync := func(any) {
		var ready []string
		for _, o := range inf.GetStore().List() {
			s := o.(*discoveryv1.EndpointSlice)
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue // kube-proxy: nil means ready
				}
				for _, port := range s.Ports {
					if port.Port == nil || port.Name == nil || *port.Name != controller.GateEndpointPortName {
						continue
					}
					for _, a := range e.Addresses {
						ready = append(ready, net.JoinHostPort(a, strconv.Itoa(int(*port.Port))))
					}
				}
			}
		}
		slices.Sort(ready) // pod IP:port
		p.mu.Lock()
		defer p.mu.Unlock()
		if !slices.Equal(ready, p.ready) {
			p.ready = ready
			p.history = append(p.history, endpointChange{time.Now(), ready})
		}
	}
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: resync, UpdateFunc: func(_, o any) { resync(o) }, DeleteFunc: resync})
	require.NoError(t, err)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f.Start(stop)
	f.WaitForCacheSync(stop)
	p.listen(t)
	return p
}

// startFixedProxy proxies to every backend, like a Service whose selector
// picks every replica.
func startFixedProxy(t testing.TB, backends ...string) *kubeProxy {
	p := &kubeProxy{fixed: backends}
	p.listen(t)
	return p
}

func (p *kubeProxy) pick() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	eps := p.ready
	if p.fixed != nil {
		eps = p.fixed
	}
	if len(eps) == 0 {
		return ""
	}
	return eps[rand.IntN(len(eps))]
}

// firstRoute: where client address src's first connection went.
func (p *kubeProxy) firstRoute(src string) (route, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.routes[src]
	return r, ok
}

// readyEndpoints is what new connections are sent to now.
func (p *kubeProxy) readyEndpoints() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ready)
}

// firstSince: when the ready endpoints first became want after t.
func (p *kubeProxy) firstSince(t time.Time, want []string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.history {
		if !h.at.Before(t) && slices.Equal(h.ready, want) {
			return h.at, true
		}
	}
	return time.Time{}, false
}

func (p *kubeProxy) listen(t testing.TB) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	p.Addr = ln.Addr().String()
	p.routes = map[string]route{}
	go func() {
		for {
			conn, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil { // out of file descriptors, say: keep accepting
				time.Sleep(10 * time.Millisecond)
				continue
			}
			backend := p.pick()
			p.mu.Lock()
			if src := conn.RemoteAddr().(*net.TCPAddr).IP.String(); p.routes != nil {
				if _, ok := p.routes[src]; !ok {
					p.routes[src] = route{time.Now(), backend}
				}
			}
			p.mu.Unlock()
			go func() {
				defer conn.Close()
				if backend == "" {
					return
				}
				// From the client's own address, as kube-proxy's DNAT
				// keeps it (the gate limits new tokens per address).
				src := conn.RemoteAddr().(*net.TCPAddr)
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.IP}}
				up, err := d.Dial("tcp", onLoopback(backend))
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
				go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
}

// podIP is the address replica i publishes (TEST-NET-1; see kubeProxy).
func podIP(i int) string { return fmt.Sprintf("192.0.2.%d", 10+i) }

// onLoopback: where the proxy reaches a published pod IP:port.
func onLoopback(ep string) string {
	_, port, _ := net.SplitHostPort(ep)
	return net.JoinHostPort("127.0.0.1", port)
}

// replica is a test replica and the pod IP it publishes.
type replica struct {
	*ctrl
	podIP string
}

// endpoint is replica h's entry in the gate Service's EndpointSlice.
func endpoint(h *replica) string {
	_, port, _ := net.SplitHostPort(h.Addr)
	return net.JoinHostPort(h.podIP, port)
}

// gateService creates the gate Service as configs/deploy ships it (no
// selector) under a name of its own for the test.
func gateService(t testing.TB, ns string) *corev1.Service {
	t.Helper()
	ensureNamespace(t, controllerNamespace)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gate-" + ns, Namespace: controllerNamespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: controller.GateEndpointPortName, Port: 443}}}}
	require.NoError(t, k8s.Create(context.Background(), svc))
	return svc
}

// publishingReplicas starts replica-a, waits until it leads, then
// replica-b; both publish themselves as svc's endpoint when they lead. With
// fast, the test's short lease timings, else controller-runtime's defaults
// (the shipped ones: lease 15s, renew 10s, retry 2s).
func publishingReplicas(t *testing.T, id, svc string, fast bool) (leader, standby *replica) {
	t.Helper()
	o := controller.Options{GangTimeout: time.Minute, LeaderElection: true, LeaderElectionID: id, GateService: svc}
	if fast {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	}
	a := o
	a.Identity, a.GateEndpointIP = "replica-a", podIP(0)
	leader = &replica{startController(t, a), podIP(0)}
	require.Eventually(t, leader.IsLeader, 30*time.Second, 50*time.Millisecond)
	b := o
	b.Identity, b.GateEndpointIP = "replica-b", podIP(1)
	standby = &replica{startController(t, b), podIP(1)}
	time.Sleep(time.Second)
	require.False(t, standby.IsLeader())
	return leader, standby
}

// The leader is the only endpoint of the gate Service, ready, in an
// EndpointSlice owned by the Service; ranks that connect through it never
// reach the standby. When the leader stops, the slice names the new leader
// and ranks that connect afterwards reach it.
func TestE2EGateEndpointFollowsLeader(t *testing.T) {
	ns := newNamespace(t, "e2e-gate-ep", true)
	svc := gateService(t, ns)
	leader, standby := publishingReplicas(t, "rankgate-e2e-gate-ep", svc.Name, true)
	proxy := startSliceProxy(t, controllerNamespace, svc.Name)
	require.Eventually(t, func() bool { return slices.Equal(proxy.readyEndpoints(), []string{endpoint(leader)}) }, 20*time.Second, 20*time.Millisecond,
		"the slice does not name the leader %s alone: %v", endpoint(leader), proxy.readyEndpoints())

	es := &discoveryv1.EndpointSlice{}
	require.NoError(t, k8s.Get(context.Background(), keyOf(controllerNamespace, controller.GateEndpointSliceName(svc.Name)), es))
	require.Equal(t, controller.EndpointSliceManager, es.Labels[controller.LabelEndpointManagedBy])
	require.Equal(t, svc.Name, es.Labels[controller.LabelServiceName])
	require.Len(t, es.OwnerReferences, 1)
	require.Equal(t, svc.UID, es.OwnerReferences[0].UID)
	require.Equal(t, "replica-a", es.Endpoints[0].TargetRef.Name)

	url := "https://" + proxy.Addr
	runGang := func(name string) *kubeflowv1.PyTorchJob {
		job := pytorchJob(t, ns, name, false, 4, nil)
		var ranks []*rank
		for i := 0; i < 4; i++ {
			p := rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), "")
			ranks = append(ranks, startRank(t, url, p, token(t, p, gate.Audience), fullGPURank...))
		}
		for _, r := range ranks {
			require.Equal(t, 0, r.wait(t, 60*time.Second), joinRanks(ranks))
		}
		return job
	}
	job := runGang("before")
	require.Equal(t, "replica-a", appliedVerdict(t, job)[contract.AnnotationDecidedBy])
	require.NotContains(t, standby.logs.String(), gate.CodeNotLeader, "a rank reached the standby through the gate Service")

	stopped := time.Now()
	leader.Stop(t)
	require.Eventually(t, standby.IsLeader, 20*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return slices.Equal(proxy.readyEndpoints(), []string{endpoint(standby)}) }, 20*time.Second, 20*time.Millisecond,
		"the slice does not name the new leader %s alone: %v", endpoint(standby), proxy.readyEndpoints())
	// The stopped leader withdrew its endpoint before it released the lease.
	withdrawn, ok := proxy.firstSince(stopped, nil)
	require.True(t, ok, "the stopped leader's endpoint was never withdrawn")
	switched, _ := proxy.firstSince(stopped, []string{endpoint(standby)})
	require.True(t, withdrawn.Before(switched))
	require.NoError(t, k8s.Get(context.Background(), keyOf(controllerNamespace, controller.GateEndpointSliceName(svc.Name)), es))
	require.Equal(t, "replica-b", es.Endpoints[0].TargetRef.Name)

	job = runGang("after")
	require.Equal(t, "replica-b", appliedVerdict(t, job)[contract.AnnotationDecidedBy])
}

func keyOf(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// firstAnswer classifies the answer to a rank's first report.
type firstAnswer int

const (
	answeredByLeader firstAnswer = iota // answered (waiting or decided): it reached a replica that can decide
	answeredNotLeader
	answeredUnavailable // the leader, not ready yet
	unreachable         // refused, reset, no endpoint
	otherError          // another refusal by the gate
)

var firstAnswerNames = []string{"leader", "notLeader", "unavailable", "unreachable", "otherError"}

func classify(err error) firstAnswer {
	var ge *gate.Error
	switch {
	case err == nil:
		return answeredByLeader
	case errors.As(err, &ge) && ge.Code == gate.CodeNotLeader:
		return answeredNotLeader
	case errors.As(err, &ge) && ge.Code == gate.CodeUnavailable:
		return answeredUnavailable
	case ge != nil:
		return otherError
	}
	return unreachable
}

// routingRun is one measurement: each rank of each job sends its first
// report at a random moment of the window over a new connection through the
// proxy, then waits for its verdict as a rank does.
type routingRun struct {
	sent    []time.Time
	answer  []firstAnswer
	routed  []route // the proxy's choice for the rank's first connection
	failed  atomic.Int32
	logged  atomic.Int32
	started time.Time
}

// share counts the first reports sent in [from, to): answered by the
// leader, and routed to a replica that could decide (decides) when the
// connection was made.
func (r *routingRun) share(from, to time.Time, decides func(route) bool) (leader, routed, total int, by map[string]int) {
	by = map[string]int{}
	for i, s := range r.sent {
		if s.Before(from) || !s.Before(to) {
			continue
		}
		total++
		by[firstAnswerNames[r.answer[i]]]++
		if r.answer[i] == answeredByLeader {
			leader++
		}
		if decides(r.routed[i]) {
			routed++
		}
	}
	return leader, routed, total, by
}

// rankTransport connects to the gate from 127.1.x.y, a loopback address of
// rank i's own (Linux routes all of 127.0.0.0/8 to the loopback device).
func rankTransport(t *testing.T, i int) *http.Transport {
	return sourceTransport(caPool(t, certs.CAFile), rankIP(i))
}

func rankIP(i int) net.IP { return net.IPv4(127, 1, byte((i+1)>>8), byte(i+1)) }

type benchRank struct {
	pod   *corev1.Pod
	token string
}

// routingGangs creates jobs PyTorchJobs of ranks pods each, with a token per pod.
func routingGangs(t *testing.T, ns string, jobs, ranks int) []benchRank {
	ctx := context.Background()
	out := make([]benchRank, jobs*ranks)
	require.NoError(t, parallel(jobs, 8, func(j int) error {
		job, err := benchGangJob(ctx, ns, fmt.Sprintf("job-%03d", j), ranks)
		if err != nil {
			return err
		}
		for i := 0; i < ranks; i++ {
			p, tok, err := benchRankPod(ctx, job, i, fmt.Sprintf("node-%d", i))
			if err != nil {
				return err
			}
			out[j*ranks+i] = benchRank{p, tok}
		}
		return nil
	}))
	return out
}

// runRouting sends every rank's first report through url within window
// (during calls during at window/2, in a goroutine) and waits until every
// rank holds its verdict.
func runRouting(t *testing.T, p *kubeProxy, run int, ns string, ranks []benchRank, window time.Duration, during func()) *routingRun {
	url := "https://" + p.Addr
	r := &routingRun{sent: make([]time.Time, len(ranks)), answer: make([]firstAnswer, len(ranks)), routed: make([]route, len(ranks)), started: time.Now()}
	var wg sync.WaitGroup
	if during != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(window / 2)
			during()
		}()
	}
	for i, rr := range ranks {
		wg.Add(1)
		delay := time.Duration(rand.Int64N(int64(window)))
		go func() {
			defer wg.Done()
			// Its own client: a new connection, as a new rank's, from an
			// address of its own, as a rank's pod IP.
			tr := rankTransport(t, run*len(ranks)+i)
			defer tr.CloseIdleConnections()
			cl, err := gate.NewClient(gate.ClientOptions{URL: url, Token: rr.token, Transport: tr})
			if err != nil {
				r.failed.Add(1)
				return
			}
			time.Sleep(time.Until(r.started.Add(delay)))
			req := &gate.ReportRequest{Namespace: ns, Pod: rr.pod.Name, Node: rr.pod.Spec.NodeName, DriverVersion: "570.172.08", CUDADriverVersion: "12.8",
				Report: benchRankReport(rr.pod.Spec.NodeName)}
			r.sent[i] = time.Now()
			_, err = cl.Report(context.Background(), req, 0)
			r.answer[i] = classify(err)
			if r.answer[i] != answeredByLeader && r.logged.Add(1) <= 5 {
				t.Logf("first report of %s: %v", rr.pod.Name, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, err := cl.Await(ctx, req, gate.AwaitOptions{Poll: 5 * time.Second})
			if err != nil {
				r.failed.Add(1)
				t.Logf("rank %s: %v", rr.pod.Name, err)
			} else if res.Verdict.Verdict != verdict.VerdictPass {
				r.failed.Add(1)
				t.Logf("rank %s: verdict %s: %v", rr.pod.Name, res.Verdict.Verdict, res.Verdict.Reason(300))
			}
		}()
	}
	wg.Wait()
	for i := range ranks {
		r.routed[i], _ = p.firstRoute(rankIP(run*len(ranks) + i).String())
	}
	return r
}

// TestBenchReportsReachLeader: with two replicas, the share of ranks'
// first reports that reach a replica that can decide them, through a
// stand-in for kube-proxy: (1) a Service that selects every replica (the
// old routing), (2) the leader's EndpointSlice, steady, (3) the same while
// the leader stops (a rolling update or drain) half-way through. The
// shipped lease timings. Two views: where the stand-in sent each rank's
// first connection (routing), and what answered the first report (on 2
// shared cores a burst of new TLS connections can time out at the leader
// itself). Goal: >= 99% in steady state.
//
//	RANKGATE_BENCH=1 go test -run TestBenchReportsReachLeader -v -timeout 30m ./integrations/kubernetes/e2e/
func TestBenchReportsReachLeader(t *testing.T) {
	benchOnly(t)
	jobs, ranks := envInt("RANKGATE_BENCH_JOBS", 200), envInt("RANKGATE_BENCH_RANKS", 8)
	window := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("RANKGATE_BENCH_WINDOW")); err == nil && d > 0 {
		window = d
	}
	names := []string{"all-replicas", "leader-slice", "leader-slice-failover"}
	nss := make([]string, len(names))
	gangs := make([][]benchRank, len(names))
	begin := time.Now()
	for i, n := range names {
		nss[i] = newNamespace(t, "bench-route-"+n, true)
		gangs[i] = routingGangs(t, nss[i], jobs, ranks)
	}
	t.Logf("setup: %d x %d jobs of %d ranks in %s", len(names), jobs, ranks, time.Since(begin).Round(time.Millisecond))
	svc := gateService(t, nss[0])
	leader, standby := publishingReplicas(t, "rankgate-bench-route", svc.Name, false)
	slice := startSliceProxy(t, controllerNamespace, svc.Name)
	require.Eventually(t, func() bool { return slices.Equal(slice.readyEndpoints(), []string{endpoint(leader)}) }, 30*time.Second, 20*time.Millisecond)
	fixed := startFixedProxy(t, endpoint(leader), endpoint(standby))

	summary := map[string]any{"jobs": jobs, "ranksPerJob": ranks, "window": window.String(), "cpus": runtime.NumCPU()}
	pct := func(a, n int) string { return fmt.Sprintf("%.2f%%", 100*float64(a)/float64(max(n, 1))) }
	report := func(name string, r *routingRun, from, to time.Time, decides func(route) bool) (map[string]any, float64) {
		l, routed, n, by := r.share(from, to, decides)
		m := map[string]any{"firstReports": n, "routedToLeader": routed, "routedShare": pct(routed, n),
			"answeredByLeader": l, "answeredShare": pct(l, n), "answers": by}
		t.Logf("%s: %v", name, m)
		return m, float64(routed) / float64(max(n, 1))
	}
	far := time.Now().Add(time.Hour)
	toLeader := func(r route) bool { return r.backend == endpoint(leader) }
	var share [2]float64
	for i, p := range []*kubeProxy{fixed, slice} {
		r := runRouting(t, p, i, nss[i], gangs[i], window, nil)
		require.Zero(t, r.failed.Load(), "ranks without a pass verdict")
		summary[names[i]], share[i] = report(names[i], r, time.Time{}, far, toLeader)
	}

	// Failover: the leader stops (releasing its lease) half-way through.
	var stopped, led time.Time
	r := runRouting(t, slice, 2, nss[2], gangs[2], window, func() {
		stopped = time.Now()
		go leader.Stop(t)
		for !standby.IsLeader() {
			time.Sleep(5 * time.Millisecond)
		}
		led = time.Now()
	})
	require.Zero(t, r.failed.Load(), "ranks without a pass verdict across the failover")
	withdrawn, _ := slice.firstSince(stopped, nil)
	switched, ok := slice.firstSince(stopped, []string{endpoint(standby)})
	require.True(t, ok, "the slice never named the new leader")
	// Who could decide: the old leader until it stopped, the new one once
	// its endpoint was ready.
	decides := func(r route) bool {
		return (r.backend == endpoint(leader) && r.at.Before(stopped)) || (r.backend == endpoint(standby) && !r.at.Before(switched))
	}
	fo, _ := report(names[2], r, time.Time{}, far, decides)
	fo["withdrawnAfterStop"] = withdrawn.Sub(stopped).Round(time.Millisecond).String()
	fo["newLeaderAfterStop"] = led.Sub(stopped).Round(time.Millisecond).String()
	fo["newLeaderReadyAfterStop"] = switched.Sub(stopped).Round(time.Millisecond).String()
	fo["duringSwitch"], _ = report("during the switch", r, stopped, switched, decides)
	before, _ := report("before the stop", r, time.Time{}, stopped, decides)
	after, _ := report("after the switch", r, switched, far, decides)
	fo["beforeStop"], fo["afterSwitch"] = before, after
	summary[names[2]] = fo
	b, _ := json.Marshal(summary)
	t.Logf("first reports that reach the leader: %s", b)
	writeBenchResult(t, "reports-reach-leader", b)
	require.GreaterOrEqual(t, share[1], 0.99, "steady state: under 99% of first connections went to the leader")
	require.Less(t, share[0], 0.9, "the baseline reached the leader almost always: the measurement proves nothing")
}
