package topology

// testInventory is a two-GPU H100 node: GPU 0 split into 3g.40gb + 2x
// 1g.10gb, GPU 1 a full GPU, NVLink between them.
func testInventory() *Inventory {
	return &Inventory{
		DriverVersion: "570.172.08",
		GPUs: []GPU{
			{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", Name: "NVIDIA H100 80GB HBM3", MIGCurrent: ModeEnabled, MIGPending: ModeEnabled,
				MIGDevices: []MIGDevice{
					{Index: 0, UUID: "MIG-11111111-0000-0000-0000-000000000000", GPUInstanceID: 2, ComputeInstanceID: 0, Profile: "3g.40gb", SMs: 60, MemoryMiB: 40448},
					{Index: 1, UUID: "MIG-22222222-0000-0000-0000-000000000000", GPUInstanceID: 9, ComputeInstanceID: 0, Profile: "1g.10gb", SMs: 16, MemoryMiB: 9984},
					{Index: 2, UUID: "MIG-33333333-0000-0000-0000-000000000000", GPUInstanceID: 10, ComputeInstanceID: 0, Profile: "1g.10gb", SMs: 16, MemoryMiB: 9984},
				}},
			{Index: 1, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", Name: "NVIDIA H100 80GB HBM3", SMs: 132, MemoryMiB: 81559, MIGCurrent: ModeDisabled, MIGPending: ModeDisabled},
		},
		Links: []Link{{A: 0, B: 1, Level: "NV18", NVLinks: 18, P2PRead: P2POK, P2PWrite: P2POK}},
	}
}
