package controller

import (
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// compactRank shrinks a rank's report for the time its gang is open
// (1,000 open gangs hold 7,000 and more of them): the words every rank
// repeats (rules, messages, profiles, versions) are shared between
// reports, a device's UUID and the findings' device references share the
// device's ID, and lists are copied to their length when decoding left
// spare room. The content is unchanged.
func compactRank(rr *preflight.RankReport) {
	rr.Node, rr.DriverVersion, rr.CUDADriverVersion = intern(rr.Node), intern(rr.DriverVersion), intern(rr.CUDADriverVersion)
	r := &rr.Report
	r.Mode = intern(r.Mode)
	ids := make(map[string]string, len(r.Devices))
	r.Devices = fit(r.Devices)
	for i := range r.Devices {
		d := &r.Devices[i]
		d.Kind, d.Profile, d.FabricCluster = intern(d.Kind), intern(d.Profile), intern(d.FabricCluster)
		ids[d.ID] = d.ID
		if d.GPUUUID == d.ID {
			d.GPUUUID = d.ID
		} else {
			d.GPUUUID = intern(d.GPUUUID)
		}
	}
	r.Findings = fit(r.Findings)
	for i := range r.Findings {
		compactFinding(&r.Findings[i], ids)
	}
}

func compactFinding(f *verdict.Finding, ids map[string]string) {
	f.Rule, f.Severity = intern(f.Rule), verdict.Severity(intern(string(f.Severity)))
	f.Message, f.Remediation = intern(f.Message), intern(f.Remediation)
	f.Devices, f.Ranks, f.Nodes, f.Pods = fit(f.Devices), fit(f.Ranks), fit(f.Nodes), fit(f.Pods)
	for i, d := range f.Devices {
		if id, ok := ids[d]; ok {
			f.Devices[i] = id
		}
	}
	for i, n := range f.Nodes {
		f.Nodes[i] = intern(n)
	}
}

// fit returns s in an array of its length (JSON decoding grows lists by
// half: 8 devices end in room for 9).
func fit[T any](s []T) []T {
	if cap(s) == len(s) {
		return s
	}
	return append(make([]T, 0, len(s)), s...)
}
