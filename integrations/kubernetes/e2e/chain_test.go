package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
)

// The real chain: a TrainJob is turned into a JobSet by the Kubeflow
// Trainer controller, the JobSet into batch Jobs by the JobSet controller,
// the Jobs into pods by kube-controller-manager's Job controller, and the
// pods are placed by kube-scheduler, each built from its own module at
// the pinned version (hack/build-test-binaries.sh) and run as a process,
// with the Trainer's and JobSet's own admission webhooks registered as
// their manifests ship them. Only the kubelet is missing: a rank's init
// container is played by `rankgate init` run by the test for the pod.
//
// The chain runs against an API server of its own (realChain), so that
// its controllers never act on the objects other tests make by hand.

// chainWebhookScope labels the namespaces whose objects the JobSet and
// Trainer webhooks see (their manifests' pod webhooks see every pod
// otherwise, with failurePolicy Fail).
const chainWebhookScope = "rankgate-e2e/real-chain"

// realChain starts an API server for the test, points the package's
// clients at it until the test ends, and runs kube-scheduler, the Job
// controller, the JobSet controller and the Trainer controller against it.
func realChain(t *testing.T) {
	t.Helper()
	for _, b := range []string{"kube-controller-manager", "jobset-controller", "trainer-controller-manager"} {
		chainBinary(t, b)
	}
	cfg, _ := envtestutil.Start(t)
	oldCfg, oldK8s, oldCS := restCfg, k8s, clientset
	c, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	restCfg, k8s, clientset = cfg, c, cs
	t.Cleanup(func() { restCfg, k8s, clientset = oldCfg, oldK8s, oldCS })

	startScheduler(t)
	startJobController(t)
	startJobSetController(t)
	startTrainerController(t)
}

// chainBinary is the path of a binary of the chain in bin/k8s.
func chainBinary(t testing.TB, name string) string {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	dir, err := envtestutil.BinDir(root)
	require.NoError(t, err)
	bin := filepath.Join(dir, name)
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		if os.Getenv(envtestutil.SkipEnv) == "1" {
			t.Skipf("skipping (%s=1): %s missing: run `make test-binaries`", envtestutil.SkipEnv, bin)
		}
		t.Fatalf("%s missing: run `make test-binaries` (hack/build-test-binaries.sh)", bin)
	}
	return bin
}

// tool is a process of the chain, stopped (SIGTERM, then SIGKILL) when the
// test ends; its log is printed when the test fails or runs verbose.
type tool struct {
	name string
	logs *lockedBuffer
	done chan struct{} // closed when it exited, with err
	err  error
}

func runTool(t testing.TB, bin string, env []string, args ...string) *tool {
	t.Helper()
	p := &tool{name: filepath.Base(bin), logs: &lockedBuffer{}, done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if env != nil {
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	}
	require.NoError(t, cmd.Start())
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() || verbose {
			t.Logf("%s log (tail):\n%s", p.name, tail(p.logs.String(), 6000))
		}
	})
	return p
}

// until polls ready every 100 ms until it returns true, failing the test
// when the tool exits or d passes.
func (p *tool) until(t testing.TB, d time.Duration, what string, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ready() {
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, tail(p.logs.String(), 6000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not within %s\n%s", p.name, what, d, tail(p.logs.String(), 6000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startJobController runs kube-controller-manager with the Job controller
// and the garbage collector (a JobSet deletes the Jobs of a restart in the
// foreground), and returns once it has made a pod of a probe Job.
func startJobController(t *testing.T) {
	t.Helper()
	p := runTool(t, chainBinary(t, "kube-controller-manager"), nil,
		"--kubeconfig", kubeconfigFile(t), "--controllers", "job-controller,garbage-collector-controller", "--leader-elect=false",
		"--secure-port", "0", "--use-service-account-credentials=false", "--concurrent-job-syncs", "10",
		"--kube-api-qps", "200", "--kube-api-burst", "400", "-v", "1")
	ctx := context.Background()
	ensureNamespace(t, "chain-probe")
	probe := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "chain-probe"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector: map[string]string{"rankgate-e2e/no-such-node": "true"},
			Containers:   []corev1.Container{{Name: "probe", Image: "busybox"}}}}}}
	require.NoError(t, k8s.Create(ctx, probe))
	p.until(t, 90*time.Second, "a pod of the probe Job", func() bool {
		pods := &corev1.PodList{}
		require.NoError(t, k8s.List(ctx, pods, client.InNamespace("chain-probe")))
		return len(pods.Items) > 0
	})
}

// webhookTool serves a controller-runtime webhook server on 127.0.0.1 with
// the suite's serving certificate, in a directory of its own.
type webhookTool struct {
	port    string
	certDir string // tls.crt and tls.key
	tmp     string // its TMPDIR (controller-runtime's default certificate directory lies under it)
}

func newWebhookTool(t *testing.T) webhookTool {
	t.Helper()
	addr := freePort(t)
	w := webhookTool{port: addr[strings.LastIndexByte(addr, ':')+1:], tmp: t.TempDir()}
	w.certDir = filepath.Join(w.tmp, "k8s-webhook-server", "serving-certs")
	require.NoError(t, os.MkdirAll(w.certDir, 0o700))
	for _, f := range []string{"tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(certs.Dir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(w.certDir, f), b, 0o600))
	}
	return w
}

// startJobSetController runs the JobSet controller (its webhooks served,
// internal certificate management off) and registers its webhook
// configurations as its kustomize component renders them.
func startJobSetController(t *testing.T) {
	t.Helper()
	w := newWebhookTool(t)
	config := managerConfig(t, "config.jobset.x-k8s.io/v1alpha1", w.port, fmt.Sprintf(`internalCertManagement:
  enable: false
webhook:
  certDir: %q
`, w.certDir))
	p := runTool(t, chainBinary(t, "jobset-controller"), []string{"TMPDIR=" + w.tmp, "KUBECONFIG=" + kubeconfigFile(t)},
		"--config", config, "--zap-devel=false", "--zap-log-level", "info")
	installChainWebhooks(t, "jobset", chainManifest(t, "jobset-webhooks.yaml"), w.port)
	p.until(t, 90*time.Second, "its webhooks answering", func() bool {
		return webhookAnswers(t, jobSetProbe())
	})
}

// startTrainerController runs the Kubeflow Trainer controller manager
// (certificate management off) and registers its webhooks.
func startTrainerController(t *testing.T) {
	t.Helper()
	w := newWebhookTool(t)
	config := managerConfig(t, "config.trainer.kubeflow.org/v1alpha1", w.port, `certManagement:
  enable: false
`)
	p := runTool(t, chainBinary(t, "trainer-controller-manager"), []string{"TMPDIR=" + w.tmp, "KUBECONFIG=" + kubeconfigFile(t)},
		"--config", config, "--zap-devel=false", "--zap-log-level", "info")
	installChainWebhooks(t, "trainer", chainManifest(t, "trainer-webhooks.yaml"), w.port)
	p.until(t, 90*time.Second, "its webhooks answering", func() bool {
		return webhookAnswers(t, runtimeProbe())
	})
}

// managerConfig writes the configuration file of a controller manager
// built on controller-runtime (apiVersion's kind Configuration): leader
// election, metrics and probes off, a client allowed 200 QPS, its webhook
// server on 127.0.0.1:port, and extra, the tool's own keys (a "webhook"
// key in extra is merged into the webhook server's).
func managerConfig(t *testing.T, apiVersion, port, extra string) string {
	t.Helper()
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(fmt.Sprintf(`apiVersion: %s
kind: Configuration
leaderElection:
  leaderElect: false
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: "0"
clientConnection:
  qps: 200
  burst: 400
webhook:
  port: %s
  host: 127.0.0.1
`, apiVersion, port)), &doc))
	var more map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(extra), &more))
	for k, v := range more {
		if k == "webhook" {
			for wk, wv := range v.(map[string]any) {
				doc["webhook"].(map[string]any)[wk] = wv
			}
			continue
		}
		doc[k] = v
	}
	b, err := yaml.Marshal(doc)
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(f, b, 0o600))
	return f
}

// chainManifest reads a webhook manifest the build script rendered from a
// module's own kustomization next to the binaries.
func chainManifest(t *testing.T, name string) []byte {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	dir, err := envtestutil.BinDir(root)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err, "run `make test-binaries`")
	return b
}

// installChainWebhooks creates the webhook configurations of manifest
// (prefixed with owner: the JobSet's and the Trainer's share names),
// each webhook calling https://127.0.0.1:port at its path with the suite's
// CA, and seeing only the namespaces labelled chainWebhookScope.
func installChainWebhooks(t *testing.T, owner string, manifest []byte, port string) {
	t.Helper()
	ca, err := os.ReadFile(certs.CAFile)
	require.NoError(t, err)
	scope := &metav1.LabelSelector{MatchLabels: map[string]string{chainWebhookScope: "true"}}
	cc := func(c admissionv1.WebhookClientConfig) admissionv1.WebhookClientConfig {
		require.NotNil(t, c.Service, "webhook without a service")
		return admissionv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:" + port + ptr.Deref(c.Service.Path, "/")), CABundle: ca}
	}
	ctx := context.Background()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	n := 0
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
		b, err := json.Marshal(raw)
		require.NoError(t, err)
		switch raw["kind"] {
		case "MutatingWebhookConfiguration":
			var m admissionv1.MutatingWebhookConfiguration
			require.NoError(t, json.Unmarshal(b, &m))
			m.Name = owner + "-" + m.Name
			for i := range m.Webhooks {
				m.Webhooks[i].ClientConfig, m.Webhooks[i].NamespaceSelector = cc(m.Webhooks[i].ClientConfig), scope
			}
			require.NoError(t, k8s.Create(ctx, &m))
			n++
		case "ValidatingWebhookConfiguration":
			var v admissionv1.ValidatingWebhookConfiguration
			require.NoError(t, json.Unmarshal(b, &v))
			v.Name = owner + "-" + v.Name
			for i := range v.Webhooks {
				v.Webhooks[i].ClientConfig, v.Webhooks[i].NamespaceSelector = cc(v.Webhooks[i].ClientConfig), scope
			}
			require.NoError(t, k8s.Create(ctx, &v))
			n++
		}
	}
	require.NotZero(t, n, "%s: no webhook configuration in its manifest", owner)
}

// chainNamespace creates an opted-in (optIn) namespace the chain's
// webhooks see, with the ranks' service account.
func chainNamespace(t *testing.T, name string, optIn bool) string {
	t.Helper()
	ns := newNamespace(t, name, optIn)
	o := &corev1.Namespace{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Name: ns}, o))
	if o.Labels == nil {
		o.Labels = map[string]string{}
	}
	o.Labels[chainWebhookScope] = "true"
	require.NoError(t, k8s.Update(context.Background(), o))
	return ns
}

// webhookAnswers creates probe as a server-side dry run in the probe
// namespace: true once no webhook call fails for want of a server.
func webhookAnswers(t *testing.T, probe client.Object) bool {
	t.Helper()
	ns := "chain-webhook-probe"
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: ns}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
		require.NoError(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{chainWebhookScope: "true"}}}))
	}
	probe.SetNamespace(ns)
	err := k8s.Create(context.Background(), probe, client.DryRunAll)
	if err == nil {
		return true
	}
	if strings.Contains(err.Error(), "failed calling webhook") {
		return false
	}
	t.Fatalf("probe %s refused by a webhook that answers: %v", probe.GetObjectKind().GroupVersionKind().Kind, err)
	return false
}

// jobSetProbe is a JobSet the JobSet webhooks admit.
func jobSetProbe() client.Object {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": map[string]any{"name": "probe"},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{"name": "w", "replicas": int64(1),
			"template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Never", "containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}}}}},
	}}
}

// runtimeProbe is a TrainingRuntime the Trainer webhooks admit.
func runtimeProbe() client.Object {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": map[string]any{"name": "probe"},
		"spec": map[string]any{"mlPolicy": map[string]any{"numNodes": int64(1), "torch": map[string]any{}},
			"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{map[string]any{"name": "node",
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
					"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
						"containers": []any{map[string]any{"name": "node", "image": "busybox"}}}}}}}}}}},
	}}
}

// chainEventually polls cond every 100 ms until it holds, failing the test
// after d with msg and what the chain made in ns (chainState).
func chainEventually(t *testing.T, ns string, d time.Duration, msg string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s within %s\n%s", msg, d, chainState(t, ns))
		}
	}
}

// chainState is what the chain's controllers made in ns, for a failure
// message: the batch Jobs (suspended, active, succeeded, failed and their
// conditions), the pods (phase, node, init containers) and the Events.
func chainState(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	jobs := &batchv1.JobList{}
	if err := k8s.List(ctx, jobs, client.InNamespace(ns)); err == nil {
		for _, j := range jobs.Items {
			fmt.Fprintf(&b, "job %s: suspend=%v active=%d succeeded=%d failed=%d", j.Name, ptr.Deref(j.Spec.Suspend, false), j.Status.Active, j.Status.Succeeded, j.Status.Failed)
			for _, c := range j.Status.Conditions {
				fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Reason)
			}
			b.WriteByte('\n')
		}
	}
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(ns)); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s: phase=%s node=%q init=%d deleting=%v\n", p.Name, p.Status.Phase, p.Spec.NodeName, len(p.Spec.InitContainers), p.DeletionTimestamp != nil)
		}
	}
	for _, e := range namespaceEvents(t, ns) {
		fmt.Fprintf(&b, "event %s/%s %s: %s\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}
