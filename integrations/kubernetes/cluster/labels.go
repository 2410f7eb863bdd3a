package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/preflight/schedule"
)

// LabelHostname is the label every kubelet sets to its node's name.
const LabelHostname = "kubernetes.io/hostname"

// LabelsNode records a node read from its labels alone: its name and where
// the name came from.
type LabelsNode struct {
	Name string
	// NameFrom is "label kubernetes.io/hostname" or "file name".
	NameFrom string
}

// labelsOf reads raw as a node's label map, the JSON that `kubectl get
// node NAME -o jsonpath='{.metadata.labels}'` prints: a flat mapping of
// label keys to scalar values, at least one key with a prefix
// ("kubernetes.io/hostname", "nvidia.com/gpu.product"), alone or as the
// labels: block of a node's YAML. ok is false when raw is not such a map.
func labelsOf(raw json.RawMessage) (map[string]string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || len(m) == 0 {
		return nil, false
	}
	if inner, ok := m["labels"].(map[string]any); ok && len(m) == 1 {
		// The labels: block of a node's YAML, pasted alone.
		m = inner
	}
	labels := make(map[string]string, len(m))
	prefixed := false
	for k, v := range m {
		switch v := v.(type) {
		case string:
			labels[k] = v
		case json.Number:
			labels[k] = v.String() // YAML without quotes: gpu.count: 8
		case bool:
			labels[k] = strconv.FormatBool(v)
		case nil:
			labels[k] = ""
		default:
			return nil, false
		}
		prefixed = prefixed || strings.Contains(k, "/")
	}
	return labels, prefixed
}

// labelsNode builds a node from its labels alone. Its name is the
// kubernetes.io/hostname label, else the file's name without extension.
// GPU resources are what its GFD labels say the device plugin advertises;
// other resources are unknown (schedule.Node.LabelsOnly).
func labelsNode(file string, labels map[string]string) (schedule.Node, LabelsNode, error) {
	name, from := labels[LabelHostname], "label "+LabelHostname
	if name == "" {
		base := filepath.Base(file)
		name, from = strings.TrimSuffix(base, filepath.Ext(base)), "file name"
		if file == "(stdin)" || name == "" || name == "." {
			return schedule.Node{}, LabelsNode{}, errors.New("node labels without kubernetes.io/hostname, read from stdin: there is no node name; save them to a file named after the node (NODE.json)")
		}
	}
	alloc, err := labelResources(labels)
	if err != nil {
		return schedule.Node{}, LabelsNode{}, err
	}
	capa := make(schedule.Resources, len(alloc))
	for k, v := range alloc {
		capa[k] = v
	}
	n := schedule.Node{Name: name, Labels: labels, Allocatable: alloc, Capacity: capa, LabelsOnly: true}
	return n, LabelsNode{Name: name, NameFrom: from}, nil
}

// labelResources derives the GPU resources the device plugin advertises
// from GFD labels: under mig.strategy=mixed nvidia.com/mig-<profile> from
// mig-<profile>.count (times .replicas when shared) and nvidia.com/gpu
// from gpu.count times gpu.replicas (GFD writes replicas=0 when every GPU
// is partitioned); under single nvidia.com/gpu from gpu.count (MIG
// instances when the product ends in -MIG-<profile>, none when
// -MIG-INVALID); otherwise nvidia.com/gpu from gpu.count.
func labelResources(labels map[string]string) (schedule.Resources, error) {
	g, err := schedule.ParseGPULabels(labels)
	if err != nil {
		return nil, err
	}
	replicas := func(key string) int64 {
		n, err := strconv.Atoi(labels[key])
		if err != nil || n < 0 || n > maxGPUResource {
			return 1 // absent (no sharing), unreadable or absurd
		}
		return int64(n)
	}
	out := schedule.Resources{}
	if g.Product == "" && g.Count == 0 {
		return out, nil // not a GPU node
	}
	if g.Count > maxGPUResource {
		return nil, fmt.Errorf("label %s=%d: not a plausible GPU count (at most %d)", schedule.LabelCount, g.Count, maxGPUResource)
	}
	gpus := int64(g.Count) * replicas(schedule.ResourceGPU+".replicas")
	switch {
	case g.Invalid():
		gpus = 0
	case g.Strategy == schedule.StrategyMixed:
		for p, l := range g.MIGProfiles {
			if l.Count > maxGPUResource {
				return nil, fmt.Errorf("label %s%s.count=%d: not a plausible count (at most %d)", schedule.MIGPrefix, p, l.Count, maxGPUResource)
			}
			if l.Count > 0 {
				out[schedule.MIGPrefix+p] = int64(l.Count) * replicas(schedule.MIGPrefix+p+".replicas")
			}
		}
		if _, ok := labels[schedule.ResourceGPU+".replicas"]; !ok && len(out) > 0 {
			// Older GFD: gpu.count includes the MIG-enabled GPUs, and
			// nothing says how many are whole.
			gpus = 0
		}
	}
	if gpus > 0 {
		out[schedule.ResourceGPU] = gpus
	}
	for r, v := range out {
		if v > maxGPUResource {
			return nil, fmt.Errorf("labels give %s %d: not a plausible amount (at most %d)", r, v, maxGPUResource)
		}
	}
	return out, nil
}
