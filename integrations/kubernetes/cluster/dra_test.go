package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

func draSets(w schedule.Workload) map[string]string {
	out := map[string]string{}
	for _, ps := range w.PodSets {
		out[ps.Name] = ps.DRA
	}
	return out
}

func withClaim(name string) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.ResourceClaims = append(s.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(name + "-template")})
		s.Containers[0].Resources.Claims = append(s.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: name})
	}
}

func TestBuilderMarksDRAPodSets(t *testing.T) {
	gpuClass := clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu")
	tests := []struct {
		name    string
		classes bool
		job     *kubeflowtest.PyTorchJobWrapper
		want    map[string]string
	}{
		{
			name: "nvidia.com/gpu that a DeviceClass maps", classes: true,
			job:  kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(1).Request("nvidia.com/gpu", "1"),
			want: map[string]string{"Master": "nvidia.com/gpu from DeviceClass gpu.nvidia.com", "Worker": "nvidia.com/gpu from DeviceClass gpu.nvidia.com"},
		},
		{
			name: "nvidia.com/gpu without such a DeviceClass: the device plugin's",
			job:  kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(1).Request("nvidia.com/gpu", "1"),
			want: map[string]string{"Master": "", "Worker": ""},
		},
		{
			name: "a MIG resource the class does not map", classes: true,
			job:  kubeflowtest.MakePyTorchJob("llm", "ml").Workers(2).Request("nvidia.com/mig-1g.10gb", "1"),
			want: map[string]string{"Worker": ""},
		},
		{
			name: "resource claims, no DeviceClass needed",
			job:  kubeflowtest.MakePyTorchJob("llm", "ml").Workers(2).Request("cpu", "4").PodSpec(withClaim("gpu")),
			want: map[string]string{"Worker": "resource claims gpu"},
		},
		{
			name: "the implicit extended resource of a class", classes: true,
			job:  kubeflowtest.MakePyTorchJob("llm", "ml").Workers(1).Request("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "1"),
			want: map[string]string{"Worker": "deviceclass.resource.kubernetes.io/gpu.nvidia.com from DeviceClass gpu.nvidia.com"},
		},
		{
			name: "the implicit extended resource of a class not in the input",
			job:  kubeflowtest.MakePyTorchJob("llm", "ml").Workers(1).Request("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "1"),
			want: map[string]string{"Worker": "deviceclass.resource.kubernetes.io/gpu.nvidia.com"},
		},
		{
			name: "asked by an init container only", classes: true,
			job: kubeflowtest.MakePyTorchJob("llm", "ml").Workers(1).PodSpec(func(s *corev1.PodSpec) {
				s.InitContainers = append(s.InitContainers, corev1.Container{Name: "rankgate-init", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}})
			}),
			want: map[string]string{"Worker": "nvidia.com/gpu from DeviceClass gpu.nvidia.com"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := asJob(t, tc.job.Obj())
			// From the templates (the webhook's case), and from the job's
			// pending pods added before the DeviceClass (offline dumps
			// come in any order).
			b := NewBuilder()
			if tc.classes {
				require.NoError(t, b.AddDeviceClass(gpuClass))
			}
			w, err := b.WorkloadFor(j)
			require.NoError(t, err)
			require.Equal(t, tc.want, draSets(w), "from the templates")

			b = NewBuilder()
			for _, p := range clustertest.OperatorPods(j) {
				require.NoError(t, b.AddPod(p.Unschedulable("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.").Obj()))
			}
			if tc.classes {
				require.NoError(t, b.AddDeviceClass(gpuClass))
			}
			w, err = b.WorkloadFor(j)
			require.NoError(t, err)
			require.Equal(t, tc.want, draSets(w), "from the pods")
		})
	}
}

func TestBuilderDRAPodsWithoutJob(t *testing.T) {
	b := NewBuilder()
	// A lone pod that has claims and asks for no GPU resource: judged (a
	// device pod), where a pod without claims would not be.
	require.NoError(t, b.AddPod(clustertest.MakePod("inference", "serving").Request("cpu", "2").EditSpec(withClaim("gpu")).Obj()))
	require.NoError(t, b.AddPod(clustertest.MakePod("web", "serving").Request("cpu", "2").Obj()))
	// A pod of a job not in the input, asking the class's implicit name.
	job := asJob(t, kubeflowtest.MakePyTorchJob("llm", "ml").Workers(2).Request("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "1").Obj())
	for _, p := range clustertest.OperatorPods(job) {
		require.NoError(t, b.AddPod(p.Obj()))
	}
	require.NoError(t, b.AddDeviceClass(clustertest.DeviceClass("gpu.nvidia.com", "")))
	ws, err := b.Workloads()
	require.NoError(t, err)
	got := map[string]map[string]string{}
	for _, w := range ws {
		got[w.Subject()] = draSets(w)
	}
	require.Equal(t, map[string]map[string]string{
		"PyTorchJob ml/llm (job object not in the input: judged from its pods)": {"Worker": "deviceclass.resource.kubernetes.io/gpu.nvidia.com from DeviceClass gpu.nvidia.com"},
		"Pod serving/inference": {"inference": "resource claims gpu"},
	}, got)
	w, ok := b.PodWorkload("serving", "inference")
	require.True(t, ok)
	require.Equal(t, "resource claims gpu", w.PodSets[0].DRA)
}

// Two classes mapping one resource: the message names one, the same
// whatever the order they come in.
func TestDeviceClassesSameResource(t *testing.T) {
	for _, order := range [][]string{{"a-gpu", "b-gpu"}, {"b-gpu", "a-gpu"}} {
		b := NewBuilder()
		for _, n := range order {
			require.NoError(t, b.AddDeviceClass(clustertest.DeviceClass(n, "nvidia.com/gpu")))
		}
		require.Equal(t, "a-gpu", b.DeviceClasses()["nvidia.com/gpu"])
	}
	require.Error(t, NewBuilder().AddDeviceClass(clustertest.DeviceClass("", "nvidia.com/gpu")))
}

// The cluster: GPUs only through DRA, no nvidia.com/gpu in node
// allocatable, a PyTorchJob of 2 pods asking nvidia.com/gpu: 1, read from
// `kubectl get -o yaml` dumps. It used to be SHAPE_MISMATCH ("The cluster
// offers no NVIDIA GPU resource at all").
func TestLoadDRAClusterStandsDown(t *testing.T) {
	dump := `apiVersion: resource.k8s.io/v1
kind: DeviceClassList
items:
- metadata: {name: gpu.nvidia.com}
  spec:
    extendedResourceName: nvidia.com/gpu
    selectors:
    - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}
---
apiVersion: v1
kind: Node
metadata: {name: dra-h100-0}
status:
  allocatable: {cpu: "96", memory: 1Ti, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: llm, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: {spec: {containers: [{name: pytorch, resources: {limits: {nvidia.com/gpu: "1"}}}]}}
    Worker:
      replicas: 1
      template: {spec: {containers: [{name: pytorch, resources: {limits: {nvidia.com/gpu: "1"}}}]}}
`
	e := schedule.New()
	judge := func(dump string) schedule.Result {
		b := NewBuilder()
		var stats LoadStats
		require.NoError(t, Load(b, "dump.yaml", strings.NewReader(dump), &stats))
		ws, err := b.Workloads()
		require.NoError(t, err)
		require.Len(t, ws, 1)
		return e.Diagnose(e.NewCluster(b.Nodes()), ws[0])
	}
	res := judge(dump)
	require.Equal(t, verdict.RuleDRANotJudged, res.Rule)
	require.False(t, res.Hopeless)
	require.Equal(t, verdict.ExitPass, res.ExitCode())

	// Without the DeviceClass (or before DRA was known), the same dump is hopeless.
	noClass := dump[strings.Index(dump, "---\n")+4:]
	res = judge(noClass)
	require.Equal(t, verdict.RuleShapeMismatch, res.Rule)
	require.Contains(t, res.Report.Findings[0].Message, "offers no NVIDIA GPU resource at all")
}

// Live diagnose reads the DeviceClasses; a user who may not list them is
// told, and pods with resource claims are still recognised.
func TestLiveDeviceClasses(t *testing.T) {
	job := kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(1).Request("nvidia.com/gpu", "1").Obj()
	objs := []runtime.Object{job, clustertest.MakeNode("dra-h100-0").Obj(), clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu")}
	objs = append(objs, jobPods(asJob(t, job), "0/1 nodes are available: 1 cannot allocate all claims.")...)
	e := schedule.New()
	judge := func(live *Live) schedule.Result {
		b := NewBuilder()
		require.NoError(t, live.LoadCluster(context.Background(), b))
		j, err := live.Job(context.Background(), "ml", "llm", "")
		require.NoError(t, err)
		w, err := b.WorkloadFor(j)
		require.NoError(t, err)
		return e.Diagnose(e.NewCluster(b.Nodes()), w)
	}

	live := newFakeLive(t, objs...)
	require.Equal(t, verdict.RuleDRANotJudged, judge(live).Rule)
	require.Empty(t, live.Notes)

	live = newFakeLive(t, objs...)
	live.Core.(*fake.Clientset).PrependReactor("list", "deviceclasses", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, "", errors.New("no RBAC"))
	})
	require.Equal(t, verdict.RuleShapeMismatch, judge(live).Rule)
	require.Len(t, live.Notes, 1)
	require.Contains(t, live.Notes[0], "cannot list deviceclasses")

	live = newFakeLive(t, objs...)
	live.Core.(*fake.Clientset).PrependReactor("list", "deviceclasses", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	var ae *APIError
	require.ErrorAs(t, live.LoadCluster(context.Background(), NewBuilder()), &ae)
}
