package ncclsettings

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/preflight/ncclenv"
)

// launcherExports are the variables a job's launcher hands every rank on
// mpirun's command line: Open MPI's `-x NAME=VALUE` and `-x NAME` (the
// value of the launcher container's own NAME), MPICH's and Intel MPI's
// `-genv NAME VALUE`. They override the rank container's env. A shell
// command line (`sh -c "..."`) is split on blanks. nil when no replica
// type that runs no ranks starts mpirun.
func launcherExports(j kubeflow.Job) *ncclenv.Env {
	for _, rs := range j.ReplicaSpecs() {
		if rs.RunsRanks || rs.Template == nil {
			continue
		}
		for i := range rs.Template.Spec.Containers {
			c := &rs.Template.Spec.Containers[i]
			if e, ok := mpirunExports(c); ok {
				return e
			}
		}
	}
	return nil
}

// mpirunExports reads the exports of the mpirun that c runs; ok is false
// when c runs none.
func mpirunExports(c *corev1.Container) (*ncclenv.Env, bool) {
	words, ok := jobkind.MPIRunExports(append(append([]string(nil), c.Command...), c.Args...))
	if !ok {
		return nil, false
	}
	own := containerEnv(c)
	e := ncclenv.NewEnv(nil)
	for i := 0; i < len(words); {
		if words[i] == "-genv" {
			e.Set(words[i+1], words[i+2])
			i += 3
			continue
		}
		export(e, own, words[i+1])
		i += 2
	}
	return e, true
}

// export records one -x: NAME=VALUE, or NAME with the launcher's value.
func export(e, own *ncclenv.Env, arg string) {
	name, value, hasValue := strings.Cut(arg, "=")
	if hasValue {
		e.Set(name, value)
		return
	}
	v, _, known := own.String(name)
	if !known {
		e.SetUnresolved(name)
		return
	}
	if _, ok := own.Vars[name]; ok {
		e.Set(name, v)
	}
}
