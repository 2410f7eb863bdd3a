package e2e

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// A rank that waits prints progress lines with the controller's own
// counts and the gang's deadline, asked afresh while its report's long
// poll is held: rank 0 of a two-rank job reports alone ("1 of 2"), then
// the second rank completes the gang and both pass.
func TestE2EProgressLines(t *testing.T) {
	ns := newNamespace(t, "e2e-progress", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := pytorchJob(t, ns, "prog", true, 1, nil)
	master := rankPod(t, job, "master", 0, "node-1", "")
	worker := rankPod(t, job, "worker", 0, "node-2", "")
	progress := append([]string{"--heartbeat", "300ms"}, fullGPURank...)

	r0 := startRank(t, c.URL, master, token(t, master, gate.Audience), progress...)
	line := regexp.MustCompile(`(?m)^rankgate init: waiting for the gang verdict of ` + ns + `/PyTorchJob/prog: 1 of 2 ranks reported; (\d+m)?\d+s left until the gang deadline$`)
	require.Eventually(t, func() bool { return len(line.FindAllString(r0.stderr.String(), -1)) >= 2 }, 20*time.Second, 50*time.Millisecond, "%s", r0)
	require.True(t, r0.running())

	r1 := startRank(t, c.URL, worker, token(t, worker, gate.Audience), progress...)
	for _, r := range []*rank{r0, r1} {
		require.Equal(t, 0, r.wait(t, time.Minute), r.String())
		require.Equal(t, verdict.VerdictPass, decodeVerdict(t, r).Verdict)
	}
}
