//go:build !rankgate_node

package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/kubeconfig"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/verdict"
)

// diagnose job takes the job as status does: NAME, KIND/NAME, KIND NAME,
// NAMESPACE/NAME, with -n or the kubeconfig context's namespace.
func TestDiagnoseJobForms(t *testing.T) {
	job := kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(1).Request("nvidia.com/gpu", "1").Obj()
	pod := clustertest.MakePod("llm-worker-0", "ml").OwnedBy("kubeflow.org/v1", "PyTorchJob", "llm", "Worker").Request("nvidia.com/gpu", "1").Obj()
	l, _ := fakeLive(t, clustertest.MakeNode("gpu-1").Allocatable("nvidia.com/gpu", "8").Obj(), job, pod)
	useLive(t, l)
	old := kubeconfigNamespace
	kubeconfigNamespace = func(*kubeconfig.Flags) (string, error) { return "ml", nil }
	t.Cleanup(func() { kubeconfigNamespace = old })

	for _, args := range [][]string{
		{"ml/llm"},
		{"llm", "-n", "ml"},
		{"llm"}, // the kubeconfig context's namespace
		{"pytorchjob/llm", "-n", "ml"},
		{"pytorchjob", "llm", "--namespace", "ml"},
		{"pytorchjobs.kubeflow.org/llm"},
		{"llm", "--kind", "PyTorchJob"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := run(t, nil, append([]string{"diagnose", "job", "-o", "json"}, args...)...)
			require.Equal(t, verdict.ExitPass, code, errOut)
			require.Equal(t, "PyTorchJob ml/llm", decodeReport(t, out).Subject)
			// diagnose JOB, as status JOB: the same report.
			code, same, errOut := run(t, nil, append([]string{"diagnose", "-o", "json"}, args...)...)
			require.Equal(t, verdict.ExitPass, code, errOut)
			require.Equal(t, out, same)
		})
	}
	code, out, _ := run(t, nil, "diagnose", "pod", "llm-worker-0", "-o", "json")
	require.Equal(t, verdict.ExitPass, code)
	require.Equal(t, "PyTorchJob ml/llm", decodeReport(t, out).Subject, "pod NAME in the context's namespace")

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"mpijob/llm", "-n", "ml"}, "MPIJob ml/llm (or its CRD is not installed) not found"},
		{[]string{"pytorchjob/llm", "--kind", "MPIJob"}, "the job is a PyTorchJob, --kind says MPIJob"},
		{[]string{"llm", "-n", "research"}, "PyTorchJob, MPIJob, TrainJob or JobSet research/llm (or its CRD is not installed) not found"},
	} {
		code, _, errOut := run(t, nil, append([]string{"diagnose", "job"}, tc.args...)...)
		require.Equal(t, verdict.ExitUsage, code, errOut)
		require.Contains(t, errOut, tc.msg)
	}

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"ml/llm", "--offline"}, "--offline needs at least one -f FILE"},
		{[]string{"ml/llm", "-f", "dump.yaml"}, "-f FILE is read with --offline only"},
		{[]string{"a", "b", "c"}, "accepts at most 2 arg(s)"},
	} {
		code, out, errOut := run(t, nil, append([]string{"diagnose"}, tc.args...)...)
		require.Equal(t, verdict.ExitUsage, code, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, tc.msg)
	}

	// No kubeconfig to take the namespace from: exit 3.
	kubeconfigNamespace = func(*kubeconfig.Flags) (string, error) {
		return "", errors.New("no configuration has been provided")
	}
	code, _, errOut := run(t, nil, "diagnose", "job", "llm")
	require.Equal(t, verdict.ExitEnvironment, code)
	require.Contains(t, errOut, "kubeconfig: no configuration has been provided")
}
