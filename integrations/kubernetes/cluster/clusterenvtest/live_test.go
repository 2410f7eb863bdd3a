// Package clusterenvtest runs live diagnose against a real kube-apiserver
// and etcd (integrations/kubernetes/envtestutil, binaries from
// `make test-binaries`) with the real Kubeflow CRDs. It is its own package
// so that the cluster package's unit tests stay light.
package clusterenvtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rankgate/rankgate/cmd/rankgate/app"
	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

func a100Labels() map[string]string {
	return map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "81920",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
		"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success",
		"nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/mig-1g.10gb.memory": "9856", "nvidia.com/mig-1g.10gb.multiprocessors": "14",
		"nvidia.com/cuda.driver-version.full": "550.54.15",
	}
}

// TestLiveDiagnoseOnAPIServer: nodes, pods (bound, pending, finished) and a
// PyTorchJob stored in a real API server; diagnose reads them through
// client-go with small pages and the server-side phase field selector.
func TestLiveDiagnoseOnAPIServer(t *testing.T) {
	cfg, _ := envtestutil.Start(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	for i := 1; i <= 3; i++ {
		n := clustertest.MakeNode(fmt.Sprintf("a100-%d", i)).Labels(a100Labels()).Allocatable("nvidia.com/mig-1g.10gb", "7").Obj()
		// Nodes keep their status on create. The API server taints new
		// nodes not-ready; with no node controller here, lift it as the
		// controller would once the kubelet reports Ready.
		n, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
		require.Equal(t, "node.kubernetes.io/not-ready", n.Spec.Taints[0].Key)
		n.Spec.Taints = nil
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	for _, ns := range []string{"ml", "other"} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// Other work holds 6 of 7 instances on a100-1 and a100-2, all of a100-3.
	busy := map[string]int{"a100-1": 6, "a100-2": 6, "a100-3": 7}
	for node, n := range busy {
		for k := 0; k < n; k++ {
			p := clustertest.MakePod(fmt.Sprintf("%s-busy-%d", node, k), "other").Request("nvidia.com/mig-1g.10gb", "1").Node(node).Obj()
			_, err := cs.CoreV1().Pods("other").Create(ctx, p, metav1.CreateOptions{})
			require.NoError(t, err)
		}
	}
	// A finished pod on a100-3 holds nothing: the field selector drops it.
	done := clustertest.MakePod("finished", "other").Request("nvidia.com/mig-1g.10gb", "7").Node("a100-3").Obj()
	done, err = cs.CoreV1().Pods("other").Create(ctx, done, metav1.CreateOptions{})
	require.NoError(t, err)
	done.Status.Phase = corev1.PodSucceeded
	_, err = cs.CoreV1().Pods("other").UpdateStatus(ctx, done, metav1.UpdateOptions{})
	require.NoError(t, err)

	// The job: 4 workers x 1 instance; 2 free instances in the cluster.
	c := envtestutil.NewClient(t, cfg)
	job := kubeflowtest.MakePyTorchJob("llm", "ml").Workers(4).Request("nvidia.com/mig-1g.10gb", "1").Obj()
	require.NoError(t, c.Create(ctx, job))
	for i := 0; i < 4; i++ {
		p := clustertest.MakePod(fmt.Sprintf("llm-worker-%d", i), "ml").OwnedBy("kubeflow.org/v1", "PyTorchJob", "llm", "Worker").
			Request("nvidia.com/mig-1g.10gb", "1").Obj()
		p.OwnerReferences[0].UID = job.UID
		p, err := cs.CoreV1().Pods("ml").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/3 nodes are available: 3 Insufficient nvidia.com/mig-1g.10gb."}}
		_, err = cs.CoreV1().Pods("ml").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	live, err := cluster.NewLive(cfg)
	require.NoError(t, err)
	live.PageSize = 4 // several pages of nodes and pods
	b := cluster.NewBuilder()
	require.NoError(t, live.LoadCluster(ctx, b))
	j, err := live.Job(ctx, "ml", "llm", "")
	require.NoError(t, err)
	require.Equal(t, "PyTorchJob", j.Kind())
	require.NoError(t, b.AddJob(j))
	w, err := b.WorkloadFor(j)
	require.NoError(t, err)
	require.Len(t, w.PodSets[0].Pods, 4)
	e := schedule.New()
	res := e.Diagnose(e.NewCluster(b.Nodes()), w)
	require.Equal(t, verdict.RuleWaitCapacity, res.Rule, res.Report.Reason(0))
	f := res.Report.Findings
	require.Contains(t, fmt.Sprint(f), "2 of 4 pending pods fit now")
	require.Contains(t, fmt.Sprint(f), "a100-3 (7/7 nvidia.com/mig-1g.10gb in use)")

	// The same through the CLI with a kubeconfig.
	kubeconfig := writeKubeconfig(t, cfg)
	var out, errb bytes.Buffer
	code := app.Run(ctx, app.Streams{In: &bytes.Buffer{}, Out: &out, Err: &errb},
		[]string{"diagnose", "pod", "ml/llm-worker-2", "--kubeconfig", kubeconfig, "-o", "json"})
	require.Equal(t, verdict.ExitPass, code, errb.String())
	var r verdict.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), out.String())
	require.Equal(t, "PyTorchJob ml/llm", r.Subject)
	require.Equal(t, verdict.VerdictWarn, r.Verdict)

	code = app.Run(ctx, app.Streams{In: &bytes.Buffer{}, Out: &out, Err: &errb},
		[]string{"diagnose", "job", "ml/nope", "--kubeconfig", kubeconfig})
	require.Equal(t, verdict.ExitUsage, code)

	// An MPIJob through the dynamic client, judged too large.
	mj := kubeflowtest.MakeMPIJob("allreduce", "ml").Workers(30).WorkerRequest("nvidia.com/mig-1g.10gb", "1").Obj()
	require.NoError(t, c.Create(ctx, mj))
	got, err := live.Job(ctx, "ml", "allreduce", "mpijob")
	require.NoError(t, err)
	require.Equal(t, kubeflow.MPIJobGVK, got.GVK())
	mw, err := b.WorkloadFor(got)
	require.NoError(t, err)
	require.Equal(t, verdict.RuleGangTooLarge, e.Diagnose(e.NewCluster(b.Nodes()), mw).Rule)

	// An MPIJob with runLauncherAsWorker and its pods as mpi-operator
	// v0.8.0 creates them: job-role labels, worker indexes shifted by one,
	// the launcher owned by the batch Job <job>-launcher. Worker 0 runs on
	// a100-1 (its last free instance); the launcher and worker 1 pend.
	ring := kubeflowtest.MakeMPIJob("ring", "ml").RunLauncherAsWorker().Workers(2).
		WorkerRequest("nvidia.com/mig-1g.10gb", "1").LauncherRequest("nvidia.com/mig-1g.10gb", "1").Obj()
	require.NoError(t, c.Create(ctx, ring))
	ringJob, err := kubeflow.FromObject(ring)
	require.NoError(t, err)
	for i, pw := range clustertest.OperatorPods(ringJob) {
		if i == 1 {
			pw.Node("a100-1")
		}
		_, err := cs.CoreV1().Pods("ml").Create(ctx, pw.Obj(), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	b = cluster.NewBuilder()
	require.NoError(t, live.LoadCluster(ctx, b))
	launcher, err := live.Pod(ctx, "ml", "ring-launcher-x7k2p")
	require.NoError(t, err)
	rj, ok, err := live.JobOfPod(ctx, launcher)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, kubeflow.MPIJobGVK, rj.GVK())
	require.NoError(t, b.AddJob(rj))
	rw, err := b.WorkloadFor(rj)
	require.NoError(t, err)
	require.Equal(t, []string{"ml/ring-launcher-x7k2p"}, rw.PodSets[0].Pods)
	require.Equal(t, 1, rw.PodSets[1].Bound)
	require.Equal(t, []string{"ml/ring-worker-1"}, rw.PodSets[1].Pods)

	out.Reset()
	errb.Reset()
	code = app.Run(ctx, app.Streams{In: &bytes.Buffer{}, Out: &out, Err: &errb},
		[]string{"diagnose", "pod", "ml/ring-launcher-x7k2p", "--kubeconfig", kubeconfig, "-o", "json"})
	require.Contains(t, []int{verdict.ExitPass, verdict.ExitFail}, code, errb.String())
	r = verdict.Report{}
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), out.String())
	require.Equal(t, "MPIJob ml/ring", r.Subject)
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, p))
	return p
}
