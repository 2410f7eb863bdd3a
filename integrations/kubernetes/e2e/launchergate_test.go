package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// startLauncher runs `rankgate launch --gang -- sh -c 'touch MARKER'` for
// the launcher pod p, as the launcher gate wraps mpirun, and returns the
// process and the file CMD creates when it starts.
func startLauncher(t *testing.T, url string, p *corev1.Pod) (*rank, string) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "mpirun-started")
	termLog := filepath.Join(t.TempDir(), "termination-log")
	r := startProcess(t, p, termLog, []string{"POD_NAME=" + p.Name, "POD_NAMESPACE=" + p.Namespace},
		"launch", "--gang", "--gate-url", url, "--ca-file", certs.CAFile,
		"--token-file", token(t, p, gate.Audience), "--gang-poll", "5s", "--gang-timeout", "90s",
		"--no-preflight", "--init-timeout", "0", "--termination-log", termLog,
		"--", "sh", "-c", `touch "$0"; echo mpirun started`, marker)
	return r, marker
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// (r) An MPIJob with the launcher gate: the launcher (no rank: no
// runLauncherAsWorker) waits on the gate's verdict endpoint; mpirun starts
// only after the workers' gang passes. On a fail the launcher exits 1 with
// the reason, mpirun never starts, and the job is suspended.
func TestE2EMPIJobLauncherGate(t *testing.T) {
	ns := newNamespace(t, "e2e-launcher-gate", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})

	t.Run("pass: mpirun starts after the verdict", func(t *testing.T) {
		job := mpiJob(t, ns, "lg-pass", 2)
		lp := launcherPod(t, job, "node-0")
		l, marker := startLauncher(t, c.URL, lp)
		// The launcher waits: no rank has reported.
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(l.stderr.String(), "waiting for the gang verdict of "+ns+"/MPIJob/lg-pass") {
			require.True(t, time.Now().Before(deadline), "the launcher never waited:\n%s", l)
			time.Sleep(50 * time.Millisecond)
		}
		require.False(t, exists(marker), "mpirun started before the verdict")
		require.True(t, l.running())

		w0 := rankPod(t, job, "worker", 0, "node-1", "")
		w1 := rankPod(t, job, "worker", 1, "node-2", "")
		var ranks []*rank
		for _, p := range []*corev1.Pod{w0, w1} {
			ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
		}
		for _, r := range ranks {
			require.Equal(t, 0, r.wait(t, time.Minute), r.String())
		}
		require.Equal(t, 0, l.wait(t, time.Minute), l.String())
		require.True(t, exists(marker))
		require.Contains(t, l.stdout.String(), "mpirun started")
		require.Contains(t, l.stderr.String(), "gang verdict for "+ns+"/MPIJob/lg-pass: pass; starting CMD")
	})

	t.Run("fail: the launcher exits 1 with the reason, mpirun never starts", func(t *testing.T) {
		job := mpiJob(t, ns, "lg-fail", 2)
		lp := launcherPod(t, job, "node-0")
		l, marker := startLauncher(t, c.URL, lp)
		p0 := rankPod(t, job, "worker", 0, "h100-node", "nvidia.com/mig-3g.40gb")
		p1 := rankPod(t, job, "worker", 1, "h100-node", "nvidia.com/mig-3g.40gb")
		r0 := startRank(t, c.URL, p0, token(t, p0, gate.Audience), "--sample", "h100-mig", "--devices", "0:0")
		r1 := startRank(t, c.URL, p1, token(t, p1, gate.Audience), "--sample", "h100-mig", "--devices", "1:0")
		for _, r := range []*rank{r0, r1} {
			require.Equal(t, verdict.ExitFail, r.wait(t, time.Minute), r.String())
		}
		require.Equal(t, verdict.ExitFail, l.wait(t, time.Minute), l.String())
		require.False(t, exists(marker), "mpirun started after a fail")
		require.Contains(t, l.stderr.String(), "gang verdict fail for "+ns+"/MPIJob/lg-fail (job action: suspend)")
		require.Contains(t, l.stderr.String(), "GANG_MIG_SPANS_GPUS")
		require.Contains(t, l.stderr.String(), "CMD not started")
		require.Contains(t, l.termination(), "GANG_MIG_SPANS_GPUS")
		t.Logf("launcher stderr:\n%s", l.stderr.String())
		// The verdict is applied to the job after the ranks hear it.
		require.Eventually(t, func() bool { return isSuspended(t, job) }, 20*time.Second, 100*time.Millisecond, "job not suspended")
	})

	t.Run("reports from the launcher are still refused", func(t *testing.T) {
		job := mpiJob(t, ns, "lg-report", 1)
		lp := launcherPod(t, job, "node-0")
		// rankgate init in the launcher pod: it is no rank, the gate says so.
		r := startRank(t, c.URL, lp, token(t, lp, gate.Audience), fullGPURank...)
		require.Equal(t, verdict.ExitUsage, r.wait(t, time.Minute), r.String())
		require.Contains(t, r.stderr.String(), gate.CodeNotARank)
	})
}
