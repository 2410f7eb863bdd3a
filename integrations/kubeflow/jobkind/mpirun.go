package jobkind

import (
	"path"
	"strings"
)

// MPIRunExports finds the mpirun (mpiexec, orterun) that a container's
// command line (its command, then its args) runs and returns the exports
// it hands every rank, as mpirun words: "-x", "NAME=VALUE" or "-x",
// "NAME" (Open MPI: NAME takes the caller's value), and "-genv", "NAME",
// "VALUE" (MPICH, Intel MPI). A shell's `-c SCRIPT` is split on blanks and
// quotes around a value are dropped. ok is false when the command line
// runs no mpirun.
func MPIRunExports(argv []string) (exports []string, ok bool) {
	words := commandWords(argv)
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
	rest := words[at+1:]
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case "-x", "--x":
			if i+1 < len(rest) {
				exports = append(exports, "-x", unquote(rest[i+1]))
				i++
			}
		case "-genv", "--genv":
			if i+2 < len(rest) {
				exports = append(exports, "-genv", rest[i+1], unquote(rest[i+2]))
				i += 2
			}
		}
	}
	return exports, true
}

// keepExports are the exports of a command line that the cache keeps: the
// launch settings only, as an mpirun command line MPIRunExports reads again.
func keepExports(argv []string) []string {
	ex, ok := MPIRunExports(argv)
	if !ok {
		return nil
	}
	out := []string{"mpirun"}
	for i := 0; i < len(ex); {
		n := 2
		if ex[i] == "-genv" {
			n = 3
		}
		name, _, _ := strings.Cut(ex[i+1], "=")
		if launchSetting(name) {
			out = append(out, ex[i:i+n]...)
		}
		i += n
	}
	return out
}

// commandWords are the words of a command line; a shell's `-c SCRIPT` is
// split on blanks.
func commandWords(argv []string) []string {
	if len(argv) >= 3 {
		switch path.Base(argv[0]) {
		case "sh", "bash", "dash", "ash":
			for i := 1; i+1 < len(argv); i++ {
				switch argv[i] {
				case "-c", "-lc", "-ec", "-xc":
					return strings.Fields(argv[i+1])
				}
			}
		}
	}
	return argv
}

// unquote drops matching quotes around a value, and around the value
// part of NAME="VALUE".
func unquote(v string) string {
	if name, val, ok := strings.Cut(v, "="); ok && !strings.ContainsAny(name, `"'`) {
		return name + "=" + unquote(val)
	}
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}
