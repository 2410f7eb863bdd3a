//go:build linux

package app

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/launcher/launchertest"
	"github.com/rankgate/rankgate/verdict"
)

// In-process launch must not make the test binary a subreaper.
func init() { launchSubreaper = false }

// The children are shell scripts; the launcher package's own tests cover
// the process handling with a helper binary.

const ncclFixtures = "../../../testdata/fixtures/nccl/"

func TestLaunchPassesThroughAndReturnsTheExitCode(t *testing.T) {
	code, out, errs := run(t, nil, "launch", "--no-preflight", "--", "sh", "-c", `printf 'out\n'; printf 'err\n' >&2; exit 3`)
	require.Equal(t, 3, code)
	require.Equal(t, "out\n", out)
	require.Equal(t, "err\n", errs)
}

func TestLaunchFlagsAfterCMDAreCMDs(t *testing.T) {
	code, out, _ := run(t, nil, "launch", "--no-preflight", "sh", "-c", `echo "$@"`, "sh", "--init-timeout", "-x")
	require.Equal(t, 0, code)
	require.Equal(t, "--init-timeout -x\n", out)
}

func TestLaunchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"launch"},
		{"launch", "--expect-transport", "nvlink", "--", "true"},
		{"launch", "--ready-pattern", "(", "--", "true"},
		{"launch", "--init-timeout", "soon", "--", "true"},
		{"launch", "--ssh-port", "0", "--", "true"},
		{"launch", "--no-preflight", "-o", "xml", "--", "true"},
	} {
		code, out, errs := run(t, nil, args...)
		require.Equal(t, verdict.ExitUsage, code, "%v: %s", args, errs)
		require.Empty(t, out)
	}
}

func TestLaunchCommandNotFound(t *testing.T) {
	code, _, errs := run(t, nil, "launch", "--no-preflight", "--", "rankgate-no-such-command")
	require.Equal(t, 127, code)
	require.Contains(t, errs, "rankgate: rankgate-no-such-command: exec: \"rankgate-no-such-command\": executable file not found")
}

func TestLaunchPreflightFailStopsBeforeCMD(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	termLog := filepath.Join(t.TempDir(), "termination-log")
	// Two MIG devices on two GPUs: MIG_SPANS_GPUS.
	code, out, errs := run(t, nil, "launch", "--sample", "h100-mig", "--devices", "0:0,1:0", "--termination-log", termLog,
		"--", "touch", marker)
	require.Equal(t, verdict.ExitFail, code)
	require.Empty(t, out, "the report goes to stderr; stdout is CMD's")
	require.Contains(t, errs, "MIG_SPANS_GPUS")
	require.Contains(t, errs, "rankgate: preflight verdict fail; CMD not started")
	require.NoFileExists(t, marker)
	log, err := os.ReadFile(termLog)
	require.NoError(t, err)
	require.Contains(t, string(log), "MIG_SPANS_GPUS")
}

func TestLaunchPreflightPassRunsCMD(t *testing.T) {
	t.Setenv("NCCL_VERSION", "2.31.2") // as NGC images set it: an NCCL with MIG support
	code, out, errs := run(t, nil, "launch", "--sample", "h100-mig", "--devices", "0:0", "--", "echo", "training")
	require.Equal(t, 0, code)
	require.Equal(t, "training\n", out)
	require.Contains(t, errs, "verdict: PASS")
}

// TestLaunchJudgesItsOwnNCCLSettings: launch judges the environment CMD
// would inherit against the rank's devices, and a setting that aborts
// NCCL init stops it before CMD starts.
func TestLaunchJudgesItsOwnNCCLSettings(t *testing.T) {
	t.Setenv("NCCL_VERSION", "2.31.2")
	t.Setenv("NCCL_NVLS_ENABLE", "1")
	code, out, errs := run(t, nil, "launch", "--sample", "h100-mig", "--devices", "0:0", "--", "echo", "training")
	require.Equal(t, verdict.ExitFail, code, errs)
	require.Empty(t, out, "CMD must not start")
	require.Contains(t, errs, "NCCL_NVLS_ON_MIG")

	t.Setenv("NCCL_NVLS_ENABLE", "0")
	t.Setenv("NCCL_VERSION", "2.21.5")
	code, _, errs = run(t, nil, "launch", "--sample", "h100-mig", "--devices", "0:0", "--", "echo", "training")
	require.Equal(t, verdict.ExitFail, code, errs)
	require.Contains(t, errs, "NCCL_MIG_VERSION")
}

func TestLaunchNprocExceedsDevices(t *testing.T) {
	t.Run("from the preflight's devices", func(t *testing.T) {
		code, _, errs := run(t, nil, "launch", "--sample", "h100-mig", "--devices", "0:0", "--",
			"torchrun", "--nproc-per-node=2", "train.py")
		require.Equal(t, verdict.ExitFail, code)
		require.Contains(t, errs, "FAIL NPROC_EXCEEDS_DEVICES: torchrun would start 2 local processes (--nproc-per-node=2) but the rank has 1 MIG device(s)")
	})
	t.Run("from the environment without preflight", func(t *testing.T) {
		env := map[string]string{"CUDA_VISIBLE_DEVICES": "0,1", "PET_NPROC_PER_NODE": "4"}
		code, _, errs := run(t, env, "launch", "--no-preflight", "--", "torchrun", "train.py")
		require.Equal(t, verdict.ExitFail, code)
		require.Contains(t, errs, "(PET_NPROC_PER_NODE=4) but the rank has 2 device(s)")
	})
}

func TestLaunchInitTimeoutFromEnvironmentConfig(t *testing.T) {
	termLog := filepath.Join(t.TempDir(), "termination-log")
	env := map[string]string{"RANKGATE_INIT_TIMEOUT": "300ms", "RANKGATE_GRACE": "100ms"}
	start := time.Now()
	code, out, errs := run(t, env, "launch", "--no-preflight", "--termination-log", termLog, "--", "sh", "-c",
		`echo "h:$$:1 [0] NCCL INFO ncclCommInitRankConfig comm 0x1 rank 3 nranks 4 cudaDev 0 busId 1000 - Init START"; exec sleep 30`)
	require.Equal(t, verdict.ExitTimeout, code, errs)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Contains(t, out, "Init START")
	require.Contains(t, errs, "NEVER COMPLETED: rank 3/4")
	log, err := os.ReadFile(termLog)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(log), verdict.RuleNCCLInitTimeout+": "))
}

func TestLaunchFatalNCCLLine(t *testing.T) {
	fixture := ncclFixtures + "40_nccl-errors_h200_4-ranks-on-1g.35gb-same-gpu_nccl1716.txt"
	code, _, errs := run(t, nil, "launch", "--no-preflight", "--grace", "100ms", "--", "sh", "-c", `cat "$0"; exec sleep 30`, fixture)
	require.Equal(t, verdict.ExitFail, code)
	require.Contains(t, errs, "FAIL NCCL_FATAL")
}

func TestLaunchDerivesTheTransportFromThePreflight(t *testing.T) {
	// Two full A100s with no P2P finding: P2P expected, and NCCL (one node)
	// connected them through shared memory.
	script := `echo "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0"
echo "h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct"`
	code, _, errs := run(t, nil, "launch", "--sample", "a100-full", "--devices", "0,1", "--", "sh", "-c", script)
	require.Equal(t, 0, code)
	require.Contains(t, errs, "WARN TRANSPORT_FALLBACK: NCCL connects ranks via SHM/direct/direct (shm) where p2p was expected (derived from the preflight")
	code, _, errs = run(t, nil, "launch", "--sample", "a100-full", "--devices", "0,1", "--strict-transport", "--", "sh", "-c", script+"; exec sleep 30")
	require.Equal(t, verdict.ExitFail, code, errs)
}

func TestLaunchHostfileUnreachable(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "hostfile")
	require.NoError(t, os.WriteFile(hf, []byte("127.0.0.1 slots=2\n"), 0o644))
	code, _, errs := run(t, nil, "launch", "--no-preflight", "--mpi-hostfile", hf, "--ssh-port", strconv.Itoa(launchertest.ClosedPort(t)),
		"--hosts-timeout", "300ms", "--", "mpirun", "-np", "2", "true")
	require.Equal(t, verdict.ExitTimeout, code)
	require.Contains(t, errs, "FAIL HOST_UNREACHABLE: 1 of 1 MPI host(s) not reachable")
	code, _, errs = run(t, nil, "launch", "--no-preflight", "--mpi-hostfile", hf, "--", "mpirun", "-np", "4", "true")
	require.Equal(t, verdict.ExitFail, code)
	require.Contains(t, errs, "FAIL HOSTFILE_SLOTS: mpirun -np 4 needs 4 slots")
}

// BenchmarkLaunchStartupLatency builds the real rankgate binary and
// measures the latency `rankgate launch --no-preflight` adds before CMD
// runs: median(time to CMD's first output through rankgate) minus
// median(time to it directly), CMD printing its clock at start.
//
//	go test -run XXX -bench LaunchStartupLatency -benchtime 100x ./cmd/rankgate/app/
func BenchmarkLaunchStartupLatency(b *testing.B) {
	// The full binary pays package initialisation of client-go and
	// controller-runtime at every start; the node build (-tags
	// rankgate_node) does not.
	for _, build := range []struct{ name, tags string }{{"full", ""}, {"node", "rankgate_node"}} {
		b.Run(build.name, func(b *testing.B) {
			bin := filepath.Join(b.TempDir(), "rankgate")
			args := []string{"build", "-o", bin}
			if build.tags != "" {
				args = append(args, "-tags", build.tags)
			}
			if out, err := exec.Command("go", append(args, "..")...).CombinedOutput(); err != nil {
				b.Fatalf("go build: %v\n%s", err, out)
			}
			benchStartup(b, bin)
		})
	}
}

func benchStartup(b *testing.B, bin string) {
	stamp := []string{"sh", "-c", `date +%s%N`}
	launchertest.ReportAddedLatency(b, nil, stamp, append([]string{bin, "launch", "--no-preflight", "--"}, stamp...))
}
