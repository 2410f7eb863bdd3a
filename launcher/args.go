package launcher

import (
	"path/filepath"
	"strconv"
	"strings"
)

// nprocInfo is a torchrun local process count and where it came from.
type nprocInfo struct {
	n    int    // local processes; 0 unknown
	from string // "--nproc-per-node", "PET_NPROC_PER_NODE"
	// raw is the value as written ("4", "gpu", "auto").
	raw string
}

// torchrun options without a value; every other option takes one.
var torchrunBool = map[string]bool{
	"--standalone": true, "-m": true, "--module": true, "--no-python": true, "--no_python": true,
	"--run-path": true, "--run_path": true, "--virtual-local-rank": true, "--virtual_local_rank": true,
	"--use-env": true, "--use_env": true,
}

// torchrunArgs returns the launcher arguments of CMD when CMD is torchrun
// (or python -m torch.distributed.run/launch), and whether CMD mentions
// torchrun at all (a shell line, a wrapper script).
func torchrunArgs(argv []string) (args []string, direct, mentioned bool) {
	if len(argv) == 0 {
		return nil, false, false
	}
	base := filepath.Base(argv[0])
	if base == "torchrun" {
		return argv[1:], true, true
	}
	if strings.HasPrefix(base, "python") {
		for i := 1; i+1 < len(argv); i++ {
			if argv[i] == "-m" && (argv[i+1] == "torch.distributed.run" || argv[i+1] == "torch.distributed.launch") {
				return argv[i+2:], true, true
			}
			if !strings.HasPrefix(argv[i], "-") {
				break // the script
			}
		}
	}
	for _, a := range argv {
		if strings.Contains(a, "torchrun") || strings.Contains(a, "torch.distributed.run") || strings.Contains(a, "torch.distributed.launch") {
			return nil, false, true
		}
	}
	return nil, false, false
}

// torchrunNproc finds how many local processes torchrun would start: its
// --nproc-per-node (either spelling), else PET_NPROC_PER_NODE, which
// torchrun reads as the flag's default and Kubeflow's PyTorchJob sets.
func torchrunNproc(argv []string, getenv func(string) string) (nprocInfo, bool) {
	args, direct, mentioned := torchrunArgs(argv)
	if !mentioned {
		return nprocInfo{}, false
	}
	if direct {
		for i := 0; i < len(args); i++ {
			a := args[i]
			if a == "--" || !strings.HasPrefix(a, "-") {
				break // the training script and its own arguments
			}
			name, val, hasVal := strings.Cut(a, "=")
			if name == "--nproc-per-node" || name == "--nproc_per_node" {
				if !hasVal {
					if i+1 >= len(args) {
						break
					}
					val = args[i+1]
				}
				return parseNproc(val, name), true
			}
			if !hasVal && !torchrunBool[name] && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++ // the option's value
			}
		}
	}
	if v := getenv("PET_NPROC_PER_NODE"); v != "" {
		return parseNproc(v, "PET_NPROC_PER_NODE"), true
	}
	return nprocInfo{}, false
}

func parseNproc(val, from string) nprocInfo {
	n, err := strconv.Atoi(strings.TrimSpace(val))
	if err != nil || n < 1 {
		n = 0 // gpu, cuda, auto, cpu: torchrun sizes it itself
	}
	return nprocInfo{n: n, from: from, raw: val}
}

// mpirun options without a value, and options with two (--mca key value).
var (
	mpirunBool = map[string]bool{
		"--oversubscribe": true, "-oversubscribe": true, "--nooversubscribe": true,
		"--allow-run-as-root": true, "-allow-run-as-root": true,
		"--tag-output": true, "-tag-output": true, "--timestamp-output": true, "-timestamp-output": true,
		"--report-bindings": true, "-report-bindings": true, "--display-map": true, "-display-map": true,
		"--display-allocation": true, "-v": true, "--verbose": true, "-q": true, "--quiet": true,
		"--merge-stderr-to-stdout": true, "--use-hwthread-cpus": true, "--noprefix": true,
		"--nolocal": true, "-nolocal": true, "-l": true, "-prepend-rank": true, "--prepend-rank": true,
		"-genvall": true, "-genvnone": true, "-print-rank-map": true, "-verbose": true,
	}
	mpirunTwo = map[string]bool{"--mca": true, "-mca": true, "--gmca": true, "-gmca": true, "-genv": true, "-env": true}
)

// mpirunNP finds mpirun's -np/-n/-c when CMD is mpirun or mpiexec.
func mpirunNP(argv []string) (np int, oversubscribe, isMPI bool) {
	if len(argv) == 0 {
		return 0, false, false
	}
	switch filepath.Base(argv[0]) {
	case "mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra", "mpiexec.openmpi", "mpirun.openmpi", "mpiexec.mpich", "mpirun.mpich":
	default:
		return 0, false, false
	}
	args := argv[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break // the program
		}
		name, val, hasVal := strings.Cut(a, "=")
		switch name {
		case "-np", "--np", "-n", "--n", "-c":
			if !hasVal {
				if i+1 >= len(args) {
					return np, oversubscribe, true
				}
				val = args[i+1]
				i++
			}
			if n, err := strconv.Atoi(val); err == nil && n > 0 {
				np = n
			}
			continue
		case "--oversubscribe", "-oversubscribe":
			oversubscribe = true
		}
		if mpirunBool[name] {
			continue
		}
		if mpirunTwo[name] && !hasVal {
			i += 2
			continue
		}
		if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			val = args[i]
		}
		// --map-by ...:OVERSUBSCRIBE allows more processes than slots too.
		if up := strings.ToUpper(val); strings.Contains(up, "OVERSUBSCRIBE") && !strings.Contains(up, "NOOVERSUBSCRIBE") {
			oversubscribe = true
		}
	}
	return np, oversubscribe, true
}

// TorchrunNproc is how many local processes torchrun would start for
// argv when the environment holds env (a container's env: --nproc-per-node
// in either spelling, else PET_NPROC_PER_NODE). from names where the
// count came from and raw is the value as written; n is 0 when torchrun
// sizes it itself (gpu, auto). ok is false when argv runs no torchrun.
// The admission webhook uses it on pod templates, launch on its own CMD.
func TorchrunNproc(argv []string, env map[string]string) (n int, from, raw string, ok bool) {
	info, ok := torchrunNproc(argv, func(k string) string { return env[k] })
	return info.n, info.from, info.raw, ok
}
