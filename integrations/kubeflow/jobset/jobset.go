// Package jobset is the JobSet kind, jobset.x-k8s.io/v1alpha2
// (sigs.k8s.io/jobset v0.12.0): one ReplicatedJob per replica type, each
// run as replicas batch Jobs of completions pods; the JobSet controls the
// Jobs, the Jobs the pods. A Kubeflow Trainer v2 TrainJob creates a JobSet
// of its own name and controls it: then the TrainJob stands for it
// (ControlledBy), and only its trainer step runs ranks (with an MPI
// runtime, the node step its launcher starts mpirun over).
package jobset

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
)

// GVK and GVR of JobSet.
var (
	GVK = jobsetapi.GroupVersion.WithKind("JobSet")
	GVR = jobsetapi.GroupVersion.WithResource("jobsets")
)

// Pod labels the JobSet controller (v0.12.0, labelAndAnnotateObject) puts
// on each Job's pod template, and the Job controller's completion index.
const (
	LabelJobSetName     = jobsetapi.JobSetNameKey
	LabelJobSetUID      = jobsetapi.JobSetUIDKey
	LabelReplicatedJob  = jobsetapi.ReplicatedJobNameKey
	LabelJobIndex       = jobsetapi.JobIndexKey
	LabelJobGlobalIndex = jobsetapi.JobGlobalIndexKey
	LabelRestartAttempt = "jobset.sigs.k8s.io/restart-attempt" // pkg/constants RestartsKey
	// LabelCompletionIndex is set by the Job controller on the pods of an
	// Indexed Job (label and annotation, batch.kubernetes.io).
	LabelCompletionIndex = batchv1.JobCompletionIndexAnnotation
)

// Kubeflow Trainer v2.3.0 marks the Job template of each ReplicatedJob of
// a runtime with the step it runs (pkg/constants LabelTrainJobAncestor):
// the trainer step runs the ranks; dataset-initializer and
// model-initializer, and an unmarked launcher, do not.
const (
	LabelTrainJobAncestor = "trainer.kubeflow.org/trainjob-ancestor-step"
	AncestorTrainer       = "trainer"
)

// The ReplicatedJobs of a Trainer MPI runtime (v2.3.0, pkg/constants):
// the launcher runs mpirun (and carries the trainer label), the node
// step runs the MPI ranks (sshd).
const (
	TrainerNode     = "node"
	TrainerLauncher = "launcher"
)

// TrainJobKind is the kind that creates and controls JobSets of its name.
var TrainJobKind = schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "TrainJob"}

var podLabels = []string{LabelJobSetName, LabelReplicatedJob, LabelJobIndex, LabelCompletionIndex, LabelRestartAttempt}

// Kind is the JobSet kind.
var Kind jobkind.Kind = kind{}

// RestartAttempt implements jobkind.Restarter: the JobSet controller
// labels every pod of a restart with its number, from 0.
func (kind) RestartAttempt(labels map[string]string) (int32, bool) {
	return RestartAttempt(labels)
}

// RestartAttempt reads a JobSet pod's restart attempt label.
func RestartAttempt(labels map[string]string) (int32, bool) {
	v, ok := labels[LabelRestartAttempt]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return int32(n), true
}

type kind struct{}

func (kind) GVK() schema.GroupVersionKind        { return GVK }
func (kind) GVR() schema.GroupVersionResource    { return GVR }
func (kind) AddToScheme(s *runtime.Scheme) error { return jobsetapi.AddToScheme(s) }
func (kind) New() jobkind.Object                 { return &jobsetapi.JobSet{} }
func (kind) NewList() jobkind.ObjectList         { return &jobsetapi.JobSetList{} }
func (kind) PodLabels() []string                 { return podLabels }
func (kind) PodJobNameLabel() string             { return LabelJobSetName }
func (kind) ControlledBy() []schema.GroupKind    { return []schema.GroupKind{TrainJobKind} }
func (kind) Launcher() string                    { return "" }
func (kind) OperatorName() string                { return "" } // the JobSet controller sets no operator-name label
func (kind) OwnsThroughBatchJob() bool           { return true }
func (kind) InjectsAtPodCreation() bool          { return true }

func (kind) Wrap(o jobkind.Object) (jobkind.Job, error) {
	js, ok := o.(*jobsetapi.JobSet)
	if !ok {
		return nil, fmt.Errorf("%T is not a %s", o, GVK.Kind)
	}
	return &job{js}, nil
}

// Strip drops the pod templates, keeping each Job template's labels
// (which step it runs) and its counts.
func (kind) Strip(o jobkind.Object) {
	js := o.(*jobsetapi.JobSet)
	for i := range js.Spec.ReplicatedJobs {
		jobkind.StripTemplate(&js.Spec.ReplicatedJobs[i].Template.Spec.Template)
	}
}

type job struct{ o *jobsetapi.JobSet }

var _ jobkind.Job = (*job)(nil)

func (j *job) GVK() schema.GroupVersionKind { return GVK }
func (j *job) Kind() string                 { return GVK.Kind }
func (j *job) Namespace() string            { return j.o.Namespace }
func (j *job) Name() string                 { return j.o.Name }
func (j *job) Object() jobkind.Object       { return j.o }
func (j *job) Suspended() bool              { return j.o.Spec.Suspend != nil && *j.o.Spec.Suspend }
func (j *job) SetSuspended(v bool)          { j.o.Spec.Suspend = &v }
func (j *job) NprocPerNode() *string        { return nil }

// OwnsPod: the JobSet controller labels every pod of the JobSet with its
// name and UID (the pod is controlled by a batch Job, not the JobSet).
func (j *job) OwnsPod(p *corev1.Pod) bool {
	if p.Namespace != j.o.Namespace || p.Labels[LabelJobSetName] != j.o.Name {
		return false
	}
	uid := p.Labels[LabelJobSetUID]
	return uid == "" || j.o.UID == "" || uid == string(j.o.UID)
}

// fromTrainer: the JobSet was made from a Trainer runtime, whose
// ReplicatedJobs say which step each runs.
func (j *job) fromTrainer() bool {
	for i := range j.o.Spec.ReplicatedJobs {
		if _, ok := j.o.Spec.ReplicatedJobs[i].Template.Labels[LabelTrainJobAncestor]; ok {
			return true
		}
	}
	return false
}

// mpiTrainer: the JobSet was made from a Trainer MPI runtime, whose
// launcher starts the ranks of its node step.
func (j *job) mpiTrainer() bool {
	return j.fromTrainer() && j.replicatedJob(TrainerLauncher) != nil && j.replicatedJob(TrainerNode) != nil
}

// runsRanks: in a JobSet made from a Trainer runtime only the trainer
// step runs ranks, and with an MPI runtime its node step (the launcher,
// labelled as the trainer step, runs mpirun); in any other JobSet every
// ReplicatedJob does. A launcher that runs as a node
// (runLauncherAsNode) is not told apart here: it is taken for a launcher.
func (j *job) runsRanks(rj *jobsetapi.ReplicatedJob) bool {
	switch {
	case !j.fromTrainer():
		return true
	case j.mpiTrainer():
		return rj.Name == TrainerNode
	}
	return rj.Template.Labels[LabelTrainJobAncestor] == AncestorTrainer
}

var _ jobkind.LauncherHolder = (*job)(nil)

// LauncherTemplate: the launcher of a JobSet made from a Trainer MPI
// runtime.
func (j *job) LauncherTemplate() (string, *corev1.PodTemplateSpec) {
	if !j.mpiTrainer() {
		return "", nil
	}
	return TrainerLauncher, &j.replicatedJob(TrainerLauncher).Template.Spec.Template
}

// podsPerJob is how many pods one Job of rj runs at once to completion:
// completions, or parallelism when completions is unset (the Job
// controller's defaults: parallelism 1).
func podsPerJob(rj *jobsetapi.ReplicatedJob) int32 {
	s := &rj.Template.Spec
	if s.Completions != nil {
		return *s.Completions
	}
	return jobkind.Replicas(s.Parallelism, 1)
}

func (j *job) ReplicaTypes() []string {
	out := make([]string, len(j.o.Spec.ReplicatedJobs))
	for i := range j.o.Spec.ReplicatedJobs {
		out[i] = j.o.Spec.ReplicatedJobs[i].Name
	}
	return out
}

// ReplicaSpecs: one per ReplicatedJob in spec order, its count the pods
// of all its Jobs (replicas x pods per Job).
func (j *job) ReplicaSpecs() []jobkind.ReplicaSpec {
	out := make([]jobkind.ReplicaSpec, 0, len(j.o.Spec.ReplicatedJobs))
	for i := range j.o.Spec.ReplicatedJobs {
		rj := &j.o.Spec.ReplicatedJobs[i]
		out = append(out, jobkind.ReplicaSpec{
			Type: rj.Name, Replicas: rj.Replicas * podsPerJob(rj), Template: &rj.Template.Spec.Template, RunsRanks: j.runsRanks(rj),
		})
	}
	return out
}

func (j *job) Templates() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for i := range j.o.Spec.ReplicatedJobs {
		if rj := &j.o.Spec.ReplicatedJobs[i]; j.runsRanks(rj) {
			out[rj.Name] = &rj.Template.Spec.Template
		}
	}
	return out
}

func (j *job) TemplatePath(typ string) []string {
	for i := range j.o.Spec.ReplicatedJobs {
		if j.o.Spec.ReplicatedJobs[i].Name == typ {
			return []string{"spec", "replicatedJobs", strconv.Itoa(i), "template", "spec", "template"}
		}
	}
	return nil
}

func (j *job) replicatedJob(name string) *jobsetapi.ReplicatedJob {
	for i := range j.o.Spec.ReplicatedJobs {
		if j.o.Spec.ReplicatedJobs[i].Name == name {
			return &j.o.Spec.ReplicatedJobs[i]
		}
	}
	return nil
}

func (j *job) Validate() error {
	rjs := j.o.Spec.ReplicatedJobs
	if len(rjs) == 0 {
		return errors.New("spec.replicatedJobs is empty")
	}
	seen := map[string]bool{}
	for i := range rjs {
		rj := &rjs[i]
		path := fmt.Sprintf("spec.replicatedJobs[%d]", i)
		if rj.Name == "" || seen[rj.Name] {
			return fmt.Errorf("%s.name %q is empty or not unique", path, rj.Name)
		}
		seen[rj.Name] = true
		if err := jobkind.CheckTemplate(path, &rj.Replicas, &rj.Template.Spec.Template); err != nil {
			return err
		}
		if n := podsPerJob(rj); n < 0 || n > jobkind.MaxReplicas {
			return fmt.Errorf("%s.template.spec.completions is %d: want 0..%d", path, n, jobkind.MaxReplicas)
		}
	}
	_, err := j.RankSlots()
	return err
}

// RankSlots: the ReplicatedJobs that run ranks, in spec order, each
// numbered from where the previous one ends; within one, the pod of Job
// index i and completion index c is rank base + i x completions + c (the
// JobSet's job-global-index x completions + c when it is the only one).
// The pods of a Job must all run at once and carry an index: an Indexed
// Job with parallelism equal to completions, or one pod per Job.
func (j *job) RankSlots() ([]jobkind.RankSlot, error) {
	var out []jobkind.RankSlot
	base := 0
	for i := range j.o.Spec.ReplicatedJobs {
		rj := &j.o.Spec.ReplicatedJobs[i]
		if !j.runsRanks(rj) {
			why := fmt.Errorf("ReplicatedJob %s is %w: it runs the TrainJob's %q step, not the trainer", rj.Name, jobkind.ErrNoRank, rj.Template.Labels[LabelTrainJobAncestor])
			if j.mpiTrainer() && rj.Name == TrainerLauncher {
				why = fmt.Errorf("ReplicatedJob %s is %w: it starts the MPI ranks of ReplicatedJob %s (mpirun) and runs none itself", rj.Name, jobkind.ErrNoRank, TrainerNode)
			}
			out = append(out, jobkind.RankSlot{Type: rj.Name, NoRank: why})
			continue
		}
		path := fmt.Sprintf("spec.replicatedJobs[%d] (%s)", i, rj.Name)
		per := podsPerJob(rj)
		if per > 1 {
			s := &rj.Template.Spec
			if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
				return nil, fmt.Errorf("%s runs %d pods per Job without completionMode: Indexed: its pods carry no index to number ranks by", path, per)
			}
			if p := jobkind.Replicas(s.Parallelism, 1); p != per {
				return nil, fmt.Errorf("%s has parallelism %d and completions %d: the ranks of a gang must all run at once (want them equal)", path, p, per)
			}
		}
		n, err := jobkind.RankCount(path, rj.Replicas*per)
		if err != nil {
			return nil, err
		}
		out = append(out, jobkind.RankSlot{Type: rj.Name, Count: n, Base: base})
		base += n
	}
	return out, nil
}

// ReplicaTypeLabel reads the ReplicatedJob name the JobSet controller
// labels every pod with.
func (j *job) ReplicaTypeLabel(labels map[string]string) (value, key string, missing error) {
	if v := labels[LabelReplicatedJob]; v != "" {
		return v, LabelReplicatedJob, nil
	}
	return "", LabelReplicatedJob, fmt.Errorf("the pod has no %s label (the JobSet controller sets it on every pod): not a pod of a JobSet's Job", LabelReplicatedJob)
}

// ReplicaIndex: job index x pods per Job + completion index (0 for a Job
// of one pod, which may be non-indexed).
func (j *job) ReplicaIndex(labels map[string]string) (int, error) {
	jobIdx, err := intLabel(labels, LabelJobIndex)
	if err != nil {
		return 0, err
	}
	rj := j.replicatedJob(labels[LabelReplicatedJob])
	if rj == nil {
		return 0, fmt.Errorf("label %s=%q names no ReplicatedJob of the spec", LabelReplicatedJob, labels[LabelReplicatedJob])
	}
	per := int(podsPerJob(rj))
	c := 0
	if _, ok := labels[LabelCompletionIndex]; ok || per > 1 {
		if c, err = intLabel(labels, LabelCompletionIndex); err != nil {
			return 0, err
		}
	}
	if c >= per && per > 0 {
		return 0, fmt.Errorf("completion index %d is outside the %d completions of ReplicatedJob %s", c, per, rj.Name)
	}
	return jobIdx*per + c, nil
}

func intLabel(labels map[string]string, key string) (int, error) {
	v, ok := labels[key]
	if !ok {
		return 0, fmt.Errorf("has no %s label: %w", key, jobkind.ErrNoIndex)
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return 0, fmt.Errorf("label %s=%q is not an index: want an integer 0 or more", key, v)
	}
	return i, nil
}

// PodNameFits: the JobSet controller names Job i of ReplicatedJob r
// <jobset>-<r>-<i> (placement.GenJobName) and the Job controller names
// its pods <job>-<completion index>-<suffix> (or <job>-<suffix>).
func (j *job) PodNameFits(p *corev1.Pod, typ string) error {
	want := j.o.Name + "-" + typ + "-" + p.Labels[LabelJobIndex]
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "Job" || ref.Name != want || !strings.HasPrefix(p.Name, want+"-") {
		return fmt.Errorf("the pods of ReplicatedJob %s, Job index %s, are named %s-... and controlled by the Job %s", typ, p.Labels[LabelJobIndex], want, want)
	}
	return nil
}
