package gangstatus

import (
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
)

func TestTimeLeftAndMissing(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deadline := metav1.NewTime(now.Add(90 * time.Second))
	g := &v1alpha1.Gang{
		Spec:   v1alpha1.GangSpec{ExpectedRanks: 8},
		Status: v1alpha1.GangStatus{Phase: v1alpha1.PhaseWaitingForRanks, ReportedRanks: 5, Deadline: &deadline},
	}
	require.Equal(t, "90s left", TimeLeft(g, now))
	require.Equal(t, "overdue 30s", TimeLeft(g, now.Add(2*time.Minute)))
	require.Equal(t, int32(3), Missing(g), "open: the ranks still awaited")
	require.Equal(t, "5/8", Progress(g), "without status.progress, from the counts")

	g.Status.Phase, g.Status.Verdict, g.Status.MissingCount = v1alpha1.PhaseFailed, "fail", 2
	require.Equal(t, "-", TimeLeft(g, now), "decided: no time left to show")
	require.Equal(t, int32(2), Missing(g), "decided: the ranks it was decided without")

	require.Equal(t, "abc", cut("abc", 3))
	require.Equal(t, "ab…", cut("abcd", 3))
	require.Equal(t, "a b", oneLine(" a\n b "))
}

// A Gang that holds a rank's raw control characters (written by an older
// controller) prints escaped: no sequence reaches the terminal.
func TestPrintEscapesStoredStrings(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const evil = "\x1b]0;owned\x07\x1b[2J\u202egnp\x9b"
	g := v1alpha1.Gang{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-1", CreationTimestamp: metav1.NewTime(now)},
		Spec: v1alpha1.GangSpec{Job: v1alpha1.JobReference{Kind: "PyTorchJob", Name: "train"}, ExpectedRanks: 2, Attempt: 1},
		Status: v1alpha1.GangStatus{Phase: v1alpha1.PhaseFailed, Verdict: "fail", Reason: "R: " + evil, Message: "line\n" + evil,
			WaitingFor: evil, Rules: []string{"R" + evil}, Action: "suspend", DecidedBy: evil, Progress: "2/2" + evil,
			Ranks: []v1alpha1.RankStatus{{Rank: 0, Pod: "p" + evil, Node: evil, Verdict: "fail", Rules: []string{evil}, Devices: []string{evil}}}}}
	var b strings.Builder
	require.NoError(t, WriteTable(&b, []v1alpha1.Gang{g}, TableOptions{AllNamespaces: true, Wide: true, Now: now}))
	require.NoError(t, WriteDetail(&b, &g, now, true))
	out := b.String()
	require.True(t, utf8.ValidString(out))
	for _, r := range out {
		require.False(t, r != '\n' && unicode.IsControl(r) || r == '\u202e', "%U reached the terminal:\n%s", r, out)
	}
	require.Contains(t, out, `\x1b]0;owned\a\x1b[2J\u202egnp`)
}

// Ranks made from DRA allocations show where their reports come from,
// and, wide, their devices as the driver publishes them.
func TestPrintDRARanks(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	g := v1alpha1.Gang{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-1", CreationTimestamp: metav1.NewTime(now)},
		Spec: v1alpha1.GangSpec{Job: v1alpha1.JobReference{Kind: "PyTorchJob", Name: "train"}, ExpectedRanks: 2, Attempt: 1},
		Status: v1alpha1.GangStatus{Phase: v1alpha1.PhasePassed, Verdict: "pass", Ranks: []v1alpha1.RankStatus{
			{Rank: 0, Pod: "train-master-0", Node: "n1", Verdict: "pass", Source: "dra", Devices: []string{"MIG-a0"},
				DRADevices: []v1alpha1.DRADevice{{Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-0-mig-1g10gb-19-0", UUID: "MIG-a0", Profile: "1g.10gb"}}},
			{Rank: 1, Pod: "train-worker-0", Node: "n1", Verdict: "pass", Devices: []string{"MIG-a1"}},
		}}}
	var b strings.Builder
	require.NoError(t, WriteDetail(&b, &g, now, true))
	out := b.String()
	require.Regexp(t, `RANK +POD +NODE +VERDICT +RULES +FROM +DEVICES`, out)
	require.Regexp(t, `0 +train-master-0 +n1 +pass +- +DRA allocation +n1/gpu-0-mig-1g10gb-19-0 \(MIG-a0, 1g\.10gb\)`, out)
	require.Regexp(t, `1 +train-worker-0 +n1 +pass +- +rank report +MIG-a1`, out)
	b.Reset()
	g.Status.Ranks[0].Source, g.Status.Ranks[0].DRADevices = "", nil
	require.NoError(t, WriteDetail(&b, &g, now, false))
	require.NotContains(t, b.String(), "FROM", "no rank from an allocation: no FROM column")
}
