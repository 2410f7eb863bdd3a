// Package trainjob is the Kubeflow Trainer v2 TrainJob kind,
// trainer.kubeflow.org/v1alpha1 (github.com/kubeflow/trainer/v2 v2.3.0),
// read through a small typed view of its own (types.go).
//
// A TrainJob's pod templates live in its (Cluster)TrainingRuntime: the
// Trainer creates a JobSet of the TrainJob's name from the runtime,
// controls it, and sets its replicated Job `node` (the trainer step) to
// one Indexed Job of spec.trainer.numNodes pods. So a TrainJob's pods are
// controlled by that Job, the Job by the JobSet, the JobSet by the
// TrainJob; a node pod's rank is its completion index. The initializer
// steps and an MPI launcher run no rank.
package trainjob

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
)

// GroupVersion, GVK and GVR of TrainJob.
var (
	GroupVersion = schema.GroupVersion{Group: "trainer.kubeflow.org", Version: "v1alpha1"}
	GVK          = GroupVersion.WithKind("TrainJob")
	GVR          = GroupVersion.WithResource("trainjobs")
)

// The ReplicatedJobs of the Trainer's runtimes (v2.3.0, pkg/constants):
// Node runs the trainer step; the others run no rank.
const (
	Node               = "node"
	DatasetInitializer = "dataset-initializer"
	ModelInitializer   = "model-initializer"
	Launcher           = "launcher"
)

// Kind is the TrainJob kind.
var Kind jobkind.Kind = kind{}

type kind struct{}

func (kind) GVK() schema.GroupVersionKind     { return GVK }
func (kind) GVR() schema.GroupVersionResource { return GVR }
func (kind) AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &TrainJob{}, &TrainJobList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
func (kind) New() jobkind.Object              { return &TrainJob{} }
func (kind) NewList() jobkind.ObjectList      { return &TrainJobList{} }
func (kind) PodLabels() []string              { return jobset.Kind.PodLabels() }
func (kind) PodJobNameLabel() string          { return jobset.LabelJobSetName } // the JobSet has the TrainJob's name
func (kind) ControlledBy() []schema.GroupKind { return nil }
func (kind) Launcher() string                 { return "" }
func (kind) OperatorName() string             { return "" }
func (kind) OwnsThroughBatchJob() bool        { return true }

// Strip: a TrainJob holds no pod templates; the runtime patches are
// dropped (the controller never reads them), but for the mutating
// webhook's own, which says how many node pods the runtime runs.
func (kind) Strip(o jobkind.Object) {
	tj := o.(*TrainJob)
	tj.Spec.RuntimePatches = slices.DeleteFunc(tj.Spec.RuntimePatches, func(p RuntimePatch) bool { return p.Manager != contract.RuntimePatchManager })
	if len(tj.Spec.RuntimePatches) == 0 {
		tj.Spec.RuntimePatches = nil
	}
}

func (kind) Wrap(o jobkind.Object) (jobkind.Job, error) {
	tj, ok := o.(*TrainJob)
	if !ok {
		return nil, fmt.Errorf("%T is not a %s", o, GVK.Kind)
	}
	return &job{tj}, nil
}

// RestartAttempt implements jobkind.Restarter: a TrainJob's pods are its
// JobSet's.
func (kind) RestartAttempt(labels map[string]string) (int32, bool) {
	return jobset.RestartAttempt(labels)
}

type job struct{ o *TrainJob }

var _ jobkind.Job = (*job)(nil)

func (j *job) GVK() schema.GroupVersionKind { return GVK }
func (j *job) Kind() string                 { return GVK.Kind }
func (j *job) Namespace() string            { return j.o.Namespace }
func (j *job) Name() string                 { return j.o.Name }
func (j *job) Object() jobkind.Object       { return j.o }
func (j *job) Suspended() bool              { return j.o.Spec.Suspend != nil && *j.o.Spec.Suspend }
func (j *job) SetSuspended(v bool)          { j.o.Spec.Suspend = &v }

// Templates: none; they are the runtime's.
func (j *job) Templates() map[string]*corev1.PodTemplateSpec {
	return map[string]*corev1.PodTemplateSpec{}
}
func (j *job) TemplatePath(string) []string { return nil }

func (j *job) ReplicaTypes() []string {
	return []string{Node, DatasetInitializer, ModelInitializer, Launcher}
}

// numNodes is how many node pods run ranks: spec.trainer.numNodes, one
// less (at least one) when the runtime runs its MPI launcher as a node
// (the Trainer's count, v2.3.0 EnforceMLPolicy); nil when the TrainJob
// sets none.
func (j *job) numNodes() *int32 {
	if j.o.Spec.Trainer == nil || j.o.Spec.Trainer.NumNodes == nil {
		return nil
	}
	n := *j.o.Spec.Trainer.NumNodes
	if j.launcherIsNode() {
		n = max(n-1, 1)
	}
	return &n
}

// launcherIsNode: the mutating webhook found, when the TrainJob was
// created, that its runtime runs the MPI launcher as a node, and said so
// in its runtime patch (contract.LabelMPILauncherIsNode).
func (j *job) launcherIsNode() bool {
	for _, p := range j.o.Spec.RuntimePatches {
		if p.Manager == contract.RuntimePatchManager && p.TrainingRuntimeSpec != nil && p.TrainingRuntimeSpec.Template != nil &&
			p.TrainingRuntimeSpec.Template.Metadata != nil && p.TrainingRuntimeSpec.Template.Metadata.Labels[contract.LabelMPILauncherIsNode] == "true" {
			return true
		}
	}
	return false
}

// NprocPerNode is spec.trainer.numProcPerNode (PET_NPROC_PER_NODE).
func (j *job) NprocPerNode() *string {
	if t := j.o.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
		s := strconv.Itoa(int(*t.NumProcPerNode))
		return &s
	}
	return nil
}

// nodeTemplate is the part of a node pod the TrainJob itself decides:
// the trainer container `node` with spec.trainer.resourcesPerNode, which
// the Trainer merges into the runtime's (v2.3.0, newRuntimeInfo). The
// pods from the runtime itself: Resolve.
func (j *job) nodeTemplate() *corev1.PodTemplateSpec {
	c := corev1.Container{Name: Node}
	if t := j.o.Spec.Trainer; t != nil && t.ResourcesPerNode != nil {
		c.Resources = *t.ResourcesPerNode.DeepCopy()
	}
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
}

// ReplicaSpecs: the node step, spec.trainer.numNodes pods, left out when
// the TrainJob does not set numNodes (the runtime's count then applies,
// which the TrainJob alone does not tell).
func (j *job) ReplicaSpecs() []jobkind.ReplicaSpec {
	n := j.numNodes()
	if n == nil {
		return nil
	}
	return []jobkind.ReplicaSpec{{Type: Node, Replicas: *n, Template: j.nodeTemplate(), RunsRanks: true}}
}

var errNoNumNodes = errors.New("spec.trainer.numNodes is not set: a gated TrainJob must say its node count (the runtime's default is not read by rankgate)")

func (j *job) Validate() error {
	if j.o.Spec.RuntimeRef.Name == "" {
		return errors.New("spec.runtimeRef.name is empty")
	}
	_, err := j.RankSlots()
	return err
}

// RankSlots: node pod c (completion index) is rank c; the initializers
// and the MPI launcher are no rank.
func (j *job) RankSlots() ([]jobkind.RankSlot, error) { return rankSlots(j.numNodes()) }

func rankSlots(n *int32) ([]jobkind.RankSlot, error) {
	if n == nil {
		return nil, errNoNumNodes
	}
	count, err := jobkind.RankCount("spec.trainer.numNodes", *n)
	if err != nil {
		return nil, err
	}
	out := []jobkind.RankSlot{{Type: Node, Count: count}}
	for _, t := range []string{DatasetInitializer, ModelInitializer, Launcher} {
		out = append(out, jobkind.RankSlot{Type: t, NoRank: fmt.Errorf("the TrainJob's %s pod is %w: only its %s step runs ranks", t, jobkind.ErrNoRank, Node)})
	}
	return out, nil
}

// OwnsPod: the JobSet controller labels every pod with the JobSet's
// name, which is the TrainJob's.
func (j *job) OwnsPod(p *corev1.Pod) bool {
	return p.Namespace == j.o.Namespace && p.Labels[jobset.LabelJobSetName] == j.o.Name
}

func (j *job) ReplicaTypeLabel(labels map[string]string) (value, key string, missing error) {
	if v := labels[jobset.LabelReplicatedJob]; v != "" {
		return v, jobset.LabelReplicatedJob, nil
	}
	return "", jobset.LabelReplicatedJob, fmt.Errorf("the pod has no %s label (the JobSet controller sets it on every pod of a TrainJob's JobSet): not a pod of this TrainJob", jobset.LabelReplicatedJob)
}

// ReplicaIndex: the node step is one Job (job index 0, the Trainer sets
// its replicas to 1) and a pod's index is its completion index.
func (j *job) ReplicaIndex(labels map[string]string) (int, error) {
	for _, key := range []string{jobset.LabelJobIndex, jobset.LabelCompletionIndex} {
		if _, ok := labels[key]; !ok {
			return 0, fmt.Errorf("has no %s label: %w", key, jobkind.ErrNoIndex)
		}
	}
	ji, err1 := strconv.Atoi(labels[jobset.LabelJobIndex])
	c, err2 := strconv.Atoi(labels[jobset.LabelCompletionIndex])
	switch {
	case err1 != nil || ji < 0:
		return 0, fmt.Errorf("label %s=%q is not an index: want an integer 0 or more", jobset.LabelJobIndex, labels[jobset.LabelJobIndex])
	case err2 != nil || c < 0:
		return 0, fmt.Errorf("label %s=%q is not an index: want an integer 0 or more", jobset.LabelCompletionIndex, labels[jobset.LabelCompletionIndex])
	case ji != 0:
		return 0, fmt.Errorf("label %s=%d: the Trainer runs the %s step as one Job (index 0)", jobset.LabelJobIndex, ji, Node)
	}
	return c, nil
}

// PodNameFits: Job <trainjob>-<step>-0, pods <job>-<index>-<suffix>.
func (j *job) PodNameFits(p *corev1.Pod, typ string) error {
	want := j.o.Name + "-" + typ + "-0"
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "Job" || ref.Name != want || !strings.HasPrefix(p.Name, want+"-") {
		return fmt.Errorf("the Trainer's %s pods are named %s-... and controlled by the Job %s", typ, want, want)
	}
	return nil
}

var _ jobkind.LabelPropagator = (*job)(nil)

// PropagateLabels: the Trainer copies the labels of each runtime patch's
// template metadata onto the JobSet it creates (v2.3.0, newRuntimeInfo),
// not the TrainJob's own labels; so a runtime patch of manager carries
// them, unless one of that manager is there already.
func (j *job) PropagateLabels(manager string, labels map[string]string) (path []string, n int, item any, needed bool) {
	for _, p := range j.o.Spec.RuntimePatches {
		if p.Manager == manager {
			return nil, 0, nil, false
		}
	}
	item = RuntimePatch{Manager: manager, TrainingRuntimeSpec: &TrainingRuntimeSpecPatch{
		Template: &JobSetTemplatePatch{Metadata: &PatchMetadata{Labels: labels}},
	}}
	return []string{"spec", "runtimePatches"}, len(j.o.Spec.RuntimePatches), item, true
}
