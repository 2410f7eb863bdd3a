package e2e

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/e2e/cpupin"
)

// CPU lists by role for the gang latency check with the control plane on
// cores of its own (hack/bench-gang-16.sh). The script starts etcd and
// kube-apiserver under taskset and this test process (the controller)
// too; the bench starts the rank clients under taskset itself. Unset: no
// pinning, as before.
const (
	envAPIServerCPUs  = "RANKGATE_BENCH_APISERVER_CPUS"
	envEtcdCPUs       = "RANKGATE_BENCH_ETCD_CPUS"
	envControllerCPUs = "RANKGATE_BENCH_CONTROLLER_CPUS"
	envClientCPUs     = "RANKGATE_BENCH_CLIENT_CPUS"
)

// checkPinning fails t unless every role whose CPU list is set runs on
// exactly those CPUs: kube-apiserver and etcd (children of this process,
// started by envtest) and the controller (this process). It returns the
// lists read back, by role, for the results.
func checkPinning(t *testing.T) map[string]string {
	t.Helper()
	pinned := map[string]string{}
	kids, err := cpupin.Children(os.Getpid())
	require.NoError(t, err)
	for _, r := range []struct{ role, env, comm string }{
		{"kube-apiserver", envAPIServerCPUs, "kube-apiserver"},
		{"etcd", envEtcdCPUs, "etcd"},
		{"controller", envControllerCPUs, ""},
	} {
		list := os.Getenv(r.env)
		if list == "" {
			continue
		}
		pid := os.Getpid()
		if r.comm != "" {
			require.Len(t, kids[r.comm], 1, "%s: one %s process started by this test, found %v", r.env, r.comm, kids)
			pid = kids[r.comm][0]
		}
		require.NoError(t, cpupin.Check(pid, list), "%s (%s)", r.role, r.env)
		pinned[r.role] = list
		t.Logf("pinned: %s (pid %d) runs on CPUs %s", r.role, pid, list)
	}
	return pinned
}

// ownCPUs is the CPU list this process may run on, for the rank clients
// to report back.
func ownCPUs(t *testing.T) string {
	cpus, err := cpupin.Allowed(os.Getpid())
	require.NoError(t, err)
	return cpupin.FormatList(cpus)
}
