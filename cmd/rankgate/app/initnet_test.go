package app

import (
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/gatetest"
	"github.com/rankgate/rankgate/verdict"
)

// rankgate init reports its pod's network (interfaces, the RDMA devices
// under --sysfs) and the NCCL version NCCL_VERSION names; a network it
// cannot fully read is reported as far as known, and never fails the
// rank.
func TestInitReportsNet(t *testing.T) {
	ifs, err := net.Interfaces()
	require.NoError(t, err)
	var here []string
	for _, i := range ifs {
		here = append(here, i.Name)
	}
	sort.Strings(here)

	withHCAs := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(withHCAs, "class", "infiniband", "mlx5_0"), 0o755))
	unreadable := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(unreadable, "class"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(unreadable, "class", "infiniband"), nil, 0o644))

	for _, tc := range []struct {
		name    string
		sysfs   string
		env     map[string]string
		want    *gate.RankNet
		version string
	}{
		{"HCAs and NCCL_VERSION", withHCAs, map[string]string{"NCCL_VERSION": "2.27.3-1"}, &gate.RankNet{Interfaces: here, HCAs: []string{"mlx5_0"}, HCAsKnown: true}, "2.27.3"},
		{"no RDMA stack, no NCCL_VERSION", t.TempDir(), map[string]string{"NCCL_VERSION": ""}, &gate.RankNet{Interfaces: here, HCAsKnown: true}, ""},
		{"RDMA devices unreadable: HCAs unknown", unreadable, map[string]string{"NCCL_VERSION": "latest"}, &gate.RankNet{Interfaces: here}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			certs, err := gatetest.WriteCerts(dir, "127.0.0.1")
			require.NoError(t, err)
			tok := filepath.Join(dir, "token")
			require.NoError(t, os.WriteFile(tok, []byte("tok"), 0o600))
			pass := verdict.NewReport("ml/PyTorchJob/train", nil)
			g, err := gatetest.StartGate(certs, "tok", func(gatetest.Request, time.Time) (*gate.Response, *gate.ErrorBody) {
				return &gate.Response{State: gate.StateDecided, Job: "ml/PyTorchJob/train", Expected: 1, Reported: 1, Verdict: &pass}, nil
			})
			require.NoError(t, err)
			t.Cleanup(g.Close)
			env := map[string]string{"POD_NAME": "train-master-0", "POD_NAMESPACE": "ml"}
			for k, v := range tc.env {
				env[k] = v
			}
			code, out, stderr := run(t, env, "init", "--gate-url", g.URL, "--ca-file", certs.CAFile, "--token-file", tok, "--timeout", "20s",
				"--sample", "a100-full", "--devices", "0", "--sysfs", tc.sysfs)
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
			var reports []*gate.ReportRequest
			for _, r := range g.Requests() {
				if r.Report != nil {
					reports = append(reports, r.Report)
				}
			}
			require.NotEmpty(t, reports)
			require.Equal(t, tc.want, reports[0].Net)
			require.Equal(t, tc.version, reports[0].NCCLVersion)
		})
	}
}
