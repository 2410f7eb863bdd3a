package trainjob

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// The Trainer (v2.3.0, pkg/runtime/core/snapshot.go) keeps the runtime a
// TrainJob was first built from in a ConfigMap of the TrainJob's
// namespace, named after it and controlled by it, and builds the JobSet
// from that copy ever after: a runtime edited or deleted since does not
// change the TrainJob's pods.
const (
	snapshotSuffix = "-runtime-snapshot"
	snapshotKey    = "runtime"
)

// SnapshotName is the name of the runtime snapshot ConfigMap of the
// TrainJob named job.
func SnapshotName(job string) string { return job + snapshotSuffix }

// Snapshot is a runtime snapshot: the runtime a TrainJob's pods are
// made from, for the TrainJob named Job whose UID is Owner.
type Snapshot struct {
	Job     string
	Owner   types.UID
	Runtime *Runtime
}

// SnapshotOf reads a ConfigMap as a runtime snapshot: ok is false for one
// that is not (its name, or no TrainJob controls it); an error says what
// is wrong with one that is.
func SnapshotOf(cm *corev1.ConfigMap) (s Snapshot, ok bool, err error) {
	job, isSnap := strings.CutSuffix(cm.Name, snapshotSuffix)
	ctl := metav1.GetControllerOf(cm)
	if !isSnap || job == "" || ctl == nil || ctl.Kind != GVK.Kind || ctl.APIVersion != GroupVersion.String() || ctl.Name != job {
		return Snapshot{}, false, nil
	}
	data, found := cm.Data[snapshotKey]
	if !found {
		return Snapshot{}, true, fmt.Errorf("runtime snapshot %s/%s has no data key %q", cm.Namespace, cm.Name, snapshotKey)
	}
	js, err := yaml.YAMLToJSON([]byte(data))
	if err != nil {
		return Snapshot{}, true, fmt.Errorf("runtime snapshot %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	rt, err := DecodeRuntime(withRuntimeType(js))
	if err != nil {
		return Snapshot{}, true, fmt.Errorf("runtime snapshot %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return Snapshot{Job: job, Owner: ctl.UID, Runtime: rt}, true, nil
}

// For tells whether s is the snapshot the Trainer uses for the TrainJob
// j: j's own (its UID), of the runtime j names (kind and name).
func (s Snapshot) For(j *TrainJob, key RuntimeKey) bool {
	return s.Job == j.Name && s.Owner != "" && s.Owner == j.UID && s.Runtime.Kind == key.Kind && s.Runtime.Name == key.Name
}

// withRuntimeType gives a runtime serialized without apiVersion and kind
// (a typed object as a client read it) the ones its namespace tells: a
// TrainingRuntime has one, a ClusterTrainingRuntime none.
func withRuntimeType(js []byte) []byte {
	var obj map[string]any
	if json.Unmarshal(js, &obj) != nil || obj == nil {
		return js
	}
	if obj["apiVersion"] != nil || obj["kind"] != nil {
		return js
	}
	kind := KindClusterTrainingRuntime
	if md, ok := obj["metadata"].(map[string]any); ok && md["namespace"] != nil && md["namespace"] != "" {
		kind = KindTrainingRuntime
	}
	obj["apiVersion"], obj["kind"] = GroupVersion.String(), kind
	out, err := json.Marshal(obj)
	if err != nil {
		return js
	}
	return out
}
