package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// The real Kueue in the real chain: Kueue's controller manager (built
// from sigs.k8s.io/kueue by hack/build-test-binaries.sh) runs against the
// chain's API server with its TrainJob and JobSet integrations, its own
// CRDs, webhooks and conversion webhooks as its config/default
// kustomization renders them (bin/k8s/kueue-install.yaml), and its own
// certificate management: it generates its CA and serving certificate
// into its Secret and injects the CA into its webhook configurations and
// CRDs, for the name kueue-webhook-service.kueue-system.svc.
//
// Two stand-ins, for what a cluster has and envtest has not:
//   - the kubelet's Secret volume: the test copies the certificate Kueue
//     wrote into its Secret to the webhook server's certificate directory;
//   - the Service's endpoints (kube-proxy, the pod network): the Service
//     kueue-webhook-service is of type ExternalName, localhost, so that
//     the API server, which resolves a webhook's Service itself, calls
//     Kueue's server on this machine (with the TLS server name Kueue's
//     certificate is for).
//
// Kueue runs with internal certificate management on (its default): off,
// its main reads a metrics certificate from the fixed path
// /etc/kueue/metrics/certs and exits when there is none. Its batch/job
// integration is on (as in its default configuration) for the JobSets'
// Jobs: off, its Job webhook (which, unlike the others, has no no-op form
// in v0.17.0) panics on every Job created (nil queue manager).

// kueueNamespace is Kueue's own namespace, as config/default installs it.
const kueueNamespace = "kueue-system"

// kueueFlavorToleration marks the pod templates Kueue patched on
// admission: the ResourceFlavor carries it, and Kueue adds a flavor's
// tolerations to the TrainJob's runtime patch when it admits the job.
const kueueFlavorToleration = "rankgate-e2e/kueue-flavor"

// startKueue installs Kueue in the chain's API server and runs its
// controller manager, returning once its webhooks answer; then it creates
// the ResourceFlavor and the ClusterQueue "gpu" (quota for the GPU
// resources the chain's nodes offer or are asked for). Kueue manages the
// jobs labelled kueue.x-k8s.io/queue-name only.
func startKueue(t *testing.T) {
	t.Helper()
	bin := chainBinary(t, "kueue-controller-manager")
	addr := freePort(t)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	installKueue(t, chainManifest(t, "kueue-install.yaml"), port)
	tmp := t.TempDir()
	certDir := filepath.Join(tmp, "serving-certs")
	require.NoError(t, os.MkdirAll(certDir, 0o700))
	config := managerConfig(t, "config.kueue.x-k8s.io/v1beta2", port, fmt.Sprintf(`namespace: %s
internalCertManagement:
  enable: true
  webhookServiceName: kueue-webhook-service
  webhookSecretName: kueue-webhook-server-cert
webhook:
  certDir: %q
manageJobsWithoutQueueName: false
featureGates:
  VisibilityOnDemand: false
integrations:
  frameworks:
  - batch/job
  - trainer.kubeflow.org/trainjob
  - jobset.x-k8s.io/jobset
`, kueueNamespace, certDir))
	p := runTool(t, bin, []string{"TMPDIR=" + tmp, "KUBECONFIG=" + kubeconfigFile(t)},
		"--config", config, "--zap-devel=false", "--zap-log-level", "info")
	p.until(t, 90*time.Second, "its certificate in its Secret", func() bool {
		return mountKueueCert(t, certDir)
	})
	p.until(t, 90*time.Second, "its webhooks answering", func() bool {
		return webhookAnswers(t, workloadProbe())
	})
	createKueueQueues(t)
}

// installKueue creates what config/default installs for Kueue's
// controller, less the controller's Deployment and RBAC (it runs as a
// process with the suite's credentials) and the visibility API service
// (off): its namespace, its CRDs, its certificate Secret (empty, filled
// by Kueue), its webhook Service (ExternalName, see above) and its webhook
// configurations (their Service port Kueue's, and, as the chain's others,
// seeing the namespaces labelled chainWebhookScope only). A CRD the API
// server has already (the Workload's, from testdata/crds: the same
// v0.17.0 base) gets the conversion webhook Kueue ships it with, as
// applying Kueue's manifest does, and is otherwise left as it is: Kueue's
// certificate management injects its CA into every conversion webhook of
// its CRDs and does not start until it could.
func installKueue(t *testing.T, manifest []byte, port string) {
	t.Helper()
	ctx := context.Background()
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var crds []string
	kinds := map[string]int{}
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
		if len(u.Object) == 0 {
			continue
		}
		kinds[u.GetKind()]++
		switch u.GetKind() {
		case "Namespace", "Secret":
			require.NoError(t, k8s.Create(ctx, u))
		case "Service":
			if u.GetName() == "kueue-webhook-service" {
				createExternalNameService(t, u)
			}
		case "CustomResourceDefinition":
			setServicePort(t, u.Object, int64(p), "spec", "conversion", "webhook", "clientConfig", "service")
			createOrConvertCRD(t, u)
			crds = append(crds, u.GetName())
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			scopeKueueWebhooks(t, u, int64(p))
			require.NoError(t, k8s.Create(ctx, u))
		}
	}
	for _, k := range []string{"Namespace", "Secret", "Service", "CustomResourceDefinition", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		require.NotZero(t, kinds[k], "no %s in kueue-install.yaml", k)
	}
	for _, name := range crds {
		require.Eventually(t, func() bool { return crdEstablished(t, name) }, 30*time.Second, 100*time.Millisecond, "CRD %s not established", name)
	}
}

// createExternalNameService creates Kueue's webhook Service, named and
// placed as shipped, as an ExternalName Service for localhost.
func createExternalNameService(t *testing.T, shipped *unstructured.Unstructured) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: shipped.GetName(), Namespace: shipped.GetNamespace(), Labels: shipped.GetLabels()},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"}}
	require.NoError(t, k8s.Create(context.Background(), svc))
}

// setServicePort sets the port of the Service reference at path in obj
// (a webhook's clientConfig.service), which must be there.
func setServicePort(t *testing.T, obj map[string]any, port int64, path ...string) {
	t.Helper()
	svc, found, err := unstructured.NestedMap(obj, path...)
	require.NoError(t, err)
	if !found {
		return
	}
	require.NotEmpty(t, svc["name"], "%v: not a Service reference", path)
	svc["port"] = port
	require.NoError(t, unstructured.SetNestedMap(obj, svc, path...))
}

// createOrConvertCRD creates crd, or gives the one there its conversion.
func createOrConvertCRD(t *testing.T, crd *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	err := k8s.Create(ctx, crd.DeepCopy())
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
		return
	}
	conv, found, err := unstructured.NestedMap(crd.Object, "spec", "conversion")
	require.NoError(t, err)
	if !found {
		return
	}
	have := &unstructured.Unstructured{}
	have.SetGroupVersionKind(crd.GroupVersionKind())
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: crd.GetName()}, have))
	require.NoError(t, unstructured.SetNestedMap(have.Object, conv, "spec", "conversion"))
	require.NoError(t, k8s.Update(ctx, have))
}

// crdEstablished says whether the CRD name is established.
func crdEstablished(t *testing.T, name string) bool {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Name: name}, u))
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// scopeKueueWebhooks points every webhook of a shipped configuration at
// Kueue's port and limits it to the chain's namespaces (names as shipped:
// Kueue injects its CA into them by name).
func scopeKueueWebhooks(t *testing.T, u *unstructured.Unstructured, port int64) {
	t.Helper()
	whs, found, err := unstructured.NestedSlice(u.Object, "webhooks")
	require.NoError(t, err)
	require.True(t, found, "%s without webhooks", u.GetName())
	for i := range whs {
		w := whs[i].(map[string]any)
		setServicePort(t, w, port, "clientConfig", "service")
		w["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{chainWebhookScope: "true"}}
		whs[i] = w
	}
	require.NoError(t, unstructured.SetNestedSlice(u.Object, whs, "webhooks"))
}

// mountKueueCert plays the kubelet's Secret volume: once Kueue wrote its
// serving certificate into its Secret, the certificate and key are
// written into the webhook server's certificate directory.
func mountKueueCert(t *testing.T, dir string) bool {
	t.Helper()
	s := &corev1.Secret{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: kueueNamespace, Name: "kueue-webhook-server-cert"}, s))
	if len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 {
		return false
	}
	// The key first: the server loads the pair once the certificate is there.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key"), s.Data["tls.key"], 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), s.Data["tls.crt"], 0o600))
	return true
}

// kueueObject is a kueue.x-k8s.io/v1beta2 object.
func kueueObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("kueue.x-k8s.io/v1beta2")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// workloadProbe is a Workload the Kueue webhooks admit.
func workloadProbe() client.Object {
	return kueueObject("Workload", "", "probe", map[string]any{"queueName": "probe", "podSets": []any{map[string]any{
		"name": "main", "count": int64(1),
		"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}}})
}

// kueueQuota is the ClusterQueue's nominal quota: enough for every job of
// the Kueue scenarios.
var kueueQuota = map[string]string{
	"cpu": "96", "memory": "1Ti",
	"nvidia.com/gpu": "8", "nvidia.com/mig-1g.20gb": "32", "nvidia.com/mig-2g.20gb": "8", "nvidia.com/mig-3g.40gb": "8",
}

// createKueueQueues creates the ResourceFlavor "gpu" (marked by its
// toleration) and the ClusterQueue "gpu" that lends kueueQuota of it to
// every namespace, and waits until Kueue reports the ClusterQueue active.
func createKueueQueues(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	flavor := kueueObject("ResourceFlavor", "", "gpu", map[string]any{
		"tolerations": []any{map[string]any{"key": kueueFlavorToleration, "operator": "Exists", "effect": "NoSchedule"}}})
	require.NoError(t, k8s.Create(ctx, flavor))
	var covered, resources []any
	for _, r := range []string{"cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.20gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"} {
		covered = append(covered, r)
		resources = append(resources, map[string]any{"name": r, "nominalQuota": kueueQuota[r]})
	}
	cq := kueueObject("ClusterQueue", "", "gpu", map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{"coveredResources": covered,
			"flavors": []any{map[string]any{"name": "gpu", "resources": resources}}}},
	})
	require.NoError(t, k8s.Create(ctx, cq))
	require.Eventually(t, func() bool {
		f := kueueObject("ClusterQueue", "", "gpu", nil)
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(f), f))
		return kueueCondition(f, "Active") == "True"
	}, 30*time.Second, 100*time.Millisecond, "Kueue did not make ClusterQueue gpu active")
}

// createLocalQueue creates the LocalQueue "gpu" in ns.
func createLocalQueue(t *testing.T, ns string) {
	t.Helper()
	require.NoError(t, k8s.Create(context.Background(), kueueObject("LocalQueue", ns, "gpu", map[string]any{"clusterQueue": "gpu"})))
}

// kueueCondition is the status of condition typ of a Kueue object ("" when
// it has none).
func kueueCondition(u *unstructured.Unstructured, typ string) string {
	c := kueueConditionOf(u, typ)
	if c == nil {
		return ""
	}
	s, _ := c["status"].(string)
	return s
}

func kueueConditionOf(u *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			return m
		}
	}
	return nil
}

// kueueWorkloadOf waits until Kueue made the Workload of job (in its
// namespace, controlled by it) and returns it.
func kueueWorkloadOf(t *testing.T, job client.Object) *unstructured.Unstructured {
	t.Helper()
	var w *unstructured.Unstructured
	require.Eventually(t, func() bool {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("kueue.x-k8s.io/v1beta2")
		list.SetKind("WorkloadList")
		require.NoError(t, k8s.List(context.Background(), list, client.InNamespace(job.GetNamespace())))
		for i := range list.Items {
			if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.UID == job.GetUID() {
				w = &list.Items[i]
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "Kueue made no Workload for %s", job.GetName())
	return w
}

// workloadAdmitted reads whether Kueue admitted w.
func workloadAdmitted(t *testing.T, w *unstructured.Unstructured) bool {
	t.Helper()
	f := kueueObject("Workload", w.GetNamespace(), w.GetName(), nil)
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(f), f))
	return kueueCondition(f, "Admitted") == "True"
}

// fieldManagers lists the managers that own field (a managedFields path
// such as "f:spec", "f:suspend") of o.
func fieldManagers(t *testing.T, o client.Object, path ...string) []string {
	t.Helper()
	var out []string
	for _, mf := range o.GetManagedFields() {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		require.NoError(t, json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields))
		cur, ok := any(fields), true
		for _, p := range path {
			var m map[string]any
			if m, ok = cur.(map[string]any); !ok {
				break
			}
			if cur, ok = m[p]; !ok {
				break
			}
		}
		if ok {
			out = append(out, mf.Manager)
		}
	}
	return out
}

// TrainJobs queued in Kueue (label kueue.x-k8s.io/queue-name), through
// the real chain with the real Kueue: Kueue's webhook suspends them at
// creation, Kueue admits them by adding its runtime patch and resuming
// them, and the Trainer applies their JobSet again, resumed.
//   - A TrainJob whose node pods ask a MIG shape no node offers: the
//     Pending watchdog deactivates its Workload within 15 s of the pods
//     being unschedulable and leaves spec.suspend to Kueue, which evicts
//     the Workload and suspends the TrainJob itself; the Trainer and the
//     JobSet and Job controllers free the GPUs.
//   - A TrainJob on one GPU's MIG instances passes its gate after Kueue
//     admitted it: the JobSet the Trainer applied again (suspended ->
//     resumed, Kueue's patch in its template, through JobSet's validating
//     webhook) still gates its rank pods.
func TestE2EChainKueue(t *testing.T) {
	start := time.Now()
	realChain(t)
	startKueue(t)
	t.Logf("chain and Kueue up in %s", time.Since(start).Round(time.Millisecond))
	// The nodes first, as in a cluster: a node the controller sees appear
	// holds hopeless verdicts for a while (a device plugin registering).
	a100All1g20(t, "a100-chain-kueue")
	gpuNode(t, "h100-chain-kueue", "nvidia.com/mig-3g.40gb", 3)
	realNode(t, "h100-chain-kueue", map[string]int64{"nvidia.com/mig-3g.40gb": 3, "nvidia.com/gpu": 2}, nil)
	c, gateURL := webhookController(t, "rankgate-tls-chain-kueue", controller.Options{})
	createChainRuntime(t)
	queued := map[string]string{controller.LabelKueueQueue: "gpu"}
	t.Run("PendingShapeDeactivatesWorkload", func(t *testing.T) { kueuePendingShape(t, c, queued) })
	t.Run("AdmittedPasses", func(t *testing.T) { kueueAdmittedPass(t, gateURL, queued) })
	require.NotContains(t, c.logs.String(), "forbidden")
}

func kueuePendingShape(t *testing.T, c *ctrl, queued map[string]string) {
	ns := chainNamespace(t, "e2e-chain-kueue-shape", true)
	createLocalQueue(t, ns)
	kueueSeesNamespace(t, ns, queued)
	tj := chainTrainJob(t, ns, "shape", 2, "nvidia.com/mig-2g.20gb", queued)
	key := client.ObjectKeyFromObject(tj)
	require.True(t, ptr.Deref(tj.Spec.Suspend, false), "Kueue's webhook did not suspend the queued TrainJob")
	w := kueueWorkloadOf(t, tj)
	require.Eventually(t, func() bool { return workloadAdmitted(t, w) && !isSuspended(t, tj) },
		30*time.Second, 100*time.Millisecond, "Kueue did not admit the TrainJob")
	js := &jobsetapi.JobSet{}
	require.Eventually(t, func() bool { return k8s.Get(context.Background(), key, js) == nil },
		60*time.Second, 100*time.Millisecond, "the Trainer made no JobSet")
	completeInitializer(t, ns, js.Name)
	var pods []corev1.Pod
	require.Eventually(t, func() bool { pods = stepPods(t, ns, js.Name, "node"); return len(pods) == 2 },
		60*time.Second, 100*time.Millisecond, "the Job controller made no node pods")
	for i := range pods {
		require.True(t, hasGateInit(&pods[i]), "node pod %s was not gated", pods[i].Name)
		waitUnschedulable(t, &pods[i])
	}
	unschedulableAt := time.Now()
	require.Eventually(t, func() bool { return !workloadActive(t, w) }, 15*time.Second, 100*time.Millisecond,
		"the Workload was not deactivated within 15 s of the pods being unschedulable")
	t.Logf("Workload %s deactivated %s after the pods were unschedulable", w.GetName(), time.Since(unschedulableAt).Round(time.Millisecond))
	a := appliedVerdict(t, tj)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
	require.Empty(t, firstReportAt(t, tj), "a rank reported")
	ev := jobEvents(t, tj)["PendingFailed"]
	require.Len(t, ev, 1)
	require.Contains(t, ev[0], "Kueue Workload "+w.GetName()+" deactivated")

	// Kueue takes it from there: it evicts the Workload and suspends the
	// TrainJob itself (the last writer of spec.suspend is Kueue).
	require.Eventually(t, func() bool {
		f := kueueObject("Workload", w.GetNamespace(), w.GetName(), nil)
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(f), f))
		ev := kueueConditionOf(f, "Evicted")
		return ev != nil && ev["status"] == "True" && ev["reason"] == "Deactivated"
	}, 30*time.Second, 100*time.Millisecond, "Kueue did not evict the deactivated Workload")
	require.Eventually(t, func() bool { return isSuspended(t, tj) }, 30*time.Second, 100*time.Millisecond,
		"Kueue did not suspend the TrainJob of its deactivated Workload")
	fresh := &trainjob.TrainJob{}
	require.NoError(t, k8s.Get(context.Background(), key, fresh))
	managers := fieldManagers(t, fresh, "f:spec", "f:suspend")
	t.Logf("spec.suspend managed by %v", managers)
	require.Equal(t, []string{"kueue"}, managers, "spec.suspend of a Kueue-managed TrainJob was written by another than Kueue")
	// The real chain frees the GPUs: the Trainer suspends the JobSet, the
	// JobSet controller its Jobs, and the Job controller deletes the pods.
	require.Eventually(t, func() bool { return jobSetSuspended(t, js) }, 30*time.Second, 100*time.Millisecond,
		"the Trainer did not suspend the JobSet")
	require.Eventually(t, func() bool {
		for _, p := range stepPods(t, ns, js.Name, "node") {
			if p.DeletionTimestamp == nil {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the node pods of the deactivated TrainJob were not deleted")
	// Not re-gated while the Workload is inactive.
	time.Sleep(time.Second)
	require.Equal(t, "fail", jobAnnotations(t, tj)[contract.AnnotationVerdict])
	require.False(t, workloadActive(t, w))
	require.NotContains(t, c.logs.String(), "orbidden")
}

func kueueAdmittedPass(t *testing.T, gateURL string, queued map[string]string) {
	ns := chainNamespace(t, "e2e-chain-kueue-pass", true)
	ctx := context.Background()
	// Its LocalQueue is created once the Trainer made the JobSet,
	// suspended: Kueue admits the TrainJob after that.
	kueueSeesNamespace(t, ns, queued)
	tj := chainTrainJob(t, ns, "same-gpu", 2, "nvidia.com/mig-3g.40gb", queued)
	key := client.ObjectKeyFromObject(tj)
	require.True(t, ptr.Deref(tj.Spec.Suspend, false), "Kueue's webhook did not suspend the queued TrainJob")
	w := kueueWorkloadOf(t, tj)
	js := &jobsetapi.JobSet{}
	require.Eventually(t, func() bool { return k8s.Get(ctx, key, js) == nil }, 60*time.Second, 100*time.Millisecond, "the Trainer made no JobSet")
	require.True(t, ptr.Deref(js.Spec.Suspend, false), "the JobSet of a suspended TrainJob runs")
	tmpl := replicatedPodTemplate(t, js, "node")
	require.Equal(t, contract.ValueInjectRanks, tmpl.Labels[contract.LabelInject], "the node template was not gated at creation")
	gen := js.Generation
	require.False(t, workloadAdmitted(t, w))
	requireJobSetUpdatesValidated(t, ns)

	createLocalQueue(t, ns)
	require.Eventually(t, func() bool { return workloadAdmitted(t, w) && !isSuspended(t, tj) },
		30*time.Second, 100*time.Millisecond, "Kueue did not admit the TrainJob")
	// The Trainer applies the JobSet again: resumed, with Kueue's patch.
	require.Eventually(t, func() bool {
		require.NoError(t, k8s.Get(ctx, key, js))
		return !ptr.Deref(js.Spec.Suspend, true) && hasKueueToleration(replicatedPodTemplate(t, js, "node").Spec)
	}, 30*time.Second, 100*time.Millisecond, "the Trainer did not resume the JobSet with Kueue's patch")
	require.Greater(t, js.Generation, gen)
	tmpl = replicatedPodTemplate(t, js, "node")
	require.Equal(t, contract.ValueInjectRanks, tmpl.Labels[contract.LabelInject], "the Trainer's apply of the resumed JobSet dropped the gate's label")
	require.Equal(t, js.Name, tmpl.Labels[controller.LabelJobName])

	completeInitializer(t, ns, js.Name)
	var ranks []*rank
	for i, p := range boundNodePods(t, ns, js.Name, 2) {
		require.True(t, hasGateInit(p), "node pod %s was not gated", p.Name)
		require.True(t, hasKueueToleration(p.Spec), "node pod %s lacks Kueue's patch", p.Name)
		ranks = append(ranks, startRank(t, gateURL, p, token(t, p, gate.Audience), "--ca-file", namespaceCA(t, ns),
			"--sample", "h100-mig", "--devices", []string{"1:0", "1:1"}[i]))
	}
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, time.Minute), joinRanks(ranks))
	}
	require.Equal(t, "pass", appliedVerdict(t, tj)[contract.AnnotationVerdict])
	require.True(t, workloadActive(t, w))
	require.False(t, isSuspended(t, tj))
	g := gangOf(t, tj)
	require.NotNil(t, g)
	require.EqualValues(t, 2, g.Spec.ExpectedRanks, "the initializer was counted as a rank")
}

// replicatedPodTemplate is the pod template of js's ReplicatedJob name.
func replicatedPodTemplate(t *testing.T, js *jobsetapi.JobSet, name string) corev1.PodTemplateSpec {
	t.Helper()
	for _, rj := range js.Spec.ReplicatedJobs {
		if rj.Name == name {
			return rj.Template.Spec.Template
		}
	}
	t.Fatalf("JobSet %s has no ReplicatedJob %s", js.Name, name)
	return corev1.PodTemplateSpec{}
}

// hasKueueToleration: the pod spec carries the toleration of Kueue's
// ResourceFlavor (Kueue's admission patch).
func hasKueueToleration(s corev1.PodSpec) bool {
	for _, tol := range s.Tolerations {
		if tol.Key == kueueFlavorToleration {
			return true
		}
	}
	return false
}

// requireJobSetUpdatesValidated: JobSet's own validating webhook (as its
// manifest ships it, failurePolicy Fail) sees updates of JobSets in ns,
// so a JobSet update the API server took was accepted by it.
func requireJobSetUpdatesValidated(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	o := &corev1.Namespace{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: ns}, o))
	v := &admissionv1.ValidatingWebhookConfiguration{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "jobset-validating-webhook-configuration"}, v))
	for _, w := range v.Webhooks {
		sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		require.NoError(t, err)
		if ptr.Deref(w.FailurePolicy, "") != admissionv1.Fail || !sel.Matches(labels.Set(o.Labels)) {
			continue
		}
		for _, r := range w.Rules {
			if slices.Contains(r.APIGroups, "jobset.x-k8s.io") && slices.Contains(r.Resources, "jobsets") &&
				slices.Contains(r.Operations, admissionv1.Update) {
				return
			}
		}
	}
	t.Fatalf("no JobSet validating webhook sees JobSet updates in %s", ns)
}

// kueueSeesNamespace waits until Kueue's webhook manages queued TrainJobs
// of the new namespace ns (its namespace cache has caught up): a dry-run
// TrainJob comes back suspended.
func kueueSeesNamespace(t *testing.T, ns string, queued map[string]string) {
	t.Helper()
	require.Eventually(t, func() bool {
		tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: queued},
			Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: chainRuntime}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(1))}}}
		return k8s.Create(context.Background(), tj, client.DryRunAll) == nil && ptr.Deref(tj.Spec.Suspend, false)
	}, 20*time.Second, 100*time.Millisecond, "Kueue's webhook does not manage the queued TrainJobs of namespace %s", ns)
}
