package schedule

import (
	"fmt"
	"strconv"

	"github.com/rankgate/rankgate/topology"
)

// Test builders: nodes labelled the way GFD and mig-manager label them
// (compare testdata/fixtures/kubernetes/21_*.json), and workloads.

type nodeBuilder struct{ n Node }

func node(name string) *nodeBuilder {
	return &nodeBuilder{n: Node{
		Name:        name,
		Labels:      map[string]string{"kubernetes.io/hostname": name},
		Allocatable: Resources{ResourceCPU: 96000, ResourceMem: 1 << 40, ResourcePods: 110},
		Used:        Resources{},
	}}
}

func (b *nodeBuilder) label(kv ...string) *nodeBuilder {
	for i := 0; i+1 < len(kv); i += 2 {
		b.n.Labels[kv[i]] = kv[i+1]
	}
	return b
}

func (b *nodeBuilder) alloc(res string, v int64) *nodeBuilder {
	b.n.Allocatable[res] = v
	if b.n.Capacity == nil {
		b.n.Capacity = Resources{}
	}
	b.n.Capacity[res] = v
	return b
}

func (b *nodeBuilder) use(res string, v int64) *nodeBuilder {
	b.n.Used[res] += v
	return b
}

func (b *nodeBuilder) taint(key, value, effect string) *nodeBuilder {
	b.n.Taints = append(b.n.Taints, Taint{Key: key, Value: value, Effect: effect})
	return b
}

func (b *nodeBuilder) cordon() *nodeBuilder { b.n.Unschedulable = true; return b }

func (b *nodeBuilder) driver(v string) *nodeBuilder {
	return b.label(LabelDriverFull, v)
}

func (b *nodeBuilder) migState(config, state string) *nodeBuilder {
	return b.label(LabelMIGConfig, config, LabelMIGConfigState, state)
}

func (b *nodeBuilder) obj() Node { return b.n }

var testCatalog = topology.DefaultCatalog()

// gpuNode labels a node with product, count, memory and SMs of a catalog
// model ("A100-80GB", product label as GFD writes it).
func gpuNode(name, model, product string, gpus int) *nodeBuilder {
	m, ok := testCatalog.ModelByName(model)
	if !ok {
		panic("no model " + model)
	}
	return node(name).label(
		LabelProduct, product,
		LabelCount, strconv.Itoa(gpus),
		LabelMemory, strconv.FormatUint(m.MemoryMiB, 10),
		LabelMIGCapable, "true",
		LabelDriverFull, "550.54.15",
	)
}

// migMixed: every GPU carries the same layout, mixed strategy, applied.
func migMixed(name, model, product string, gpus int, config string, layout map[string]int) *nodeBuilder {
	b := gpuNode(name, model, product, gpus).label(LabelMIGStrategy, StrategyMixed).migState(config, MIGStateSuccess)
	m, _ := testCatalog.ModelByName(model)
	for p, n := range layout {
		prof, ok := m.Profile(p)
		if !ok {
			panic(fmt.Sprintf("%s has no %s", model, p))
		}
		b.label(
			MIGPrefix+p+".count", strconv.Itoa(n*gpus),
			MIGPrefix+p+".memory", strconv.FormatUint(prof.MemoryMiB, 10),
			MIGPrefix+p+".multiprocessors", strconv.Itoa(prof.SMs),
		)
		b.alloc(MIGPrefix+p, int64(n*gpus))
	}
	return b
}

// full: MIG disabled, whole GPUs.
func full(name, model, product string, gpus int, strategy string) *nodeBuilder {
	return gpuNode(name, model, product, gpus).
		label(LabelMIGStrategy, strategy).
		migState("all-disabled", MIGStateSuccess).
		alloc(ResourceGPU, int64(gpus))
}

// single: mig.strategy=single, all GPUs with one profile, advertised as
// nvidia.com/gpu.
func single(name, model, product string, gpus int, profile string) *nodeBuilder {
	m, _ := testCatalog.ModelByName(model)
	prof, _ := m.Profile(profile)
	return gpuNode(name, model, product+"-MIG-"+profile, gpus).
		label(LabelMIGStrategy, StrategySingle).
		migState("all-"+profile, MIGStateSuccess).
		alloc(ResourceGPU, int64(prof.MaxInstances*gpus))
}

const (
	a100Product = "NVIDIA-A100-SXM4-80GB"
	h100Product = "NVIDIA-H100-80GB-HBM3"
)

func podSet(name string, count int, req Resources) PodSet {
	r := Resources{ResourceCPU: 4000, ResourceMem: 16 << 30, ResourcePods: 1}
	for k, v := range req {
		r[k] = v
	}
	return PodSet{Name: name, Count: count, Requests: r}
}

func pytorchJob(name string, sets ...PodSet) Workload {
	return Workload{Kind: "PyTorchJob", Namespace: "ml", Name: name, PodSets: sets}
}

func mig(p string, n int64) Resources { return Resources{MIGPrefix + p: n} }

func gpus(n int64) Resources { return Resources{ResourceGPU: n} }

func nodes(bs ...*nodeBuilder) []Node {
	out := make([]Node, len(bs))
	for i, b := range bs {
		out[i] = b.obj()
	}
	return out
}
