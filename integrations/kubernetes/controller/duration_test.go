package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// Durations from a job's annotations are clamped to gate.MaxJobDuration:
// a deadline "now + 2562047h47m" would overflow.
func TestJobDurationsClamped(t *testing.T) {
	j := ptJob(true, 1)
	j.Annotations = map[string]string{contract.AnnotationGangTimeout: "2562047h47m", contract.AnnotationPendingGrace: "2562047h47m", contract.AnnotationPendingTimeout: "1000h"}
	d, err := decision.JobTimeout(j, time.Minute)
	require.NoError(t, err)
	require.Equal(t, gate.MaxJobDuration, d)
	for _, key := range []string{contract.AnnotationPendingGrace, contract.AnnotationPendingTimeout} {
		d, err = watchdog.JobDuration(j, key, time.Minute)
		require.NoError(t, err)
		require.Equal(t, gate.MaxJobDuration, d, key)
	}
	j.Annotations[contract.AnnotationPendingGrace] = "-5s"
	d, err = watchdog.JobDuration(j, contract.AnnotationPendingGrace, time.Minute)
	require.Error(t, err)
	require.Equal(t, time.Minute, d)
}

// Optional durations: nil takes the default, a set zero stays zero (at
// once), a negative one is refused.
func TestDurationDefault(t *testing.T) {
	var d *time.Duration
	require.NoError(t, durationDefault(&d, 5*time.Second, "X"))
	require.Equal(t, 5*time.Second, *d)
	zero := time.Duration(0)
	d = &zero
	require.NoError(t, durationDefault(&d, 5*time.Second, "X"))
	require.Zero(t, *d)
	neg := -time.Second
	d = &neg
	require.ErrorContains(t, durationDefault(&d, 5*time.Second, "X"), "X -1s is negative")
}
