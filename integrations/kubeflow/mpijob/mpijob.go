// Package mpijob is the MPIJob kind, kubeflow.org/v2beta1
// (github.com/kubeflow/mpi-operator v0.8.0): replica types Launcher and
// Worker; the launcher runs a rank only with runLauncherAsWorker, and its
// pod is controlled by a batch Job that the MPIJob controls.
package mpijob

import (
	"errors"
	"fmt"
	"strings"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/internal/intern"
)

// GVK and GVR of MPIJob.
var (
	GVK = mpiv2.SchemeGroupVersionKind
	GVR = mpiv2.SchemeGroupVersion.WithResource("mpijobs")
)

// Kind is the MPIJob kind.
var Kind jobkind.Kind = kind{}

type kind struct{}

func (kind) GVK() schema.GroupVersionKind        { return GVK }
func (kind) GVR() schema.GroupVersionResource    { return GVR }
func (kind) AddToScheme(s *runtime.Scheme) error { return mpiv2.AddToScheme(s) }
func (kind) New() jobkind.Object                 { return &mpiv2.MPIJob{} }
func (kind) NewList() jobkind.ObjectList         { return &mpiv2.MPIJobList{} }
func (kind) PodLabels() []string                 { return jobkind.KubeflowPodLabels }
func (kind) PodJobNameLabel() string             { return jobkind.LabelJobName }
func (kind) ControlledBy() []schema.GroupKind    { return nil }
func (kind) Launcher() string                    { return string(mpiv2.MPIReplicaTypeLauncher) }
func (kind) OperatorName() string                { return "mpi-operator" } // kubeflow.OperatorName in mpi-operator v0.8.0
func (kind) OwnsThroughBatchJob() bool           { return true }

func (kind) Wrap(o jobkind.Object) (jobkind.Job, error) {
	mj, ok := o.(*mpiv2.MPIJob)
	if !ok {
		return nil, fmt.Errorf("%T is not an %s", o, GVK.Kind)
	}
	return &job{mj}, nil
}

// specs shares equal replica specs, once stripped of their templates,
// between cached jobs.
var specs intern.Table[mpiv2.ReplicaSpec]

func (kind) Strip(o jobkind.Object) {
	j := o.(*mpiv2.MPIJob)
	for t, s := range j.Spec.MPIReplicaSpecs {
		if s != nil {
			jobkind.StripTemplate(&s.Template)
			j.Spec.MPIReplicaSpecs[t] = intern.ShareJSON(&specs, s)
		}
	}
}

var types = []mpiv2.MPIReplicaType{mpiv2.MPIReplicaTypeLauncher, mpiv2.MPIReplicaTypeWorker}

type job struct{ o *mpiv2.MPIJob }

var _ jobkind.Job = (*job)(nil)

func (j *job) GVK() schema.GroupVersionKind { return GVK }
func (j *job) Kind() string                 { return GVK.Kind }
func (j *job) Namespace() string            { return j.o.Namespace }
func (j *job) Name() string                 { return j.o.Name }
func (j *job) Object() jobkind.Object       { return j.o }
func (j *job) Suspended() bool {
	return j.o.Spec.RunPolicy.Suspend != nil && *j.o.Spec.RunPolicy.Suspend
}
func (j *job) SetSuspended(v bool) { j.o.Spec.RunPolicy.Suspend = &v }
func (j *job) OwnsPod(p *corev1.Pod) bool {
	return jobkind.OwnsPod(j.o, GVK.Kind, p)
}
func (j *job) NprocPerNode() *string { return nil }

func (j *job) TemplatePath(typ string) []string {
	return []string{"spec", "mpiReplicaSpecs", typ, "template"}
}

func (j *job) ReplicaIndex(labels map[string]string) (int, error) {
	return jobkind.ReplicaIdxLabel(labels)
}

func (j *job) Templates() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for t, r := range j.o.Spec.MPIReplicaSpecs {
		if r != nil {
			out[string(t)] = &r.Template
		}
	}
	return out
}

func (j *job) ReplicaTypes() []string {
	return []string{string(mpiv2.MPIReplicaTypeLauncher), string(mpiv2.MPIReplicaTypeWorker)}
}

func (j *job) asWorker() bool {
	return j.o.Spec.RunLauncherAsWorker != nil && *j.o.Spec.RunLauncherAsWorker
}

// ReplicaSpecs: a nil count is 1 for the Launcher and 0 for the Worker
// (mpi-operator v0.8.0, setDefaultsTypeLauncher and
// setDefaultsTypeWorker).
func (j *job) ReplicaSpecs() []jobkind.ReplicaSpec {
	var out []jobkind.ReplicaSpec
	for _, t := range types {
		if r := j.o.Spec.MPIReplicaSpecs[t]; r != nil {
			def := int32(1) // setDefaultsTypeLauncher
			if t == mpiv2.MPIReplicaTypeWorker {
				def = 0 // setDefaultsTypeWorker
			}
			out = append(out, jobkind.ReplicaSpec{
				Type: string(t), Replicas: jobkind.Replicas(r.Replicas, def), Template: &r.Template,
				RunsRanks: t == mpiv2.MPIReplicaTypeWorker || j.asWorker(),
			})
		}
	}
	return out
}

func (j *job) Validate() error {
	specs := j.o.Spec.MPIReplicaSpecs
	if len(specs) == 0 {
		return errors.New("spec.mpiReplicaSpecs is empty: want Launcher and Worker")
	}
	for t, r := range specs {
		if t != mpiv2.MPIReplicaTypeLauncher && t != mpiv2.MPIReplicaTypeWorker {
			return fmt.Errorf("spec.mpiReplicaSpecs: unknown replica type %q (want Launcher or Worker)", t)
		}
		path := "spec.mpiReplicaSpecs." + string(t)
		if r == nil {
			return fmt.Errorf("%s is null", path)
		}
		if err := jobkind.CheckTemplate(path, r.Replicas, &r.Template); err != nil {
			return err
		}
	}
	if l := specs[mpiv2.MPIReplicaTypeLauncher]; l == nil || jobkind.Replicas(l.Replicas, 1) != 1 {
		return errors.New("spec.mpiReplicaSpecs.Launcher: an MPIJob needs exactly one launcher")
	}
	if s := j.o.Spec.SlotsPerWorker; s != nil && (*s < 0 || *s > 4096) {
		return fmt.Errorf("spec.slotsPerWorker is %d: want 0..4096", *s)
	}
	return nil
}

// RankSlots: Worker i is rank i; with runLauncherAsWorker the launcher is
// rank 0 and Worker i rank i+1. Verified against mpi-operator v0.8.0,
// pkg/controller/mpi_job_controller.go: defaultLabels sets job-role
// (launcher, worker), no replica-type; workerReplicaIndexLabel labels
// Worker i (pod <job>-worker-i) with index i, or i+1 with
// runLauncherAsWorker; newLauncherPodTemplate labels the launcher index 0
// only with runLauncherAsWorker, and without it blanks
// NVIDIA_VISIBLE_DEVICES (nvidiaDisableEnvVars); newConfigMap writes the
// hostfile with the launcher first (only with runLauncherAsWorker), then
// Worker 0..n-1, so a pod's line in the hostfile is its index label.
func (j *job) RankSlots() ([]jobkind.RankSlot, error) {
	specs := j.o.Spec.MPIReplicaSpecs
	var out []jobkind.RankSlot
	first := 0
	note := ""
	if j.asWorker() {
		l := specs[mpiv2.MPIReplicaTypeLauncher]
		if l == nil {
			return nil, errors.New("spec.mpiReplicaSpecs.Launcher is missing: with runLauncherAsWorker the launcher is rank 0, and an MPIJob needs exactly one launcher")
		}
		if n := jobkind.Replicas(l.Replicas, 1); n != 1 {
			return nil, fmt.Errorf("spec.mpiReplicaSpecs.Launcher.replicas is %d: want 1 (mpi-operator's validation: \"must be 1\")", n)
		}
		out = append(out, jobkind.RankSlot{Type: string(mpiv2.MPIReplicaTypeLauncher), Count: 1})
		first = 1
		note = " (with runLauncherAsWorker mpi-operator labels Worker i with index i+1)"
	} else {
		out = append(out, jobkind.RankSlot{Type: string(mpiv2.MPIReplicaTypeLauncher), NoRank: fmt.Errorf(
			"the Launcher is %w: without spec.runLauncherAsWorker it only runs mpirun and holds no GPUs (mpi-operator blanks NVIDIA_VISIBLE_DEVICES on it), so it should not get the rankgate init container",
			jobkind.ErrNoRank)})
	}
	if w := specs[mpiv2.MPIReplicaTypeWorker]; w != nil {
		n, err := jobkind.RankCount("spec.mpiReplicaSpecs.Worker", jobkind.Replicas(w.Replicas, 0))
		if err != nil {
			return nil, err
		}
		out = append(out, jobkind.RankSlot{Type: string(mpiv2.MPIReplicaTypeWorker), First: first, Count: n, Base: first, Note: note})
	}
	return out, nil
}

// ReplicaTypeLabel reads LabelJobRole, which mpi-operator v0.8.0 sets
// (defaultLabels, after copying the template's labels, so it wins over
// them), else LabelReplicaType.
func (j *job) ReplicaTypeLabel(labels map[string]string) (value, key string, missing error) {
	if v := labels[jobkind.LabelJobRole]; v != "" {
		return v, jobkind.LabelJobRole, nil
	}
	if v := labels[jobkind.LabelReplicaType]; v != "" {
		return v, jobkind.LabelReplicaType, nil
	}
	return "", jobkind.LabelReplicaType, fmt.Errorf("the pod has neither a %s nor a %s label (mpi-operator labels its pods %s=launcher or worker): not a pod mpi-operator created for this job",
		jobkind.LabelJobRole, jobkind.LabelReplicaType, jobkind.LabelJobRole)
}

// PodNameFits: mpi-operator names Worker i <job>-worker-i (its index
// label is i+1 with runLauncherAsWorker), and the launcher's pod
// <job>-launcher-<suffix>, controlled by the batch Job <job>-launcher.
func (j *job) PodNameFits(p *corev1.Pod, typ string) error {
	if typ == string(mpiv2.MPIReplicaTypeLauncher) {
		prefix := j.o.Name + "-launcher"
		ref := metav1.GetControllerOf(p)
		if !strings.HasPrefix(p.Name, prefix+"-") || ref == nil || ref.Kind != "Job" || ref.Name != prefix {
			return fmt.Errorf("mpi-operator's launcher pod is named %s-<suffix> and controlled by the Job %s", prefix, prefix)
		}
		return nil
	}
	offset := 0
	if j.asWorker() {
		offset = 1
	}
	return jobkind.IndexedPodNameFits(j.o.Name, p, typ, offset)
}
