package envtestutil_test

import (
	"context"
	"testing"
	"time"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
)

func ptr[T any](v T) *T { return &v }

func gpuPod(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "main",
				Image: image,
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{
						"nvidia.com/mig-1g.10gb": resource.MustParse("1"),
					},
				},
			}},
		},
	}
}

func TestRealAPIServerWithKubeflowCRDs(t *testing.T) {
	cfg, stop := envtestutil.Start(t)
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server version %s", v.GitVersion)
	if v.Major != "1" || v.Minor != "37" || v.GitVersion != "v1.37.2" {
		t.Errorf("server version = %q (major %q minor %q), want v1.37.2; built without the version ldflags?", v.GitVersion, v.Major, v.Minor)
	}

	c := envtestutil.NewClient(t, cfg)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "train"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	// PyTorchJob, kubeflow.org/v1 (training-operator v1.9.4 CRD).
	pj := &kubeflowv1.PyTorchJob{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "train"},
		Spec: kubeflowv1.PyTorchJobSpec{
			RunPolicy: kubeflowv1.RunPolicy{Suspend: ptr(false)},
			PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
				kubeflowv1.PyTorchJobReplicaTypeMaster: {
					Replicas:      ptr(int32(1)),
					RestartPolicy: kubeflowv1.RestartPolicyOnFailure,
					Template:      gpuPod("pytorch:2"),
				},
				kubeflowv1.PyTorchJobReplicaTypeWorker: {
					Replicas: ptr(int32(3)),
					Template: gpuPod("pytorch:2"),
				},
			},
			NprocPerNode: ptr("1"),
		},
	}
	if err := c.Create(ctx, pj); err != nil {
		t.Fatalf("create PyTorchJob: %v", err)
	}
	var gotPJ kubeflowv1.PyTorchJob
	if err := c.Get(ctx, client.ObjectKeyFromObject(pj), &gotPJ); err != nil {
		t.Fatalf("get PyTorchJob: %v", err)
	}
	if gotPJ.UID == "" {
		t.Error("PyTorchJob has no UID")
	}
	w := gotPJ.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker]
	m := gotPJ.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeMaster]
	switch {
	case w == nil || m == nil:
		t.Fatalf("PyTorchJob replica specs lost: %+v", gotPJ.Spec.PyTorchReplicaSpecs)
	case *w.Replicas != 3 || *m.Replicas != 1:
		t.Errorf("replicas: master %d worker %d, want 1 and 3", *m.Replicas, *w.Replicas)
	case m.RestartPolicy != kubeflowv1.RestartPolicyOnFailure:
		t.Errorf("master restartPolicy = %q", m.RestartPolicy)
	case gotPJ.Spec.NprocPerNode == nil || *gotPJ.Spec.NprocPerNode != "1":
		t.Errorf("nprocPerNode = %v", gotPJ.Spec.NprocPerNode)
	}
	if q := w.Template.Spec.Containers[0].Resources.Limits["nvidia.com/mig-1g.10gb"]; q.Value() != 1 {
		t.Errorf("worker MIG limit = %s, want 1", q.String())
	}

	// MPIJob, kubeflow.org/v2beta1 (mpi-operator v0.8.0 CRD).
	mj := &mpiv2beta1.MPIJob{
		ObjectMeta: metav1.ObjectMeta{Name: "allreduce", Namespace: "train"},
		Spec: mpiv2beta1.MPIJobSpec{
			SlotsPerWorker:    ptr(int32(1)),
			MPIImplementation: mpiv2beta1.MPIImplementationOpenMPI,
			RunPolicy:         mpiv2beta1.RunPolicy{CleanPodPolicy: ptr(mpiv2beta1.CleanPodPolicyRunning)},
			MPIReplicaSpecs: map[mpiv2beta1.MPIReplicaType]*mpiv2beta1.ReplicaSpec{
				mpiv2beta1.MPIReplicaTypeLauncher: {Replicas: ptr(int32(1)), Template: gpuPod("mpi:1")},
				mpiv2beta1.MPIReplicaTypeWorker:   {Replicas: ptr(int32(2)), Template: gpuPod("mpi:1")},
			},
		},
	}
	if err := c.Create(ctx, mj); err != nil {
		t.Fatalf("create MPIJob: %v", err)
	}
	var gotMJ mpiv2beta1.MPIJob
	if err := c.Get(ctx, client.ObjectKeyFromObject(mj), &gotMJ); err != nil {
		t.Fatalf("get MPIJob: %v", err)
	}
	if gotMJ.APIVersion != "" && gotMJ.APIVersion != "kubeflow.org/v2beta1" {
		t.Errorf("MPIJob apiVersion = %q", gotMJ.APIVersion)
	}
	mw := gotMJ.Spec.MPIReplicaSpecs[mpiv2beta1.MPIReplicaTypeWorker]
	if mw == nil || *mw.Replicas != 2 {
		t.Fatalf("MPIJob worker spec = %+v", mw)
	}
	if gotMJ.Spec.SlotsPerWorker == nil || *gotMJ.Spec.SlotsPerWorker != 1 {
		t.Errorf("slotsPerWorker = %v", gotMJ.Spec.SlotsPerWorker)
	}
	if gotMJ.Spec.MPIImplementation != mpiv2beta1.MPIImplementationOpenMPI {
		t.Errorf("mpiImplementation = %q", gotMJ.Spec.MPIImplementation)
	}

	// The CRD schema is enforced by the real API server: an MPIJob without
	// mpiReplicaSpecs (a required field) is rejected.
	bad := &mpiv2beta1.MPIJob{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "train"}}
	if err := c.Create(ctx, bad); err == nil {
		t.Error("MPIJob without mpiReplicaSpecs was accepted; CRD schema not in effect?")
	} else {
		t.Logf("rejected as expected: %v", err)
	}

	// Suspend through an update, as the controller will do on a fail verdict.
	gotPJ.Spec.RunPolicy.Suspend = ptr(true)
	if err := c.Update(ctx, &gotPJ); err != nil {
		t.Fatalf("update PyTorchJob: %v", err)
	}
	var again kubeflowv1.PyTorchJob
	if err := c.Get(ctx, client.ObjectKeyFromObject(pj), &again); err != nil {
		t.Fatal(err)
	}
	if again.Spec.RunPolicy.Suspend == nil || !*again.Spec.RunPolicy.Suspend {
		t.Errorf("suspend not persisted: %v", again.Spec.RunPolicy.Suspend)
	}
}

func TestRepoRootAndBinDir(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envtestutil.BinDirEnv, t.TempDir())
	if _, err := envtestutil.BinDir(root); err == nil {
		t.Error("BinDir on an empty directory: want error")
	}
}
