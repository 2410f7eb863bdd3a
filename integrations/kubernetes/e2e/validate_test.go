package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/verdict"
)

// warnings collects the admission warnings the API server returns, as
// kubectl prints them ("Warning: ...").
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// validateNode creates a Ready node labelled as GFD labels an 8-GPU
// A100-80GB with mixed strategy and the all-1g.10gb layout applied, and
// the label that makes it one of this test's nodes.
func validateNode(t *testing.T, name, group string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "e2e-validate": group,
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
		"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success",
		"nvidia.com/mig-1g.10gb.count": "56", "nvidia.com/mig-1g.10gb.memory": "9728", "nvidia.com/mig-1g.10gb.multiprocessors": "14",
	}}}
	require.NoError(t, k8s.Create(ctx, n))
	rl := corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("56"), corev1.ResourceCPU: resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Capacity, n.Status.Allocatable = rl, rl
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	require.NoError(t, k8s.Status().Update(ctx, n))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
}

// serveWebhooks serves handlers by path over TLS on 127.0.0.1 with the
// suite's serving certificate and returns the base URL.
func serveWebhooks(t *testing.T, handlers map[string]admission.Handler) string {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certs.Dir+"/tls.crt", certs.Dir+"/tls.key")
	require.NoError(t, err)
	mux := http.NewServeMux()
	for p, h := range handlers {
		mux.Handle(p, &admission.Webhook{Handler: h})
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().(*net.TCPAddr).String()
}

func jobRules() []admissionregv1.RuleWithOperations {
	return []admissionregv1.RuleWithOperations{
		{Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
			Rule: admissionregv1.Rule{APIGroups: []string{"kubeflow.org"}, APIVersions: []string{"v1"}, Resources: []string{"pytorchjobs"}}},
		{Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
			Rule: admissionregv1.Rule{APIGroups: []string{"kubeflow.org"}, APIVersions: []string{"v2beta1"}, Resources: []string{"mpijobs"}}},
	}
}

func validatingWebhook(name, url, ns string) admissionregv1.ValidatingWebhook {
	ca, _ := os.ReadFile(certs.CAFile)
	return admissionregv1.ValidatingWebhook{
		Name:                    name,
		ClientConfig:            admissionregv1.WebhookClientConfig{URL: ptr.To(url), CABundle: ca},
		Rules:                   jobRules(),
		FailurePolicy:           ptr.To(admissionregv1.Fail),
		SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		TimeoutSeconds:          ptr.To(int32(5)),
		NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
	}
}

// migPyTorchJob is a PyTorchJob of a Master and workers, every container
// asking count of res and running torchrun with nproc processes.
func migPyTorchJob(ns, name, res string, count, nproc, workers int) *kubeflowv1.PyTorchJob {
	q := resource.MustParse(fmt.Sprint(count))
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "pytorch", Image: "pytorch/pytorch:2.7",
		Command:   []string{"torchrun", fmt.Sprintf("--nproc-per-node=%d", nproc), "train.py"},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): q}},
		// An NCCL with MIG support, as NGC images declare it: without it the
		// webhook warns NCCL_MIG_VERSION (the version cannot be told).
		Env: []corev1.EnvVar{{Name: "NCCL_VERSION", Value: "2.31.2"}},
	}}}}
	return &kubeflowv1.PyTorchJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{contract.KeyGate: "enabled"}},
		Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: *tmpl.DeepCopy()},
			kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(workers)), Template: *tmpl.DeepCopy()},
		}},
	}
}

// (o) The validating webhook on the real API server: per policy, a job is
// refused with the rule ID, reason and fix in the message the API server
// returns (what kubectl prints after "Error from server"), or admitted with
// admission warnings that carry the rule ID (what kubectl prints after
// "Warning:").
func TestValidatingWebhookPolicies(t *testing.T) {
	ctx := context.Background()
	group := fmt.Sprintf("v%d", time.Now().UnixNano())
	validateNode(t, "validate-a100-0-"+group, group)
	validateNode(t, "validate-a100-1-"+group, group)
	nodes := func(ctx context.Context) ([]corev1.Node, error) {
		l := &corev1.NodeList{}
		err := k8s.List(ctx, l, client.MatchingLabels{"e2e-validate": group})
		return l.Items, err
	}
	nsDefault := newNamespace(t, "e2e-validate-default", true)
	nsStrict := newNamespace(t, "e2e-validate-strict", true)
	base := serveWebhooks(t, map[string]admission.Handler{
		validate.Path: validate.NewHandler(validate.Options{Nodes: nodes}),
		"/strict" + validate.Path: validate.NewHandler(validate.Options{Nodes: nodes, Policies: map[string]validate.Policy{
			verdict.RuleShapeMismatch:         validate.Warn,
			verdict.RuleMIGMultiplePerProcess: validate.Deny,
			verdict.RuleNprocExceedsDevices:   validate.Off,
		}}),
	})
	cfg := &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "rankgate-validate-" + group},
		Webhooks: []admissionregv1.ValidatingWebhook{
			validatingWebhook("default.validate.rankgate.io", base+validate.Path, nsDefault),
			validatingWebhook("strict.validate.rankgate.io", base+"/strict"+validate.Path, nsStrict),
		},
	}
	require.NoError(t, k8s.Create(ctx, cfg))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cfg) })

	warned := &warnings{}
	wcfg := rest.CopyConfig(restCfg)
	wcfg.WarningHandler = warned
	c, err := client.New(wcfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)

	// The API server picks the configuration up within a second or so:
	// wait until a hopeless job is refused (dry run: nothing is stored).
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Create(ctx, migPyTorchJob(nsDefault, "probe", "nvidia.com/mig-1g.5gb", 1, 1, 1), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), verdict.RuleShapeMismatch) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the webhook was not called within 30s: %v", err)
		time.Sleep(200 * time.Millisecond)
	}
	warned.take()

	t.Run("default policy: SHAPE_MISMATCH denied", func(t *testing.T) {
		err := c.Create(ctx, migPyTorchJob(nsDefault, "train-1g5", "nvidia.com/mig-1g.5gb", 1, 1, 3))
		require.Error(t, err)
		require.True(t, apierrors.IsForbidden(err), "%v", err)
		t.Logf("Error from server: %v", err)
		msg := err.Error()
		for _, s := range []string{`admission webhook "default.validate.rankgate.io" denied the request`,
			"rankgate refused PyTorchJob " + nsDefault + "/train-1g5", "SHAPE_MISMATCH: ", "nvidia.com/mig-1g.5gb", "Fix: "} {
			require.Contains(t, msg, s)
		}
		got := &kubeflowv1.PyTorchJob{}
		require.True(t, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: nsDefault, Name: "train-1g5"}, got)), "a refused job is not stored")
	})
	t.Run("default policy: MIG_MULTIPLE_PER_PROCESS and NPROC_EXCEEDS_DEVICES warn", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, migPyTorchJob(nsDefault, "train-2mig", "nvidia.com/mig-1g.10gb", 2, 4, 1)))
		ws := warned.take()
		for _, w := range ws {
			t.Logf("Warning: %s", w)
		}
		all := strings.Join(ws, "\n")
		require.Contains(t, all, "MIG_MULTIPLE_PER_PROCESS: ")
		require.Contains(t, all, "NPROC_EXCEEDS_DEVICES: ")
		require.Contains(t, all, "Fix: ")
	})
	t.Run("default policy: a job that fits passes silently", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, migPyTorchJob(nsDefault, "train-ok", "nvidia.com/mig-1g.10gb", 1, 1, 3)))
		require.Empty(t, warned.take())
	})
	t.Run("strict policy: MIG_MULTIPLE_PER_PROCESS denied, SHAPE_MISMATCH only warns, NPROC off", func(t *testing.T) {
		err := c.Create(ctx, migPyTorchJob(nsStrict, "train-2mig", "nvidia.com/mig-1g.10gb", 2, 4, 1))
		require.Error(t, err)
		t.Logf("Error from server: %v", err)
		require.Contains(t, err.Error(), `admission webhook "strict.validate.rankgate.io" denied the request`)
		require.Contains(t, err.Error(), "MIG_MULTIPLE_PER_PROCESS: ")
		require.NotContains(t, err.Error()+strings.Join(warned.take(), ""), verdict.RuleNprocExceedsDevices)

		require.NoError(t, c.Create(ctx, migPyTorchJob(nsStrict, "train-1g5", "nvidia.com/mig-1g.5gb", 1, 1, 3)))
		ws := warned.take()
		for _, w := range ws {
			t.Logf("Warning: %s", w)
		}
		require.Contains(t, strings.Join(ws, "\n"), "SHAPE_MISMATCH: ")
	})
	t.Run("MPIJob v2beta1 denied on update too", func(t *testing.T) {
		j := mpiJob(t, nsDefault, "mpi-1g5", 2)
		// mpiJob created it without requests: asking for a shape no node
		// has on update is refused and the stored job stays as it was.
		w := &j.Spec.MPIReplicaSpecs["Worker"].Template.Spec.Containers[0]
		w.Resources.Limits = corev1.ResourceList{"nvidia.com/mig-1g.5gb": resource.MustParse("1")}
		err := c.Update(ctx, j)
		require.Error(t, err)
		t.Logf("Error from server: %v", err)
		require.Contains(t, err.Error(), "rankgate refused MPIJob "+nsDefault+"/mpi-1g5")
		require.Contains(t, err.Error(), "SHAPE_MISMATCH: ")
		var se *apierrors.StatusError
		require.True(t, errors.As(err, &se))
	})
}
