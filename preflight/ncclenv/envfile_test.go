package ncclenv

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseEnvFile(t *testing.T) {
	e, err := ParseEnvFile([]byte("# NCCL settings\n\nexport NCCL_MULTI_RANK_GPU_ENABLE=1\nNCCL_SOCKET_IFNAME=\"=eth0\"\nNCCL_DEBUG='INFO'\n  FI_PROVIDER = efa \nUCX_TLS\nNCCL_IB_HCA=\n"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"NCCL_MULTI_RANK_GPU_ENABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa", "NCCL_IB_HCA": "",
	}, e.Vars)
	require.Equal(t, map[string]bool{"UCX_TLS": true}, e.Unresolved)
	_, set, known := e.String("NCCL_IB_HCA")
	require.False(t, set, "an empty value is NCCL's default")
	require.True(t, known)
}

func TestParseEnvFileRejects(t *testing.T) {
	for _, in := range []string{"1NCCL=1\n", "NCCL-DEBUG=INFO\n", "=1\n", "export 1A=2\n", "NCCL DEBUG=INFO\n"} {
		_, err := ParseEnvFile([]byte(in))
		require.Error(t, err, in)
		require.Contains(t, err.Error(), "line 1")
	}
	_, err := ParseEnvFile([]byte(strings.Repeat("A", MaxEnvFile+1)))
	require.Error(t, err)
}

// FuzzParseEnvFile: any input parses or is refused with an error; what
// parses judges without panicking, and names only valid variables.
func FuzzParseEnvFile(f *testing.F) {
	for _, s := range []string{"NCCL_P2P_DISABLE=1\n", "export A='b'\n#c\n", "X\n", "A=\"\n", "NCCL_SOCKET_IFNAME=^=lo,\n", "\xff=1", "IMAGE=nvcr.io/nvidia/pytorch:24.05-py3\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseEnvFile(data)
		if err != nil {
			return
		}
		for k := range e.Vars {
			require.True(t, validName(k), k)
		}
		for k := range e.Unresolved {
			require.True(t, validName(k), k)
		}
		r := Rank{Rank: 0, Env: e, Devices: []Device{mig("MIG-a", "GPU-1"), mig("MIG-b", "GPU-1")}, DevicesKnown: true, Net: &Net{Interfaces: []string{"eth0"}, HCAsKnown: true}}
		Check(Input{Scope: ScopeLocal, Ranks: []Rank{r}})
		image := e.Vars["IMAGE"] // image references from outside input too
		Check(Input{Scope: ScopeTemplate, Ranks: []Rank{{Rank: -1, Env: e, Image: image, GPUs: 2, MIGRequested: true, Replicas: 2}, {Rank: -1, Env: NewEnv(nil), GPUs: 1}}})
	})
}
