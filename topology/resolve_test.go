package topology

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// One order for preflight, init and launch: --devices, the environment,
// the kubelet in a pod, else all devices.
func TestResolveAllocationOrder(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	require.NoError(t, os.WriteFile(sock, nil, 0o600))
	env := func(kv map[string]string) Env {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	pod := map[string]string{"POD_NAME": "w-0", "POD_NAMESPACE": "ml"}
	asked := 0
	kubelet := func(_ context.Context, ns, name string) ([]string, error) {
		asked++
		require.Equal(t, "ml/w-0", ns+"/"+name)
		return []string{"GPU-aaaa"}, nil
	}
	for _, tc := range []struct {
		name string
		q    AllocationQuery
		from string
		refs []string
		all  bool
	}{
		{"--devices wins", AllocationQuery{Devices: "0,1", Env: env(map[string]string{"NVIDIA_VISIBLE_DEVICES": "2"})}, "--devices", []string{"0", "1"}, false},
		{"environment", AllocationQuery{Env: env(map[string]string{"NVIDIA_VISIBLE_DEVICES": "2", "POD_NAME": "w-0", "POD_NAMESPACE": "ml"}), KubeletSocket: sock, Kubelet: kubelet}, "NVIDIA_VISIBLE_DEVICES", []string{"2"}, false},
		{"kubelet in a pod", AllocationQuery{Env: env(pod), KubeletSocket: sock, Kubelet: kubelet}, "podresources", []string{"GPU-aaaa"}, false},
		{"no kubelet asked", AllocationQuery{Env: env(pod), KubeletSocket: sock}, "default (all devices of the node)", nil, true},
		{"no socket", AllocationQuery{Env: env(pod), KubeletSocket: sock + ".gone", Kubelet: kubelet}, "default (all devices of the node)", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ResolveAllocation(context.Background(), tc.q)
			require.NoError(t, err)
			require.Equal(t, tc.from, a.From)
			require.Equal(t, tc.refs, a.Refs)
			require.Equal(t, tc.all, a.All)
		})
	}
	require.Equal(t, 1, asked, "the kubelet is asked only when nothing else names the devices")

	_, err := ResolveAllocation(context.Background(), AllocationQuery{Devices: "zero"})
	require.Equal(t, verdict.ExitUsage, verdict.Code(err))
	require.ErrorContains(t, err, "--devices")
	_, err = ResolveAllocation(context.Background(), AllocationQuery{Env: env(pod), KubeletSocket: sock,
		Kubelet: func(context.Context, string, string) ([]string, error) { return nil, errors.New("refused") }})
	require.Equal(t, verdict.ExitEnvironment, verdict.Code(err))
	require.ErrorContains(t, err, "kubelet PodResources API at "+sock)
}
