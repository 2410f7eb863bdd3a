package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// A gated job with more rank pods than the gate serves connections at
// once (--gate-max-connections) is warned about once, in the log and in a
// Warning Event on the job that names the flag; a job within the bound is
// not.
func TestE2EGateConnectionBoundWarned(t *testing.T) {
	ns := newNamespace(t, "e2e-gate-conns", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute, GateMaxConnections: 4})
	big := pytorchJob(t, ns, "big", true, 5, nil) // 6 rank pods
	small := pytorchJob(t, ns, "small", true, 3, nil)
	ask := func(job *corev1.Pod) {
		t.Helper()
		cl, err := gate.NewClient(gate.ClientOptions{URL: c.URL, CAFile: certs.CAFile, TokenFile: token(t, job, gate.Audience)})
		require.NoError(t, err)
		var r *gate.Response
		require.Eventually(t, func() bool { // the controller starts
			r, err = cl.Verdict(context.Background(), job.Namespace, job.Name, 0)
			return err == nil
		}, 30*time.Second, 50*time.Millisecond)
		require.Equal(t, gate.StateWaiting, r.State)
	}
	for i := 0; i < 3; i++ {
		ask(rankPod(t, big, "worker", i, fmt.Sprintf("node-%d", i), ""))
	}
	ask(rankPod(t, small, "master", 0, "node-9", ""))
	var evs []string
	require.Eventually(t, func() bool {
		evs = jobEvents(t, big)[contract.ReasonGateConnectionsTooFew]
		return len(evs) > 0
	}, 10*time.Second, 100*time.Millisecond, "no %s Event on the job", contract.ReasonGateConnectionsTooFew)
	time.Sleep(time.Second) // a second Event would have arrived
	evs = jobEvents(t, big)[contract.ReasonGateConnectionsTooFew]
	require.Len(t, evs, 1)
	require.Contains(t, evs[0], "6 rank pods")
	require.Contains(t, evs[0], "--gate-max-connections=6")
	require.Empty(t, jobEvents(t, small)[contract.ReasonGateConnectionsTooFew])
	require.Equal(t, 1, strings.Count(c.logs.String(), "raise --gate-max-connections"), c.logs.String())
}
