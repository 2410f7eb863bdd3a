package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// draObjectsOf decodes the nodes and DRA objects of a testdata/dra dump.
func draObjectsOf(t *testing.T, name string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "dra", name))
	require.NoError(t, err)
	var out []runtime.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var tm typeMeta
		require.NoError(t, yaml.Unmarshal([]byte(doc), &tm))
		var obj runtime.Object
		switch tm.Kind {
		case "Node":
			obj = &corev1.Node{}
		case "DeviceClass":
			obj = &resourcev1.DeviceClass{}
		case "ResourceSlice":
			obj = &resourcev1.ResourceSlice{}
		case "ResourceClaim":
			obj = &resourcev1.ResourceClaim{}
		case "ResourceClaimTemplate":
			obj = &resourcev1.ResourceClaimTemplate{}
		default:
			continue
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), obj))
		out = append(out, obj)
	}
	return out
}

// diagnoseLiveJob judges job ns/name as live diagnose does, on a fake API
// server holding objs, which leaves no note.
func diagnoseLiveJob(t *testing.T, ns, name string, objs ...runtime.Object) schedule.Result {
	t.Helper()
	live := newFakeLive(t, objs...)
	ctx := context.Background()
	b := NewBuilder()
	require.NoError(t, live.LoadCluster(ctx, b))
	require.Empty(t, live.Notes)
	got, err := live.Job(ctx, ns, name, "")
	require.NoError(t, err)
	w, err := b.WorkloadFor(got)
	require.NoError(t, err)
	e := schedule.New()
	res := e.Diagnose(e.NewCluster(b.Nodes()), w)
	return res
}

// Live diagnose reads the slices and claims from the API and names the
// claims that hold the devices the job waits for.
func TestLiveDRAJobWaitsForHeldDevices(t *testing.T) {
	objs := draObjectsOf(t, "03-devices-held.yaml")
	job := kubeflowtest.MakePyTorchJob("bert-ext", "ml").Master().Workers(1).Request("nvidia.com/gpu", "1").Obj()
	j, err := kubeflow.FromObject(job)
	require.NoError(t, err)
	objs = append(append(objs, job), jobPods(j, "0/1 nodes are available: 1 cannot allocate all claims.")...)
	res := diagnoseLiveJob(t, "ml", "bert-ext", objs...)
	require.Equal(t, verdict.RuleWaitCapacity, res.Rule, res.Report.Reason(0))
	fs := findingsOf(res, verdict.RuleWaitCapacity)
	require.NotEmpty(t, fs)
	require.Contains(t, fs[0].Message, "ResourceClaim research/notebook-a-gpu-x2k9q (pod research/notebook-a-0) holds")
}
