package webhook

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/launchergate"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
)

// FuzzPatch: whatever object a review carries, the mutator's decode and
// patch never panic; a patch it builds applies to that same object, and
// applying the mutator to the result adds nothing more.
func FuzzPatch(f *testing.F) {
	for _, s := range []string{job, mpiJob, `{}`, `null`, `{"spec":{"pytorchReplicaSpecs":{"W":null}}}`,
		`{"spec":{"pytorchReplicaSpecs":{"W":{"template":{"spec":{"initContainers":{},"containers":[{"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}}}`,
		`{"spec":{"mpiReplicaSpecs":{"Launcher":{"template":{"spec":{"containers":[{"command":["a"],"args":[]}]}}}}},"metadata":{"labels":{"rankgate.io/launcher-gate":"enabled"}}}`} {
		f.Add([]byte(s))
	}
	m, err := NewMutator(Options{Image: "i", GateURL: "https://g:443",
		LauncherGate: &launchergate.Options{Image: "i", GateURL: "https://g:443", CAConfigMap: CAConfigMapName}})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, kind := range []struct{ k, v string }{{"PyTorchJob", "v1"}, {"MPIJob", "v2beta1"}} {
			gvk := pytorchKind
			if kind.k == "MPIJob" {
				gvk = mpiKind
			}
			j, err := review.DecodeJob(gvk, "ns", raw)
			if err != nil || j == nil {
				continue
			}
			ops, err := m.Patch(j)
			if err != nil || len(ops) == 0 {
				continue
			}
			pj, err := json.Marshal(ops)
			require.NoError(t, err)
			p, err := jsonpatch.DecodePatch(pj)
			require.NoError(t, err)
			out, err := p.Apply(raw)
			require.NoError(t, err, "patch %s", pj)
			j2, err := review.DecodeJob(gvk, "ns", out)
			require.NoError(t, err)
			again, err := m.Patch(j2)
			require.NoError(t, err)
			require.Empty(t, again, "a second pass adds nothing")
		}
	})
}

// FuzzPodPatch: whatever pod a review carries, the Pod handler never
// panics; a patch it answers applies to that pod, and admitting the
// result adds nothing more.
func FuzzPodPatch(f *testing.F) {
	for _, s := range []string{rankPod(injectLabel, "", ""), rankPod(injectLabel, `,"rankgate.io/gang-timeout":"1h"`, `"initContainers":[],"volumes":null,`),
		`{}`, `null`, `{"metadata":{"labels":{"rankgate.io/inject":"rank-init","jobset.sigs.k8s.io/jobset-name":"j"}},"spec":{"containers":[{"resources":{"requests":{"nvidia.com/gpu":"2"}}}]}}`} {
		f.Add([]byte(s))
	}
	m, err := NewMutator(Options{Image: "i", GateURL: "https://g:443"})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, raw []byte) {
		resp, _ := admitPodRaw(t, m, raw)
		if len(resp.Patches) == 0 {
			return
		}
		pj, err := json.Marshal(resp.Patches)
		require.NoError(t, err)
		p, err := jsonpatch.DecodePatch(pj)
		require.NoError(t, err)
		out, err := p.Apply(raw)
		require.NoError(t, err, "patch %s", pj)
		again, _ := admitPodRaw(t, m, out)
		require.Empty(t, again.Patches, "a second pass adds nothing")
	})
}
