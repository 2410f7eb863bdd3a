package webhook

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// initTimeoutArg is the --timeout the webhook injects into the rank
// pods of a PyTorchJob whose rankgate.io/gang-timeout is gangTimeout.
func initTimeoutArg(t *testing.T, m *Mutator, gangTimeout string) string {
	t.Helper()
	obj, _ := mutate(t, m, pytorchKind, []byte(strings.Replace(job, `"rankgate.io/gang-timeout":"15m"`, `"rankgate.io/gang-timeout":"`+gangTimeout+`"`, 1)))
	for _, a := range podSpec(t, obj, "Master").InitContainers[0].Args {
		if v, ok := strings.CutPrefix(a, "--timeout="); ok {
			return v
		}
	}
	t.Fatal("no --timeout injected")
	return ""
}

// A gang timeout near the largest Duration used to wrap the injected
// --timeout around to a negative value (rankgate init then exits 2).
func TestInjectedTimeoutNeverOverflows(t *testing.T) {
	m := newMutator(t)
	for in, want := range map[string]time.Duration{
		"15m":         20 * time.Minute,
		"2562047h47m": gate.MaxJobDuration + initMargin,
		"100000h":     gate.MaxJobDuration + initMargin,
	} {
		d, err := time.ParseDuration(initTimeoutArg(t, m, in))
		require.NoError(t, err, in)
		require.Equal(t, want, d, in)
	}
}
