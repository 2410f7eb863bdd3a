package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
)

// TestBenchChainTrainJobPods: the time rankgate's webhooks add to bringing
// up a TrainJob's pods on the real chain (issue #23): from the TrainJob's
// creation to its 64th `node` pod made, the Trainer, JobSet and Job
// controllers doing their own work (their reaction times and client rate
// limits included), with rankgate's webhooks called (a namespace opted in:
// the TrainJob and its JobSet are mutated, the pods made from the gated
// template) and not called (a namespace not opted in: the webhooks'
// selectors leave it out). The pods are left unscheduled (no scheduler
// serves their name). RANKGATE_BENCH_ROUNDS rounds (default 5, after one
// not counted), the two in turns, the first of each round alternating.
//
//	RANKGATE_BENCH=1 go test -run '^TestBenchChainTrainJobPods$' -v ./integrations/kubernetes/e2e/
func TestBenchChainTrainJobPods(t *testing.T) {
	benchOnly(t)
	nodes, rounds := envInt("RANKGATE_BENCH_NODES", 64), envInt("RANKGATE_BENCH_ROUNDS", 5)
	realChain(t)
	webhookController(t, "rankgate-tls-chain-bench", controller.Options{})
	runtime := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
		"metadata": map[string]any{"name": chainRuntime},
		"spec": map[string]any{
			"mlPolicy": map[string]any{"numNodes": int64(1), "torch": map[string]any{}},
			"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{map[string]any{"name": "node",
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{jobset.LabelTrainJobAncestor: jobset.AncestorTrainer}},
					"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
						"schedulerName": "rankgate-bench-none", "serviceAccountName": serviceAccount,
						"containers": []any{map[string]any{"name": "node", "image": "pytorch/pytorch"}}}}}}}}}},
		},
	}}
	require.NoError(t, k8s.Create(context.Background(), runtime))
	gated, plain := chainNamespace(t, "bench-chain-gated", true), chainNamespace(t, "bench-chain-plain", false)

	took := map[string][]time.Duration{}
	for r := 0; r <= rounds; r++ {
		order := []string{gated, plain}
		if r%2 == 1 {
			order = []string{plain, gated}
		}
		for _, ns := range order {
			d := chainPodsUp(t, ns, fmt.Sprintf("r%d", r), nodes, ns == gated)
			if r > 0 { // the first round warms the controllers' caches
				took[ns] = append(took[ns], d)
			}
		}
	}
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
	}
	msg := fmt.Sprintf("TrainJob of %d nodes, created -> its last node pod made (%d rounds): with rankgate's webhooks median %s (%v); without median %s (%v); added %s",
		nodes, rounds, median(took[gated]).Round(time.Millisecond), roundAll(took[gated]), median(took[plain]).Round(time.Millisecond),
		roundAll(took[plain]), (median(took[gated]) - median(took[plain])).Round(time.Millisecond))
	t.Log(msg)
	fmt.Fprintln(os.Stderr, msg)
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// chainPodsUp creates a TrainJob of n nodes in ns and returns the time
// until its n-th node pod was made (a watch); the pods carry the gate's
// init container when gated. The TrainJob is deleted (the garbage
// collector deletes the rest) before it returns.
func chainPodsUp(t *testing.T, ns, name string, n int, gated bool) time.Duration {
	t.Helper()
	ctx := context.Background()
	wc, err := client.NewWithWatch(restCfg, client.Options{Scheme: k8s.Scheme()})
	require.NoError(t, err)
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), client.MatchingLabels{jobset.LabelJobSetName: name})
	require.NoError(t, err)
	defer w.Stop()
	start := time.Now()
	tj := chainTrainJob(t, ns, name, int32(n), "nvidia.com/gpu", nil)
	seen := map[string]bool{}
	timeout := time.After(2 * time.Minute)
	for len(seen) < n {
		select {
		case ev := <-w.ResultChan():
			p, ok := ev.Object.(*corev1.Pod)
			if ok && ev.Type == watch.Added && !seen[p.Name] {
				require.Equal(t, gated, hasGateInit(p), "pod %s", p.Name)
				seen[p.Name] = true
			}
		case <-timeout:
			t.Fatalf("%s/%s: %d of %d pods within 2 minutes\n%s", ns, name, len(seen), n, chainState(t, ns))
		}
	}
	took := time.Since(start)
	require.NoError(t, k8s.Delete(ctx, tj, client.PropagationPolicy("Background")))
	return took
}
