// Package devicesource says where a rank's devices and their facts come
// from. The gang rules (package preflight) judge ranks by their reports;
// a source is what makes a rank's report:
//
//   - the rank's own report (package reported): its init container reads
//     its devices from NVML on the node and sends them to the gate. It is
//     the node's truth: health, P2P and NVLink, the fabric.
//   - the rank's DRA allocation (package dra): the devices the scheduler
//     allocated to the rank pod's ResourceClaims, resolved to the facts
//     their driver publishes in ResourceSlices. It is known as soon as the
//     claims are allocated, before any container or image pull starts.
//
// A rank known to both is judged on its own report, and where the two
// disagree about which devices the rank holds, that is a finding of its
// own (Disagreement).
package devicesource

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// Names of the sources, as a rank report's Source says them.
const (
	// Reported is the rank's own report (NVML on the node); a report
	// without a Source is one.
	Reported = ""
	// DRA is the rank pod's DRA allocation.
	DRA = preflight.SourceDRA
)

// Rank is what a source knows of one rank's devices.
type Rank struct {
	// Known: the source knows the rank's devices and Report holds them.
	Known bool
	// Report is the rank's report as the source makes it (its Source set).
	Report preflight.RankReport
	// Waiting says, while not Known, what the source waits for ("claim
	// x/y is not allocated yet"); empty when the source has nothing to
	// say about the pod (not a DRA pod, no report).
	Waiting string
}

// Source resolves the devices of a rank's pod.
type Source interface {
	// Name is the source's name (Reported, DRA).
	Name() string
	// Rank says what the source knows of pod's devices, pod being rank
	// of its job.
	Rank(ctx context.Context, pod *corev1.Pod, rank int) (Rank, error)
}

// deviceIDs are the IDs of a report's devices, sorted, duplicates once.
func deviceIDs(r preflight.RankReport) []string {
	out := make([]string, 0, len(r.Report.Devices))
	for _, d := range r.Report.Devices {
		out = append(out, d.ID)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Disagreement compares two sources' reports of one rank: the devices the
// rank's own report (own, from NVML) lists against those its DRA
// allocation (alloc) holds. It returns a failing DRA_DEVICES_DISAGREE
// finding when the sets of device IDs (UUIDs) differ, nil when they agree
// or either side lists no device (a report that could not read its
// devices fails on its own).
func Disagreement(own, alloc preflight.RankReport) *verdict.Finding {
	a, b := deviceIDs(own), deviceIDs(alloc)
	if len(a) == 0 || len(b) == 0 || slices.Equal(a, b) {
		return nil
	}
	onlyOwn := setMinus(a, b)
	onlyAlloc := setMinus(b, a)
	var parts []string
	if len(onlyAlloc) > 0 {
		parts = append(parts, "allocated but not seen by the rank: "+strings.Join(onlyAlloc, ", "))
	}
	if len(onlyOwn) > 0 {
		parts = append(parts, "seen by the rank but not allocated: "+strings.Join(onlyOwn, ", "))
	}
	return &verdict.Finding{
		Rule: verdict.RuleDRADevicesDisagree, Severity: verdict.SeverityFail, Devices: append(onlyAlloc, onlyOwn...),
		Message: fmt.Sprintf("rank %d (pod %s on %s): the devices NVML shows the rank differ from those its ResourceClaims were allocated (%s)",
			own.Rank, own.Pod, own.Node, strings.Join(parts, "; ")),
		Remediation: "check the DRA driver's plugin on the node (kubectl logs of its kubelet plugin) and the container's CDI devices; " +
			"a device set by hand (NVIDIA_VISIBLE_DEVICES in the pod spec) or a second device plugin on the node gives the rank other GPUs than its claims",
	}
}

// setMinus is a minus b, both sorted.
func setMinus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			out = append(out, x)
		}
	}
	return out
}
