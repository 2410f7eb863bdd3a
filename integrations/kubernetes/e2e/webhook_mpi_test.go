package e2e

import (
	"context"
	"testing"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/launchergate"
)

// gpuMPIJob is an MPIJob as a user writes it: a launcher that runs mpirun
// and no GPUs, workers with GPUs, no rankgate YAML.
func gpuMPIJob(ns, name string, workers int32) *mpiv2beta1.MPIJob {
	launcher := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "launcher", Image: "mpioperator/openmpi:0.8.0",
		Command: []string{"mpirun"}, Args: []string{"-np", "8", "python", "train.py"},
	}}}}
	worker := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "worker", Image: "nvcr.io/nvidia/pytorch:25.10-py3",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}},
	}}}}
	return &mpiv2beta1.MPIJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: mpiv2beta1.MPIJobSpec{SlotsPerWorker: ptr.To(int32(4)), MPIReplicaSpecs: map[mpiv2beta1.MPIReplicaType]*mpiv2beta1.ReplicaSpec{
			mpiv2beta1.MPIReplicaTypeLauncher: {Replicas: ptr.To(int32(1)), Template: launcher},
			mpiv2beta1.MPIReplicaTypeWorker:   {Replicas: ptr.To(workers), Template: worker},
		}},
	}
}

// createAgain creates a copy of j's spec under another name with strict
// field validation, as `kubectl apply` of the mutated output would: every
// field the webhook added must be known to the MPIJob CRD's schema, and
// the webhook must change nothing.
func createAgain(t *testing.T, j *mpiv2beta1.MPIJob, name string) *mpiv2beta1.MPIJob {
	t.Helper()
	again := &mpiv2beta1.MPIJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: j.Namespace, Labels: j.Labels}, Spec: *j.Spec.DeepCopy()}
	require.NoError(t, k8s.Create(context.Background(), again, client.FieldValidation(metav1.FieldValidationStrict)))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), again) })
	require.True(t, equality.Semantic.DeepEqual(j.Spec, again.Spec), "a second apply changed the MPIJob:\nfirst:  %+v\nsecond: %+v", j.Spec, again.Spec)
	return again
}

// (m) for MPIJob: the controller's mutating webhook adds the rank init
// container to the Worker template (GPUs) exactly once and leaves the
// Launcher (no GPUs) as it is; the API server and the mpi-operator CRD
// schema keep what was added (read back, and a strict second create of the
// result); a second apply and an update change nothing. With
// rankgate.io/launcher-gate: enabled the Launcher is wrapped once:
// init container rankgate-copy, command `rankgate launch --gang ... --
// mpirun ...`.
func TestE2EWebhookMPIJob(t *testing.T) {
	webhookController(t, "rankgate-tls-mpi", controller.Options{})
	ctx := context.Background()
	ns := newNamespace(t, "e2e-wh-mpi", true)

	t.Run("rank init container in the workers only", func(t *testing.T) {
		j := gpuMPIJob(ns, "allreduce", 2)
		require.NoError(t, k8s.Create(ctx, j))
		t.Cleanup(func() { _ = k8s.Delete(ctx, j) })
		got := &mpiv2beta1.MPIJob{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(j), got))
		w := got.Spec.MPIReplicaSpecs[mpiv2beta1.MPIReplicaTypeWorker].Template.Spec
		require.Equal(t, 1, countInit(w))
		require.Len(t, w.InitContainers, 1)
		ic := w.InitContainers[0]
		require.Equal(t, initImage, ic.Image)
		require.Equal(t, []string{webhook.NodeBinary}, ic.Command)
		require.Equal(t, "init", ic.Args[0])
		require.Contains(t, ic.Args, "--termination-log=/dev/termination-log")
		require.Equal(t, "4", ic.Resources.Limits.Name("nvidia.com/gpu", "").String(), "the worker's GPUs")
		require.Len(t, ic.Env, 3, "the downward-API identity")
		require.Len(t, w.Volumes, 3)
		var audience string
		for _, v := range w.Volumes {
			if v.Projected != nil {
				audience = v.Projected.Sources[0].ServiceAccountToken.Audience
			}
		}
		require.Equal(t, "rankgate", audience, "the projected token survived the CRD schema")

		l := got.Spec.MPIReplicaSpecs[mpiv2beta1.MPIReplicaTypeLauncher].Template.Spec
		require.Empty(t, l.InitContainers, "a launcher without GPUs is not a rank")
		require.Empty(t, l.Volumes)
		require.Equal(t, []string{"mpirun"}, l.Containers[0].Command, "no launcher gate unless asked")

		// An update passes the webhook again: nothing changes.
		before := got.Spec.DeepCopy()
		got.Labels = map[string]string{"team": "hpc"}
		require.NoError(t, k8s.Update(ctx, got))
		require.True(t, equality.Semantic.DeepEqual(before, &got.Spec), "an update changed the templates")
		createAgain(t, got, "allreduce-again")
	})

	t.Run("launcher gate wraps the launcher once", func(t *testing.T) {
		j := gpuMPIJob(ns, "gated", 2)
		j.Labels = map[string]string{contract.KeyLauncherGate: "enabled"}
		require.NoError(t, k8s.Create(ctx, j))
		t.Cleanup(func() { _ = k8s.Delete(ctx, j) })
		got := &mpiv2beta1.MPIJob{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(j), got))

		require.Equal(t, 1, countInit(got.Spec.MPIReplicaSpecs[mpiv2beta1.MPIReplicaTypeWorker].Template.Spec))
		l := got.Spec.MPIReplicaSpecs[mpiv2beta1.MPIReplicaTypeLauncher].Template.Spec
		require.Len(t, l.InitContainers, 1)
		cp := l.InitContainers[0]
		require.Equal(t, launchergate.InitContainerName, cp.Name)
		require.Equal(t, initImage, cp.Image, "the binary comes from the controller's own image")
		require.Equal(t, []string{"/usr/local/bin/rankgate-node", "copy-binary", launchergate.BinDir}, cp.Command)
		c := l.Containers[0]
		require.Nil(t, c.Args, "the original args moved behind --")
		require.Equal(t, []string{launchergate.Binary, "launch", "--gang"}, c.Command[:3])
		sep := -1
		for i, a := range c.Command {
			if a == "--" {
				sep = i
				break
			}
		}
		require.Positive(t, sep, "no -- in %q", c.Command)
		require.Contains(t, c.Command[:sep], "--gate-url")
		require.Contains(t, c.Command[:sep], "--token-file")
		require.Equal(t, []string{"mpirun", "-np", "8", "python", "train.py"}, c.Command[sep+1:], "the original command after --")
		require.Len(t, l.Volumes, 3, "binary, token, CA")
		require.Len(t, c.VolumeMounts, 3)

		// Once: a second apply (strict) and an update change nothing.
		again := createAgain(t, got, "gated-again")
		require.Len(t, again.Spec.MPIReplicaSpecs[mpiv2beta1.MPIReplicaTypeLauncher].Template.Spec.InitContainers, 1)
		before := got.Spec.DeepCopy()
		got.Annotations = map[string]string{"note": "x"}
		require.NoError(t, k8s.Update(ctx, got))
		require.True(t, equality.Semantic.DeepEqual(before, &got.Spec), "an update changed the templates")
	})
}
