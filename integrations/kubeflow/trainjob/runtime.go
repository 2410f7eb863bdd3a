package trainjob

import (
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"
)

// The runtimes a TrainJob names in spec.runtimeRef (Trainer v2.3.0,
// pkg/apis/trainer/v1alpha1/trainingruntime_types.go).
const (
	KindTrainingRuntime        = "TrainingRuntime"
	KindClusterTrainingRuntime = "ClusterTrainingRuntime"
)

// GVRs of the two runtime kinds (the first namespaced, the second not).
var (
	TrainingRuntimeGVR        = GroupVersion.WithResource("trainingruntimes")
	ClusterTrainingRuntimeGVR = GroupVersion.WithResource("clustertrainingruntimes")
)

// Runtime is the part of a TrainingRuntime or ClusterTrainingRuntime that
// shapes a TrainJob's pods: its ML policy (node count, MPI launcher) and
// its JobSet template. Read like TrainJob through a view of its own.
type Runtime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              RuntimeSpec `json:"spec"`
}

// RuntimeSpec is the part of TrainingRuntimeSpec rankgate reads.
type RuntimeSpec struct {
	MLPolicy *MLPolicy      `json:"mlPolicy,omitempty"`
	Template JobSetTemplate `json:"template"`
}

// MLPolicy: numNodes is the runtime's default node count; only the MPI
// policy changes which pods run (its launcher may run as a node).
type MLPolicy struct {
	NumNodes *int32     `json:"numNodes,omitempty"`
	MPI      *MPIPolicy `json:"mpi,omitempty"`
}

// MPIPolicy is the part of the MPI policy that decides the pods.
type MPIPolicy struct {
	NumProcPerNode    *int32 `json:"numProcPerNode,omitempty"`
	RunLauncherAsNode *bool  `json:"runLauncherAsNode,omitempty"`
}

// JobSetTemplate is the JobSet the Trainer makes from the runtime.
type JobSetTemplate struct {
	Metadata metav1.ObjectMeta    `json:"metadata,omitempty"`
	Spec     jobsetapi.JobSetSpec `json:"spec"`
}

// RuntimeKey names one runtime: Namespace is "" for a
// ClusterTrainingRuntime.
type RuntimeKey struct {
	Kind      string
	Namespace string
	Name      string
}

func (k RuntimeKey) String() string {
	if k.Namespace == "" {
		return k.Kind + " " + k.Name
	}
	return k.Kind + " " + k.Namespace + "/" + k.Name
}

// GVR is the resource of the key's kind.
func (k RuntimeKey) GVR() schema.GroupVersionResource {
	if k.Kind == KindTrainingRuntime {
		return TrainingRuntimeGVR
	}
	return ClusterTrainingRuntimeGVR
}

// Key is the runtime a TrainJob in namespace ns names: the kind defaults
// to ClusterTrainingRuntime (the CRD's default), a TrainingRuntime is the
// TrainJob's namespace's.
func (r RuntimeRef) Key(ns string) (RuntimeKey, error) {
	if r.Name == "" {
		return RuntimeKey{}, errors.New("spec.runtimeRef.name is empty")
	}
	if r.APIGroup != nil && *r.APIGroup != GroupVersion.Group {
		return RuntimeKey{}, fmt.Errorf("spec.runtimeRef.apiGroup %q: rankgate reads the Trainer's runtimes (%s) only", *r.APIGroup, GroupVersion.Group)
	}
	kind := KindClusterTrainingRuntime
	if r.Kind != nil {
		kind = *r.Kind
	}
	switch kind {
	case KindClusterTrainingRuntime:
		return RuntimeKey{Kind: kind, Name: r.Name}, nil
	case KindTrainingRuntime:
		return RuntimeKey{Kind: kind, Namespace: ns, Name: r.Name}, nil
	}
	return RuntimeKey{}, fmt.Errorf("spec.runtimeRef.kind %q: want %s or %s", kind, KindTrainingRuntime, KindClusterTrainingRuntime)
}

// IsRuntime tells whether apiVersion and kind are a runtime's.
func IsRuntime(apiVersion, kind string) bool {
	return apiVersion == GroupVersion.String() && (kind == KindTrainingRuntime || kind == KindClusterTrainingRuntime)
}

// DecodeRuntime reads one runtime as `kubectl get -o json` prints it.
func DecodeRuntime(raw []byte) (*Runtime, error) {
	rt := &Runtime{}
	if err := json.Unmarshal(raw, rt); err != nil {
		return nil, err
	}
	if !IsRuntime(rt.APIVersion, rt.Kind) {
		return nil, fmt.Errorf("%s %s is not a %s or %s", rt.APIVersion, rt.Kind, KindTrainingRuntime, KindClusterTrainingRuntime)
	}
	if rt.Name == "" {
		return nil, errors.New("metadata.name is empty")
	}
	if rt.Kind == KindTrainingRuntime && rt.Namespace == "" {
		return nil, errors.New("metadata.namespace is empty (a TrainingRuntime lives in a namespace)")
	}
	if rt.Kind == KindClusterTrainingRuntime {
		rt.Namespace = ""
	}
	defaultReplicas(raw, rt)
	return rt, nil
}

// defaultReplicas sets replicas to 1 on the ReplicatedJobs that leave it
// out, as the API server's schema default does (a runtime written by
// hand rather than read back).
func defaultReplicas(raw []byte, rt *Runtime) {
	var shape struct {
		Spec struct {
			Template struct {
				Spec struct {
					ReplicatedJobs []map[string]json.RawMessage `json:"replicatedJobs"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if json.Unmarshal(raw, &shape) != nil {
		return
	}
	rjs := rt.Spec.Template.Spec.ReplicatedJobs
	for i, rj := range shape.Spec.Template.Spec.ReplicatedJobs {
		if _, set := rj["replicas"]; !set && i < len(rjs) {
			rjs[i].Replicas = 1
		}
	}
}

// Key names the runtime.
func (rt *Runtime) Key() RuntimeKey {
	return RuntimeKey{Kind: rt.Kind, Namespace: rt.Namespace, Name: rt.Name}
}
