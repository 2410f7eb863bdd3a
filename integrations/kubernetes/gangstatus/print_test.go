package gangstatus

import (
	"testing"
	"time"

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
