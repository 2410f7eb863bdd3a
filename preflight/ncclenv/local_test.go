package ncclenv

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The network a rank reports is read from the interface list and the
// RDMA devices under sysfs; what cannot be read stays unknown, never
// "none".
func TestReadNet(t *testing.T) {
	ifs := func() ([]net.Interface, error) {
		return []net.Interface{{Name: "net1"}, {Name: "eth0"}, {Name: "lo"}}, nil
	}
	withHCAs := t.TempDir()
	for _, d := range []string{"mlx5_1", "mlx5_0"} {
		require.NoError(t, os.MkdirAll(filepath.Join(withHCAs, "class", "infiniband", d), 0o755))
	}
	noRDMA := t.TempDir()
	unreadable := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(unreadable, "class"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(unreadable, "class", "infiniband"), nil, 0o644)) // not a directory

	for _, tc := range []struct {
		name    string
		sysfs   string
		ifs     func() ([]net.Interface, error)
		want    *Net
		wantErr string
	}{
		{"interfaces and HCAs, sorted", withHCAs, ifs, &Net{Interfaces: []string{"eth0", "lo", "net1"}, HCAs: []string{"mlx5_0", "mlx5_1"}, HCAsKnown: true}, ""},
		{"no RDMA stack: no HCAs", noRDMA, ifs, &Net{Interfaces: []string{"eth0", "lo", "net1"}, HCAsKnown: true}, ""},
		{"RDMA devices unreadable: HCAs unknown", unreadable, ifs, &Net{Interfaces: []string{"eth0", "lo", "net1"}}, "listing RDMA devices"},
		{"interfaces unreadable: network unknown", withHCAs, func() ([]net.Interface, error) { return nil, errors.New("netlink: permission denied") }, nil, "listing network interfaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readNet(tc.sysfs, tc.ifs)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestVersionFromEnv(t *testing.T) {
	unresolved := NewEnv(nil)
	unresolved.SetUnresolved("NCCL_VERSION")
	for _, tc := range []struct {
		env  *Env
		want string
	}{
		{NewEnv(map[string]string{"NCCL_VERSION": "2.27.3-1"}), "2.27.3"},
		{NewEnv(map[string]string{"NCCL_VERSION": "2.31"}), "2.31.0"},
		{NewEnv(map[string]string{"NCCL_VERSION": "3.0.0"}), ""},
		{NewEnv(map[string]string{"NCCL_VERSION": "latest"}), ""},
		{NewEnv(nil), ""},
		{unresolved, ""},
		{nil, ""},
	} {
		require.Equal(t, tc.want, VersionFromEnv(tc.env))
	}
}
