package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// asNodeRuntime is a ClusterTrainingRuntime shaped as the Trainer's own
// deepspeed-distributed (v2.3.0): MPI, the launcher runs as a node
// (runLauncherAsNode) and starts once the node step is ready.
const asNodeRuntime = "deepspeed-distributed-e2e"

func createAsNodeRuntime(t *testing.T) {
	t.Helper()
	container := func() []any {
		return []any{map[string]any{"name": "node", "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime",
			"command": []any{"/usr/sbin/sshd"}, "args": []any{"-De", "-f", "/home/mpiuser/.sshd_config"}}}
	}
	podSpec := func() map[string]any {
		return map[string]any{"schedulerName": testScheduler, "serviceAccountName": serviceAccount, "containers": container()}
	}
	node := map[string]any{"name": "node", "template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": podSpec()}}}}
	launcher := map[string]any{"name": "launcher", "dependsOn": []any{map[string]any{"name": "node", "status": "Ready"}},
		"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{jobset.LabelTrainJobAncestor: jobset.AncestorTrainer}},
			"spec": map[string]any{"template": map[string]any{"spec": podSpec()}}}}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
		"metadata": map[string]any{"name": asNodeRuntime, "labels": map[string]any{"trainer.kubeflow.org/framework": "deepspeed"}},
		"spec": map[string]any{
			"mlPolicy": map[string]any{"numNodes": int64(1), "mpi": map[string]any{"numProcPerNode": int64(1), "mpiImplementation": "OpenMPI",
				"sshAuthMountPath": "/home/mpiuser/.ssh", "runLauncherAsNode": true}},
			"template": map[string]any{"spec": map[string]any{"network": map[string]any{"publishNotReadyAddresses": true},
				"successPolicy":  map[string]any{"operator": "All", "targetReplicatedJobs": []any{"launcher"}},
				"replicatedJobs": []any{node, launcher}}},
		},
	}}
	require.NoError(t, k8s.Create(context.Background(), u))
}

// A TrainJob of 3 nodes on a runtime that runs its MPI launcher as a node
// (the Trainer's DeepSpeed and MLX runtimes), on the real chain: the
// webhook reads the runtime and says so in its runtime patch; the Trainer
// makes 2 node pods and a launcher that starts once they are ready. The
// gang is the 2 node pods, gated as they are made: they report, pass and
// start; the launcher, no rank, is not waited for (it could not be: it is
// made after the node pods are ready).
func TestE2EChainTrainJobLauncherAsNode(t *testing.T) {
	realChain(t)
	_, gateURL := webhookController(t, "rankgate-tls-chain-mpi", controller.Options{})
	createAsNodeRuntime(t)
	gpuNode(t, "h100-chain-mpi", "nvidia.com/mig-3g.40gb", 3)
	realNode(t, "h100-chain-mpi", map[string]int64{"nvidia.com/mig-3g.40gb": 3, "nvidia.com/gpu": 2}, nil)
	ns := chainNamespace(t, "e2e-chain-mpi", true)

	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "ds", Namespace: ns},
		Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: asNodeRuntime}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(3)),
			ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1")}}}}}
	require.NoError(t, k8s.Create(context.Background(), tj))
	require.Len(t, tj.Spec.RuntimePatches, 1)
	require.Equal(t, map[string]string{contract.KeyGate: "enabled", contract.LabelMPILauncherIsNode: "true"},
		tj.Spec.RuntimePatches[0].TrainingRuntimeSpec.Template.Metadata.Labels)

	js := &jobsetapi.JobSet{}
	require.Eventually(t, func() bool { return k8s.Get(context.Background(), client.ObjectKeyFromObject(tj), js) == nil },
		60*time.Second, 100*time.Millisecond, "the Trainer made no JobSet")
	require.Equal(t, "true", js.Labels[contract.LabelMPILauncherIsNode])
	require.NotContains(t, replicatedPodTemplate(t, js, "launcher").Labels, contract.LabelInject, "the launcher is no rank")

	var ranks []*rank
	for i, p := range boundNodePods(t, ns, js.Name, 2) {
		require.True(t, hasGateInit(p), "node pod %s was not gated", p.Name)
		ranks = append(ranks, startRank(t, gateURL, p, token(t, p, gate.Audience), "--ca-file", namespaceCA(t, ns),
			"--sample", "h100-mig", "--devices", []string{"1:0", "1:1"}[i]))
	}
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, time.Minute), joinRanks(ranks))
	}
	require.Equal(t, "pass", appliedVerdict(t, tj)[contract.AnnotationVerdict])
	g := gangOf(t, tj)
	require.NotNil(t, g)
	require.EqualValues(t, 2, g.Spec.ExpectedRanks, "numNodes 3, the launcher one of them")
	require.Empty(t, stepPods(t, ns, js.Name, "launcher"), "the launcher starts once the node pods are ready")
	require.False(t, isSuspended(t, tj))
}
