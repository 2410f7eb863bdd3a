package trainjob

import (
	"bytes"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TrainJob is the part of a trainer.kubeflow.org/v1alpha1 TrainJob
// (Kubeflow Trainer v2.3.0, pkg/apis/trainer/v1alpha1/trainjob_types.go)
// that rankgate reads and writes: the Trainer's own module needs an older
// k8s.io/api than rankgate builds with. Fields it does not name are not
// decoded; rankgate only ever patches a TrainJob (merge patches of what
// it changed), so they are never written back.
type TrainJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec `json:"spec,omitempty"`
}

// Spec is the part of TrainJobSpec rankgate reads.
type Spec struct {
	RuntimeRef     RuntimeRef     `json:"runtimeRef,omitzero"`
	Trainer        *Trainer       `json:"trainer,omitempty"`
	RuntimePatches []RuntimePatch `json:"runtimePatches,omitempty"`
	Suspend        *bool          `json:"suspend,omitempty"`
	ManagedBy      *string        `json:"managedBy,omitempty"`
}

// RuntimeRef names the (Cluster)TrainingRuntime the TrainJob runs.
type RuntimeRef struct {
	Name     string  `json:"name,omitempty"`
	APIGroup *string `json:"apiGroup,omitempty"`
	Kind     *string `json:"kind,omitempty"`
}

// Trainer is the part of the trainer settings that shapes the node pods.
type Trainer struct {
	Image            *string                      `json:"image,omitempty"`
	Command          []string                     `json:"command,omitempty"`
	Args             []string                     `json:"args,omitempty"`
	Env              []corev1.EnvVar              `json:"env,omitempty"`
	NumNodes         *int32                       `json:"numNodes,omitempty"`
	NumProcPerNode   *int32                       `json:"numProcPerNode,omitempty"`
	ResourcesPerNode *corev1.ResourceRequirements `json:"resourcesPerNode,omitempty"`
}

// RuntimePatch is one manager's patch of the runtime; rankgate writes
// only the labels it puts on the JobSet, and reads the rest to derive a
// TrainJob's pods (Derive).
type RuntimePatch struct {
	Manager             string                    `json:"manager,omitempty"`
	TrainingRuntimeSpec *TrainingRuntimeSpecPatch `json:"trainingRuntimeSpec,omitempty"`
}

// TrainingRuntimeSpecPatch patches the runtime's JobSet template.
type TrainingRuntimeSpecPatch struct {
	Template *JobSetTemplatePatch `json:"template,omitempty"`
}

// JobSetTemplatePatch: the Trainer copies metadata.labels onto the JobSet
// it creates (pkg/runtime/core/trainingruntime.go, newRuntimeInfo), and
// applies spec to the runtime's JobSet spec as a strategic merge patch
// (kept as it was written: its fields are the JobSet's).
type JobSetTemplatePatch struct {
	Metadata *PatchMetadata  `json:"metadata,omitempty"`
	Spec     json.RawMessage `json:"spec,omitempty"`
}

// PatchMetadata is the metadata a runtime patch may set.
type PatchMetadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// TrainJobList is a list of TrainJobs.
type TrainJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainJob `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (t *TrainJob) DeepCopyObject() runtime.Object { return t.DeepCopy() }

// DeepCopy copies every field.
func (t *TrainJob) DeepCopy() *TrainJob {
	if t == nil {
		return nil
	}
	out := &TrainJob{TypeMeta: t.TypeMeta}
	t.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	s, o := &t.Spec, &out.Spec
	o.RuntimeRef = RuntimeRef{Name: s.RuntimeRef.Name, APIGroup: copyPtr(s.RuntimeRef.APIGroup), Kind: copyPtr(s.RuntimeRef.Kind)}
	if s.Trainer != nil {
		o.Trainer = &Trainer{
			Image: copyPtr(s.Trainer.Image), Command: copySlice(s.Trainer.Command), Args: copySlice(s.Trainer.Args),
			NumNodes: copyPtr(s.Trainer.NumNodes), NumProcPerNode: copyPtr(s.Trainer.NumProcPerNode),
		}
		if s.Trainer.Env != nil {
			o.Trainer.Env = make([]corev1.EnvVar, len(s.Trainer.Env))
			for i := range s.Trainer.Env {
				s.Trainer.Env[i].DeepCopyInto(&o.Trainer.Env[i])
			}
		}
		if s.Trainer.ResourcesPerNode != nil {
			o.Trainer.ResourcesPerNode = s.Trainer.ResourcesPerNode.DeepCopy()
		}
	}
	if s.RuntimePatches != nil {
		o.RuntimePatches = make([]RuntimePatch, len(s.RuntimePatches))
		for i, p := range s.RuntimePatches {
			o.RuntimePatches[i] = p.deepCopy()
		}
	}
	o.Suspend, o.ManagedBy = copyPtr(s.Suspend), copyPtr(s.ManagedBy)
	return out
}

func (p RuntimePatch) deepCopy() RuntimePatch {
	out := RuntimePatch{Manager: p.Manager}
	if p.TrainingRuntimeSpec == nil {
		return out
	}
	out.TrainingRuntimeSpec = &TrainingRuntimeSpecPatch{}
	if t := p.TrainingRuntimeSpec.Template; t != nil {
		out.TrainingRuntimeSpec.Template = &JobSetTemplatePatch{Spec: bytes.Clone(t.Spec)}
		if m := t.Metadata; m != nil {
			out.TrainingRuntimeSpec.Template.Metadata = &PatchMetadata{Labels: copyMap(m.Labels), Annotations: copyMap(m.Annotations)}
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *TrainJobList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &TrainJobList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]TrainJob, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func copySlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T(nil), s...)
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
