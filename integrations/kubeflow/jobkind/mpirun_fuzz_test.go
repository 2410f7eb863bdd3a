package jobkind

import (
	"strings"
	"testing"
)

// FuzzMPIRunExports: any command line parses without a panic into whole
// exports (-x and one word, -genv and two), and what the cache keeps of it
// reads back as the same launch-setting exports.
func FuzzMPIRunExports(f *testing.F) {
	f.Add("mpirun\x00-np\x002\x00-x\x00NCCL_NVLS_ENABLE=1\x00-x\x00NCCL_DEBUG\x00python")
	f.Add("/bin/sh\x00-c\x00mpiexec -n 2 -genv FI_PROVIDER \"efa\" -x NCCL_PROTO='Simple' ./a.out")
	f.Add("mpirun\x00-x")
	f.Add("bash\x00-c\x00mpirun -genv A")
	f.Fuzz(func(t *testing.T, line string) {
		argv := strings.Split(line, "\x00")
		ex, ok := MPIRunExports(argv)
		if !ok && ex != nil {
			t.Fatalf("no mpirun but exports %q", ex)
		}
		for i := 0; i < len(ex); {
			switch ex[i] {
			case "-x":
				i += 2
			case "-genv":
				i += 3
			default:
				t.Fatalf("export %d of %q is %q", i, ex, ex[i])
			}
			if i > len(ex) {
				t.Fatalf("a cut export in %q", ex)
			}
		}
		kept := keepExports(argv)
		if !ok {
			if kept != nil {
				t.Fatalf("kept %q of a line without mpirun", kept)
			}
			return
		}
		again, ok := MPIRunExports(kept)
		if !ok || len(again) > len(ex) {
			t.Fatalf("kept %q reads back as %q (ok %v) from %q", kept, again, ok, ex)
		}
	})
}
