//go:build !rankgate_node

package app

import (
	"errors"
	"github.com/rankgate/rankgate/integrations/kubernetes/kubeconfig"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
)

// useConnect serves status and completion from l, with defaultNS as the
// kubeconfig context's namespace.
func useConnect(t *testing.T, l *cluster.Live, defaultNS string, err error) {
	old := connect
	connect = func(*kubeconfig.Flags) (*cluster.Live, string, error) { return l, defaultNS, err }
	t.Cleanup(func() { connect = old })
}

func TestCompletionOfClusterFlags(t *testing.T) {
	words, dir := complete(t, "status", "-o", "")
	require.Equal(t, []string{"text", "wide", "json", "yaml", "name"}, words)
	require.Equal(t, noFiles, dir)
	words, _ = complete(t, "diagnose", "job", "x", "-o", "")
	require.Subset(t, words, []string{"text", "json"})
	words, _ = complete(t, "controller", "--on-fail", "")
	require.Equal(t, []string{"suspend", "delete", "annotate"}, words)
	words, _ = complete(t, "controller", "--mig-reconfigure", "")
	require.Equal(t, []string{"off", "on-demand"}, words)
	words, _ = complete(t, "controller", "--admission-check", "SHAPE_MISMATCH=")
	require.Equal(t, []string{"SHAPE_MISMATCH=deny", "SHAPE_MISMATCH=warn", "SHAPE_MISMATCH=off"}, words)
	words, _ = complete(t, "diagnose", "job", "--kind", "")
	require.Equal(t, []string{"PyTorchJob", "MPIJob", "TrainJob", "JobSet"}, words)

	// --context from the kubeconfig.
	cfg := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(cfg, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts:
- {name: prod, context: {cluster: c, user: u}}
- {name: lab, context: {cluster: c, user: u, namespace: ml}}
current-context: lab
`), 0o600))
	words, dir = complete(t, "status", "--kubeconfig", cfg, "--context", "")
	require.Equal(t, []string{"lab", "prod"}, words)
	require.Equal(t, noFiles, dir)
	words, _ = complete(t, "diagnose", "pod", "--kubeconfig", cfg, "--context", "p")
	require.Equal(t, []string{"prod"}, words)
}

func TestCompletionFromTheCluster(t *testing.T) {
	ns := func(name string) runtime.Object { return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	l, cs := fakeLive(t, ns("ml"), ns("research"), ns("kube-system"),
		kubeflowtest.MakePyTorchJob("train", "ml").Master().Workers(1).Obj(),
		kubeflowtest.MakePyTorchJob("tune", "ml").Master().Workers(1).Obj(),
		kubeflowtest.MakeMPIJob("hpc", "ml").Workers(2).Obj(),
		kubeflowtest.MakePyTorchJob("elsewhere", "research").Master().Obj(),
	)
	useConnect(t, l, "ml", nil)

	words, dir := complete(t, "status", "-n", "")
	require.Equal(t, []string{"kube-system", "ml", "research"}, words)
	require.Equal(t, noFiles, dir)
	words, _ = complete(t, "diagnose", "job", "--namespace", "r")
	require.Equal(t, []string{"research"}, words)

	// Job names of the context's namespace, of both kinds.
	words, dir = complete(t, "status", "")
	require.ElementsMatch(t, []string{"train\tPyTorchJob", "tune\tPyTorchJob", "hpc\tMPIJob"}, words)
	require.Equal(t, noFiles, dir)
	words, _ = complete(t, "status", "t")
	require.ElementsMatch(t, []string{"train\tPyTorchJob", "tune\tPyTorchJob"}, words)
	words, _ = complete(t, "status", "-n", "research", "")
	require.Equal(t, []string{"elsewhere\tPyTorchJob"}, words)
	// KIND/NAME and KIND NAME.
	words, _ = complete(t, "status", "pytorchjob/tr")
	require.Equal(t, []string{"pytorchjob/train\tPyTorchJob"}, words)
	words, _ = complete(t, "diagnose", "job", "mpijob", "")
	require.Equal(t, []string{"hpc\tMPIJob"}, words)
	words, _ = complete(t, "diagnose", "job", "mpijobs.kubeflow.org/")
	require.Equal(t, []string{"mpijobs.kubeflow.org/hpc\tMPIJob"}, words)
	// Nothing after a complete reference.
	words, _ = complete(t, "status", "pytorchjob/train", "")
	require.Empty(t, words)
	words, _ = complete(t, "status", "train", "")
	require.Empty(t, words)

	// The API server refuses: no suggestions, no error, no file names.
	cs.PrependReactor("list", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	words, dir = complete(t, "status", "-n", "")
	require.Empty(t, words)
	require.Equal(t, noFiles, dir)

	// No kubeconfig: the same.
	useConnect(t, nil, "", errors.New("no configuration has been provided"))
	words, dir = complete(t, "status", "")
	require.Empty(t, words)
	require.Equal(t, noFiles, dir)
}
