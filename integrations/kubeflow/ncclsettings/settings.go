// Package ncclsettings reads a Kubeflow job's NCCL settings from its pod
// templates for the rules of preflight/ncclenv: each rank-running replica
// type's container that holds the GPUs (its env, image, and the GPUs and
// MIG instances it asks for), with what an MPI launcher exports to every
// rank on mpirun's command line. The webhook, `rankgate diagnose` and the
// controller read a job's settings through it, so they agree.
package ncclsettings

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// Templates is one ncclenv.Rank per rank-running replica type (Rank -1,
// Replicas the spec's count), for ScopeTemplate.
func Templates(j kubeflow.Job) []ncclenv.Rank {
	var out []ncclenv.Rank
	exports := launcherExports(j)
	for _, rs := range j.ReplicaSpecs() {
		if !rs.RunsRanks || rs.Template == nil {
			continue
		}
		r, ok := fromTemplate(rs.Type, rs.Template)
		if !ok {
			continue
		}
		r.Env = r.Env.With(exports)
		r.Replicas = int(rs.Replicas)
		out = append(out, r)
	}
	return out
}

// ByRank is the template settings each rank runs with (the template of its
// replica type), for the gang verdict. Ranks the spec cannot number are
// left out.
func ByRank(j kubeflow.Job) map[int]ncclenv.Rank {
	slots, err := j.RankSlots()
	if err != nil {
		return nil
	}
	tpl := j.Templates()
	exports := launcherExports(j)
	out := map[int]ncclenv.Rank{}
	for _, s := range slots {
		if s.NoRank != nil || tpl[s.Type] == nil {
			continue
		}
		r, ok := fromTemplate(s.Type, tpl[s.Type])
		if !ok {
			continue
		}
		r.Env = r.Env.With(exports)
		for k := 0; k < s.Count && k < kubeflow.MaxReplicas; k++ {
			rr := r
			rr.Rank, rr.Replicas = s.Base+k, 1
			out[s.Base+k] = rr
		}
	}
	return out
}

// fromTemplate reads the replica type's rank container: the first
// container asking for GPUs, else the first container.
func fromTemplate(typ string, t *corev1.PodTemplateSpec) (ncclenv.Rank, bool) {
	cs := t.Spec.Containers
	if len(cs) == 0 {
		return ncclenv.Rank{}, false
	}
	c := &cs[0]
	for i := range cs {
		if gpus, _ := gpuRequest(&cs[i]); gpus > 0 {
			c = &cs[i]
			break
		}
	}
	gpus, migReq := gpuRequest(c)
	return ncclenv.Rank{
		Rank: -1, Name: typ + " (container " + c.Name + ")",
		Env: containerEnv(c), Image: c.Image, GPUs: gpus, MIGRequested: migReq,
	}, true
}

// gpuRequest counts the container's GPU resources (limits, as the device
// plugin's resources must be set there; requests where a limit is
// missing) and says whether any is a MIG instance.
func gpuRequest(c *corev1.Container) (n int, mig bool) {
	count := func(l corev1.ResourceList, seen map[corev1.ResourceName]bool) {
		for name, q := range l {
			if seen[name] || !topology.IsGPUResource(string(name)) {
				continue
			}
			seen[name] = true
			if v, ok := q.AsInt64(); ok && v > 0 {
				n += int(min(v, int64(kubeflow.MaxReplicas)))
				mig = mig || strings.HasPrefix(string(name), topology.ResourceMIGPrefix)
			}
		}
	}
	seen := map[corev1.ResourceName]bool{}
	count(c.Resources.Limits, seen)
	count(c.Resources.Requests, seen)
	return n, mig
}

// containerEnv reads a container's env as the kubelet would set it, as far
// as the template tells: valueFrom and $(VAR) references are unresolved,
// envFrom makes every other name unknown.
func containerEnv(c *corev1.Container) *ncclenv.Env {
	e := ncclenv.NewEnv(nil)
	e.Partial = len(c.EnvFrom) > 0
	for _, v := range c.Env {
		switch {
		case v.ValueFrom != nil || strings.Contains(v.Value, "$("):
			e.SetUnresolved(v.Name)
		default:
			e.Set(v.Name, v.Value) // a later entry wins, as in the kubelet
		}
	}
	return e
}

// Judge runs the NCCL settings rules on the job's templates alone.
func Judge(j kubeflow.Job) []verdict.Finding {
	return ncclenv.Check(ncclenv.Input{Scope: ncclenv.ScopeTemplate, Ranks: Templates(j)})
}
