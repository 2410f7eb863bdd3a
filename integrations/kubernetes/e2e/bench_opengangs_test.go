package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// envCount reads a count that may be 0 (none); unset or unreadable is def.
func envCount(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

func TestEnvCount(t *testing.T) {
	t.Setenv("RANKGATE_TEST_COUNT", "0")
	require.Equal(t, 0, envCount("RANKGATE_TEST_COUNT", 500), "0 means none")
	t.Setenv("RANKGATE_TEST_COUNT", "7")
	require.Equal(t, 7, envCount("RANKGATE_TEST_COUNT", 500))
	t.Setenv("RANKGATE_TEST_COUNT", "")
	require.Equal(t, 500, envCount("RANKGATE_TEST_COUNT", 500))
	t.Setenv("RANKGATE_TEST_COUNT", "-1")
	require.Equal(t, 500, envCount("RANKGATE_TEST_COUNT", 500))
}

// openGangLoad is a gated job whose rank pods are bound to nodes; all ranks
// but the last report through the gate, so its gang stays open.
type openGangLoad struct {
	pods   []*corev1.Pod
	tokens []string // of the reporting ranks
}

// createOpenGangs creates n gated PyTorchJobs of per bound rank pods (the
// memory bench's realistic pod specs, on nodes first, first+1, ... modulo
// nodes) and a pod-bound gate token for every rank but the last.
func createOpenGangs(t *testing.T, ns string, n, per, nodes, first int) []openGangLoad {
	ctx := context.Background()
	gangs := make([]openGangLoad, n)
	require.NoError(t, parallel(n, 32, func(j int) error {
		job := &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gang-%04d", j), Namespace: ns},
			Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
				kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: corev1.PodTemplateSpec{Spec: benchPodSpec(0, "")}},
				kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(per - 1)), Template: corev1.PodTemplateSpec{Spec: benchPodSpec(0, "")}},
			}}}
		if err := k8s.Create(ctx, job); err != nil {
			return err
		}
		for i := 0; i < per; i++ {
			typ, idx := "worker", i-1
			if i == 0 {
				typ, idx = "master", 0
			}
			p := benchPod(job, typ, idx, "")
			p.Spec = benchPodSpec(j, fmt.Sprintf("gpu-node-%04d", (first+j*per+i)%nodes))
			p.Annotations = map[string]string{"sidecar.istio.io/inject": "false", "kubectl.kubernetes.io/default-container": "pytorch",
				"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
			if err := k8s.Create(ctx, p); err != nil {
				return err
			}
			gangs[j].pods = append(gangs[j].pods, p)
			if i == per-1 {
				break // the missing rank
			}
			tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, serviceAccount, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
				Audiences: []string{gate.Audience}, ExpirationSeconds: ptr.To(int64(3600)),
				BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			gangs[j].tokens = append(gangs[j].tokens, tr.Status.Token)
		}
		return nil
	}))
	return gangs
}

// fullRankReport is what `rankgate init` sends for an 8-GPU node with two
// findings (about 2 KB of JSON): the rank reports an open gang holds.
func fullRankReport(node string) verdict.Report {
	var devs []verdict.DeviceSummary
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("GPU-6f1c2a7e-59d1-4b0a-%s-%012d", node[len(node)-4:], i)
		devs = append(devs, verdict.DeviceSummary{ID: id, Kind: "gpu", GPU: i, GPUUUID: id, Profile: "full", SMs: 132, MemoryMiB: 81559})
	}
	r := verdict.NewReport("node "+node, []verdict.Finding{
		{Rule: verdict.RuleProfileMismatch, Severity: verdict.SeverityWarn, Message: "GPU 3 runs profile full, the job asks for 3g.40gb",
			Remediation: "reconfigure MIG on the node or change the job's resource", Devices: []string{devs[3].ID}},
		{Rule: verdict.RuleMIGParentAllocated, Severity: verdict.SeverityInfo, Message: "GPU 5 is allocated whole", Devices: []string{devs[5].ID}},
	})
	r.Devices = devs
	return r
}

// reportOpenGangs sends the reports of every open gang's reporting ranks
// to the gate at url, without waiting for a verdict (wait 0), each gang
// from its own loopback address (the gate bounds TokenReviews per client
// address), and checks that each stays undecided.
func reportOpenGangs(t *testing.T, url, ns string, gangs []openGangLoad) {
	pool := caPool(t, certs.CAFile)
	ctx := context.Background()
	require.NoError(t, parallel(len(gangs), 16, func(j int) error {
		tr := sourceTransport(pool, sourceIP(3, j))
		defer tr.CloseIdleConnections()
		for i, tok := range gangs[j].tokens {
			p := gangs[j].pods[i]
			cl, err := gate.NewClient(gate.ClientOptions{URL: url, Token: tok, Transport: tr})
			if err != nil {
				return err
			}
			req := &gate.ReportRequest{Namespace: ns, Pod: p.Name, Node: p.Spec.NodeName, DriverVersion: "580.65.06", CUDADriverVersion: "13.0",
				Report: fullRankReport(p.Spec.NodeName)}
			var r *gate.Response
			for try := 0; ; try++ {
				if r, err = cl.Report(ctx, req, 0); err == nil || try == 5 {
					break
				}
				time.Sleep(time.Second) // a TokenReview refused for load: again
			}
			if err != nil {
				return fmt.Errorf("gang %d rank %d: %w", j, i, err)
			}
			if r.State == gate.StateDecided {
				return fmt.Errorf("gang %d rank %d: decided %s", j, i, r.Verdict.Verdict)
			}
		}
		return nil
	}))
}

// gangsReported counts the Gangs in ns whose status shows n reported ranks.
func gangsReported(t *testing.T, ns string, n int32) int {
	list := &v1alpha1.GangList{}
	require.NoError(t, k8s.List(context.Background(), list, client.InNamespace(ns)))
	c := 0
	for _, g := range list.Items {
		if g.Status.ReportedRanks == n {
			c++
		}
	}
	return c
}
