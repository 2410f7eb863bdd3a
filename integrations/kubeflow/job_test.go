package kubeflow_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
)

const mig = corev1.ResourceName("nvidia.com/mig-1g.10gb")

func TestPyTorchJobAdapter(t *testing.T) {
	obj := kubeflowtest.MakePyTorchJob("train", "ml").Master().Workers(3).Request(mig, "1").Obj()
	j, err := kubeflow.FromObject(obj)
	require.NoError(t, err)
	require.NoError(t, j.Validate())
	require.Equal(t, "PyTorchJob", j.Kind())
	require.Equal(t, kubeflow.PyTorchJobGVK, j.GVK())
	require.Equal(t, "ml", j.Namespace())
	require.Equal(t, "train", j.Name())
	specs := j.ReplicaSpecs()
	require.Len(t, specs, 2)
	require.Equal(t, "Master", specs[0].Type)
	require.Equal(t, int32(1), specs[0].Replicas)
	require.Equal(t, "Worker", specs[1].Type)
	require.Equal(t, int32(3), specs[1].Replicas)
	require.Equal(t, 4, kubeflow.RankPods(j))

	require.False(t, j.Suspended())
	j.SetSuspended(true)
	require.True(t, *obj.Spec.RunPolicy.Suspend, "SetSuspended writes through to the wrapped object")
	require.Same(t, obj, j.Object())

	// A nil replica count defaults to 1 (training-operator SetDefaults_PyTorchJob).
	obj.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeWorker].Replicas = nil
	require.Equal(t, int32(1), j.ReplicaSpecs()[1].Replicas)
}

func TestMPIJobAdapter(t *testing.T) {
	obj := kubeflowtest.MakeMPIJob("allreduce", "hpc").Workers(4).SlotsPerWorker(8).WorkerRequest("nvidia.com/gpu", "8").Obj()
	j, err := kubeflow.FromObject(obj)
	require.NoError(t, err)
	require.NoError(t, j.Validate())
	specs := j.ReplicaSpecs()
	require.Equal(t, []string{"Launcher", "Worker"}, []string{specs[0].Type, specs[1].Type})
	require.False(t, specs[0].RunsRanks)
	require.True(t, specs[1].RunsRanks)
	require.Equal(t, 4, kubeflow.RankPods(j))

	obj.Spec.RunLauncherAsWorker = ptr(true)
	require.Equal(t, 5, kubeflow.RankPods(j))

	// mpi-operator v0.8.0 defaults a nil Worker count to 0, Launcher to 1.
	obj.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeWorker].Replicas = nil
	obj.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeLauncher].Replicas = nil
	specs = j.ReplicaSpecs()
	require.Equal(t, int32(1), specs[0].Replicas)
	require.Equal(t, int32(0), specs[1].Replicas)
	require.Equal(t, 1, kubeflow.RankPods(j), "the launcher alone")
	require.NoError(t, j.Validate())
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		obj  runtime.Object
		err  string
	}{
		{"no replica specs", &kftraining.PyTorchJob{}, "spec.pytorchReplicaSpecs is empty"},
		{"unknown type", func() runtime.Object {
			o := kubeflowtest.MakePyTorchJob("a", "b").Obj()
			o.Spec.PyTorchReplicaSpecs["Chief"] = o.Spec.PyTorchReplicaSpecs["Worker"]
			return o
		}(), `unknown replica type "Chief"`},
		{"negative replicas", kubeflowtest.MakePyTorchJob("a", "b").Workers(-1).Obj(), "Worker.replicas is -1"},
		{"absurd replicas", kubeflowtest.MakePyTorchJob("a", "b").Workers(1 << 30).Obj(), "want 0..100000"},
		{"two masters", func() runtime.Object {
			o := kubeflowtest.MakePyTorchJob("a", "b").Master().Obj()
			o.Spec.PyTorchReplicaSpecs["Master"].Replicas = ptr(int32(2))
			return o
		}(), "at most one Master"},
		{"no containers", func() runtime.Object {
			o := kubeflowtest.MakePyTorchJob("a", "b").Obj()
			o.Spec.PyTorchReplicaSpecs["Worker"].Template.Spec.Containers = nil
			return o
		}(), "Worker.template.spec.containers is empty"},
		{"null spec", func() runtime.Object {
			o := kubeflowtest.MakePyTorchJob("a", "b").Obj()
			o.Spec.PyTorchReplicaSpecs["Master"] = nil
			return o
		}(), "Master is null"},
		{"mpi without launcher", func() runtime.Object {
			o := kubeflowtest.MakeMPIJob("a", "b").Obj()
			delete(o.Spec.MPIReplicaSpecs, mpiv2.MPIReplicaTypeLauncher)
			return o
		}(), "exactly one launcher"},
		{"mpi slots", kubeflowtest.MakeMPIJob("a", "b").SlotsPerWorker(-2).Obj(), "slotsPerWorker is -2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, err := kubeflow.FromObject(tc.obj)
			require.NoError(t, err)
			require.ErrorContains(t, j.Validate(), tc.err)
		})
	}
}

func TestOwnsPod(t *testing.T) {
	j, _ := kubeflow.FromObject(kubeflowtest.MakeMPIJob("allreduce", "hpc").Obj())
	owned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "allreduce-worker-0", Namespace: "hpc",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v2beta1", Kind: "MPIJob", Name: "allreduce", UID: "uid-allreduce", Controller: ptr(true)}}}}
	require.True(t, j.OwnsPod(owned))
	// The launcher pod is owned by a batch Job; the label ties it to the MPIJob.
	launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "allreduce-launcher-x", Namespace: "hpc",
		Labels:          map[string]string{kubeflow.LabelJobName: "allreduce", kubeflow.LabelReplicaType: "launcher"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "allreduce-launcher", Controller: ptr(true)}}}}
	require.True(t, j.OwnsPod(launcher))
	require.Equal(t, "Launcher", kubeflow.ReplicaTypeOf(j, launcher))
	// mpi-operator v0.8.0 itself sets job-role, not replica-type.
	require.Equal(t, "Worker", kubeflow.ReplicaTypeOf(j, pod(kubeflow.LabelJobRole, "worker")))
	require.Equal(t, "", kubeflow.ReplicaTypeOf(j, pod(kubeflow.LabelJobRole, "ps")))
	require.Equal(t, "", kubeflow.ReplicaTypeOf(j, pod()))
	other := owned.DeepCopy()
	other.Namespace = "elsewhere"
	require.False(t, j.OwnsPod(other))
	stale := owned.DeepCopy()
	stale.OwnerReferences[0].UID = "uid-old"
	require.False(t, j.OwnsPod(stale), "a pod of an earlier job with the same name")
}

func TestFromUnstructured(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": map[string]any{"name": "train", "namespace": "ml"},
		"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{
			"Worker": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "pytorch", "image": "x"}}}}},
		}},
	}}
	j, err := kubeflow.FromUnstructured(u)
	require.NoError(t, err)
	require.Equal(t, int32(2), j.ReplicaSpecs()[0].Replicas)

	u.SetAPIVersion("kubeflow.org/v1")
	u.SetKind("TFJob")
	_, err = kubeflow.FromUnstructured(u)
	require.ErrorIs(t, err, kubeflow.ErrUnsupported)
	_, err = kubeflow.FromObject(&corev1.Pod{})
	require.ErrorIs(t, err, kubeflow.ErrUnsupported)
	require.PanicsWithValue(t, "kubeflow: *v1.Pod: "+kubeflow.ErrUnsupported.Error(), func() { kubeflow.MustFromObject(&corev1.Pod{}) })
	for _, k := range kubeflow.All() {
		require.Equal(t, k.GVK(), kubeflow.MustFromObject(k.New()).GVK())
	}
}

func ptr[T any](v T) *T { return &v }

// n is a replica count.
func n(v int32) *int32 { return &v }

// ptJob is a PyTorchJob with the given replica types; a nil count is left
// unset, for the defaults.
func ptJob(specs map[kftraining.ReplicaType]*int32) kubeflow.Job {
	o := kubeflowtest.MakePyTorchJob("train", "ml").Obj()
	tmpl := o.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeWorker].Template
	o.Spec.PyTorchReplicaSpecs = map[kftraining.ReplicaType]*kftraining.ReplicaSpec{}
	for t, c := range specs {
		o.Spec.PyTorchReplicaSpecs[t] = &kftraining.ReplicaSpec{Replicas: c, Template: *tmpl.DeepCopy()}
	}
	j, err := kubeflow.FromObject(o)
	if err != nil {
		panic(err)
	}
	return j
}

// mpiJob is an MPIJob with the given replica types; a nil count is left
// unset, for the defaults.
func mpiJob(asWorker bool, specs map[mpiv2.MPIReplicaType]*int32) kubeflow.Job {
	o := kubeflowtest.MakeMPIJob("allreduce", "hpc").Obj()
	tmpl := o.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeWorker].Template
	o.Spec.MPIReplicaSpecs = map[mpiv2.MPIReplicaType]*mpiv2.ReplicaSpec{}
	for t, c := range specs {
		o.Spec.MPIReplicaSpecs[t] = &mpiv2.ReplicaSpec{Replicas: c, Template: *tmpl.DeepCopy()}
	}
	if asWorker {
		o.Spec.RunLauncherAsWorker = ptr(true)
	}
	j, err := kubeflow.FromObject(o)
	if err != nil {
		panic(err)
	}
	return j
}

// pod has the given labels, as key, value pairs.
func pod(kv ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{}}}
	for i := 0; i+1 < len(kv); i += 2 {
		p.Labels[kv[i]] = kv[i+1]
	}
	return p
}

// ptPod is a PyTorchJob pod as the training-operator labels it.
func ptPod(typ, idx string) *corev1.Pod {
	return pod(kubeflow.LabelReplicaType, typ, kubeflow.LabelReplicaIdx, idx)
}

// mpiPod is an MPIJob pod as mpi-operator labels it.
func mpiPod(role, idx string) *corev1.Pod {
	return pod(kubeflow.LabelJobRole, role, kubeflow.LabelReplicaIdx, idx)
}

const (
	master   = kftraining.PyTorchJobReplicaTypeMaster
	worker   = kftraining.PyTorchJobReplicaTypeWorker
	launcher = mpiv2.MPIReplicaTypeLauncher
	mworker  = mpiv2.MPIReplicaTypeWorker
)

func TestReplicaDefaults(t *testing.T) {
	type spec struct {
		typ      string
		replicas int32
		ranks    bool
	}
	for _, tc := range []struct {
		name  string
		job   kubeflow.Job
		want  []spec
		ranks int
	}{
		{"PyTorchJob nil counts are 1", ptJob(map[kftraining.ReplicaType]*int32{master: nil, worker: nil}),
			[]spec{{"Master", 1, true}, {"Worker", 1, true}}, 2},
		{"PyTorchJob workers only, nil count", ptJob(map[kftraining.ReplicaType]*int32{worker: nil}),
			[]spec{{"Worker", 1, true}}, 1},
		{"PyTorchJob set counts", ptJob(map[kftraining.ReplicaType]*int32{master: n(1), worker: n(0)}),
			[]spec{{"Master", 1, true}, {"Worker", 0, true}}, 1},
		{"MPIJob nil Launcher is 1, nil Worker 0", mpiJob(false, map[mpiv2.MPIReplicaType]*int32{launcher: nil, mworker: nil}),
			[]spec{{"Launcher", 1, false}, {"Worker", 0, true}}, 0},
		{"MPIJob nil counts, launcher as worker", mpiJob(true, map[mpiv2.MPIReplicaType]*int32{launcher: nil, mworker: nil}),
			[]spec{{"Launcher", 1, true}, {"Worker", 0, true}}, 1},
		{"MPIJob set counts", mpiJob(false, map[mpiv2.MPIReplicaType]*int32{launcher: n(1), mworker: n(3)}),
			[]spec{{"Launcher", 1, false}, {"Worker", 3, true}}, 3},
		{"MPIJob without Worker spec", mpiJob(true, map[mpiv2.MPIReplicaType]*int32{launcher: nil}),
			[]spec{{"Launcher", 1, true}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []spec
			for _, r := range tc.job.ReplicaSpecs() {
				got = append(got, spec{r.Type, r.Replicas, r.RunsRanks})
				require.NotNil(t, r.Template)
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.ranks, kubeflow.RankPods(tc.job))
		})
	}
}

func TestRankOf(t *testing.T) {
	ptMaster3 := ptJob(map[kftraining.ReplicaType]*int32{master: n(1), worker: n(3)})
	ptWorkers2 := ptJob(map[kftraining.ReplicaType]*int32{worker: n(2)})
	ptNil := ptJob(map[kftraining.ReplicaType]*int32{master: nil, worker: nil})
	mpi4 := mpiJob(false, map[mpiv2.MPIReplicaType]*int32{launcher: n(1), mworker: n(4)})
	mpiLW2 := mpiJob(true, map[mpiv2.MPIReplicaType]*int32{launcher: n(1), mworker: n(2)})
	mpiNil := mpiJob(false, map[mpiv2.MPIReplicaType]*int32{launcher: nil, mworker: nil})
	mpiLWNil := mpiJob(true, map[mpiv2.MPIReplicaType]*int32{launcher: nil, mworker: nil})

	const noRank = "holds no GPUs"
	for _, tc := range []struct {
		name string
		job  kubeflow.Job
		pod  *corev1.Pod
		want int
		err  string // substring; "" for success
	}{
		// PyTorchJob with a Master.
		{"pt master", ptMaster3, ptPod("master", "0"), 0, ""},
		{"pt worker 0 after master", ptMaster3, ptPod("worker", "0"), 1, ""},
		{"pt last worker", ptMaster3, ptPod("worker", "2"), 3, ""},
		{"pt type in any case", ptMaster3, ptPod("Worker", "1"), 2, ""},
		{"pt worker past count", ptMaster3, ptPod("worker", "3"), 0, "Worker index 3 is outside the spec's 3 Worker replica(s), indexes 0..2"},
		{"pt second master", ptMaster3, ptPod("master", "1"), 0, "Master index 1 is outside the spec's 1 Master replica(s), indexes 0..0"},
		{"pt unknown type", ptMaster3, ptPod("ps", "0"), 0, `label training.kubeflow.org/replica-type="ps" is not one of the PyTorchJob replica types (Master, Worker)`},
		// PyTorchJob without a Master.
		{"pt worker 0 no master", ptWorkers2, ptPod("worker", "0"), 0, ""},
		{"pt worker 1 no master", ptWorkers2, ptPod("worker", "1"), 1, ""},
		{"pt master missing from spec", ptWorkers2, ptPod("master", "0"), 0, `replica-type="master", but the spec has no Master replicas`},
		{"pt job-role is not read", ptWorkers2, pod(kubeflow.LabelJobRole, "master", kubeflow.LabelReplicaIdx, "0"), 0, "has no training.kubeflow.org/replica-type label"},
		// PyTorchJob nil counts: 1 each.
		{"pt nil master", ptNil, ptPod("master", "0"), 0, ""},
		{"pt nil worker", ptNil, ptPod("worker", "0"), 1, ""},
		{"pt nil worker count is 1", ptNil, ptPod("worker", "1"), 0, "outside the spec's 1 Worker replica(s)"},
		// PyTorchJob specs the operator rejects.
		{"pt zero masters", ptJob(map[kftraining.ReplicaType]*int32{master: n(0), worker: n(2)}), ptPod("worker", "0"), 0, "Master.replicas is 0: want 1"},
		{"pt two masters", ptJob(map[kftraining.ReplicaType]*int32{master: n(2), worker: n(2)}), ptPod("master", "0"), 0, "Master.replicas is 2: want 1"},
		{"pt negative workers", ptJob(map[kftraining.ReplicaType]*int32{worker: n(-1)}), ptPod("worker", "0"), 0, "Worker.replicas is -1: want 0..100000"},
		{"pt absurd workers", ptJob(map[kftraining.ReplicaType]*int32{worker: n(1 << 30)}), ptPod("worker", "0"), 0, "want 0..100000"},
		{"pt zero workers", ptJob(map[kftraining.ReplicaType]*int32{master: n(1), worker: n(0)}), ptPod("worker", "0"), 0, "Worker index 0, but the spec has 0 Worker replicas"},
		// Labels.
		{"pt no labels", ptMaster3, pod(), 0, "pod ns/p of PyTorchJob ml/train: the pod has no training.kubeflow.org/replica-type label"},
		{"pt no index", ptMaster3, pod(kubeflow.LabelReplicaType, "worker"), 0, "the Worker pod has no training.kubeflow.org/replica-index label"},
		{"pt index not a number", ptMaster3, ptPod("worker", "one"), 0, `label training.kubeflow.org/replica-index="one" is not a replica index`},
		{"pt index empty", ptMaster3, ptPod("worker", ""), 0, `replica-index="" is not a replica index`},
		{"pt index negative", ptMaster3, ptPod("worker", "-1"), 0, `replica-index="-1" is not a replica index: want an integer 0 or more`},
		{"pt index overflows", ptMaster3, ptPod("worker", "99999999999999999999"), 0, "is not a replica index"},
		{"nil pod", ptMaster3, nil, 0, "PyTorchJob ml/train: no pod"},

		// MPIJob.
		{"mpi worker 0", mpi4, mpiPod("worker", "0"), 0, ""},
		{"mpi worker 3", mpi4, mpiPod("worker", "3"), 3, ""},
		{"mpi worker past count", mpi4, mpiPod("worker", "4"), 0, "Worker index 4 is outside the spec's 4 Worker replica(s), indexes 0..3"},
		{"mpi launcher is no rank", mpi4, pod(kubeflow.LabelJobRole, "launcher"), 0, noRank},
		{"mpi launcher with an index is no rank", mpi4, mpiPod("launcher", "0"), 0, "should not get the rankgate init container"},
		{"mpi unknown role", mpi4, mpiPod("ps", "0"), 0, `label training.kubeflow.org/job-role="ps" is not one of the MPIJob replica types (Launcher, Worker)`},
		{"mpi no labels", mpi4, pod(), 0, "neither a training.kubeflow.org/job-role nor a training.kubeflow.org/replica-type label"},
		{"mpi no index", mpi4, pod(kubeflow.LabelJobRole, "worker"), 0, "the Worker pod has no training.kubeflow.org/replica-index label"},
		{"mpi replica-type when no job-role", mpi4, ptPod("worker", "2"), 2, ""},
		{"mpi job-role wins over replica-type", mpi4, pod(kubeflow.LabelJobRole, "launcher", kubeflow.LabelReplicaType, "worker", kubeflow.LabelReplicaIdx, "0"), 0, noRank},
		// MPIJob with runLauncherAsWorker: launcher index 0, Worker i index i+1.
		{"mpi launcher as worker", mpiLW2, mpiPod("launcher", "0"), 0, ""},
		{"mpi shifted worker 0", mpiLW2, mpiPod("worker", "1"), 1, ""},
		{"mpi shifted worker 1", mpiLW2, mpiPod("worker", "2"), 2, ""},
		{"mpi unshifted index", mpiLW2, mpiPod("worker", "0"), 0, "Worker index 0 is outside the spec's 2 Worker replica(s), indexes 1..2 (with runLauncherAsWorker mpi-operator labels Worker i with index i+1)"},
		{"mpi shifted past count", mpiLW2, mpiPod("worker", "3"), 0, "indexes 1..2"},
		{"mpi launcher index 1", mpiLW2, mpiPod("launcher", "1"), 0, "Launcher index 1 is outside the spec's 1 Launcher replica(s)"},
		{"mpi launcher as worker without index", mpiLW2, pod(kubeflow.LabelJobRole, "launcher"), 0, "the Launcher pod has no training.kubeflow.org/replica-index label"},
		// MPIJob nil counts: Launcher 1, Worker 0.
		{"mpi nil workers", mpiNil, mpiPod("worker", "0"), 0, "Worker index 0, but the spec has 0 Worker replicas"},
		{"mpi nil launcher is no rank", mpiNil, mpiPod("launcher", "0"), 0, noRank},
		{"mpi nil launcher as worker", mpiLWNil, mpiPod("launcher", "0"), 0, ""},
		{"mpi nil workers, launcher as worker", mpiLWNil, mpiPod("worker", "1"), 0, "Worker index 1, but the spec has 0 Worker replicas"},
		// MPIJob specs the operator rejects.
		{"mpi launcher as worker without launcher", mpiJob(true, map[mpiv2.MPIReplicaType]*int32{mworker: n(2)}), mpiPod("worker", "1"), 0, "spec.mpiReplicaSpecs.Launcher is missing"},
		{"mpi two launchers as workers", mpiJob(true, map[mpiv2.MPIReplicaType]*int32{launcher: n(2), mworker: n(2)}), mpiPod("launcher", "0"), 0, "Launcher.replicas is 2: want 1"},
		{"mpi no worker spec", mpiJob(false, map[mpiv2.MPIReplicaType]*int32{launcher: n(1)}), mpiPod("worker", "0"), 0, `job-role="worker", but the spec has no Worker replicas`},
		{"mpi negative workers", mpiJob(false, map[mpiv2.MPIReplicaType]*int32{launcher: n(1), mworker: n(-3)}), mpiPod("worker", "0"), 0, "Worker.replicas is -3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kubeflow.RankOf(tc.job, tc.pod)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.Equal(t, strings.Contains(tc.err, noRank) || strings.Contains(tc.err, "rankgate init container"), errors.Is(err, kubeflow.ErrNoRank),
					"only the launcher that is no worker wraps ErrNoRank")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Less(t, got, kubeflow.RankPods(tc.job))
		})
	}
}

func TestRank(t *testing.T) {
	j := mpiJob(true, map[mpiv2.MPIReplicaType]*int32{launcher: n(1), mworker: n(2)})
	r, err := kubeflow.Rank(j, "Launcher", 0)
	require.NoError(t, err)
	require.Equal(t, 0, r)
	r, err = kubeflow.Rank(j, "worker", 2)
	require.NoError(t, err)
	require.Equal(t, 2, r)
	_, err = kubeflow.Rank(j, "worker", -1)
	require.EqualError(t, err, "MPIJob hpc/allreduce: Worker index -1 is negative")
	_, err = kubeflow.Rank(j, "chief", 0)
	require.EqualError(t, err, `MPIJob hpc/allreduce: replica type "chief" is not one of the MPIJob replica types (Launcher, Worker)`)

	_, err = kubeflow.Rank(mpiJob(false, map[mpiv2.MPIReplicaType]*int32{launcher: n(1), mworker: n(2)}), "launcher", 0)
	require.ErrorIs(t, err, kubeflow.ErrNoRank)
	require.EqualError(t, err, "MPIJob hpc/allreduce: the Launcher is not a rank: without spec.runLauncherAsWorker it only runs mpirun and holds no GPUs (mpi-operator blanks NVIDIA_VISIBLE_DEVICES on it), so it should not get the rankgate init container")

	// A kind the package does not list ranks its pods by its own slots.
	r, err = kubeflow.Rank(otherJob{}, "worker", 1)
	require.NoError(t, err)
	require.Equal(t, 2, r)
	r, err = kubeflow.RankOf(otherJob{}, ptPod("chief", "0"))
	require.NoError(t, err)
	require.Equal(t, 0, r)
	_, err = kubeflow.RankOf(otherJob{}, ptPod("ps", "0"))
	require.EqualError(t, err, `pod ns/p of TFJob ns/tf: label training.kubeflow.org/replica-type="ps", but the spec has no PS replicas`)
}

// otherJob is a Job of a kind the package does not list: one Chief and
// two Workers, numbered from 0.
type otherJob struct{ kubeflow.Job }

func (otherJob) Kind() string           { return "TFJob" }
func (otherJob) Namespace() string      { return "ns" }
func (otherJob) Name() string           { return "tf" }
func (otherJob) ReplicaTypes() []string { return []string{"Chief", "PS", "Worker"} }
func (otherJob) RankSlots() ([]jobkind.RankSlot, error) {
	return []jobkind.RankSlot{{Type: "Chief", Count: 1}, {Type: "Worker", Count: 2, Base: 1}}, nil
}
func (otherJob) ReplicaTypeLabel(l map[string]string) (string, string, error) {
	return l[kubeflow.LabelReplicaType], kubeflow.LabelReplicaType, nil
}
func (otherJob) ReplicaIndex(l map[string]string) (int, error) { return jobkind.ReplicaIdxLabel(l) }

// operatorPods are the pods the operator creates for a job, labelled as it
// labels them (see RankOf for where in its sources), and whether each runs
// a rank.
func operatorPods(t *testing.T, j kubeflow.Job) (pods []*corev1.Pod, ranks []bool) {
	switch o := j.Object().(type) {
	case *kftraining.PyTorchJob:
		for _, rt := range []kftraining.ReplicaType{master, worker} {
			if s := o.Spec.PyTorchReplicaSpecs[rt]; s != nil {
				c := int32(1)
				if s.Replicas != nil {
					c = *s.Replicas
				}
				for i := range int(c) {
					pods = append(pods, ptPod(strings.ToLower(string(rt)), strconv.Itoa(i)))
					ranks = append(ranks, true)
				}
			}
		}
	case *mpiv2.MPIJob:
		asWorker := o.Spec.RunLauncherAsWorker != nil && *o.Spec.RunLauncherAsWorker
		if o.Spec.MPIReplicaSpecs[launcher] != nil {
			l := pod(kubeflow.LabelJobRole, "launcher")
			if asWorker {
				l.Labels[kubeflow.LabelReplicaIdx] = "0"
			}
			pods = append(pods, l)
			ranks = append(ranks, asWorker)
		}
		if s := o.Spec.MPIReplicaSpecs[mworker]; s != nil && s.Replicas != nil {
			for i := range int(*s.Replicas) {
				idx := i
				if asWorker {
					idx++
				}
				pods = append(pods, mpiPod("worker", strconv.Itoa(idx)))
				ranks = append(ranks, true)
			}
		}
	default:
		t.Fatalf("%T", o)
	}
	return pods, ranks
}

// TestRankOfOperatorPods: on the pods the operator creates, RankOf numbers
// the rank pods 0..RankPods-1, each once.
func TestRankOfOperatorPods(t *testing.T) {
	for _, j := range []kubeflow.Job{
		ptJob(map[kftraining.ReplicaType]*int32{master: n(1), worker: n(5)}),
		ptJob(map[kftraining.ReplicaType]*int32{master: nil, worker: nil}),
		ptJob(map[kftraining.ReplicaType]*int32{master: n(1)}),
		ptJob(map[kftraining.ReplicaType]*int32{worker: n(7)}),
		mpiJob(false, map[mpiv2.MPIReplicaType]*int32{launcher: n(1), mworker: n(6)}),
		mpiJob(true, map[mpiv2.MPIReplicaType]*int32{launcher: n(1), mworker: n(6)}),
		mpiJob(false, map[mpiv2.MPIReplicaType]*int32{launcher: nil, mworker: nil}),
		mpiJob(true, map[mpiv2.MPIReplicaType]*int32{launcher: nil, mworker: nil}),
		mpiJob(true, map[mpiv2.MPIReplicaType]*int32{launcher: nil}),
	} {
		pods, runs := operatorPods(t, j)
		var got []int
		for i, p := range pods {
			r, err := kubeflow.RankOf(j, p)
			if !runs[i] {
				require.ErrorIs(t, err, kubeflow.ErrNoRank)
				continue
			}
			require.NoError(t, err)
			got = append(got, r)
		}
		slices.Sort(got)
		want := make([]int, kubeflow.RankPods(j))
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, append([]int{}, got...), "%s %v", j.Kind(), j.ReplicaSpecs())
	}
}

func FuzzRankOf(f *testing.F) {
	// kind: 0 PyTorchJob, 1 MPIJob. mode: 0 absent, 1 nil count, 2 count.
	f.Add(uint8(0), false, uint8(2), int32(1), uint8(2), int32(3), "worker", "2", true, false)
	f.Add(uint8(0), false, uint8(0), int32(0), uint8(1), int32(0), "worker", "0", true, false)
	f.Add(uint8(0), false, uint8(2), int32(0), uint8(2), int32(2), "master", "0", true, false)
	f.Add(uint8(1), false, uint8(2), int32(1), uint8(2), int32(4), "worker", "3", true, true)
	f.Add(uint8(1), true, uint8(2), int32(1), uint8(2), int32(2), "launcher", "0", true, true)
	f.Add(uint8(1), true, uint8(1), int32(0), uint8(1), int32(0), "worker", "1", true, true)
	f.Add(uint8(1), true, uint8(0), int32(0), uint8(2), int32(2), "Worker", "+1", true, false)
	f.Add(uint8(1), false, uint8(2), int32(-1), uint8(2), int32(-7), "", "-1", false, false)
	f.Fuzz(func(t *testing.T, kind uint8, asWorker bool, firstMode uint8, firstN int32, workerMode uint8, workerN int32,
		typ, idx string, hasIdx, jobRole bool) {
		count := func(mode uint8, v int32) (present bool, c *int32) {
			switch mode % 3 {
			case 0:
				return false, nil
			case 1:
				return true, nil
			}
			return true, &v
		}
		var j kubeflow.Job
		if kind%2 == 0 {
			specs := map[kftraining.ReplicaType]*int32{}
			if ok, c := count(firstMode, firstN); ok {
				specs[master] = c
			}
			if ok, c := count(workerMode, workerN); ok {
				specs[worker] = c
			}
			j = ptJob(specs)
		} else {
			specs := map[mpiv2.MPIReplicaType]*int32{}
			if ok, c := count(firstMode, firstN); ok {
				specs[launcher] = c
			}
			if ok, c := count(workerMode, workerN); ok {
				specs[mworker] = c
			}
			j = mpiJob(asWorker, specs)
		}
		key := kubeflow.LabelReplicaType
		if jobRole {
			key = kubeflow.LabelJobRole
		}
		p := pod(key, typ)
		if hasIdx {
			p.Labels[kubeflow.LabelReplicaIdx] = idx
		}
		r, err := kubeflow.RankOf(j, p)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if total := kubeflow.RankPods(j); r < 0 || r >= total {
			t.Fatalf("RankOf = %d, outside [0, %d) (RankPods)", r, total)
		}
		// Rank agrees with RankOf.
		i, err := strconv.Atoi(idx)
		if err != nil {
			t.Fatalf("RankOf accepted index %q: %v", idx, err)
		}
		if r2, err := kubeflow.Rank(j, typ, i); err != nil || r2 != r {
			t.Fatalf("Rank = %d, %v; RankOf = %d", r2, err, r)
		}
	})
}

func TestKindOfOperator(t *testing.T) {
	require.Equal(t, "MPIJob", kubeflow.KindOfOperator("mpi-operator"))
	require.Equal(t, "PyTorchJob", kubeflow.KindOfOperator("pytorchjob-controller"))
	require.Empty(t, kubeflow.KindOfOperator("tfjob-controller"))
	require.Empty(t, kubeflow.KindOfOperator(""))
}
