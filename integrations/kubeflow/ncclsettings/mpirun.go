package ncclsettings

import (
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
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
	words := commandWords(append(append([]string(nil), c.Command...), c.Args...))
	at := -1
	for i, w := range words {
		switch path.Base(w) {
		case "mpirun", "mpiexec", "orterun", "mpiexec.hydra":
			at = i
		}
		if at >= 0 {
			break
		}
	}
	if at < 0 {
		return nil, false
	}
	own := containerEnv(c)
	e := ncclenv.NewEnv(nil)
	rest := words[at+1:]
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case "-x", "--x":
			if i+1 < len(rest) {
				i++
				export(e, own, rest[i])
			}
		case "-genv", "--genv":
			if i+2 < len(rest) {
				e.Set(rest[i+1], unquote(rest[i+2]))
				i += 2
			}
		}
	}
	return e, true
}

// export records one -x: NAME=VALUE, or NAME with the launcher's value.
func export(e, own *ncclenv.Env, arg string) {
	name, value, hasValue := strings.Cut(arg, "=")
	if hasValue {
		e.Set(name, unquote(value))
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

// commandWords are the words of a container's command line; a shell's
// `-c SCRIPT` is split on blanks (quotes around a word are dropped by
// unquote where a value is read).
func commandWords(argv []string) []string {
	if len(argv) >= 3 {
		switch path.Base(argv[0]) {
		case "sh", "bash", "dash", "ash":
			for i := 1; i+1 < len(argv); i++ {
				if argv[i] == "-c" || argv[i] == "-lc" || argv[i] == "-ec" {
					return strings.Fields(argv[i+1])
				}
			}
		}
	}
	return argv
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}
