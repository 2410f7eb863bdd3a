package ncclenv

import "fmt"

// Scope says what an Input describes.
type Scope string

// The scopes.
const (
	// ScopeTemplate: pod templates before any pod exists (the webhook,
	// diagnose): each Rank is a replica type, devices unknown.
	ScopeTemplate Scope = "template"
	// ScopeGang: every rank of a job with its reported devices (the
	// controller's gang verdict).
	ScopeGang Scope = "gang"
	// ScopeLocal: one process tree on one node with its own environment
	// and the local devices (launch, preflight --env-file).
	ScopeLocal Scope = "local"
)

// Input is what the rules judge.
type Input struct {
	Scope Scope
	Ranks []Rank
}

// Rank is one rank of the job, or (ScopeTemplate) one replica type's pod
// template standing for Replicas ranks.
type Rank struct {
	// Rank is the rank number; -1 for a template.
	Rank int
	// Name says in words who this is ("rank 3", "template Worker
	// container pytorch").
	Name string
	Pod  string
	Node string
	// Replicas: for a template, the pods it makes; otherwise 1.
	Replicas int
	// Env is the rank's environment; nil when unknown.
	Env *Env
	// Image is the container image (NCCL version from an NGC tag).
	Image string
	// NCCLVersion is the NCCL version the rank reported, if any.
	NCCLVersion string
	// Devices are the rank's devices; DevicesKnown says whether Devices
	// is the truth (an empty list then means none).
	Devices      []Device
	DevicesKnown bool
	// GPUs is what a template's container asks for: the count and
	// whether it asks for MIG instances (nvidia.com/mig-*). Under the
	// single MIG strategy MIG instances are nvidia.com/gpu and MIG is
	// unknown from the template.
	GPUs         int
	MIGRequested bool
	// Net is the rank's node's network, nil when unknown.
	Net *Net
}

// Device is one device of a rank.
type Device struct {
	ID string
	// MIG: a MIG instance (else a full GPU).
	MIG bool
	// GPUUUID is the physical GPU (for MIG, the parent).
	GPUUUID string
	// FabricCluster and FabricClique are the GPU's multi-node NVLink
	// domain; empty when the GPU is in none or it is unknown.
	FabricCluster string
	FabricClique  *uint32
	// NVSwitch says whether the GPU sits on an NVSwitch fabric (NVLS
	// needs one); nil when unknown.
	NVSwitch *bool
	// NVLinkPeers: the GPU has an NVLink to another GPU of the job on
	// the same node.
	NVLinkPeers bool
}

// Net is a node's network as the rank sees it. The rules only read it;
// ranks with the same network may share one.
type Net struct {
	// Interfaces are IP interface names (eth0, ib0, ...).
	Interfaces []string `json:"interfaces,omitempty"`
	// HCAs are RDMA devices (mlx5_0, ...); nil with HCAsKnown false when
	// not read.
	HCAs      []string `json:"hcas,omitempty"`
	HCAsKnown bool     `json:"hcasKnown,omitempty"`
}

func (r Rank) label() string {
	if r.Name != "" {
		return r.Name
	}
	if r.Rank >= 0 {
		return fmt.Sprintf("rank %d", r.Rank)
	}
	return "template"
}

// mig says whether the rank is known to run on MIG instances.
func (r Rank) mig() bool {
	if r.DevicesKnown {
		for _, d := range r.Devices {
			if d.MIG {
				return true
			}
		}
		return false
	}
	return r.MIGRequested
}

// rankList lists the rank numbers of rs (templates have none).
func rankList(rs []Rank) []int {
	var out []int
	for _, r := range rs {
		if r.Rank >= 0 {
			out = append(out, r.Rank)
		}
	}
	return out
}

func names(rs []Rank) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.label())
	}
	return out
}
