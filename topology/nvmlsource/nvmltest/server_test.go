package nvmltest_test

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
)

func TestKinds(t *testing.T) {
	for _, kind := range nvmltest.Kinds() {
		t.Run(kind, func(t *testing.T) {
			s := nvmltest.NewServer(t, kind)
			again := nvmltest.NewServer(t, kind)
			lib := s.Interface()
			require.Equal(t, nvml.SUCCESS, lib.Init())
			n, r := lib.DeviceGetCount()
			require.Equal(t, nvml.SUCCESS, r)
			require.Equal(t, 8, n)
			seen := map[string]bool{}
			for i := range n {
				d, r := lib.DeviceGetHandleByIndex(i)
				require.Equal(t, nvml.SUCCESS, r)
				uuid, _ := d.GetUUID()
				require.True(t, strings.HasPrefix(uuid, "GPU-"))
				require.Equal(t, again.GPU(i).UUID, uuid, "UUIDs are stable")
				pci, _ := d.GetPciInfo()
				bus := string(int8sToBytes(pci.BusId[:]))
				require.False(t, seen[uuid] || seen[bus])
				seen[uuid], seen[bus] = true, true
				byBus, r := lib.DeviceGetHandleByPciBusId(bus)
				require.Equal(t, nvml.SUCCESS, r)
				require.Same(t, d, byBus)
			}
			require.NotEqual(t, nvmltest.NewServer(t, otherKind(kind)).GPU(0).UUID, s.GPU(0).UUID)
			require.Len(t, s.Profiles(), 7)
		})
	}
}

func otherKind(k string) string {
	if k == nvmltest.DGXA100 {
		return nvmltest.DGXH100
	}
	return nvmltest.DGXA100
}

func int8sToBytes(b []int8) []byte {
	var out []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return out
}

func TestMIGHandles(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100)
	uuids := s.CreateMIG(2, "3g.40gb", "2g.20gb", "1g.10gb")
	uuids = append(uuids, s.CreateGI(2, "1g.10gb", "1g.10gb")...)
	d := s.GPU(2)
	cur, pend, _ := d.GetMigMode()
	require.Equal(t, nvml.DEVICE_MIG_ENABLE, cur)
	require.Equal(t, nvml.DEVICE_MIG_ENABLE, pend)
	max, _ := d.GetMaxMigDeviceCount()
	require.Equal(t, 7, max)
	for i, u := range uuids {
		h, r := d.GetMigDeviceHandleByIndex(i)
		require.Equal(t, nvml.SUCCESS, r)
		h2, _ := d.GetMigDeviceHandleByIndex(i)
		require.Same(t, h, h2, "one handle per MIG device")
		got, _ := h.GetUUID()
		require.Equal(t, u, got)
		isMIG, _ := h.IsMigDeviceHandle()
		require.True(t, isMIG)
		parent, _ := h.GetDeviceHandleFromMigDeviceHandle()
		require.Same(t, d, parent)

		giID, _ := h.GetGpuInstanceId()
		ciID, _ := h.GetComputeInstanceId()
		gi, r := d.GetGpuInstanceById(giID)
		require.Equal(t, nvml.SUCCESS, r)
		ci, r := gi.GetComputeInstanceById(ciID)
		require.Equal(t, nvml.SUCCESS, r)
		info, _ := ci.GetInfo()
		require.Equal(t, uint32(ciID), info.Id)

		name := s.MIGName(u)
		attrs, r := h.GetAttributes()
		require.Equal(t, nvml.SUCCESS, r)
		require.Equal(t, s.ComputeSMs(name), int(attrs.MultiprocessorCount))
		require.Equal(t, s.ProfileInfo(name).MemorySizeMB, attrs.MemorySizeMB)
		hn, _ := h.GetName()
		require.Equal(t, "NVIDIA H100 80GB HBM3 MIG "+name, hn)
	}
	_, r := d.GetMigDeviceHandleByIndex(len(uuids))
	require.Equal(t, nvml.ERROR_NOT_FOUND, r)
	_, r = d.GetMigDeviceHandleByIndex(max)
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, r)
	_, r = d.GetGpuInstanceById(99)
	require.Equal(t, nvml.ERROR_NOT_FOUND, r)
	_, r = s.GPU(0).GetAttributes()
	require.Equal(t, nvml.ERROR_NOT_SUPPORTED, r, "full GPUs have no attributes")
}

// TestEveryListedMethodIsHooked faults each method Methods lists, calls it
// with zero arguments (a fault answers before the mock looks at them) and
// expects the fault back.
func TestEveryListedMethodIsHooked(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXA100)
	s.CreateMIG(0, "3g.20gb")
	d := s.GPU(0)
	mig, _ := d.GetMigDeviceHandleByIndex(0)
	giID, _ := mig.GetGpuInstanceId()
	gi, _ := d.GetGpuInstanceById(giID)
	ciID, _ := mig.GetComputeInstanceId()
	ci, _ := gi.GetComputeInstanceById(ciID)
	objects := map[string]any{"Interface": s.Interface(), "Device": d, "MIG": mig, "GpuInstance": gi, "ComputeInstance": ci}
	n := 0
	for _, name := range nvmltest.Methods() {
		kind, method, ok := strings.Cut(name, ".")
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			n++
			s.ClearFaults()
			s.Fault(name, nvml.ERROR_IRQ_ISSUE)
			m := reflect.ValueOf(objects[kind]).MethodByName(method)
			require.True(t, m.IsValid())
			args := make([]reflect.Value, m.Type().NumIn())
			for k := range args {
				args[k] = reflect.Zero(m.Type().In(k))
			}
			out := m.Call(args)
			require.Equal(t, nvml.ERROR_IRQ_ISSUE, out[len(out)-1].Interface())
		})
	}
	s.ClearFaults()
	require.Greater(t, n, 50)
}

func TestFaultScopes(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXB200)
	s.CreateMIG(1, "7g.180gb")
	mig, _ := s.GPU(1).GetMigDeviceHandleByIndex(0)

	s.Fault("Device.GetUUID", nvml.ERROR_GPU_IS_LOST)
	_, r := s.GPU(1).GetUUID()
	require.Equal(t, nvml.ERROR_GPU_IS_LOST, r)
	_, r = mig.GetUUID()
	require.Equal(t, nvml.SUCCESS, r, "a Device fault spares MIG handles")

	s.Fault("Device.GetUUID", nvml.SUCCESS)
	s.FaultGPU("GetUUID", 1, nvml.ERROR_NOT_READY)
	_, r = s.GPU(0).GetUUID()
	require.Equal(t, nvml.SUCCESS, r)
	_, r = s.GPU(1).GetUUID()
	require.Equal(t, nvml.ERROR_NOT_READY, r)
	_, r = mig.GetUUID()
	require.Equal(t, nvml.ERROR_NOT_READY, r, "a GPU's faults reach its MIG devices")

	s.ClearFaults()
	_, r = mig.GetUUID()
	require.Equal(t, nvml.SUCCESS, r)

	before := s.Calls()
	s.Interface().DeviceGetCount()
	require.Equal(t, before+1, s.Calls())
}

func TestHang(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH200)
	release := s.Hang("GetName")
	done := make(chan string)
	go func() {
		name, _ := s.GPU(3).GetName()
		done <- name
	}()
	select {
	case <-done:
		t.Fatal("GetName returned while hung")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	release()
	require.Equal(t, "NVIDIA H200 141GB HBM3e", <-done)
	name, _ := s.GPU(3).GetName()
	require.Equal(t, "NVIDIA H200 141GB HBM3e", name, "released for good")
}

func TestTopology(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXA100)
	g0, g1, g4 := s.GPU(0), s.GPU(1), s.GPU(4)
	lvl, _ := g0.GetTopologyCommonAncestor(g1)
	require.Equal(t, nvml.TOPOLOGY_MULTIPLE, lvl)
	lvl, _ = g0.GetTopologyCommonAncestor(g4)
	require.Equal(t, nvml.TOPOLOGY_SYSTEM, lvl)
	st, _ := g0.GetP2PStatus(g4, nvml.P2P_CAPS_INDEX_NVLINK)
	require.Equal(t, nvml.P2P_STATUS_OK, st)
	s.SetP2P(4, 0, nvml.P2P_CAPS_INDEX_NVLINK, nvml.P2P_STATUS_NOT_SUPPORTED)
	st, _ = g0.GetP2PStatus(g4, nvml.P2P_CAPS_INDEX_NVLINK)
	require.Equal(t, nvml.P2P_STATUS_NOT_SUPPORTED, st)
	for l := range 12 {
		state, r := g0.GetNvLinkState(l)
		require.Equal(t, nvml.SUCCESS, r)
		require.Equal(t, nvml.FEATURE_ENABLED, state)
		typ, _ := g0.GetNvLinkRemoteDeviceType(l)
		require.Equal(t, nvml.NVLINK_DEVICE_TYPE_SWITCH, typ)
	}
	_, r := g0.GetNvLinkState(12)
	require.Equal(t, nvml.ERROR_NOT_SUPPORTED, r)
	aff, _ := g4.GetMemoryAffinity(64, nvml.AFFINITY_SCOPE_NODE)
	require.Equal(t, uint(2), aff[0], "GPU 4 is on NUMA node 1")
	_, r = g4.GetNumaNodeId()
	require.Equal(t, nvml.ERROR_NOT_SUPPORTED, r)

	b := nvmltest.NewServer(t, nvmltest.DGXH100, nvmltest.WithNVLinkBridge(1, 2, 3))
	typ, _ := b.GPU(1).GetNvLinkRemoteDeviceType(0)
	require.Equal(t, nvml.NVLINK_DEVICE_TYPE_GPU, typ)
	_, r = b.GPU(0).GetNvLinkState(0)
	require.Equal(t, nvml.ERROR_NOT_SUPPORTED, r)
}

// fakeTB captures the first Fatalf and ends the goroutine, as testing does.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func fatal(t *testing.T, fn func(tb testing.TB)) string {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func TestMisuseFailsTheTest(t *testing.T) {
	tests := map[string]struct {
		fn   func(tb testing.TB)
		want string
	}{
		"unknown kind": {func(tb testing.TB) { nvmltest.NewServer(tb, "dgx1") }, "unknown server kind"},
		"GPU count":    {func(tb testing.TB) { nvmltest.NewServer(tb, nvmltest.DGXA100, nvmltest.WithGPUCount(0)) }, "want 1 to 16"},
		"bad bridge": {func(tb testing.TB) {
			nvmltest.NewServer(tb, nvmltest.DGXA100, nvmltest.WithNVLinkBridge(0, 0, 2))
		}, "does not join"},
		"unknown profile": {func(tb testing.TB) { nvmltest.NewServer(tb, nvmltest.DGXA100).CreateMIG(0, "1g.10gb+me") }, "no GPU-instance profile"},
		"too many": {func(tb testing.TB) {
			nvmltest.NewServer(tb, nvmltest.DGXH100).CreateMIG(0, "3g.40gb", "3g.40gb", "3g.40gb")
		}, "allows 2 instances"},
		"too many slices": {func(tb testing.TB) {
			nvmltest.NewServer(tb, nvmltest.DGXA100).CreateMIG(0, "4g.20gb", "2g.10gb", "2g.10gb")
		}, "compute slices"},
		"placement": {func(tb testing.TB) {
			nvmltest.NewServer(tb, nvmltest.DGXA100).CreateMIG(0, "1g.5gb", "4g.20gb")
		}, "no free placement"},
		"compute instances": {func(tb testing.TB) {
			nvmltest.NewServer(tb, nvmltest.DGXA100).CreateGI(0, "3g.20gb", "2c.3g.20gb", "2c.3g.20gb")
		}, "do not fit"},
		"foreign compute instance": {func(tb testing.TB) {
			nvmltest.NewServer(tb, nvmltest.DGXA100).CreateGI(0, "3g.20gb", "1c.4g.20gb")
		}, "does not belong"},
		"unknown method": {func(tb testing.TB) { nvmltest.NewServer(tb, nvmltest.DGXA100).Fault("GetFoo", nvml.ERROR_UNKNOWN) }, "no method"},
		"unknown kind of method": {func(tb testing.TB) {
			nvmltest.NewServer(tb, nvmltest.DGXA100).Hang("MIG.GetPciInfo")
		}, "no method"},
		"no GPU": {func(tb testing.TB) { nvmltest.NewServer(tb, nvmltest.DGXA100, nvmltest.WithGPUCount(2)).GPU(2) }, "no GPU 2"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			require.Contains(t, fatal(t, tt.fn), tt.want)
		})
	}
}

func TestDriverProfileIDs(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXA100, nvmltest.WithDriverProfileIDs())
	s.CreateMIG(0, "3g.20gb", "1g.5gb")
	d := s.GPU(0)
	info, r := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	require.Equal(t, nvml.SUCCESS, r)
	require.Equal(t, uint32(9), info.Id, "nvidia-smi's ID of 3g.20gb")
	gis, r := d.GetGpuInstances(&info)
	require.Equal(t, nvml.SUCCESS, r)
	require.Len(t, gis, 1)
	gi, _ := gis[0].GetInfo()
	require.Equal(t, uint32(9), gi.ProfileId)
	mig, _ := d.GetMigDeviceHandleByIndex(1)
	attrs, _ := mig.GetAttributes()
	require.Equal(t, uint32(14), attrs.MultiprocessorCount, "the mock's tables still answer")
}
