package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/gatetest"
)

// Shared by all tests of the package (TestMain).
var (
	restCfg   *rest.Config
	k8s       client.Client
	clientset *kubernetes.Clientset
	binary    string // the rankgate binary under test
	certs     *gatetest.Certs
)

const serviceAccount = "trainer"

// verbose (RANKGATE_E2E_VERBOSE=1) logs every rank's output and every
// controller's log, failed or not.
var verbose = os.Getenv("RANKGATE_E2E_VERBOSE") == "1"

// newNamespace creates an opted-in namespace with the ranks' service account.
func newNamespace(t testing.TB, name string, optIn bool) string {
	t.Helper()
	ctx := context.Background()
	// Namespaces outlive their tests (envtest runs no namespace
	// controller): a repeated test (-count) gets name-2, name-3, ...
	nsUses.mu.Lock()
	if nsUses.n == nil {
		nsUses.n = map[string]int{}
	}
	nsUses.n[name]++
	if n := nsUses.n[name]; n > 1 {
		name = fmt.Sprintf("%s-%d", name, n)
	}
	nsUses.mu.Unlock()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if optIn {
		ns.Labels = map[string]string{contract.KeyGate: "enabled"}
	}
	require.NoError(t, k8s.Create(ctx, ns))
	require.NoError(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount, Namespace: name}}))
	return name
}

var nsUses struct {
	mu sync.Mutex
	n  map[string]int
}

// pytorchJob creates a PyTorchJob with a Master (if master) and workers.
func pytorchJob(t testing.TB, ns, name string, master bool, workers int, annotations map[string]string) *kubeflowv1.PyTorchJob {
	t.Helper()
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "pytorch/pytorch"}}}}
	specs := map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
		kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(workers)), Template: tmpl},
	}
	if master {
		specs[kubeflowv1.PyTorchJobReplicaTypeMaster] = &kubeflowv1.ReplicaSpec{Replicas: ptr.To(int32(1)), Template: tmpl}
	}
	j := &kubeflowv1.PyTorchJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec:       kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: specs},
	}
	require.NoError(t, k8s.Create(context.Background(), j))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), j) })
	return j
}

// mpiJob creates an MPIJob with a launcher and workers.
func mpiJob(t testing.TB, ns, name string, workers int) *mpiv2beta1.MPIJob {
	return mpiJobWith(t, ns, name, workers, false)
}

// mpiJobWith creates an MPIJob; launcherWorks sets runLauncherAsWorker.
func mpiJobWith(t testing.TB, ns, name string, workers int, launcherWorks bool) *mpiv2beta1.MPIJob {
	t.Helper()
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mpi", Image: "mpioperator/base"}}}}
	j := &mpiv2beta1.MPIJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: mpiv2beta1.MPIJobSpec{RunLauncherAsWorker: ptr.To(launcherWorks), MPIReplicaSpecs: map[mpiv2beta1.MPIReplicaType]*mpiv2beta1.ReplicaSpec{
			mpiv2beta1.MPIReplicaTypeLauncher: {Replicas: ptr.To(int32(1)), Template: tmpl},
			mpiv2beta1.MPIReplicaTypeWorker:   {Replicas: ptr.To(int32(workers)), Template: tmpl},
		}},
	}
	require.NoError(t, k8s.Create(context.Background(), j))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), j) })
	return j
}

// rankPod creates the pod the operator would create for a replica: its
// labels, its controller owner reference, the ranks' service account, and
// (node != "") bound to a node. gpus names the resource the app and init
// containers request; edit, if given, changes the pod before it is created.
func rankPod(t testing.TB, owner client.Object, replicaType string, index int, node, gpuResource string, edit ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	gvk, err := k8s.GroupVersionKindFor(owner)
	require.NoError(t, err)
	name := fmt.Sprintf("%s-%s-%d", owner.GetName(), replicaType, index)
	if mj, ok := owner.(*mpiv2beta1.MPIJob); ok && ptr.Deref(mj.Spec.RunLauncherAsWorker, false) && replicaType == "worker" {
		// mpi-operator v0.8 names Worker i <job>-worker-i and labels it
		// index i+1 when the launcher is rank 0.
		name = fmt.Sprintf("%s-worker-%d", owner.GetName(), index-1)
	}
	if gpuResource == "" {
		gpuResource = "nvidia.com/gpu"
	}
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(gpuResource): resource.MustParse("1")}}
	// The labels each operator really sets: training-operator v1.9
	// (replica-type in lower case, job-role=master on the master);
	// mpi-operator v0.8 (job-role launcher|worker, no replica-type).
	labels := map[string]string{controller.LabelJobName: owner.GetName(), controller.LabelReplicaIndex: fmt.Sprint(index)}
	switch gvk.Kind {
	case "MPIJob":
		labels["training.kubeflow.org/operator-name"] = "mpi-operator"
		labels[controller.LabelJobRole] = replicaType
	default:
		labels["training.kubeflow.org/operator-name"] = "pytorchjob-controller"
		labels[controller.LabelReplicaType] = replicaType
		if replicaType == "master" {
			labels[controller.LabelJobRole] = "master"
		}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: owner.GetNamespace(), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(),
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: serviceAccount, NodeName: node,
			InitContainers: []corev1.Container{{Name: "rankgate-init", Image: "rankgate", Resources: res}},
			Containers:     []corev1.Container{{Name: "train", Image: "pytorch/pytorch", Resources: res}},
		},
	}
	for _, e := range edit {
		e(p)
	}
	require.NoError(t, k8s.Create(context.Background(), p))
	return p
}

// launcherPod creates what mpi-operator v0.8 creates for an MPIJob's
// launcher: a batch Job controlled by the MPIJob, and the launcher pod
// controlled by that Job, labelled job-role=launcher (index 0 with
// runLauncherAsWorker).
func launcherPod(t testing.TB, owner *mpiv2beta1.MPIJob, node string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{{Name: "mpi", Image: "mpioperator/base"}}}}
	bj := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: owner.Name + "-launcher", Namespace: owner.Namespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v2beta1", Kind: "MPIJob", Name: owner.Name, UID: owner.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: tmpl},
	}
	require.NoError(t, k8s.Create(ctx, bj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), bj) })
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: owner.Name + "-launcher-x7k2p", Namespace: owner.Namespace,
			Labels: map[string]string{controller.LabelJobName: owner.Name, "training.kubeflow.org/operator-name": "mpi-operator",
				controller.LabelJobRole: "launcher", controller.LabelReplicaIndex: "0"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: bj.Name, UID: bj.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: serviceAccount, NodeName: node,
			InitContainers: []corev1.Container{{Name: "rankgate-init", Image: "rankgate", Resources: res}},
			Containers:     []corev1.Container{{Name: "mpi", Image: "mpioperator/base", Resources: res}},
		},
	}
	require.NoError(t, k8s.Create(ctx, p))
	return p
}

// markUnschedulable sets the condition the scheduler would.
func markUnschedulable(t testing.TB, p *corev1.Pod, msg string) {
	t.Helper()
	p.Status.Phase = corev1.PodPending
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.Now()}}
	require.NoError(t, k8s.Status().Update(context.Background(), p))
}

// gpuNode creates a Ready node advertising count of resource, and the cpu,
// memory and pods every kubelet advertises.
func gpuNode(t testing.TB, name, res string, count int) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(ctx, n); err != nil {
		require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: name}, n))
	}
	q := resource.MustParse(fmt.Sprint(count))
	rl := corev1.ResourceList{corev1.ResourceName(res): q, corev1.ResourceCPU: resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Capacity, n.Status.Allocatable = rl, rl
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	require.NoError(t, k8s.Status().Update(ctx, n))
}

// token mints the pod's projected service-account token (audience
// rankgate, bound to the pod) with the TokenRequest API, into a file.
func token(t testing.TB, p *corev1.Pod, audience string) string {
	t.Helper()
	tr, err := clientset.CoreV1().ServiceAccounts(p.Namespace).CreateToken(context.Background(), p.Spec.ServiceAccountName, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(3600)),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), p.Name+"-"+audience+".token")
	require.NoError(t, os.WriteFile(f, []byte(tr.Status.Token), 0o600))
	return f
}

// ctrl is an in-process controller replica.
type ctrl struct {
	*controller.Controller
	URL    string
	Addr   string
	cancel context.CancelFunc
	done   chan error
	logs   *logBuffer
}

// logBuffer collects a controller's logs; a failed test prints them.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func (l *logBuffer) logger(name string) logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		fmt.Fprintf(&l.b, "%s %s %s %s\n", time.Now().Format("15:04:05.000"), name, prefix, args)
		l.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

// startController runs a replica until the test ends (or Stop). Zero
// options get test defaults: a random local gate port, no leader election,
// no metrics or probes.
func startController(t testing.TB, o controller.Options) *ctrl {
	t.Helper()
	if o.Config == nil {
		o.Config = restCfg
	}
	if o.CertDir == "" {
		o.CertDir = servingOnlyDir(t)
	}
	if o.GateAddr == "" && o.GateListener == nil {
		o.GateAddr = "127.0.0.1:0"
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	if o.HealthAddr == "" {
		o.HealthAddr = "0"
	}
	if o.Identity == "" {
		o.Identity = "replica-" + t.Name()
	}
	if o.LeaderElection && o.LeaderElectionNamespace == "" {
		o.LeaderElectionNamespace = "default"
	}
	if o.Namespace == "" {
		o.Namespace = controllerNamespace
	}
	if o.AppliedDelay == nil {
		o.AppliedDelay = ptr.To(time.Duration(0)) // tests read the Applied condition right after the job's verdict
	}
	ensureNamespace(t, o.Namespace)
	logs := &logBuffer{}
	o.Log = logs.logger(o.Identity)
	c, err := controller.New(o)
	require.NoError(t, err)
	addr, err := c.GateAddr()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	h := &ctrl{Controller: c, URL: "https://" + addr.String(), Addr: addr.String(), cancel: cancel, done: make(chan error, 1), logs: logs}
	go func() { h.done <- c.Start(ctx) }()
	t.Cleanup(func() {
		h.Stop(t)
		if t.Failed() || verbose {
			t.Logf("controller %s log:\n%s", o.Identity, logs.String())
		}
	})
	return h
}

// controllerNamespace is the test replicas' own namespace
// (Options.Namespace), as the shipped install's.
const controllerNamespace = "rankgate-system"

// ensureNamespace creates namespace name unless it exists (kept: envtest
// runs no namespace controller).
func ensureNamespace(t testing.TB, name string) {
	t.Helper()
	err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// Stop ends the replica and waits for it.
func (h *ctrl) Stop(t testing.TB) {
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("controller stopped with: %v", err)
		}
		h.done <- nil // later Stops return at once
	case <-time.After(30 * time.Second):
		t.Errorf("controller did not stop within 30s")
	}
}

// rank is a running `rankgate init` process.
type rank struct {
	pod     *corev1.Pod
	cmd     *exec.Cmd
	stdout  bytes.Buffer
	stderr  lockedBuffer
	termLog string
	exited  chan struct{}
	code    int
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// startRank runs `rankgate init` for pod against url with the given token
// file and extra flags (the fixture inventory: --sample/--inventory,
// --devices).
func startRank(t testing.TB, url string, p *corev1.Pod, tokenFile string, extra ...string) *rank {
	t.Helper()
	termLog := filepath.Join(t.TempDir(), "termination-log")
	args := []string{"init", "--gate-url", url, "--ca-file", certs.CAFile, "--token-file", tokenFile,
		"--pod-name", p.Name, "--pod-namespace", p.Namespace, "--timeout", "90s", "--poll", "5s",
		"-o", "json", "--termination-log", termLog, "--log-level", "info"}
	return startProcess(t, p, termLog, nil, append(args, extra...)...)
}

// startProcess runs the rankgate binary with args for pod p (its
// termination log at termLog, env added to PATH and HOME), and kills it
// when the test ends.
func startProcess(t testing.TB, p *corev1.Pod, termLog string, env []string, args ...string) *rank {
	t.Helper()
	r := &rank{pod: p, termLog: termLog, exited: make(chan struct{})}
	r.cmd = exec.Command(binary, args...)
	r.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	r.cmd.Stdout = &r.stdout
	r.cmd.Stderr = &r.stderr
	require.NoError(t, r.cmd.Start())
	go func() {
		err := r.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
		}
		close(r.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		if verbose {
			t.Log(r.String())
		}
	})
	return r
}

// wait returns the exit code, failing the test if the process runs longer
// than d.
func (r *rank) wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-r.exited:
		return r.code
	case <-time.After(d):
		t.Fatalf("rankgate init for %s still running after %s; stderr:\n%s", r.pod.Name, d, r.stderr.String())
	}
	return -1
}

func (r *rank) running() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

func (r *rank) termination() string {
	b, _ := os.ReadFile(r.termLog)
	return string(b)
}

func (r *rank) String() string {
	return fmt.Sprintf("rank pod %s exit %d\nstdout:\n%s\nstderr:\n%s\ntermination log: %s", r.pod.Name, r.code, r.stdout.String(), r.stderr.String(), r.termination())
}

// jobAnnotations reads the job from the API server.
func jobAnnotations(t testing.TB, o client.Object) map[string]string {
	t.Helper()
	fresh := o.DeepCopyObject().(client.Object)
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(o), fresh))
	return fresh.GetAnnotations()
}

// roundRobinProxy listens on a local port and hands each new TCP
// connection to the next backend in turn, as kube-proxy spreads a
// Service's connections over its endpoints.
func roundRobinProxy(t testing.TB, backends ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			backend := backends[int(n.Add(1)-1)%len(backends)]
			go func() {
				defer conn.Close()
				up, err := net.Dial("tcp", backend)
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
	return ln.Addr().String()
}

// appliedVerdict waits until the job carries its verdict (the controller
// answers the ranks once the verdict is recorded in the job's Gang, then
// applies it to the job), checks that the Gang says so (condition
// Applied), and returns the job's annotations.
func appliedVerdict(t testing.TB, o client.Object) map[string]string {
	t.Helper()
	var a map[string]string
	require.Eventually(t, func() bool {
		a = jobAnnotations(t, o)
		return a[contract.AnnotationVerdict] != ""
	}, 10*time.Second, 20*time.Millisecond, "the verdict was not applied to the job")
	fresh := o.DeepCopyObject().(client.Object)
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(o), fresh))
	require.Eventually(t, func() bool {
		g := gangOf(t, fresh)
		return g != nil && meta.IsStatusConditionTrue(g.Status.Conditions, contract.ConditionApplied)
	}, 10*time.Second, 20*time.Millisecond, "the Gang of the job does not say the verdict was applied")
	return a
}

// jobEvents lists the Events whose object is o, by reason.
func jobEvents(t testing.TB, o client.Object) map[string][]string {
	t.Helper()
	evs := &corev1.EventList{}
	require.NoError(t, k8s.List(context.Background(), evs, client.InNamespace(o.GetNamespace())))
	out := map[string][]string{}
	for _, e := range evs.Items {
		if e.InvolvedObject.UID == o.GetUID() {
			out[e.Reason] = append(out[e.Reason], e.Message)
		}
	}
	return out
}

// freePort reserves a local port and releases it for a later listener.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func joinRanks(rs []*rank) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.String())
		b.WriteString("\n----\n")
	}
	return b.String()
}

// setupEnv starts the API server, writes the gate certificates and builds
// the binary; the returned function stops the API server.
func setupEnv() (func(), error) {
	env, cfg, err := envtestutil.StartEnv()
	if err != nil {
		return nil, err
	}
	stop := func() { _ = env.Stop() }
	restCfg = cfg
	if k8s, err = client.New(cfg, client.Options{Scheme: controller.Scheme()}); err != nil {
		stop()
		return nil, err
	}
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		stop()
		return nil, err
	}
	dir, err := os.MkdirTemp("", "rankgate-e2e-")
	if err != nil {
		stop()
		return nil, err
	}
	stopAll := func() { stop(); _ = os.RemoveAll(dir) }
	if certs, err = gatetest.WriteCerts(dir, "127.0.0.1", "localhost"); err != nil {
		stopAll()
		return nil, err
	}
	root, err := envtestutil.RepoRoot()
	if err != nil {
		stopAll()
		return nil, err
	}
	binary = filepath.Join(dir, "rankgate")
	// Built as `make build` does (stripped), so that memory measurements
	// see the production binary.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binary, "./cmd/rankgate")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if out, err := build.CombinedOutput(); err != nil {
		stopAll()
		return nil, fmt.Errorf("building rankgate: %v\n%s", err, out)
	}
	return stopAll, nil
}

// servingOnlyDir holds the suite's serving certificate and key without its
// ca.crt: a controller given a certificate directory with a CA distributes
// that CA to every opted-in namespace of the shared API server, and
// controllers of different tests would overwrite each other's copies.
// Tests of that distribution give their own directory.
func servingOnlyDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(certs.Dir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
	}
	return dir
}
