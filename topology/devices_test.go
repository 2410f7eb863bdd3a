package topology

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	inv := testInventory()
	for _, tc := range []struct {
		ref      string
		kind     DeviceKind
		gpu, mig int
	}{
		{"0", KindGPU, 0, -1},
		{"1", KindGPU, 1, -1},
		{"0:1", KindMIG, 0, 1},
		{"GPU-bbbbbbbb-0000-0000-0000-000000000000", KindGPU, 1, -1},
		{"gpu-BBBBBBBB-0000-0000-0000-000000000000", KindGPU, 1, -1},
		{"MIG-22222222-0000-0000-0000-000000000000", KindMIG, 0, 1},
		{"MIG-22222222-0000-0000-0000-000000000000::3", KindMIG, 0, 1},
		{"MIG-GPU-aaaaaaaa-0000-0000-0000-000000000000/10/0", KindMIG, 0, 2},
		{" 0:0 ", KindMIG, 0, 0},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			d, err := inv.Resolve(tc.ref)
			require.NoError(t, err)
			require.Equal(t, tc.kind, d.Kind)
			require.Equal(t, tc.gpu, d.GPU.Index)
			if tc.mig >= 0 {
				require.Equal(t, tc.mig, d.MIG.Index)
			}
		})
	}
	for _, ref := range []string{"2", "0:7", "GPU-ffff", "MIG-ffff", "MIG-GPU-aaaaaaaa-0000-0000-0000-000000000000/1/0", "5:0"} {
		_, err := inv.Resolve(ref)
		require.ErrorIs(t, err, ErrDeviceNotFound, ref)
	}
	for _, ref := range []string{"", "x", "-1", "0:x", "0:-1", "MIG-GPU-abc/1", "MIG-GPU-abc/a/b", "::1"} {
		_, err := inv.Resolve(ref)
		require.ErrorIs(t, err, ErrBadDeviceRef, ref)
	}
}

func TestDeviceNamesAndIDs(t *testing.T) {
	inv := testInventory()
	d, _ := inv.Resolve("0:0")
	require.Equal(t, "MIG 3g.40gb 0:0 (MIG-11111111-0000-0000-0000-000000000000)", d.Name())
	require.Equal(t, "MIG-11111111-0000-0000-0000-000000000000", d.ID())
	require.Equal(t, 60, d.SMs())
	require.Equal(t, "3g.40gb", d.Profile())
	g, _ := inv.Resolve("1")
	require.Equal(t, "GPU 1 (GPU-bbbbbbbb-0000-0000-0000-000000000000)", g.Name())
	require.Equal(t, "full", g.Profile())
	require.Equal(t, uint64(81559), g.MemoryMiB())
}

func TestAllDevices(t *testing.T) {
	all := testInventory().AllDevices()
	require.Len(t, all, 4) // three MIG devices of GPU 0, GPU 1 whole
	require.Equal(t, KindMIG, all[0].Kind)
	require.Equal(t, KindGPU, all[3].Kind)
}

func TestAllocationFromEnv(t *testing.T) {
	list := func(dir string) ([]string, error) {
		if dir != VolumeMountsDir {
			return nil, errors.New("unexpected dir")
		}
		return []string{"MIG-22222222-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"}, nil
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		ok      bool
		all     bool
		from    string
		refs    []string
		wantErr string
	}{
		{"nothing set", nil, false, false, "", nil, ""},
		{"nvidia ids", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-x,MIG-y::2"}, true, false, "NVIDIA_VISIBLE_DEVICES", []string{"GPU-x", "MIG-y::2"}, ""},
		{"nvidia all", map[string]string{"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0"}, true, true, "NVIDIA_VISIBLE_DEVICES", nil, ""},
		{"nvidia none", map[string]string{"NVIDIA_VISIBLE_DEVICES": "none"}, true, false, "NVIDIA_VISIBLE_DEVICES", nil, ""},
		{"nvidia void", map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"}, true, false, "NVIDIA_VISIBLE_DEVICES", nil, ""},
		{"volume mounts", map[string]string{"NVIDIA_VISIBLE_DEVICES": VolumeMountsDir}, true, false, "NVIDIA_VISIBLE_DEVICES",
			[]string{"GPU-bbbbbbbb-0000-0000-0000-000000000000", "MIG-22222222-0000-0000-0000-000000000000"}, ""},
		{"other path", map[string]string{"NVIDIA_VISIBLE_DEVICES": "/etc"}, true, false, "", nil, "volume-mounts"},
		{"cuda indices", map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}, true, false, "CUDA_VISIBLE_DEVICES", []string{"0", "1"}, ""},
		{"cuda legacy MIG", map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-GPU-aaaa/1/0"}, true, false, "CUDA_VISIBLE_DEVICES", []string{"MIG-GPU-aaaa/1/0"}, ""},
		{"cuda hidden", map[string]string{"CUDA_VISIBLE_DEVICES": "-1"}, true, false, "CUDA_VISIBLE_DEVICES", nil, ""},
		{"cuda garbage", map[string]string{"CUDA_VISIBLE_DEVICES": "zero"}, true, false, "", nil, "not a device identifier"},
		{"empty entry", map[string]string{"NVIDIA_VISIBLE_DEVICES": "0,,1"}, true, false, "", nil, "empty entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			a, ok, err := AllocationFromEnv(env, list)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.all, a.All)
			require.Equal(t, tc.from, a.From)
			require.Equal(t, tc.refs, a.Refs)
		})
	}
}

func TestDevicesDedupesSharingReplicas(t *testing.T) {
	inv := testInventory()
	found, missing := inv.Devices(Allocation{Refs: []string{"GPU-bbbbbbbb-0000-0000-0000-000000000000::0", "GPU-bbbbbbbb-0000-0000-0000-000000000000::1", "GPU-nope"}})
	require.Len(t, found, 1)
	require.Contains(t, missing, "GPU-nope")
}

func TestSnapshotRoundTrip(t *testing.T) {
	inv := testInventory()
	b, err := EncodeSnapshot(inv)
	require.NoError(t, err)
	got, err := DecodeSnapshot("x.json", b)
	require.NoError(t, err)
	inv.APIVersion, inv.Kind = SnapshotAPIVersion, SnapshotKind
	require.Equal(t, inv, got)
}

func TestDecodeSnapshotStrict(t *testing.T) {
	good, _ := EncodeSnapshot(testInventory())
	for name, data := range map[string]string{
		"unknown field": strings.Replace(string(good), `"driverVersion"`, `"driverVersoin"`, 1),
		"wrong version": strings.Replace(string(good), SnapshotVersion, "rankgate.io/v0", 1),
		"no version":    `{"gpus": []}`,
		"trailing":      string(good) + "{}",
		"syntax":        "{\n\"version\": \"rankgate.io/v1\",\n\"gpus\": [\n}",
		"dup index":     `{"version":"rankgate.io/v1","gpus":[{"index":0,"uuid":"GPU-a","migDevices":null,"gpuInstanceId":0},{"index":0,"uuid":"GPU-b"}]}`,
		"bad link":      `{"version":"rankgate.io/v1","gpus":[{"index":0,"uuid":"GPU-a"}],"links":[{"a":0,"b":3}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeSnapshot("node.json", []byte(data))
			var ie *InputError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, "node.json", ie.File)
		})
	}
	_, err := DecodeSnapshot("n.json", []byte("{\n\"version\": \"rankgate.io/v1\",\n\"gpus\": [\n}"))
	require.ErrorContains(t, err, "n.json:4")
}

func FuzzDecodeSnapshot(f *testing.F) {
	good, _ := EncodeSnapshot(testInventory())
	f.Add(good)
	f.Add([]byte(`{"version":"rankgate.io/v1","gpus":[]}`))
	f.Add([]byte(`{"apiVersion":"rankgate.io/v1","kind":"NodeInventory","gpus":[]}`))
	f.Add([]byte(`{"apiVersion":"rankgate.io/v1","kind":"MIGProfileCatalog","models":[]}`))
	f.Add([]byte(`{"apiVersion":"rankgate.io/v2","kind":"NodeInventory","gpus":[{"index":0,"uuid":"GPU-a"}]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := DecodeSnapshot("f", data)
		if err != nil {
			return
		}
		// Whatever header was read, the inventory carries the current one.
		require.Equal(t, SnapshotAPIVersion, inv.APIVersion)
		require.Equal(t, SnapshotKind, inv.Kind)
		// What decodes must satisfy the invariants and resolve without panics.
		require.NoError(t, inv.Validate())
		for _, d := range inv.AllDevices() {
			_, err := inv.Resolve(d.ID())
			require.NoError(t, err)
			_ = d.Name()
		}
	})
}

func FuzzParseDeviceList(f *testing.F) {
	for _, s := range []string{"0,1", "MIG-abc::2", "MIG-GPU-x/1/0", "0:0,1:3", ",", "all"} {
		f.Add(s)
	}
	inv := testInventory()
	f.Fuzz(func(t *testing.T, s string) {
		refs, err := ParseDeviceList(s)
		if err != nil {
			return
		}
		for _, r := range refs {
			_, err := inv.Resolve(r)
			if err != nil {
				require.ErrorIs(t, err, ErrDeviceNotFound)
			}
		}
	})
}

func TestIsIndexID(t *testing.T) {
	for id, want := range map[string]bool{"0": true, "7:3": true, "12:0": true, "GPU-8d116ece": false, "MIG-d23f0824": false,
		"": false, "0:": false, ":1": false, "a:1": false, "0:1:2": false, "-1": false} {
		if got := IsIndexID(id); got != want {
			t.Errorf("IsIndexID(%q) = %v, want %v", id, got, want)
		}
	}
}
