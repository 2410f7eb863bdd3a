package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/verdict"
)

// A TrainJob holds no pod templates: its pods come from its
// (Cluster)TrainingRuntime. Offline the runtimes are read from the files
// (AddRuntime), live from the API server (Live.LoadRuntime); both then
// judge the pods trainjob.Derive makes, whether or not the JobSet exists.

// RuntimeMissingError: a TrainJob's runtime is not in the input. diagnose
// exits 2 on it (bad input), saying what to add. Its text does not name
// the TrainJob: the callers' context does.
type RuntimeMissingError struct {
	Runtime trainjob.RuntimeKey
	Live    bool
}

func (e *RuntimeMissingError) Error() string {
	get := "kubectl get clustertrainingruntime " + e.Runtime.Name + " -o yaml"
	if e.Runtime.Kind == trainjob.KindTrainingRuntime {
		get = "kubectl get trainingruntime " + e.Runtime.Name + " -n " + e.Runtime.Namespace + " -o yaml"
	}
	if e.Live {
		return fmt.Sprintf("its runtime %s does not exist (or its CRD is not installed): the Trainer creates no pods for it either; create the runtime, or point spec.runtimeRef at one (%s)", e.Runtime, get)
	}
	return fmt.Sprintf("its runtime %s is not in the files: a TrainJob's pods are made from it; add its dump (%s, or kubectl get trainjobs,trainingruntimes,clustertrainingruntimes -A -o yaml)", e.Runtime, get)
}

// ExitCode: a missing input is exit 2.
func (e *RuntimeMissingError) ExitCode() int { return verdict.ExitUsage }

// AddRuntime adds a TrainingRuntime or ClusterTrainingRuntime; a second
// one of the same kind and name is an error.
func (b *Builder) AddRuntime(rt *trainjob.Runtime) error {
	if b.runtimes == nil {
		b.runtimes = map[trainjob.RuntimeKey]*trainjob.Runtime{}
	}
	k := rt.Key()
	if _, ok := b.runtimes[k]; ok {
		return fmt.Errorf("%s is in the input twice", k)
	}
	b.runtimes[k] = rt
	return nil
}

// AddRuntimeSnapshot adds a ConfigMap if it is a runtime snapshot
// (trainjob.SnapshotOf); added tells whether it was.
func (b *Builder) AddRuntimeSnapshot(cm *corev1.ConfigMap) (added bool, err error) {
	s, ok, err := trainjob.SnapshotOf(cm)
	if !ok || err != nil {
		return ok, err
	}
	if b.snapshots == nil {
		b.snapshots = map[string]trainjob.Snapshot{}
	}
	b.snapshots[cm.Namespace+"/"+s.Job] = s
	return true, nil
}

// Resolve returns j with its pods as its operator makes them: a TrainJob
// resolved with its runtime (trainjob.Resolve), any other job as it is.
// As the Trainer, it takes the TrainJob's runtime snapshot when there is
// one, else the runtime itself. Its errors do not name j (callers do).
func (b *Builder) Resolve(j kubeflow.Job) (kubeflow.Job, error) {
	key, ok, err := trainjob.RuntimeOf(j)
	if !ok {
		return j, nil
	}
	if err != nil {
		return nil, err
	}
	rt := b.runtimes[key]
	if s, found := b.snapshots[j.Namespace()+"/"+j.Name()]; found && s.For(j.Object().(*trainjob.TrainJob), key) {
		rt = s.Runtime
	}
	if rt == nil {
		return nil, &RuntimeMissingError{Runtime: key, Live: b.live}
	}
	r, err := trainjob.Resolve(j, rt)
	if err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// loadRuntime decodes one runtime of a dump.
func loadRuntime(b *Builder, raw json.RawMessage) error {
	rt, err := trainjob.DecodeRuntime(raw)
	if err != nil {
		return err
	}
	return b.AddRuntime(rt)
}

// LoadRuntime adds the runtime of a TrainJob to b (nothing for another
// kind). A runtime that does not exist is a RuntimeMissingError.
func (l *Live) LoadRuntime(ctx context.Context, b *Builder, j kubeflow.Job) error {
	b.live = true
	key, ok, err := trainjob.RuntimeOf(j)
	if !ok || err != nil {
		return err // an invalid runtimeRef is Resolve's to report
	}
	if found, err := l.loadSnapshot(ctx, b, j, key); found || err != nil {
		return err
	}
	res := l.Dynamic.Resource(key.GVR())
	u, err := res.Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("TrainJob %s/%s: %w", j.Namespace(), j.Name(), &RuntimeMissingError{Runtime: key, Live: true})
	case err != nil:
		return apiErrorf("get %s: %w", key, err)
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		return apiErrorf("%s: %w", key, err)
	}
	rt, err := trainjob.DecodeRuntime(raw)
	if err != nil {
		return &APIError{Err: fmt.Errorf("%s: %w", key, err)}
	}
	return b.AddRuntime(rt)
}

// loadSnapshot adds the TrainJob's runtime snapshot ConfigMap, if it has
// one; found tells whether it was. A user who may not read ConfigMaps is
// told the runtime stands in for it.
func (l *Live) loadSnapshot(ctx context.Context, b *Builder, j kubeflow.Job, key trainjob.RuntimeKey) (found bool, err error) {
	name := trainjob.SnapshotName(j.Name())
	cm, err := l.Core.CoreV1().ConfigMaps(j.Namespace()).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsForbidden(err):
		l.Notes = append(l.Notes, fmt.Sprintf("cannot read ConfigMap %s/%s, the Trainer's snapshot of the runtime TrainJob %s was made from: its pods are judged from the runtime as it is now", j.Namespace(), name, j.Name()))
		return false, nil
	case err != nil:
		return false, apiErrorf("get ConfigMap %s/%s: %w", j.Namespace(), name, err)
	}
	if _, err := b.AddRuntimeSnapshot(cm); err != nil {
		return false, &APIError{Err: err}
	}
	s, ok := b.snapshots[j.Namespace()+"/"+j.Name()]
	return ok && s.For(j.Object().(*trainjob.TrainJob), key), nil
}
