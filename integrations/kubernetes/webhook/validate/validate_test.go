package validate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/verdict"
)

// gpuNode is a Ready node labelled as GFD labels it.
func gpuNode(name string, labels map[string]string, alloc map[string]int) corev1.Node {
	rl := corev1.ResourceList{"cpu": resource.MustParse("96"), "memory": resource.MustParse("1Ti"), "pods": resource.MustParse("110")}
	for r, n := range alloc {
		rl[corev1.ResourceName(r)] = resource.MustParse(fmt.Sprint(n))
	}
	l := map[string]string{"kubernetes.io/hostname": name}
	for k, v := range labels {
		l[k] = v
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Status: corev1.NodeStatus{Allocatable: rl, Capacity: rl,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// a100Mixed: 8 A100-80GB, mixed strategy, all-1g.10gb applied.
func a100Mixed(name string) corev1.Node {
	return gpuNode(name, map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
		"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success",
		"nvidia.com/mig-1g.10gb.count": "56", "nvidia.com/mig-1g.10gb.memory": "9728", "nvidia.com/mig-1g.10gb.multiprocessors": "14",
	}, map[string]int{"nvidia.com/mig-1g.10gb": 56})
}

// h100Single: one H100, mig.strategy=single, MIG disabled.
func h100Single(name string) corev1.Node {
	return gpuNode(name, map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "81559",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single",
		"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success",
	}, map[string]int{"nvidia.com/gpu": 1})
}

func nodes(ns ...corev1.Node) validate.NodeSource {
	return func(context.Context) ([]corev1.Node, error) { return ns, nil }
}

func request(t testing.TB, obj runtime.Object, op admissionv1.Operation) admission.Request {
	t.Helper()
	raw, err := json.Marshal(obj)
	require.NoError(t, err)
	j, err := kubeflow.FromObject(obj)
	require.NoError(t, err)
	gvk := j.GVK()
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Operation: op, Namespace: j.Namespace(), Name: j.Name(),
		Kind:   metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Object: runtime.RawExtension{Raw: raw},
	}}
}

func torchrun(args ...string) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) { s.Containers[0].Command = append([]string{"torchrun"}, args...) }
}

func TestHandle(t *testing.T) {
	cluster := nodes(a100Mixed("a100-0"), a100Mixed("a100-1"), h100Single("h100-0"))
	tests := []struct {
		name     string
		obj      runtime.Object
		policies map[string]validate.Policy
		nodes    validate.NodeSource
		allowed  bool
		// deny: substrings of the denial message; warn: of the warnings.
		deny, warn []string
		noWarn     bool
	}{
		{
			name:    "fits: one 1g.10gb per worker, torchrun one process",
			obj:     kubeflowtest.MakePyTorchJob("ok", "ml").Master().Workers(3).Request("nvidia.com/mig-1g.10gb", "1").PodSpec(torchrun("--nproc-per-node=1", "train.py")).PodSpec(nccl231).Obj(),
			allowed: true, noWarn: true,
		},
		{
			name:    "SHAPE_MISMATCH: 1g.5gb exists on no node and no A100-80GB/H100 layout gives it",
			obj:     kubeflowtest.MakePyTorchJob("shape", "ml").Master().Workers(1).Request("nvidia.com/mig-1g.5gb", "1").Obj(),
			allowed: false, deny: []string{"rankgate refused PyTorchJob ml/shape", "SHAPE_MISMATCH: ", "nvidia.com/mig-1g.5gb", "Fix: "},
		},
		{
			name:     "SHAPE_MISMATCH under warn: admitted with the warning",
			obj:      kubeflowtest.MakePyTorchJob("shape", "ml").Master().Workers(1).Request("nvidia.com/mig-1g.5gb", "1").Obj(),
			policies: map[string]validate.Policy{verdict.RuleShapeMismatch: validate.Warn},
			allowed:  true, warn: []string{"SHAPE_MISMATCH: ", "Fix: "},
		},
		{
			name:     "SHAPE_MISMATCH off",
			obj:      kubeflowtest.MakePyTorchJob("shape", "ml").Master().Workers(1).Request("nvidia.com/mig-1g.5gb", "1").PodSpec(nccl231).Obj(),
			policies: map[string]validate.Policy{verdict.RuleShapeMismatch: validate.Off},
			allowed:  true, noWarn: true,
		},
		{
			name:    "RECONFIGURABLE: 3g.40gb is a valid A100-80GB layout, not refused",
			obj:     kubeflowtest.MakePyTorchJob("reconf", "ml").Workers(2).Request("nvidia.com/mig-3g.40gb", "1").PodSpec(nccl231).Obj(),
			allowed: true, noWarn: true,
		},
		{
			name:    "STRATEGY_MISMATCH: 1g.10gb asked where only the single-strategy H100 could give it",
			obj:     kubeflowtest.MakePyTorchJob("strat", "ml").Workers(1).Request("nvidia.com/mig-1g.10gb", "1").Obj(),
			nodes:   nodes(h100Single("h100-0")),
			allowed: false, deny: []string{"STRATEGY_MISMATCH: ", "mig.strategy=single", "Fix: "},
		},
		{
			name:    "no GPU nodes: placement not judged",
			obj:     kubeflowtest.MakePyTorchJob("shape", "ml").Workers(1).Request("nvidia.com/mig-1g.5gb", "1").PodSpec(nccl231).Obj(),
			nodes:   nodes(gpuNode("cpu-0", nil, nil)),
			allowed: true, noWarn: true,
		},
		{
			name:    "node source fails: admitted with a note",
			obj:     kubeflowtest.MakePyTorchJob("shape", "ml").Workers(1).Request("nvidia.com/mig-1g.5gb", "1").Obj(),
			nodes:   func(context.Context) ([]corev1.Node, error) { return nil, errors.New("cache not synced") },
			allowed: true, warn: []string{"placement checks (SHAPE_MISMATCH, STRATEGY_MISMATCH) skipped", "cache not synced"},
		},
		{
			name:    "MIG_MULTIPLE_PER_PROCESS warns by default",
			obj:     kubeflowtest.MakePyTorchJob("multi", "ml").Workers(2).Request("nvidia.com/mig-1g.10gb", "2").Obj(),
			allowed: true, warn: []string{"MIG_MULTIPLE_PER_PROCESS: ", "asks for 2 MIG devices", "Fix: "},
		},
		{
			name:     "MIG_MULTIPLE_PER_PROCESS denies when configured",
			obj:      kubeflowtest.MakePyTorchJob("multi", "ml").Workers(2).Request("nvidia.com/mig-1g.10gb", "2").Obj(),
			policies: map[string]validate.Policy{verdict.RuleMIGMultiplePerProcess: validate.Deny},
			allowed:  false, deny: []string{"MIG_MULTIPLE_PER_PROCESS: ", "Worker container"},
		},
		{
			name:    "GANG_MIG_MIXED_WITH_FULL: Master on a full GPU, Workers on MIG",
			obj:     mixedJob(),
			allowed: true, warn: []string{"GANG_MIG_MIXED_WITH_FULL: ", "Master/", "Worker/"},
		},
		{
			name:    "NPROC_EXCEEDS_DEVICES: --nproc-per-node 4 on one GPU",
			obj:     kubeflowtest.MakePyTorchJob("nproc", "ml").Workers(2).Request("nvidia.com/mig-1g.10gb", "1").PodSpec(torchrun("--nproc-per-node", "4", "train.py")).Obj(),
			allowed: true, warn: []string{"NPROC_EXCEEDS_DEVICES: ", "starts 4 torchrun processes (--nproc-per-node) on 1 GPUs", "Fix: set --nproc-per-node to 1"},
		},
		{
			name: "NPROC_EXCEEDS_DEVICES from PET_NPROC_PER_NODE in a shell line",
			obj: kubeflowtest.MakePyTorchJob("nproc", "ml").Workers(1).Request("nvidia.com/mig-1g.10gb", "1").PodSpec(func(s *corev1.PodSpec) {
				s.Containers[0].Command = []string{"/bin/bash", "-c", "pip install -r req.txt && torchrun train.py"}
				s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "PET_NPROC_PER_NODE", Value: "2"})
			}).Obj(),
			allowed: true, warn: []string{"NPROC_EXCEEDS_DEVICES: ", "starts 2 torchrun processes (PET_NPROC_PER_NODE) on 1 GPUs"},
		},
		{
			name:    "MPIJob v2beta1: launcher without GPUs, workers asking two 1g.10gb",
			obj:     kubeflowtest.MakeMPIJob("mpi", "ml").Workers(2).WorkerRequest("nvidia.com/mig-1g.10gb", "2").Obj(),
			allowed: true, warn: []string{"MIG_MULTIPLE_PER_PROCESS: ", "Worker container"},
		},
		{
			name:    "NCCL_NVLS_ON_MIG warns by default",
			obj:     kubeflowtest.MakePyTorchJob("nvls", "ml").Workers(2).Request("nvidia.com/mig-1g.10gb", "1").PodSpec(nccl231).PodSpec(setEnv("NCCL_NVLS_ENABLE", "1")).Obj(),
			allowed: true, warn: []string{"NCCL_NVLS_ON_MIG: ", "Worker (container pytorch)", "Fix: "},
		},
		{
			name:     "NCCL_NVLS_ON_MIG under deny: refused",
			obj:      kubeflowtest.MakePyTorchJob("nvls", "ml").Workers(2).Request("nvidia.com/mig-1g.10gb", "1").PodSpec(nccl231).PodSpec(setEnv("NCCL_NVLS_ENABLE", "1")).Obj(),
			policies: map[string]validate.Policy{verdict.RuleNCCLNVLSOnMIG: validate.Deny},
			allowed:  false, deny: []string{"NCCL_NVLS_ON_MIG: "},
		},
		{
			name:    "NCCL_MIG_VERSION: a MIG job whose NCCL cannot be told says how to tell",
			obj:     kubeflowtest.MakePyTorchJob("ver", "ml").Workers(2).Request("nvidia.com/mig-1g.10gb", "1").Obj(),
			allowed: true, warn: []string{"NCCL_MIG_VERSION: ", "NCCL_DEBUG=VERSION"},
		},
		{
			name:     "NCCL_MIG_VERSION off",
			obj:      kubeflowtest.MakePyTorchJob("ver", "ml").Workers(2).Request("nvidia.com/mig-1g.10gb", "1").Obj(),
			policies: map[string]validate.Policy{verdict.RuleNCCLMIGVersion: validate.Off},
			allowed:  true, noWarn: true,
		},
		{
			name:    "MPIJob v2beta1: unknown profile refused",
			obj:     kubeflowtest.MakeMPIJob("mpi", "ml").Workers(2).WorkerRequest("nvidia.com/mig-1g.5gb", "1").Obj(),
			allowed: false, deny: []string{"rankgate refused MPIJob ml/mpi", "SHAPE_MISMATCH: "},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := cluster
			if tc.nodes != nil {
				src = tc.nodes
			}
			h := validate.NewHandler(validate.Options{Policies: tc.policies, Nodes: src})
			resp := h.Handle(context.Background(), request(t, tc.obj, admissionv1.Create))
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			require.Equal(t, tc.allowed, resp.Allowed, "message %q, warnings %q", msg, resp.Warnings)
			for _, s := range tc.deny {
				require.Contains(t, msg, s)
			}
			warnings := strings.Join(resp.Warnings, "\n")
			for _, s := range tc.warn {
				require.Contains(t, warnings, s)
			}
			if tc.noWarn {
				require.Empty(t, resp.Warnings)
			}
			for _, w := range resp.Warnings {
				require.LessOrEqual(t, len(w), 256, "the API server truncates longer warnings")
			}
		})
	}
}

// mixedJob: the Master on a full GPU, two Workers on one 1g.10gb each.
func mixedJob() *kftraining.PyTorchJob {
	j := kubeflowtest.MakePyTorchJob("mixed", "ml").Request("nvidia.com/gpu", "1").Master().Workers(2).Obj()
	w := &j.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeWorker].Template.Spec.Containers[0].Resources
	one := resource.MustParse("1")
	w.Limits = corev1.ResourceList{"nvidia.com/mig-1g.10gb": one}
	w.Requests = corev1.ResourceList{"nvidia.com/mig-1g.10gb": one}
	return j
}

func TestHandleIgnores(t *testing.T) {
	h := validate.NewHandler(validate.Options{Nodes: nodes(a100Mixed("a100-0"))})
	bad := kubeflowtest.MakePyTorchJob("shape", "ml").Workers(1).Request("nvidia.com/mig-1g.5gb", "1").Obj()
	// A delete is not judged.
	resp := h.Handle(context.Background(), request(t, bad, admissionv1.Delete))
	require.True(t, resp.Allowed)
	// Another kind is not judged.
	req := request(t, bad, admissionv1.Create)
	req.Kind.Kind = "TFJob"
	require.True(t, h.Handle(context.Background(), req).Allowed)
	// An update is judged like a create.
	require.False(t, h.Handle(context.Background(), request(t, bad, admissionv1.Update)).Allowed)
	// Garbage is a bad request.
	req = request(t, bad, admissionv1.Create)
	req.Object.Raw = []byte("{")
	resp = h.Handle(context.Background(), req)
	require.False(t, resp.Allowed)
	require.EqualValues(t, 400, resp.Result.Code)
}

func TestCheckPolicies(t *testing.T) {
	require.NoError(t, validate.CheckPolicies(validate.DefaultPolicies()))
	require.Error(t, validate.CheckPolicies(map[string]validate.Policy{"NO_SUCH_RULE": validate.Deny}))
	require.Error(t, validate.CheckPolicies(map[string]validate.Policy{verdict.RuleShapeMismatch: "block"}))
	for _, id := range validate.Checks {
		require.True(t, verdict.Registered(id), id)
	}
	p, err := validate.ParsePolicy(" Warn ")
	require.NoError(t, err)
	require.Equal(t, validate.Warn, p)
}

// a100_40Mixed: 8 A100-40GB, mixed strategy, all-1g.5gb applied.
func a100_40Mixed(name string) corev1.Node {
	return gpuNode(name, map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "40960",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
		"nvidia.com/mig.config": "all-1g.5gb", "nvidia.com/mig.config.state": "success",
		"nvidia.com/mig-1g.5gb.count": "56", "nvidia.com/mig-1g.5gb.memory": "4864", "nvidia.com/mig-1g.5gb.multiprocessors": "14",
	}, map[string]int{"nvidia.com/mig-1g.5gb": 56})
}

// The prepared cluster is reused while the nodes are the same objects,
// and never once one changes (a new resourceVersion) or is added.
func TestHandleFollowsTheNodes(t *testing.T) {
	a := a100Mixed("a100-0")
	a.ResourceVersion = "1"
	current := []corev1.Node{a}
	h := validate.NewHandler(validate.Options{Nodes: func(context.Context) ([]corev1.Node, error) { return current, nil }})
	req := request(t, kubeflowtest.MakePyTorchJob("j", "ml").Workers(2).Request("nvidia.com/mig-1g.5gb", "1").Obj(), admissionv1.Create)
	require.False(t, h.Handle(context.Background(), req).Allowed)
	require.False(t, h.Handle(context.Background(), req).Allowed)

	// A new node offers the shape.
	b := a100_40Mixed("a100-40")
	b.ResourceVersion = "5"
	current = []corev1.Node{a, b}
	require.True(t, h.Handle(context.Background(), req).Allowed)

	// The same node, relabelled to the 80GB layout: a new resourceVersion.
	b2 := a100Mixed("a100-40")
	b2.ResourceVersion = "6"
	current = []corev1.Node{a, b2}
	require.False(t, h.Handle(context.Background(), req).Allowed)
}

// nccl231 says the job's image runs NCCL 2.31, the first with MIG support.
func nccl231(s *corev1.PodSpec) { setEnv("NCCL_VERSION", "2.31.2")(s) }

func setEnv(name, value string) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		for i := range s.Containers {
			s.Containers[i].Env = append(s.Containers[i].Env, corev1.EnvVar{Name: name, Value: value})
		}
	}
}

// TestHandleNCCLChecks: every NCCL settings check a template alone can
// show warns at admission by default and refuses the job when set to
// deny; the same job with the setting fixed is admitted without a word.
func TestHandleNCCLChecks(t *testing.T) {
	mig := func(n string, fs ...func(*corev1.PodSpec)) *kftraining.PyTorchJob {
		b := kubeflowtest.MakePyTorchJob("nccl", "ml").Master().Workers(2).Request("nvidia.com/mig-1g.10gb", n).PodSpec(torchrun("--nproc-per-node="+n, "train.py"))
		for _, f := range fs {
			b = b.PodSpec(f)
		}
		return b.Obj()
	}
	masterProto := func(j *kftraining.PyTorchJob, v string) *kftraining.PyTorchJob {
		c := &j.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeMaster].Template.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "NCCL_PROTO", Value: v})
		return j
	}
	multi := setEnv("NCCL_MULTI_RANK_GPU_ENABLE", "1")
	cases := map[string]struct{ bad, good *kftraining.PyTorchJob }{
		verdict.RuleNCCLMIGVersion:         {mig("1", setEnv("NCCL_VERSION", "2.21.5")), mig("1", nccl231)},
		verdict.RuleNCCLMultiRankGPU:       {mig("2", nccl231), mig("2", nccl231, multi)},
		verdict.RuleNCCLNVLSOnMIG:          {mig("1", nccl231, setEnv("NCCL_NVLS_ENABLE", "1")), mig("1", nccl231, setEnv("NCCL_NVLS_ENABLE", "0"))},
		verdict.RuleNCCLMNNVLNoDomain:      {mig("1", nccl231, setEnv("NCCL_MNNVL_ENABLE", "1")), mig("1", nccl231, setEnv("NCCL_MNNVL_ENABLE", "0"))},
		verdict.RuleNCCLSHMDisabledMIG:     {mig("2", nccl231, multi, setEnv("NCCL_SHM_DISABLE", "1")), mig("2", nccl231, multi, setEnv("NCCL_SHM_DISABLE", "0"))},
		verdict.RuleNCCLIgnoreNetMismatch:  {mig("1", nccl231, setEnv("NCCL_IGNORE_NET_MISMATCH", "1")), mig("1", nccl231, setEnv("NCCL_IGNORE_NET_MISMATCH", "0"))},
		verdict.RuleNCCLSettingsDiffer:     {masterProto(mig("1", nccl231, setEnv("NCCL_PROTO", "LL128")), "Simple"), mig("1", nccl231, setEnv("NCCL_PROTO", "Simple"))},
		verdict.RuleVisibleDevicesMismatch: {mig("1", nccl231, setEnv("CUDA_VISIBLE_DEVICES", "0,1")), mig("1", nccl231, setEnv("CUDA_VISIBLE_DEVICES", "0"))},
	}
	require.Len(t, cases, len(validate.NCCLChecks), "a case for every NCCL check")
	for _, id := range validate.NCCLChecks {
		tc, ok := cases[id]
		require.True(t, ok, id)
		t.Run(id, func(t *testing.T) {
			// No node source: the placement checks stay out of it.
			resp := validate.NewHandler(validate.Options{}).Handle(context.Background(), request(t, tc.bad, admissionv1.Create))
			require.True(t, resp.Allowed)
			require.Contains(t, strings.Join(resp.Warnings, "\n"), id+": ")

			resp = validate.NewHandler(validate.Options{Policies: map[string]validate.Policy{id: validate.Deny}}).Handle(context.Background(), request(t, tc.bad, admissionv1.Create))
			require.False(t, resp.Allowed, "%q", resp.Warnings)
			require.Contains(t, resp.Result.Message, id+": ")

			resp = validate.NewHandler(validate.Options{}).Handle(context.Background(), request(t, tc.good, admissionv1.Create))
			require.True(t, resp.Allowed)
			for _, w := range resp.Warnings {
				require.NotContains(t, w, id+": ")
			}
		})
	}
}
