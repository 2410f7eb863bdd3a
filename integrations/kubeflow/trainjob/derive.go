package trainjob

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
)

// Derive is the JobSet spec the Trainer (v2.3.0) makes for tj from its
// runtime rt, as far as it shapes the pods: the runtime's template with
// tj's runtime patches applied (a strategic merge patch of the JobSet
// spec each, in order, the ReplicatedJobs kept in the runtime's order),
// the trainer step's node count (tj's numNodes, else the runtime's
// mlPolicy.numNodes, else 1; with an MPI policy it is the `node` step's,
// one less when the launcher runs as a node), spec.trainer.resourcesPerNode
// merged over the `node` container's resources (key by key; claims by
// name), and the trainer's image, command, args and env on that
// container. Each ReplicatedJob runs its count of pods as one Indexed Job
// (parallelism = completions). The Trainer's own env (PET_*, the MPI
// hostfile) and volumes are not added: they do not change where a pod fits.
func Derive(tj *TrainJob, rt *Runtime) (*jobsetapi.JobSetSpec, error) {
	spec := rt.Spec.Template.Spec.DeepCopy()
	if len(spec.ReplicatedJobs) == 0 {
		return nil, fmt.Errorf("%s has no spec.template.spec.replicatedJobs", rt.Key())
	}
	if err := applyPatches(tj, spec); err != nil {
		return nil, err
	}
	var tr Trainer
	if tj.Spec.Trainer != nil {
		tr = *tj.Spec.Trainer
	}
	p := newPolicy(rt.Spec.MLPolicy)
	for i := range spec.ReplicatedJobs {
		rj := &spec.ReplicatedJobs[i]
		trainer := rj.Template.Labels[jobset.LabelTrainJobAncestor] == jobset.AncestorTrainer
		count := p.count(rj, trainer, tr.NumNodes)
		if count < 0 {
			return nil, fmt.Errorf("ReplicatedJob %s would run %d pods: want 0 or more", rj.Name, count)
		}
		rj.Template.Spec.Parallelism, rj.Template.Spec.Completions = ptr.To(count), ptr.To(count)
		if rj.Template.Spec.CompletionMode == nil {
			// The JobSet webhook's default: each pod has its index.
			rj.Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		}
		if trainer {
			rj.Replicas = 1
		}
		if node := nodeContainer(&rj.Template.Spec.Template.Spec); node != nil {
			p.applyTrainer(node, &tr, rj.Name, trainer)
		}
	}
	return spec, nil
}

// policy is what the runtime's ML policy changes in the steps.
type policy struct {
	set, mpi, launcherAsNode bool
	numNodes                 *int32
}

func newPolicy(pol *MLPolicy) policy {
	if pol == nil {
		return policy{}
	}
	mpi := pol.MPI != nil
	return policy{set: true, mpi: mpi, launcherAsNode: mpi && ptr.Deref(pol.MPI.RunLauncherAsNode, false), numNodes: pol.NumNodes}
}

// count is the pods of one Job of rj: its parallelism, the runtime's
// numNodes on the trainer step, then the TrainJob's numNodes on the
// trainer step, or with MPI on the node step (less the launcher when it
// runs as a node).
func (p policy) count(rj *jobsetapi.ReplicatedJob, trainer bool, numNodes *int32) int32 {
	count := ptr.Deref(rj.Template.Spec.Parallelism, 1)
	if trainer && p.set {
		count = ptr.Deref(p.numNodes, 1)
	}
	switch {
	case numNodes == nil:
	case p.mpi && rj.Name == Node && p.launcherAsNode:
		count = max(*numNodes-1, 1)
	case p.mpi && rj.Name == Node, !p.mpi && trainer:
		count = *numNodes
	}
	return count
}

// applyTrainer writes the TrainJob's trainer settings on the node
// container of step name: resources on the trainer step (and with MPI's
// launcher as a node, on the node step), image, command and args on the
// trainer step, env on both.
func (p policy) applyTrainer(node *corev1.Container, tr *Trainer, name string, trainer bool) {
	nodeAsNode := p.launcherAsNode && name == Node
	if tr.ResourcesPerNode != nil && ((trainer && p.set) || nodeAsNode) {
		node.Resources = mergeResources(node.Resources, *tr.ResourcesPerNode)
	}
	if trainer {
		if tr.Image != nil {
			node.Image = *tr.Image
		}
		if tr.Command != nil {
			node.Command = slices.Clone(tr.Command)
		}
		if tr.Args != nil {
			node.Args = slices.Clone(tr.Args)
		}
	}
	if trainer || nodeAsNode {
		node.Env = upsertEnv(node.Env, tr.Env)
	}
}

// applyPatches applies each runtime patch's JobSet spec in turn.
func applyPatches(tj *TrainJob, spec *jobsetapi.JobSetSpec) error {
	order := make(map[string]int, len(spec.ReplicatedJobs))
	for i, rj := range spec.ReplicatedJobs {
		order[rj.Name] = i
	}
	for _, p := range tj.Spec.RuntimePatches {
		if p.TrainingRuntimeSpec == nil || p.TrainingRuntimeSpec.Template == nil || len(p.TrainingRuntimeSpec.Template.Spec) == 0 {
			continue
		}
		src, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		merged, err := strategicpatch.StrategicMergePatch(src, p.TrainingRuntimeSpec.Template.Spec, jobsetapi.JobSetSpec{})
		if err != nil {
			return fmt.Errorf("spec.runtimePatches (manager %s): %w", p.Manager, err)
		}
		*spec = jobsetapi.JobSetSpec{}
		if err := json.Unmarshal(merged, spec); err != nil {
			return fmt.Errorf("spec.runtimePatches (manager %s): %w", p.Manager, err)
		}
	}
	sort.SliceStable(spec.ReplicatedJobs, func(i, j int) bool {
		return order[spec.ReplicatedJobs[i].Name] < order[spec.ReplicatedJobs[j].Name]
	})
	return nil
}

func nodeContainer(p *corev1.PodSpec) *corev1.Container {
	for i := range p.Containers {
		if p.Containers[i].Name == Node {
			return &p.Containers[i]
		}
	}
	return nil
}

// mergeResources lays over on base: limits and requests key by key,
// claims by name.
func mergeResources(base, over corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *base.DeepCopy()
	for _, m := range []struct {
		dst *corev1.ResourceList
		src corev1.ResourceList
	}{{&out.Limits, over.Limits}, {&out.Requests, over.Requests}} {
		if len(m.src) > 0 && *m.dst == nil {
			*m.dst = corev1.ResourceList{}
		}
		for k, v := range m.src {
			(*m.dst)[k] = v.DeepCopy()
		}
	}
	for _, c := range over.Claims {
		if i := slices.IndexFunc(out.Claims, func(b corev1.ResourceClaim) bool { return b.Name == c.Name }); i >= 0 {
			out.Claims[i] = c
		} else {
			out.Claims = append(out.Claims, c)
		}
	}
	return out
}

// upsertEnv sets each variable of add, replacing one of the same name.
func upsertEnv(env, add []corev1.EnvVar) []corev1.EnvVar {
	for _, e := range add {
		if i := slices.IndexFunc(env, func(x corev1.EnvVar) bool { return x.Name == e.Name }); i >= 0 {
			env[i] = *e.DeepCopy()
		} else {
			env = append(env, *e.DeepCopy())
		}
	}
	return env
}
