package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// Scenario files: `kubectl get -o yaml` style dumps built around the real
// node labels, resources and scheduler messages people posted
// (testdata/fixtures/kubernetes), one per verdict. They are written by
// `go test -run TestScenarioFiles -update` and read by the offline tests
// here and by `rankgate diagnose --offline` golden tests and docs.

var update = flag.Bool("update", false, "rewrite testdata/scenarios from the fixtures")

const scenarioDir = "testdata/scenarios"

// legacyDir holds inputs labelled the way older dumps are, which diagnose
// still reads; they are written and judged like the scenarios, but are
// not one per verdict (and not read by the CLI's golden tests).
const legacyDir = "testdata/legacy"

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "fixtures", "kubernetes", name))
	require.NoError(t, err)
	return data
}

func fixtureLabels(t *testing.T, name string) map[string]string {
	var m map[string]string
	require.NoError(t, json.Unmarshal(fixture(t, name), &m))
	return m
}

// h100MixedNode is fixture 21 (H100, mig.strategy=mixed, all-balanced).
func h100MixedNode(t *testing.T) *clustertest.NodeWrapper {
	return clustertest.MakeNode("s4124-0073").
		Labels(fixtureLabels(t, "21_node-labels-json_h100_mig-mixed_all-balanced_nvidia-cloud-native-docs.json")).
		Allocatable("nvidia.com/mig-1g.10gb", "2").Allocatable("nvidia.com/mig-2g.20gb", "1").Allocatable("nvidia.com/mig-3g.40gb", "1")
}

// h100DisabledNode is fixture 23 (the same H100 with MIG disabled, single
// strategy), renamed so that both can be in one cluster.
func h100DisabledNode(t *testing.T, name string) *clustertest.NodeWrapper {
	return clustertest.MakeNode(name).
		Labels(fixtureLabels(t, "23_node-labels-json_h100_mig-disabled_single_nvidia-cloud-native-docs.json")).
		Label("kubernetes.io/hostname", name).
		Allocatable("nvidia.com/gpu", "1")
}

// staleNode is fixture 35: 8 full GPUs, stale zero MIG resources. Its
// labels were not posted; the product (RTX PRO 6000 Blackwell class, from
// the 1g.24gb/2g.48gb profiles) and GFD labels are our reconstruction.
func staleNode(t *testing.T) *clustertest.NodeWrapper {
	n, err := clustertest.MakeNode("gpu-node-01").
		Labels(map[string]string{
			"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "nvidia.com/gpu.count": "8",
			"nvidia.com/gpu.memory": "97887", "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
			"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success",
			"nvidia.com/cuda.driver-version.full": "580.82.07",
		}).
		Resources(bytes.NewReader(fixture(t, "35_node-capacity_8gpu_mig-disabled-stale-zero-mig-resources_kai1120.txt")))
	require.NoError(t, err)
	return n
}

func gfd(product, count, memory, strategy, config, state, driver string) map[string]string {
	return map[string]string{
		"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": count, "nvidia.com/gpu.memory": memory,
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": strategy,
		"nvidia.com/mig.config": config, "nvidia.com/mig.config.state": state,
		"nvidia.com/cuda.driver-version.full": driver,
	}
}

func migLabels(m map[string]string, profile, count, memory, sms string) map[string]string {
	m["nvidia.com/mig-"+profile+".count"] = count
	m["nvidia.com/mig-"+profile+".memory"] = memory
	m["nvidia.com/mig-"+profile+".multiprocessors"] = sms
	return m
}

// jobPods creates the pending pods the job's operator would create,
// labelled as it labels them (clustertest.OperatorPods).
func jobPods(j kubeflow.Job, msg string) []runtime.Object {
	var out []runtime.Object
	for _, p := range clustertest.OperatorPods(j) {
		if msg != "" {
			p.Unschedulable(msg)
		}
		out = append(out, p.Obj())
	}
	return out
}

// legacyJobPods creates them with only the replica-type label (in lower
// case) and the job-name label, as older dumps and hand-written files
// label MPIJob pods too: mpi-operator v0.8.0 sets no replica-type, but
// diagnose still reads it where a pod has no job-role label.
func legacyJobPods(j kubeflow.Job, msg string) []runtime.Object {
	var out []runtime.Object
	for _, rs := range j.ReplicaSpecs() {
		for i := 0; i < int(rs.Replicas); i++ {
			name := j.Name() + "-" + strings.ToLower(rs.Type) + "-" + string(rune('0'+i))
			p := clustertest.MakePod(name, j.Namespace()).OwnedBy(j.GVK().GroupVersion().String(), j.Kind(), j.Name(), rs.Type)
			p.Spec = *rs.Template.Spec.DeepCopy()
			if msg != "" {
				p.Unschedulable(msg)
			}
			out = append(out, p.Obj())
		}
	}
	return out
}

func asJob(t *testing.T, obj kubeflow.Object) kubeflow.Job {
	j, err := kubeflow.FromObject(obj)
	require.NoError(t, err)
	return j
}

type scenario struct {
	dir     string // scenarioDir if empty
	file    string
	about   string
	objects func(t *testing.T) []runtime.Object
	// rule is the primary verdict of the first workload; exit the exit
	// code of diagnose over the file.
	rule  string
	exit  int
	rules []string // further rules that must appear
	// labelErrors: nodes whose GPU labels cannot be read.
	labelErrors int
}

func scenarios() []scenario {
	return []scenario{
		{
			file:  "01-schedulable.yaml",
			about: "fixture 21 and 23 (one H100 MIG mixed all-balanced, one with MIG off): a notebook asks a 3g.40gb instance",
			objects: func(t *testing.T) []runtime.Object {
				return []runtime.Object{h100MixedNode(t).Obj(), h100DisabledNode(t, "s4124-0074").Obj(),
					clustertest.MakePod("notebook-3g", "research").Request("nvidia.com/mig-3g.40gb", "1").Request("cpu", "4").Obj()}
			},
			rule: verdict.RuleSchedulable, exit: 0,
		},
		{
			file:  "02-wait-capacity.yaml",
			about: "fixture 38 (gpu-operator#693, AKS A100, all-1g.10gb): the node advertises 1 instance instead of 7, and it is in use",
			objects: func(t *testing.T) []runtime.Object {
				labels := migLabels(gfd("NVIDIA-A100-80GB-PCIe", "1", "81920", "mixed", "all-1g.10gb", "success", "535.129.03"),
					"1g.10gb", "1", "9856", "14")
				labels["agentpool"] = "gpu"
				gpu := clustertest.MakeNode("aks-gpu-13492584-vmss000000").Labels(labels).Allocatable("nvidia.com/mig-1g.10gb", "1")
				sys0 := clustertest.MakeNode("aks-system-26383473-vmss000000").Label("agentpool", "system")
				sys1 := clustertest.MakeNode("aks-system-26383473-vmss000001").Label("agentpool", "system")
				running := clustertest.MakePod("mig-test-0", "default").Request("nvidia.com/mig-1g.10gb", "1").Node(gpu.Name)
				pending := clustertest.MakePod("mig-test-1", "default").Request("nvidia.com/mig-1g.10gb", "1").
					EditSpec(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"agentpool": "gpu"} }).
					Unschedulable("0/3 nodes are available: 1 Insufficient nvidia.com/mig-1g.10gb, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.")
				return []runtime.Object{gpu.Obj(), sys0.Obj(), sys1.Obj(), running.Obj(), pending.Obj()}
			},
			rule: verdict.RuleWaitCapacity, exit: 0, rules: []string{verdict.RuleMIGLayoutInvalid},
		},
		{
			file:  "03-shape-mismatch.yaml",
			about: "A100-80GB nodes carved into 1g.20gb (14 SMs); the job asks 2g.20gb (28 SMs): same memory, twice the compute",
			objects: func(t *testing.T) []runtime.Object {
				var out []runtime.Object
				for _, n := range []string{"dgx-a100-01", "dgx-a100-02"} {
					out = append(out, clustertest.MakeNode(n).
						Labels(migLabels(gfd("NVIDIA-A100-SXM4-80GB", "8", "81920", "mixed", "all-1g.20gb", "success", "550.54.15"), "1g.20gb", "32", "19968", "14")).
						Allocatable("nvidia.com/mig-1g.20gb", "32").Obj())
				}
				job := kubeflowtest.MakePyTorchJob("llm-finetune", "ml").Master().Workers(3).
					Request("nvidia.com/mig-2g.20gb", "1").Request("cpu", "8").Request("memory", "32Gi").Obj()
				out = append(out, job)
				return append(out, jobPods(asJob(t, job), "0/2 nodes are available: 2 Insufficient nvidia.com/mig-2g.20gb. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")...)
			},
			rule: verdict.RuleShapeMismatch, exit: 1, rules: []string{verdict.RuleReconfigurable, verdict.RuleMIGMultiPod},
		},
		{
			file:  "04-strategy-mismatch.yaml",
			about: "fixture 21: mixed strategy, every GPU partitioned; the job asks nvidia.com/gpu",
			objects: func(t *testing.T) []runtime.Object {
				job := kubeflowtest.MakePyTorchJob("bert", "ml").Request("nvidia.com/gpu", "1").Obj()
				return append([]runtime.Object{h100MixedNode(t).Obj(), job}, jobPods(asJob(t, job), "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")...)
			},
			rule: verdict.RuleStrategyMismatch, exit: 1,
		},
		{
			file:  "05-mig-layout-invalid.yaml",
			about: "gpu-operator#479: single strategy, MIG enabled without instances: GFD labels the product MIG-INVALID with count 0",
			objects: func(t *testing.T) []runtime.Object {
				labels := gfd("NVIDIA-A100-SXM4-40GB-MIG-INVALID", "0", "0", "single", "all-enabled", "success", "550.54.15")
				n := clustertest.MakeNode("a100-node-3").Labels(labels).Allocatable("nvidia.com/gpu", "0")
				p := clustertest.MakePod("inference-0", "serving").Request("nvidia.com/gpu", "1").
					Unschedulable("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
				return []runtime.Object{n.Obj(), p.Obj()}
			},
			rule: verdict.RuleMIGLayoutInvalid, exit: 1,
		},
		{
			file:  "06-mig-reconfig-pending.yaml",
			about: "fixture 23 relabelled to all-1g.10gb (mixed): mig-manager is applying it, the device plugin is paused",
			objects: func(t *testing.T) []runtime.Object {
				n := h100DisabledNode(t, "s4124-0073").Label("nvidia.com/mig.strategy", "mixed").
					Label("nvidia.com/mig.config", "all-1g.10gb").Label("nvidia.com/mig.config.state", "pending").
					Label("nvidia.com/gpu.deploy.device-plugin", "paused-for-mig-change").
					Label("nvidia.com/gpu.deploy.gpu-feature-discovery", "paused-for-mig-change")
				p := clustertest.MakePod("notebook-1g", "research").Request("nvidia.com/mig-1g.10gb", "1")
				return []runtime.Object{n.Obj(), p.Obj()}
			},
			rule: verdict.RuleMIGReconfigPending, exit: 0,
		},
		{
			file:  "07-mig-reconfig-failed.yaml",
			about: "the same change after mig-manager gave up",
			objects: func(t *testing.T) []runtime.Object {
				n := h100DisabledNode(t, "s4124-0073").Label("nvidia.com/mig.strategy", "mixed").
					Label("nvidia.com/mig.config", "all-1g.10gb").Label("nvidia.com/mig.config.state", "failed")
				p := clustertest.MakePod("notebook-1g", "research").Request("nvidia.com/mig-1g.10gb", "1")
				return []runtime.Object{n.Obj(), p.Obj()}
			},
			rule: verdict.RuleMIGReconfigFailed, exit: 1,
		},
		{
			file:  "08-driver-known-bad.yaml",
			about: "GPU Operator 25.3 known issue: a node mixing MIG and full GPUs on driver 570.133.20",
			objects: func(t *testing.T) []runtime.Object {
				labels := migLabels(gfd("NVIDIA-A100-SXM4-80GB", "8", "81920", "mixed", "half-balanced", "success", "570.133.20"), "1g.10gb", "28", "9856", "14")
				n := clustertest.MakeNode("dgx-a100-07").Labels(labels).Allocatable("nvidia.com/gpu", "4").Allocatable("nvidia.com/mig-1g.10gb", "28")
				job := kubeflowtest.MakePyTorchJob("resnet", "vision").Request("nvidia.com/gpu", "4").Obj()
				return append([]runtime.Object{n.Obj(), job}, jobPods(asJob(t, job), "")...)
			},
			rule: verdict.RuleDriverKnownBad, exit: 1,
		},
		{
			file:  "09-gang-too-large.yaml",
			about: "fixture 35 (8 full GPUs, rdma/ib0): an MPIJob with 2 workers x 8 GPUs",
			objects: func(t *testing.T) []runtime.Object {
				job := kubeflowtest.MakeMPIJob("allreduce", "hpc").Workers(2).SlotsPerWorker(8).
					WorkerRequest("nvidia.com/gpu", "8").WorkerRequest("rdma/ib0", "1").LauncherRequest("cpu", "1").Obj()
				return append([]runtime.Object{staleNode(t).Obj(), job}, jobPods(asJob(t, job), "")...)
			},
			rule: verdict.RuleGangTooLarge, exit: 1,
		},
		{
			file:  "10-node-constraints.yaml",
			about: "H100 nodes: two reserved with a taint the job does not tolerate, one in another pool than the job's nodeSelector",
			objects: func(t *testing.T) []runtime.Object {
				a := h100DisabledNode(t, "h100-a").Taint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule).Label("pool", "training")
				b := h100DisabledNode(t, "h100-b").Taint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule).Label("pool", "training")
				c := h100DisabledNode(t, "h100-c").Label("pool", "inference")
				job := kubeflowtest.MakePyTorchJob("train", "ml").Request("nvidia.com/gpu", "1").
					PodSpec(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"pool": "training"} }).Obj()
				return append([]runtime.Object{a.Obj(), b.Obj(), c.Obj(), job}, jobPods(asJob(t, job), "")...)
			},
			rule: verdict.RuleNodeConstraints, exit: 1,
		},
		{
			file:  "11-stale-mig-resources.yaml",
			about: "fixture 35 (kai#1120): MIG disabled, nvidia.com/mig-1g.24gb: 0 left over; a pod asks for it",
			objects: func(t *testing.T) []runtime.Object {
				p := clustertest.MakePod("vllm-0", "serving").Request("nvidia.com/mig-1g.24gb", "1")
				return []runtime.Object{staleNode(t).Obj(), p.Obj()}
			},
			rule: verdict.RuleShapeMismatch, exit: 1,
		},
		{
			file:  "12-scheduler-disagrees.yaml",
			about: "fixture 36 (kai#1876): the shape exists and is free, but KAI says no node has nvidia.com/mig-1g.5gb",
			objects: func(t *testing.T) []runtime.Object {
				var out []runtime.Object
				for _, name := range []string{"poweredge-r7525-01", "poweredge-r7525-02"} {
					labels := migLabels(gfd("NVIDIA-A100-PCIE-40GB", "2", "40960", "mixed", "all-1g.5gb", "success", "570.172.08"), "1g.5gb", "14", "4864", "14")
					out = append(out, clustertest.MakeNode(name).Labels(labels).
						Allocatable("nvidia.com/mig-1g.5gb", "14").Allocatable("rdma/shared_mlx5", "1k").Obj())
				}
				msg := strings.SplitN(string(fixture(t, "36_podgroup-event_kai_mixed-strategy_no-node-has-mig-1g.5gb_kai1876.txt")), "kai-scheduler  ", 2)[1]
				msg = strings.SplitN(msg, "\n", 2)[0]
				p := clustertest.MakePod("qwen3-embedding-0-vllmdecodeworker-4p8dk", "dynamo").
					Request("nvidia.com/mig-1g.5gb", "1").Request("cpu", "2").Request("memory", "6442Mi").Request("rdma/shared_mlx5", "1k").
					EditSpec(func(s *corev1.PodSpec) { s.SchedulerName = "kai-scheduler" }).Unschedulable(msg)
				return append(out, p.Obj())
			},
			rule: verdict.RuleSchedulable, exit: 0,
		},
		{
			file:  "13-mig-multi-pod.yaml",
			about: "fixture 40 (nccl#1716) as a job: 4 ranks on 1g.35gb instances of one H200, but in 4 pods",
			objects: func(t *testing.T) []runtime.Object {
				labels := migLabels(gfd("NVIDIA-H200", "1", "143771", "mixed", "all-1g.35gb", "success", "580.159.03"), "1g.35gb", "4", "35840", "26")
				n := clustertest.MakeNode("h200-01").Labels(labels).Allocatable("nvidia.com/mig-1g.35gb", "4")
				job := kubeflowtest.MakePyTorchJob("nccl-mig", "ml").Workers(4).Request("nvidia.com/mig-1g.35gb", "1").Obj()
				return append([]runtime.Object{n.Obj(), job}, jobPods(asJob(t, job), "")...)
			},
			rule: verdict.RuleSchedulable, exit: 0, rules: []string{verdict.RuleMIGMultiPod},
		},
		{
			file:  "14-dra-not-judged.yaml",
			about: "GPUs through DRA (NVIDIA DRA driver v0.4.1): DeviceClass gpu.nvidia.com serves nvidia.com/gpu, the dump holds no ResourceSlice (the devices are unknown), no node advertises nvidia.com/gpu; a PyTorchJob of 2 pods asks nvidia.com/gpu: 1. With the slices dumped too, the job is judged on them (testdata/dra)",
			objects: func(t *testing.T) []runtime.Object {
				n := clustertest.MakeNode("dra-h100-0").Label("nvidia.com/gpu.present", "true")
				job := kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(1).Request("nvidia.com/gpu", "1").Obj()
				objs := []runtime.Object{clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu"), n.Obj(), job}
				return append(objs, jobPods(asJob(t, job), "0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")...)
			},
			rule: verdict.RuleDRANotJudged, exit: 0,
		},
		{
			file: "15-dra-device-unhealthy.yaml",
			about: "GPUs through DRA (NVIDIA DRA driver v0.4.1, NVMLDeviceHealthCheck): DeviceClass gpu.nvidia.com serves nvidia.com/gpu; the node's ResourceSlice publishes two H100s, " +
				"gpu-0 tainted gpu.nvidia.com/xid=79 (a fatal Xid), gpu-1 gpu.nvidia.com/gpu-lost, both NoSchedule; a PyTorchJob of 2 pods asks nvidia.com/gpu: 1 and waits for the repair",
			objects: func(t *testing.T) []runtime.Object {
				n := clustertest.MakeNode("dgx-h100-0").Label("nvidia.com/gpu.present", "true")
				slice := clustertest.GPUSlice("dgx-h100-0",
					clustertest.DRAGPU{UUID: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20", MemoryGiB: 80},
					clustertest.DRAGPU{UUID: "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20", MemoryGiB: 80})
				slice.Spec.Devices[0].Taints = []resourcev1.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
				slice.Spec.Devices[1].Taints = []resourcev1.DeviceTaint{{Key: "gpu.nvidia.com/gpu-lost", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
				job := kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(1).Request("nvidia.com/gpu", "1").Obj()
				objs := []runtime.Object{clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu"), n.Obj(), slice, job}
				// What kube-scheduler 1.37 says (e2e TestE2EPendingDRAUnhealthyDevicesWait).
				return append(objs, jobPods(asJob(t, job), "0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")...)
			},
			rule: verdict.RuleDRADeviceUnhealthy, exit: 0,
		},
		{
			file: "16-node-labels-unreadable.yaml",
			about: "03-shape-mismatch with a third A100-80GB node whose nvidia.com/gpu.count label was hand-edited to \"eight\": its labels cannot be read, " +
				"so it is judged from its allocatable alone, and the job that would be hopeless (SHAPE_MISMATCH) is not called so until the label is fixed",
			objects: func(t *testing.T) []runtime.Object {
				var out []runtime.Object
				for _, n := range []string{"dgx-a100-01", "dgx-a100-02", "dgx-a100-03"} {
					labels := migLabels(gfd("NVIDIA-A100-SXM4-80GB", "8", "81920", "mixed", "all-1g.20gb", "success", "550.54.15"), "1g.20gb", "32", "19968", "14")
					if n == "dgx-a100-03" {
						labels["nvidia.com/gpu.count"] = "eight"
					}
					out = append(out, clustertest.MakeNode(n).Labels(labels).Allocatable("nvidia.com/mig-1g.20gb", "32").Obj())
				}
				job := kubeflowtest.MakePyTorchJob("llm-finetune", "ml").Master().Workers(3).
					Request("nvidia.com/mig-2g.20gb", "1").Request("cpu", "8").Request("memory", "32Gi").Obj()
				out = append(out, job)
				return append(out, jobPods(asJob(t, job), "0/3 nodes are available: 3 Insufficient nvidia.com/mig-2g.20gb. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")...)
			},
			rules: []string{verdict.RuleShapeMismatch}, labelErrors: 1,
			rule: verdict.RuleNodeLabelsUnreadable, exit: 0,
		},
	}
}

func legacyScenarios() []scenario {
	return []scenario{
		{
			dir:   legacyDir,
			file:  "mpijob-replica-type-labels.yaml",
			about: "09-gang-too-large with its MPIJob pods labelled replica-type=launcher|worker and no job-role, as older dumps label them",
			objects: func(t *testing.T) []runtime.Object {
				job := kubeflowtest.MakeMPIJob("allreduce", "hpc").Workers(2).SlotsPerWorker(8).
					WorkerRequest("nvidia.com/gpu", "8").WorkerRequest("rdma/ib0", "1").LauncherRequest("cpu", "1").Obj()
				return append([]runtime.Object{staleNode(t).Obj(), job}, legacyJobPods(asJob(t, job), "")...)
			},
			rule: verdict.RuleGangTooLarge, exit: 1,
		},
	}
}

func (s scenario) path() string {
	if s.dir == "" {
		return filepath.Join(scenarioDir, s.file)
	}
	return filepath.Join(s.dir, s.file)
}

func render(t *testing.T, s scenario) []byte {
	var b bytes.Buffer
	b.WriteString("# " + s.about + "\n# Generated by `go test ./integrations/kubernetes/cluster -run TestScenarioFiles -update`.\n")
	for _, o := range s.objects(t) {
		data, err := yaml.Marshal(o)
		require.NoError(t, err)
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.Bytes()
}

func TestScenarioFiles(t *testing.T) {
	for _, s := range append(scenarios(), legacyScenarios()...) {
		t.Run(s.file, func(t *testing.T) {
			path := s.path()
			want := render(t, s)
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, want, 0o644))
			}
			got, err := os.ReadFile(path)
			require.NoError(t, err, "run with -update")
			require.Equal(t, string(want), string(got), "scenario file is stale: run with -update")
		})
	}
}

// TestScenarios judges every scenario file offline, as diagnose does.
func TestScenarios(t *testing.T) {
	e := schedule.New()
	seen := map[string]bool{}
	for _, s := range append(scenarios(), legacyScenarios()...) {
		t.Run(s.file, func(t *testing.T) {
			b := NewBuilder()
			require.NoError(t, LoadFile(context.Background(), b, s.path(), nil, nil))
			c := e.NewCluster(b.Nodes())
			require.Len(t, c.LabelErrors, s.labelErrors)
			ws, err := b.Workloads()
			require.NoError(t, err)
			require.NotEmpty(t, ws)
			exit := 0
			var text strings.Builder
			for i, w := range ws {
				res := e.Diagnose(c, w)
				exit = max(exit, res.ExitCode())
				for _, f := range res.Report.Findings {
					seen[f.Rule] = true
					text.WriteString(string(f.Severity) + " " + f.Rule + ": " + f.Message + "\n")
				}
				if i == 0 {
					require.Equal(t, s.rule, res.Rule, text.String())
				}
				for _, r := range s.rules {
					_, ok := find(res.Report, r)
					require.True(t, ok, "want %s:\n%s", r, text.String())
				}
			}
			require.Equal(t, s.exit, exit, text.String())
		})
	}
	if !t.Failed() {
		var all []string
		for _, r := range schedule.Rules {
			if !seen[r] {
				all = append(all, r)
			}
		}
		sort.Strings(all)
		require.Empty(t, all, "every rule fires on some scenario")
	}
}

func find(r verdict.Report, rule string) (verdict.Finding, bool) {
	for _, f := range r.Findings {
		if f.Rule == rule {
			return f, true
		}
	}
	return verdict.Finding{}, false
}
