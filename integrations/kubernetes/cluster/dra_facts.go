package cluster

import (
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/preflight/schedule"
)

type quantity = resource.Quantity

func (d *draDevice) str(name string) string {
	return dra.AttributeString(d.slice.Spec.Driver, d.device, name)
}

// facts are the device's facts as messages show them, from the NVIDIA
// DRA driver's attributes and capacities.
func (d *draDevice) facts() schedule.DRADevice {
	f := schedule.DRADevice{
		Driver: d.slice.Spec.Driver, Pool: d.slice.Spec.Pool.Name, Name: d.device.Name,
		Type: d.str("type"), Product: d.str("productName"), Profile: d.str("profile"),
		UUID: d.str("uuid"), ParentUUID: d.str("parentUUID"), DriverVersion: d.str("driverVersion"),
		Count: 1,
	}
	if n := d.slice.Spec.NodeName; n != nil {
		f.Node = *n
	}
	if m, ok := capacityOf(d, "memory"); ok {
		f.Memory = m.String()
	}
	if m, ok := capacityOf(d, "multiprocessors"); ok {
		f.Multiprocessors = m.Value()
	}
	return f
}

// groupDevices folds devices of one shape (type, product, profile,
// memory, SMs, node) into one entry with a count, largest groups first,
// at most n entries.
func groupDevices(devs []*draDevice, n int) []schedule.DRADevice {
	idx := map[string]int{}
	var out []schedule.DRADevice
	for _, d := range devs {
		f := d.facts()
		key := strings.Join([]string{f.Type, f.Product, f.Profile, f.Memory, f.Node, f.DriverVersion}, "|") + "|" + strconv.FormatInt(f.Multiprocessors, 10)
		if i, ok := idx[key]; ok {
			out[i].Count++
			continue
		}
		idx[key] = len(out)
		out = append(out, f)
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Count > out[b].Count })
	if len(out) > n {
		out = out[:n]
	}
	return out
}
