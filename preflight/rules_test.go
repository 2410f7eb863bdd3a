package preflight

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

func ptrInt(i int) *int { return &i }

// node builds a two-GPU H100 node: GPU 0 in MIG mode (3g.40gb, 2g.20gb,
// 1g.20gb, 1g.10gb), GPU 1 in MIG mode (3g.40gb x2), GPU 2 and 3 full with
// NVLink and P2P, GPU 4 full without P2P to GPU 2.
func node() *topology.Inventory {
	mig := func(i, gi int, p string, sms int, mem uint64) topology.MIGDevice {
		return topology.MIGDevice{Index: i, UUID: "MIG-" + p + "-" + string(rune('a'+gi)), GPUInstanceID: gi, Profile: p, SMs: sms, MemoryMiB: mem}
	}
	name := "NVIDIA H100 80GB HBM3"
	return &topology.Inventory{
		Hostname: "n1", DriverVersion: "580.65.06",
		GPUs: []topology.GPU{
			{Index: 0, UUID: "GPU-0", Name: name, MIGCurrent: topology.ModeEnabled, MIGPending: topology.ModeEnabled, MIGDevices: []topology.MIGDevice{
				mig(0, 1, "3g.40gb", 60, 40448), mig(1, 3, "2g.20gb", 32, 20096), mig(2, 5, "1g.20gb", 26, 20096), mig(3, 9, "1g.10gb", 16, 9984)}},
			{Index: 1, UUID: "GPU-1", Name: name, MIGCurrent: topology.ModeEnabled, MIGPending: topology.ModeEnabled, MIGDevices: []topology.MIGDevice{
				mig(0, 11, "3g.40gb", 60, 40448), mig(1, 12, "3g.40gb", 60, 40448)}},
			{Index: 2, UUID: "GPU-2", Name: name, SMs: 132, MIGCurrent: topology.ModeDisabled, MIGPending: topology.ModeDisabled, NUMANode: ptrInt(0),
				NVLinks: []topology.NVLink{{Link: 0, Active: true}, {Link: 1, Active: true}}},
			{Index: 3, UUID: "GPU-3", Name: name, SMs: 132, MIGCurrent: topology.ModeDisabled, MIGPending: topology.ModeDisabled,
				NVLinks: []topology.NVLink{{Link: 0, Active: true}, {Link: 1, Active: false}}},
			{Index: 4, UUID: "GPU-4", Name: "NVIDIA H100 PCIe", SMs: 114, MIGCurrent: topology.ModeDisabled, MIGPending: topology.ModeEnabled},
			{Index: 5, UUID: "GPU-5", Name: name, MIGCurrent: topology.ModeEnabled, MIGPending: topology.ModeEnabled},
		},
		Links: []topology.Link{
			{A: 2, B: 3, Level: "NV18", P2PRead: topology.P2POK, P2PWrite: topology.P2POK},
			{A: 2, B: 4, Level: "SYS", P2PRead: topology.P2PChipsetNotSupported, P2PWrite: topology.P2PChipsetNotSupported},
		},
	}
}

func rules(r verdict.Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Rule+"/"+string(f.Severity))
	}
	return out
}

func TestRankRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		refs     []string
		all      bool
		expect   string
		p2p      bool
		driver   string
		want     []string
		verdict  verdict.Verdict
		contains string
	}{
		{name: "one MIG device", refs: []string{"0:0"}, expect: "3g.40gb", verdict: verdict.VerdictPass},
		{name: "one full GPU", refs: []string{"2"}, expect: "full", verdict: verdict.VerdictPass},
		{name: "two full GPUs with P2P", refs: []string{"GPU-2", "GPU-3"}, want: []string{"NVLINK_DOWN/fail"}, verdict: verdict.VerdictFail, contains: "NVLink(s) 1 down"},
		{name: "MIG on two GPUs", refs: []string{"0:0", "1:0"}, want: []string{"MIG_MULTIPLE_PER_PROCESS/fail", "MIG_SPANS_GPUS/fail"}, verdict: verdict.VerdictFail},
		{name: "MIG with full", refs: []string{"0:0", "2"}, want: []string{"MIG_MIXED_WITH_FULL/fail"}, verdict: verdict.VerdictFail},
		{name: "two MIG one GPU", refs: []string{"1:0", "1:1"}, want: []string{"MIG_MULTIPLE_PER_PROCESS/fail"}, verdict: verdict.VerdictFail},
		{name: "same memory different SMs", refs: []string{"0:2"}, expect: "2g.20gb", want: []string{"PROFILE_MISMATCH/fail"}, verdict: verdict.VerdictFail, contains: "same memory (20 GB) but 26 SMs instead of 32"},
		{name: "MIG when full expected", refs: []string{"0:3"}, expect: "full", want: []string{"PROFILE_MISMATCH/fail"}, verdict: verdict.VerdictFail},
		{name: "heterogeneous full GPUs", refs: []string{"2", "4"}, want: []string{"PROFILE_HETEROGENEOUS/fail", "MIG_MODE_PENDING/warn", "P2P_UNSUPPORTED/warn"}, verdict: verdict.VerdictFail, contains: "H100 PCIe (114 SMs)"},
		{name: "P2P required", refs: []string{"2", "4"}, p2p: true, want: []string{"P2P_UNSUPPORTED/fail", "PROFILE_HETEROGENEOUS/fail", "MIG_MODE_PENDING/warn"}, verdict: verdict.VerdictFail, contains: "read CNS"},
		{name: "MIG parent given whole", refs: []string{"0"}, want: []string{"MIG_PARENT_ALLOCATED/fail"}, verdict: verdict.VerdictFail},
		{name: "MIG enabled no instances", refs: []string{"5"}, want: []string{"MIG_NO_INSTANCES/fail"}, verdict: verdict.VerdictFail},
		{name: "device not found", refs: []string{"GPU-9", "0:0"}, want: []string{"DEVICE_NOT_FOUND/fail"}, verdict: verdict.VerdictFail, contains: "GPU-9"},
		{name: "no devices", refs: nil, want: []string{"NO_DEVICES/fail"}, verdict: verdict.VerdictFail},
		{name: "pending mode warns", refs: []string{"4"}, want: []string{"MIG_MODE_PENDING/warn"}, verdict: verdict.VerdictWarn},
		{name: "pending mode names the reset", refs: []string{"4"}, want: []string{"MIG_MODE_PENDING/warn"}, verdict: verdict.VerdictWarn, contains: "`nvidia-smi -r -i 4`"},
		{name: "Enabled* still runs full-GPU work", refs: []string{"4"}, want: []string{"MIG_MODE_PENDING/warn"}, verdict: verdict.VerdictWarn, contains: "(nvidia-smi shows \"Enabled*\"); the GPU is not in MIG mode yet: full-GPU work still runs"},
		{name: "single GPU partial NVLink warns", refs: []string{"3"}, want: []string{"NVLINK_DOWN/warn"}, verdict: verdict.VerdictWarn},
		{name: "known-bad driver on mixed node", refs: []string{"0:0"}, driver: "570.133.20", want: []string{"DRIVER_KNOWN_BAD/fail"}, verdict: verdict.VerdictFail, contains: "570.172.08"},
		{name: "fixed driver", refs: []string{"0:0"}, driver: "570.172.08", verdict: verdict.VerdictPass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := node()
			if tc.driver != "" {
				inv.DriverVersion = tc.driver
			}
			r := RankRules(RankInput{Inventory: inv, Allocation: topology.Allocation{From: "--devices", Refs: tc.refs, All: tc.all},
				ExpectProfile: tc.expect, RequireP2P: tc.p2p, Catalog: topology.DefaultCatalog(), Drivers: DefaultDriverTable()})
			if tc.want == nil {
				require.Empty(t, r.Findings)
			} else {
				require.ElementsMatch(t, tc.want, rules(r))
			}
			require.Equal(t, tc.verdict, r.Verdict)
			for _, f := range r.Findings {
				require.NotEmpty(t, f.Message)
				require.NotEmpty(t, f.Remediation, f.Rule)
			}
			if tc.contains != "" {
				found := false
				for _, f := range r.Findings {
					if strings.Contains(f.Message, tc.contains) || strings.Contains(f.Remediation, tc.contains) {
						found = true
					}
				}
				require.True(t, found, "no finding mentions %q: %+v", tc.contains, r.Findings)
			}
		})
	}
}

func TestReportVerdictAndReason(t *testing.T) {
	r := verdict.NewReport("x", []verdict.Finding{
		{Rule: "B_RULE", Severity: verdict.SeverityWarn, Message: "w"},
		{Rule: "A_RULE", Severity: verdict.SeverityFail, Message: "f", Remediation: "do it"},
	})
	require.Equal(t, verdict.VerdictFail, r.Verdict)
	require.Equal(t, "A_RULE", r.Findings[0].Rule)
	require.Equal(t, "A_RULE: f Fix: do it", r.Reason(0))
	require.Len(t, r.Reason(8), 8)
	require.Equal(t, verdict.ExitFail, r.ExitCode())
	require.Equal(t, verdict.VerdictPass, verdict.NewReport("", nil).Verdict)
	require.NotNil(t, verdict.NewReport("", nil).Findings)
}

func TestDriverTable(t *testing.T) {
	tbl := DefaultDriverTable()
	mixed := NodeShape{Driver: "570.148.08", HasMIG: true, HasFull: true}
	require.Len(t, tbl.Match(mixed), 1)
	mixed.HasFull = false
	require.Empty(t, tbl.Match(mixed))
	gh := NodeShape{Driver: "580.1", HasMIG: true, Products: []string{"NVIDIA GH200 480GB"}, Profiles: []string{"1g.12gb"}}
	m := tbl.Match(gh)
	require.Len(t, m, 1)
	require.Equal(t, verdict.SeverityWarn, m[0].Severity)
	gh.Profiles = []string{"1g.24gb"}
	require.Empty(t, tbl.Match(gh))

	for name, data := range map[string]string{
		"bad version":   "version: v0\nentries: []",
		"unknown field": "version: rankgate.io/v1\nentries:\n- id: x\n  drivers: [\"1\"]\n  condition: any\n  severity: fail\n  fix: f\n  source: s\n  extra: 1",
		"bad condition": "version: rankgate.io/v1\nentries:\n- id: x\n  drivers: [\"1\"]\n  condition: sometimes\n  severity: fail\n  fix: f\n  source: s",
		"bad severity":  "version: rankgate.io/v1\nentries:\n- id: x\n  drivers: [\"1\"]\n  condition: any\n  severity: info\n  fix: f\n  source: s",
		"no source":     "version: rankgate.io/v1\nentries:\n- id: x\n  drivers: [\"1\"]\n  condition: any\n  severity: fail\n  fix: f",
	} {
		_, err := ParseDriverTable([]byte(data))
		require.Error(t, err, name)
	}
}

func TestShapeOf(t *testing.T) {
	s := ShapeOf(node())
	require.True(t, s.HasMIG)
	require.True(t, s.HasFull)
	require.Contains(t, s.Profiles, "3g.40gb")
}

// "not on this node" is said once; what the lookup adds beyond it stays.
func TestNotFoundDetailSaysItOnce(t *testing.T) {
	require.Equal(t, "", notFoundDetail("GPU-9", fmt.Errorf("%w: %s", topology.ErrDeviceNotFound, "GPU-9")))
	require.Equal(t, " (GPU index 9)", notFoundDetail("9", fmt.Errorf("%w: GPU index %d", topology.ErrDeviceNotFound, 9)))
	require.Equal(t, " (MIG device 1:7)", notFoundDetail("1:7", fmt.Errorf("%w: MIG device %d:%d", topology.ErrDeviceNotFound, 1, 7)))
	require.Equal(t, "", notFoundDetail("x", nil))
}

// The report's devices carry what the gang verdict's NCCL settings rules
// need of their GPUs: an NVLink to another full GPU of the rank, and the
// NVSwitch fabric where NVML reports its state (unknown otherwise).
func TestReportDevicesNVLinkFacts(t *testing.T) {
	inv := node()
	inv.GPUs[2].Fabric = &topology.Fabric{State: topology.FabricCompleted, Status: topology.FabricStatusSuccess}
	inv.GPUs[3].Fabric = &topology.Fabric{State: topology.FabricNotSupported}
	r := RankRules(RankInput{Inventory: inv, Allocation: topology.Allocation{From: "--devices", Refs: []string{"2", "3", "4", "0:0"}},
		Catalog: topology.DefaultCatalog(), Drivers: DefaultDriverTable()})
	require.Len(t, r.Devices, 4)
	byGPU := map[string]verdict.DeviceSummary{}
	for _, d := range r.Devices {
		byGPU[d.GPUUUID] = d
	}
	require.True(t, byGPU["GPU-2"].NVLinkPeer, "NV18 to GPU 3")
	require.True(t, byGPU["GPU-3"].NVLinkPeer, "NV18 to GPU 2")
	require.False(t, byGPU["GPU-4"].NVLinkPeer, "SYS to GPU 2")
	require.False(t, byGPU["GPU-0"].NVLinkPeer, "a MIG instance has no NVLink")
	require.NotNil(t, byGPU["GPU-2"].NVSwitch)
	require.True(t, *byGPU["GPU-2"].NVSwitch)
	require.NotNil(t, byGPU["GPU-3"].NVSwitch)
	require.False(t, *byGPU["GPU-3"].NVSwitch)
	require.NotNil(t, byGPU["GPU-4"].NVSwitch, "no fabric state, no NVLink, SYS to GPU 2: no NVSwitch")
	require.False(t, *byGPU["GPU-4"].NVSwitch)
	require.Nil(t, byGPU["GPU-0"].NVSwitch, "no fabric state and no links known: unknown")

	// Without a fabric state, NVLinks may run to a bridge or a switch.
	inv.GPUs[2].Fabric, inv.GPUs[3].Fabric = nil, nil
	r = RankRules(RankInput{Inventory: inv, Allocation: topology.Allocation{From: "--devices", Refs: []string{"2", "3"}},
		Catalog: topology.DefaultCatalog(), Drivers: DefaultDriverTable()})
	for _, d := range r.Devices {
		require.Nil(t, d.NVSwitch, d.ID)
		require.True(t, d.NVLinkPeer, d.ID)
	}
}
