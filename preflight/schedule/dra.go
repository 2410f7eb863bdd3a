package schedule

import (
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/verdict"
)

// standDown answers for a workload with a pod set whose devices come
// through DRA (PodSet.DRA): DRA_NOT_JUDGED, a warning, never hopeless.
//
// The engine models devices as counted resources in node allocatable. A
// DRA device is not there: the scheduler allocates it from ResourceSlices,
// for a resource claim or for an extended resource that a DeviceClass maps
// (where nodes with the device plugin still advertise the same name, the
// scheduler may serve it from either). Judged from allocatable, such a job
// would look as if its shape existed nowhere. Where the cluster layer
// judged the pod sets on the published devices (PodSet.DRAFacts), judgeDRA
// answers; where it could not (the devices are not known), the only honest
// answer is to say so and judge nothing.
func standDown(w *Workload) (Result, bool) {
	var via, pods []string
	var schedMsg string
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Count <= 0 || ps.DRA == "" {
			continue
		}
		via = append(via, fmt.Sprintf("%s (%s): %s", ps.Name, plural(ps.Count, "pod"), ps.DRA))
		pods = append(pods, ps.Pods...)
		if schedMsg == "" {
			schedMsg = ps.SchedulerMessage
		}
	}
	if len(via) == 0 {
		return Result{}, false
	}
	noun := "job"
	if w.Kind == "Pod" {
		noun = "pod"
	}
	msg := fmt.Sprintf("The %s's devices come through DRA (%s), and the devices it may get are not known here (no ResourceSlice was read, a claim or claim template its pods name is missing, or nodes also advertise the resource from the device plugin); node allocatable does not hold these devices, so the %s is not judged and never failed on those grounds.",
		noun, strings.Join(via, "; "), noun)
	if schedMsg != "" {
		msg += fmt.Sprintf(" The scheduler said: %q.", clip(schedMsg, 600))
	}
	rule, _ := verdict.Lookup(verdict.RuleDRANotJudged)
	f := verdict.Finding{
		Rule: rule.ID, Severity: verdict.SeverityWarn, Message: msg,
		Remediation: rule.Remediation, Pods: limit(pods, 50),
	}
	return Result{
		Report: verdict.NewReport(w.Subject(), []verdict.Finding{f}),
		Rule:   verdict.RuleDRANotJudged,
	}, true
}
