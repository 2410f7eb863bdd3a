// Package pytorchjob is the PyTorchJob kind, kubeflow.org/v1
// (github.com/kubeflow/training-operator v1.9.4): replica types Master and
// Worker, every pod a rank.
package pytorchjob

import (
	"errors"
	"fmt"

	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/internal/intern"
)

// GVK and GVR of PyTorchJob.
var (
	GVK = kftraining.GroupVersion.WithKind(kftraining.PyTorchJobKind)
	GVR = kftraining.GroupVersion.WithResource("pytorchjobs")
)

// Kind is the PyTorchJob kind.
var Kind jobkind.Kind = kind{}

type kind struct{}

func (kind) GVK() schema.GroupVersionKind        { return GVK }
func (kind) GVR() schema.GroupVersionResource    { return GVR }
func (kind) AddToScheme(s *runtime.Scheme) error { return kftraining.AddToScheme(s) }
func (kind) New() jobkind.Object                 { return &kftraining.PyTorchJob{} }
func (kind) NewList() jobkind.ObjectList         { return &kftraining.PyTorchJobList{} }
func (kind) PodLabels() []string                 { return jobkind.KubeflowPodLabels }
func (kind) PodJobNameLabel() string             { return jobkind.LabelJobName }
func (kind) ControlledBy() []schema.GroupKind    { return nil }
func (kind) Launcher() string                    { return "" }
func (kind) OperatorName() string                { return "pytorchjob-controller" } // training-operator v1.9.4
func (kind) OwnsThroughBatchJob() bool           { return false }

func (kind) Wrap(o jobkind.Object) (jobkind.Job, error) {
	pj, ok := o.(*kftraining.PyTorchJob)
	if !ok {
		return nil, fmt.Errorf("%T is not a %s", o, GVK.Kind)
	}
	return &job{pj}, nil
}

// specs shares equal replica specs, once stripped of their templates,
// between cached jobs (most jobs' Masters are alike, as are Workers of
// one size): a spec's type has room for a template (896 bytes).
var specs intern.Table[kftraining.ReplicaSpec]

func (kind) Strip(o jobkind.Object) {
	j := o.(*kftraining.PyTorchJob)
	for t, s := range j.Spec.PyTorchReplicaSpecs {
		if s != nil {
			jobkind.StripTemplate(&s.Template)
			j.Spec.PyTorchReplicaSpecs[t] = intern.ShareJSON(&specs, s)
		}
	}
}

var types = []kftraining.ReplicaType{kftraining.PyTorchJobReplicaTypeMaster, kftraining.PyTorchJobReplicaTypeWorker}

type job struct{ o *kftraining.PyTorchJob }

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
func (j *job) NprocPerNode() *string { return j.o.Spec.NprocPerNode }

func (j *job) TemplatePath(typ string) []string {
	return []string{"spec", "pytorchReplicaSpecs", typ, "template"}
}

func (j *job) ReplicaIndex(labels map[string]string) (int, error) {
	return jobkind.ReplicaIdxLabel(labels)
}

func (j *job) Templates() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for t, r := range j.o.Spec.PyTorchReplicaSpecs {
		if r != nil {
			out[string(t)] = &r.Template
		}
	}
	return out
}

func (j *job) ReplicaTypes() []string {
	return []string{string(kftraining.PyTorchJobReplicaTypeMaster), string(kftraining.PyTorchJobReplicaTypeWorker)}
}

// ReplicaSpecs: a nil count is 1 for Master and Worker (training-operator
// v1.9.4, SetDefaults_PyTorchJob).
func (j *job) ReplicaSpecs() []jobkind.ReplicaSpec {
	var out []jobkind.ReplicaSpec
	for _, t := range types {
		if r := j.o.Spec.PyTorchReplicaSpecs[t]; r != nil {
			out = append(out, jobkind.ReplicaSpec{Type: string(t), Replicas: jobkind.Replicas(r.Replicas, 1), Template: &r.Template, RunsRanks: true})
		}
	}
	return out
}

func (j *job) Validate() error {
	specs := j.o.Spec.PyTorchReplicaSpecs
	if len(specs) == 0 {
		return errors.New("spec.pytorchReplicaSpecs is empty: want Master and/or Worker")
	}
	for t, r := range specs {
		if t != kftraining.PyTorchJobReplicaTypeMaster && t != kftraining.PyTorchJobReplicaTypeWorker {
			return fmt.Errorf("spec.pytorchReplicaSpecs: unknown replica type %q (want Master or Worker)", t)
		}
		path := "spec.pytorchReplicaSpecs." + string(t)
		if r == nil {
			return fmt.Errorf("%s is null", path)
		}
		if err := jobkind.CheckTemplate(path, r.Replicas, &r.Template); err != nil {
			return err
		}
	}
	if m := specs[kftraining.PyTorchJobReplicaTypeMaster]; m != nil && jobkind.Replicas(m.Replicas, 1) > 1 {
		return fmt.Errorf("spec.pytorchReplicaSpecs.Master.replicas is %d: a PyTorchJob has at most one Master", jobkind.Replicas(m.Replicas, 1))
	}
	return nil
}

// RankSlots: Master 0 is rank 0, Worker i is rank i+1 when the spec has a
// Master, else rank i. Verified against training-operator v1.9.4:
// pkg/controller.v1/common/pod.go (ReconcilePods, createNewPod) labels a
// pod with the replica type in lower case and its index;
// pkg/controller.v1/pytorch/envvar.go (setPodEnv) sets RANK to the index,
// plus 1 for a Worker, whenever PyTorchReplicaSpecs[Master] is not nil,
// and WORLD_SIZE to the sum of all replicas. Without a Master it sets no
// RANK (torchrun's rendezvous assigns node ranks); rank i for Worker i
// is then rankgate's own numbering, the one the operator also uses when
// it gives Worker 0 the master role (IsMasterRole).
func (j *job) RankSlots() ([]jobkind.RankSlot, error) {
	specs := j.o.Spec.PyTorchReplicaSpecs
	var out []jobkind.RankSlot
	base := 0
	if m := specs[kftraining.PyTorchJobReplicaTypeMaster]; m != nil {
		// pkg/webhooks/pytorch/pytorchjob_webhook.go: Master.replicas
		// "must be 1". With any other count the operator's ranks clash or
		// leave a gap (Workers start at RANK 1 either way).
		if n := jobkind.Replicas(m.Replicas, 1); n != 1 {
			return nil, fmt.Errorf("spec.pytorchReplicaSpecs.Master.replicas is %d: want 1 (the training-operator numbers Workers from RANK 1 whenever a Master is present)", n)
		}
		out = append(out, jobkind.RankSlot{Type: string(kftraining.PyTorchJobReplicaTypeMaster), Count: 1})
		base = 1
	}
	if w := specs[kftraining.PyTorchJobReplicaTypeWorker]; w != nil {
		n, err := jobkind.RankCount("spec.pytorchReplicaSpecs.Worker", jobkind.Replicas(w.Replicas, 1))
		if err != nil {
			return nil, err
		}
		out = append(out, jobkind.RankSlot{Type: string(kftraining.PyTorchJobReplicaTypeWorker), Count: n, Base: base})
	}
	return out, nil
}

// ReplicaTypeLabel reads LabelReplicaType, not LabelJobRole: the
// training-operator sets job-role=master on Worker 0 of a job without a
// Master (IsMasterRole).
func (j *job) ReplicaTypeLabel(labels map[string]string) (value, key string, missing error) {
	if v := labels[jobkind.LabelReplicaType]; v != "" {
		return v, jobkind.LabelReplicaType, nil
	}
	return "", jobkind.LabelReplicaType, fmt.Errorf("the pod has no %s label (the training-operator sets it on every replica pod): not a pod the operator created for this job", jobkind.LabelReplicaType)
}

// PodNameFits: the training-operator names the pod of replica type t,
// index i, <job>-<t>-<i>.
func (j *job) PodNameFits(p *corev1.Pod, typ string) error {
	return jobkind.IndexedPodNameFits(j.o.Name, p, typ, 0)
}
