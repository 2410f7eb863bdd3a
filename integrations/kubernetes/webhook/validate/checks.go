package validate

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/ncclsettings"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/launcher"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// judge runs the checks that are not off. notes are warnings whatever
// the policies say: a check that could not run, a claim the pods name
// that does not exist yet.
func (h *handler) judge(ctx context.Context, j kubeflow.Job) (fs []verdict.Finding, notes []string) {
	on := func(id string) bool { return h.policy[id] != Off }
	rd := h.reads(ctx)
	if on(verdict.RuleShapeMismatch) || on(verdict.RuleStrategyMismatch) {
		var err error
		fs, err = h.placement(ctx, rd, j, on)
		if err != nil {
			notes = append(notes, "rankgate: placement checks (SHAPE_MISMATCH, STRATEGY_MISMATCH) skipped: "+clip(err.Error(), 150))
		}
	}
	notes = append(notes, h.claimChecks(ctx, rd, j, on, &fs)...)
	if on(verdict.RuleMIGMultiplePerProcess) {
		fs = append(fs, migPerContainer(j)...)
	}
	if on(verdict.RuleGangMIGMixedWithFull) {
		fs = append(fs, mixedMIGFull(j)...)
	}
	if on(verdict.RuleNprocExceedsDevices) {
		fs = append(fs, nprocExceeds(j)...)
	}
	for _, f := range ncclsettings.Judge(j) {
		if on(f.Rule) {
			fs = append(fs, f)
		}
	}
	return fs, notes
}

// placement judges the job's templates against the nodes with the schedule
// engine, as `rankgate diagnose` and the controller do, and keeps its
// shape verdicts when no valid layout of any node's GPU could give the
// shape (no RECONFIGURABLE finding): STRATEGY_MISMATCH, and SHAPE_MISMATCH
// for jobs that ask for MIG devices (a missing full-GPU shape is left to
// the cluster autoscaler).
// Without GPU nodes nothing is judged: the cluster may not have any yet.
// A job whose pods get devices through DRA (resource claims, or an
// extended resource a DeviceClass maps) is judged on the devices drivers
// publish in ResourceSlices (the DRA source); it asks for MIG devices when
// the published devices nearest to a request no device serves pass the
// request's DeviceClass and are MIG devices. Where the DRA objects are not known, it is not judged (the
// engine stands down with DRA_NOT_JUDGED, a warning this check does not
// keep).
func (h *handler) placement(ctx context.Context, rd *reads, j kubeflow.Job, on func(string) bool) ([]verdict.Finding, error) {
	if h.nodes == nil && h.fleet == nil {
		return nil, nil
	}
	gpu := requestsGPU(j)
	if !gpu && !claimsDevices(j) {
		return nil, nil
	}
	// The templates alone: no pods exist yet.
	b := cluster.NewBuilder()
	if h.classes != nil {
		classes, err := rd.deviceClasses()
		if err != nil {
			return nil, fmt.Errorf("reading DeviceClasses: %w", err)
		}
		for i := range classes {
			if err := b.AddDeviceClass(&classes[i]); err != nil {
				return nil, fmt.Errorf("DeviceClass %d: %w", i, err)
			}
		}
	}
	w, err := b.WorkloadFor(j)
	if err != nil {
		return nil, err
	}
	dra := usesDRA(w)
	if !gpu && !dra {
		return nil, nil
	}
	cl, gpuNodes, nodes, err := h.fleetNow(ctx)
	if err != nil || gpuNodes == 0 && !dra {
		return nil, err
	}
	if dra && h.objects != nil {
		if w, err = h.withDRA(ctx, rd, b, j, nodes); err != nil {
			return nil, err
		}
	}
	// Judged as if it ran now (a suspended job will be resumed), and only
	// shape verdicts are kept: free capacity is not the question at
	// admission.
	w.Suspended = false
	res := h.engine.Diagnose(cl, w)
	return keptShapes(res, requestsMIG(j) || draAsksMIG(w), on), nil
}

// fleetNow is the cluster to judge on and how many nodes advertise GPU
// resources: the caller's (Fleet), else prepared from Nodes, which are
// then returned too.
func (h *handler) fleetNow(ctx context.Context) (*schedule.Cluster, int, []corev1.Node, error) {
	if h.fleet != nil {
		cl, gpuNodes, err := h.fleet(ctx)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("the cluster's nodes: %w", err)
		}
		return cl, gpuNodes, nil, nil
	}
	nodes, err := h.nodes(ctx)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("reading nodes: %w", err)
	}
	snap, err := h.snapshot(nodes)
	if err != nil {
		return nil, 0, nil, err
	}
	return snap.cl, snap.gpuNodes, nodes, nil
}

// withDRA is the job's workload judged on the published DRA devices, with
// the nodes they are on (the DRA source's; else nodes, else listed); the
// workload without DRA facts where the DRA objects are not known (not
// served, or the caches have not synced): never refused then.
func (h *handler) withDRA(ctx context.Context, rd *reads, b *cluster.Builder, j kubeflow.Job, nodes []corev1.Node) (schedule.Workload, error) {
	o, err := rd.draObjects()
	if err != nil {
		return schedule.Workload{}, fmt.Errorf("reading DRA objects: %w", err)
	}
	if o == nil || o.Nodes == nil {
		if nodes == nil && h.nodes != nil {
			if nodes, err = h.nodes(ctx); err != nil {
				return schedule.Workload{}, fmt.Errorf("reading nodes: %w", err)
			}
		}
		for i := range nodes {
			if err := b.AddNode(&nodes[i]); err != nil {
				return schedule.Workload{}, fmt.Errorf("node %s: %w", nodes[i].Name, err)
			}
		}
	}
	if o != nil {
		if err := o.addTo(b); err != nil {
			return schedule.Workload{}, fmt.Errorf("reading DRA objects: %w", err)
		}
	}
	return b.WorkloadFor(j)
}

// keptShapes are the fail findings of res the placement check keeps (see
// placement).
func keptShapes(res schedule.Result, mig bool, on func(string) bool) []verdict.Finding {
	reconfigurable := false
	for _, f := range res.Report.Findings {
		reconfigurable = reconfigurable || f.Rule == verdict.RuleReconfigurable
	}
	var out []verdict.Finding
	for _, f := range res.Report.Findings {
		if f.Severity != verdict.SeverityFail || !on(f.Rule) {
			continue
		}
		switch {
		case reconfigurable:
			// A valid layout on some node would give the shape: the
			// engine may still call another node's strategy wrong, but
			// the job can run after a relabel.
		case f.Rule == verdict.RuleStrategyMismatch,
			f.Rule == verdict.RuleShapeMismatch && mig:
			out = append(out, f)
		}
	}
	return out
}

// usesDRA: a pod set of w gets devices through DRA.
func usesDRA(w schedule.Workload) bool {
	for _, ps := range w.PodSets {
		if ps.DRA != "" && ps.Count > 0 {
			return true
		}
	}
	return false
}

// claimsDevices: a replica that runs ranks has resource claims, or asks
// for an extended resource that is not a GPU resource (a DeviceClass may
// map it).
func claimsDevices(j kubeflow.Job) bool {
	for _, rs := range j.ReplicaSpecs() {
		if rs.Replicas > 0 && len(rs.Template.Spec.ResourceClaims) > 0 {
			return true
		}
	}
	for _, c := range rankContainers(j) {
		for _, rl := range []corev1.ResourceList{c.c.Resources.Limits, c.c.Resources.Requests} {
			for r := range rl {
				if strings.Contains(string(r), "/") && !topology.IsGPUResource(string(r)) {
					return true
				}
			}
		}
	}
	return false
}

// draAsksMIG: a DRA request of w that no published device serves asks
// for MIG devices: the nearest published devices pass its DeviceClass and
// are MIG devices.
func draAsksMIG(w schedule.Workload) bool {
	for _, ps := range w.PodSets {
		if ps.DRAFacts == nil || ps.DRAFacts.Outcome != schedule.DRANoDevice {
			continue
		}
		for _, r := range ps.DRAFacts.Requests {
			if !r.NearestInClass {
				continue
			}
			for _, d := range r.Nearest {
				if d.Profile != "" || d.ParentUUID != "" {
					return true
				}
			}
		}
	}
	return false
}

// snapshot is the engine's prepared cluster for a list of nodes.
type snapshot struct {
	key      string
	cl       *schedule.Cluster
	gpuNodes int
}

// snapshot prepares nodes for the engine, or reuses the last snapshot when
// the nodes are the same objects (names, UIDs and resourceVersions, as an
// informer cache hands them out): preparing a fleet costs more than
// judging a job against it. Nodes without a resourceVersion are never
// reused.
func (h *handler) snapshot(nodes []corev1.Node) (*snapshot, error) {
	var key strings.Builder
	cacheable := true
	for i := range nodes {
		m := &nodes[i].ObjectMeta
		cacheable = cacheable && m.ResourceVersion != ""
		key.WriteString(m.Name)
		key.WriteByte(0)
		key.WriteString(string(m.UID))
		key.WriteByte(0)
		key.WriteString(m.ResourceVersion)
		key.WriteByte(0)
	}
	if last := h.last.Load(); cacheable && last != nil && last.key == key.String() {
		return last, nil
	}
	b := cluster.NewBuilder()
	s := &snapshot{key: key.String()}
	for i := range nodes {
		if err := b.AddNode(&nodes[i]); err != nil {
			return nil, fmt.Errorf("node %s: %w", nodes[i].Name, err)
		}
		if cluster.AdvertisesGPU(nodes[i].Status.Allocatable) {
			s.gpuNodes++
		}
	}
	// Nodes whose GPU labels cannot be read: the engine's one policy
	// (schedule.Cluster.unreadableLabels).
	s.cl = h.engine.NewCluster(b.Nodes())
	if cacheable {
		h.last.Store(s)
	}
	return s, nil
}

// containers are a replica's containers that count: init containers and
// containers (sidecars included) of replicas that run ranks.
type ctr struct {
	replica string
	c       *corev1.Container
}

func rankContainers(j kubeflow.Job) []ctr {
	var out []ctr
	for _, rs := range j.ReplicaSpecs() {
		if !rs.RunsRanks || rs.Replicas == 0 {
			continue
		}
		spec := &rs.Template.Spec
		for i := range spec.InitContainers {
			out = append(out, ctr{rs.Type, &spec.InitContainers[i]})
		}
		for i := range spec.Containers {
			out = append(out, ctr{rs.Type, &spec.Containers[i]})
		}
	}
	return out
}

// devices counts a container's full GPUs and MIG devices (limits, which
// extended resources must set; requests when only they are given).
func devices(c *corev1.Container) (gpus, mig int64, migNames []string) {
	rl := c.Resources.Limits
	if len(rl) == 0 {
		rl = c.Resources.Requests
	}
	for r, q := range rl {
		name := string(r)
		switch {
		case name == topology.ResourceGPU:
			gpus += q.Value()
		case strings.HasPrefix(name, topology.ResourceMIGPrefix) && q.Value() > 0:
			mig += q.Value()
			migNames = append(migNames, fmt.Sprintf("%s: %d", name, q.Value()))
		}
	}
	sort.Strings(migNames)
	return gpus, mig, migNames
}

func requestsGPU(j kubeflow.Job) bool {
	for _, c := range rankContainers(j) {
		if g, m, _ := devices(c.c); g+m > 0 {
			return true
		}
	}
	return false
}

func requestsMIG(j kubeflow.Job) bool {
	for _, c := range rankContainers(j) {
		if _, m, _ := devices(c.c); m > 0 {
			return true
		}
	}
	return false
}

// migPerContainer: MIG_MULTIPLE_PER_PROCESS for each container that asks
// for more than one MIG device (CUDA shows one process one MIG device).
func migPerContainer(j kubeflow.Job) []verdict.Finding {
	rule, _ := verdict.Lookup(verdict.RuleMIGMultiplePerProcess)
	var out []verdict.Finding
	for _, c := range rankContainers(j) {
		_, m, names := devices(c.c)
		if m <= 1 {
			continue
		}
		out = append(out, verdict.Finding{
			Rule: rule.ID, Severity: verdict.SeverityFail,
			Message: fmt.Sprintf("%s container %q asks for %d MIG devices (%s): one CUDA process sees only one MIG device.",
				c.replica, c.c.Name, m, strings.Join(names, ", ")),
			Remediation: "ask for one MIG device per container, or run one process per device (torchrun --nproc-per-node=" + fmt.Sprint(m) + " with one CUDA_VISIBLE_DEVICES each)",
		})
	}
	return out
}

// mixedMIGFull: GANG_MIG_MIXED_WITH_FULL when the job's ranks ask for MIG
// devices and full GPUs (across replicas or in one container).
func mixedMIGFull(j kubeflow.Job) []verdict.Finding {
	var withMIG, withFull []string
	for _, c := range rankContainers(j) {
		g, m, _ := devices(c.c)
		name := fmt.Sprintf("%s/%s", c.replica, c.c.Name)
		if m > 0 {
			withMIG = append(withMIG, name)
		}
		if g > 0 {
			withFull = append(withFull, name)
		}
	}
	if len(withMIG) == 0 || len(withFull) == 0 {
		return nil
	}
	rule, _ := verdict.Lookup(verdict.RuleGangMIGMixedWithFull)
	return []verdict.Finding{{
		Rule: rule.ID, Severity: verdict.SeverityFail,
		Message: fmt.Sprintf("the job mixes MIG devices (%s) and full GPUs (%s): NCCL cannot join them in one collective at full speed and MIG ranks have no P2P.",
			strings.Join(withMIG, ", "), strings.Join(withFull, ", ")),
		Remediation: rule.Remediation + " (all nvidia.com/gpu or all one nvidia.com/mig-<profile>)",
	}}
}

// nprocExceeds: NPROC_EXCEEDS_DEVICES for each container whose torchrun
// would start more local processes than the container has GPUs.
func nprocExceeds(j kubeflow.Job) []verdict.Finding {
	var specNproc string
	if n := j.NprocPerNode(); n != nil {
		specNproc = *n
	}
	rule, _ := verdict.Lookup(verdict.RuleNprocExceedsDevices)
	var out []verdict.Finding
	for _, c := range rankContainers(j) {
		g, m, _ := devices(c.c)
		if g+m == 0 {
			continue
		}
		env := map[string]string{}
		if specNproc != "" {
			env["PET_NPROC_PER_NODE"] = specNproc // the operator sets it from spec.nprocPerNode
		}
		for _, e := range c.c.Env {
			if e.ValueFrom == nil {
				env[e.Name] = e.Value
			}
		}
		n, from, _, ok := launcher.TorchrunNproc(commandLine(c.c), env)
		if !ok || n == 0 || int64(n) <= g+m {
			continue
		}
		if from == "PET_NPROC_PER_NODE" && specNproc != "" && env["PET_NPROC_PER_NODE"] == specNproc {
			from = "spec.nprocPerNode (PET_NPROC_PER_NODE)"
		}
		out = append(out, verdict.Finding{
			Rule: rule.ID, Severity: verdict.SeverityFail,
			Message: fmt.Sprintf("%s container %q starts %d torchrun processes (%s) on %d GPUs: processes would share a device or fail to find one.",
				c.replica, c.c.Name, n, from, g+m),
			Remediation: fmt.Sprintf("set %s to %d, or ask for %d GPUs per pod", from, g+m, n),
		})
	}
	return out
}

// commandLine is the container's command and args; a shell line (sh -c
// "... torchrun ...") is split on blanks from the torchrun word on, which
// is as far as its options can be read without a shell.
func commandLine(c *corev1.Container) []string {
	argv := append(append([]string(nil), c.Command...), c.Args...)
	if len(argv) >= 3 && argv[1] == "-c" {
		switch filepath.Base(argv[0]) {
		case "sh", "bash", "dash", "ash", "zsh":
			words := strings.Fields(argv[2])
			for i, w := range words {
				if filepath.Base(w) == "torchrun" {
					end := len(words)
					for k := i + 1; k < len(words); k++ {
						if strings.ContainsAny(words[k], ";&|") {
							end = k
							break
						}
					}
					return words[i:end]
				}
			}
		}
	}
	return argv
}

// reads are the DeviceClass and DRA object reads of one admission, each
// done at most once: the placement and the claim checks both need them
// (in the controller each is a listing of its caches).
type reads struct {
	deviceClasses func() ([]resourcev1.DeviceClass, error)
	draObjects    func() (*DRAObjects, error)
}

func (h *handler) reads(ctx context.Context) *reads {
	return &reads{
		deviceClasses: sync.OnceValues(func() ([]resourcev1.DeviceClass, error) { return h.classes(ctx) }),
		draObjects:    sync.OnceValues(func() (*DRAObjects, error) { return h.objects(ctx) }),
	}
}
