package webhook

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// claimJob is a PyTorchJob whose workers get their GPU through a DRA
// claim template (claim gpu) and a NIC through another (claim nic, used by
// a sidecar); the trainer container's resources are res.
func claimJob(res string) string {
	return `{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"j","namespace":"ml"},"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":2,"template":{"spec":{
"resourceClaims":[{"name":"gpu","resourceClaimTemplateName":"mig-1g"},{"name":"nic","resourceClaimTemplateName":"rdma"}],
"containers":[{"name":"pytorch","image":"t","resources":` + res + `},{"name":"sidecar","image":"s","resources":{"claims":[{"name":"nic"}]}}]}}}}}}`
}

// claimMutator says the claims made from template mig-1g in namespace ml
// are GPUs'.
func claimMutator(t *testing.T) (*Mutator, *[]string) {
	var asked []string
	m, err := NewMutator(Options{Image: "i", GateURL: "https://g:443", GPUClaim: func(ns string, pc corev1.PodResourceClaim) bool {
		asked = append(asked, ns+"/"+pc.Name)
		return ns == "ml" && pc.ResourceClaimTemplateName != nil && *pc.ResourceClaimTemplateName == "mig-1g"
	}})
	require.NoError(t, err)
	return m, &asked
}

// A rank whose devices come through DRA claims gets the init container
// with every claim its trainer container uses, so that NVML shows it the
// same devices (its report is then compared with the allocation); with
// GPU resources too, both, without asking which claim is a GPU's. A
// container that uses only claims that are no GPU's (a NIC) makes no rank.
func TestMutateGivesInitContainerTheTrainersClaims(t *testing.T) {
	m, asked := claimMutator(t)
	for name, tc := range map[string]struct {
		res    string
		claims []corev1.ResourceClaim
		gpus   bool
	}{
		"GPU claim":      {`{"claims":[{"name":"gpu"},{"name":"nic","request":"port0"}]}`, []corev1.ResourceClaim{{Name: "gpu"}, {Name: "nic", Request: "port0"}}, false},
		"claim and GPUs": {`{"limits":{"nvidia.com/gpu":"1"},"claims":[{"name":"nic"}]}`, []corev1.ResourceClaim{{Name: "nic"}}, true},
		"GPUs, no claim": {`{"limits":{"nvidia.com/gpu":"1"}}`, nil, true},
	} {
		t.Run(name, func(t *testing.T) {
			obj, changed := mutate(t, m, pytorchKind, []byte(claimJob(tc.res)))
			require.True(t, changed)
			ic := podSpec(t, obj, "Worker").InitContainers[0]
			require.Equal(t, InitName, ic.Name)
			require.Equal(t, tc.claims, ic.Resources.Claims)
			_, hasGPU := ic.Resources.Limits["nvidia.com/gpu"]
			require.Equal(t, tc.gpus, hasGPU)
			before, _ := json.Marshal(obj)
			_, changed = mutate(t, m, pytorchKind, before)
			require.False(t, changed, "second pass")
		})
	}
	*asked = nil
	_, changed := mutate(t, m, pytorchKind, []byte(claimJob(`{}`)))
	require.False(t, changed, "only a NIC's claim: no rank")
	require.ElementsMatch(t, []string{"ml/gpu", "ml/nic"}, *asked)

	plain := newMutator(t)
	_, changed = mutate(t, plain, pytorchKind, []byte(claimJob(`{"claims":[{"name":"gpu"}]}`)))
	require.False(t, changed, "without GPUClaim no claim is known to be a GPU's")
}

// The Pod webhook does the same for a JobSet's rank pod.
func TestPodWebhookGivesInitContainerTheClaims(t *testing.T) {
	raw := `{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"js-node-0-0-","namespace":"ml",
"labels":{"jobset.sigs.k8s.io/jobset-name":"js","rankgate.io/inject":"rank-init"}},
"spec":{"resourceClaims":[{"name":"gpu","resourceClaimTemplateName":"mig-1g"}],"containers":[{"name":"node","image":"t","resources":{"claims":[{"name":"gpu"}]}}]}}`
	m, _ := claimMutator(t)
	resp, pod := admitPod(t, m, raw)
	require.True(t, resp.Allowed)
	require.Equal(t, []corev1.ResourceClaim{{Name: "gpu"}}, pod.Spec.InitContainers[0].Resources.Claims)
}
