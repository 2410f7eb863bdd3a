package preflight

import (
	"fmt"
	"sort"

	"github.com/rankgate/rankgate/verdict"
)

// GangCheck answers, one rank at a time, whether the ranks reported so far
// already fail together: the gang rules that can fail on a part of a job
// (a rank that failed its own preflight, MIG mixed with full GPUs, MIG on
// several GPUs, different shapes, duplicate devices, an NVLink domain
// split, mixed health with a failing health finding). Its answer is the
// one GangRules gives for the same ranks without Expected and Missing, at
// a cost per rank of that rank's devices and findings instead of the whole
// gang's. Adding a rank again replaces its earlier report; Remove drops it.
// A GangCheck is not safe for concurrent use.
type GangCheck struct {
	expectMultiNodeNVLink bool
	ranks                 map[int]*contribution

	failed             int // ranks whose own report fails
	migRanks, fullRank int // ranks with a MIG device, with a full GPU
	parents            keyCount
	shapes             keyCount
	domains            keyCount
	devices            map[nodeDevice]int // node/device ID (deviceKey: the report's own strings) -> ranks holding it
	duplicated         int                // devices held by more than one rank
	sick, sickFailing  int                // ranks with health findings, with a failing one
}

// keyCount counts, for each key, the ranks contributing it.
type keyCount map[string]int

func (k keyCount) add(key string) int {
	k[key]++
	return k[key]
}

func (k keyCount) remove(key string) int {
	n := k[key] - 1
	if n <= 0 {
		delete(k, key)
		return 0
	}
	k[key] = n
	return n
}

// NewGangCheck is an empty check; expectMultiNodeNVLink is
// GangInput.ExpectMultiNodeNVLink.
func NewGangCheck(expectMultiNodeNVLink bool) *GangCheck {
	return &GangCheck{
		expectMultiNodeNVLink: expectMultiNodeNVLink, ranks: map[int]*contribution{},
		parents: keyCount{}, shapes: keyCount{}, domains: keyCount{}, devices: map[nodeDevice]int{},
	}
}

// Len is the number of ranks held.
func (c *GangCheck) Len() int { return len(c.ranks) }

// Add takes r's report, replacing an earlier one of the same rank. The
// check keeps what the report contributes (its keys), not the report.
func (c *GangCheck) Add(r RankReport) {
	c.Remove(r.Rank)
	k := c.contributionOf(r)
	c.ranks[r.Rank] = k
	c.apply(k, 1)
}

// Remove drops rank's report, if held.
func (c *GangCheck) Remove(rank int) {
	if k, ok := c.ranks[rank]; ok {
		c.apply(k, -1)
		delete(c.ranks, rank)
	}
}

// contribution is what one rank's report adds to the check: each key once
// per rank, as the rules see ranks, not devices.
type contribution struct {
	failed, mig, fullGPU, sick, sickFailing bool
	keys                                    []string     // parent, shape and domain keys
	devices                                 []nodeDevice // the report's own strings
}

func (c *GangCheck) contributionOf(r RankReport) *contribution {
	devs := r.Report.Devices
	k := &contribution{failed: r.Report.Failed()}
	multi := c.expectMultiNodeNVLink
	for _, d := range devs {
		if d.Kind == "mig" {
			k.mig = true
		} else {
			k.fullGPU = true
		}
		multi = multi || d.FabricCluster != ""
	}
	seen := make(map[string]bool, 3*len(devs))
	key := func(s string) {
		if !seen[s] {
			seen[s] = true
			k.keys = append(k.keys, s)
		}
	}
	seenDev := make(map[nodeDevice]bool, len(devs))
	for _, d := range devs {
		if d.Kind == "mig" {
			key("p\x00" + migParent(r.Node, d))
		}
		key("s\x00" + shapeOf(d))
		if multi {
			key("d\x00" + nvlinkDomain(r, d))
		}
		if dk := deviceKey(r.Node, d.ID); !seenDev[dk] {
			seenDev[dk] = true
			k.devices = append(k.devices, dk)
		}
	}
	k.sick, k.sickFailing = healthOf(r.Report)
	return k
}

// Failed says whether GangRules fails on the ranks held.
func (c *GangCheck) Failed() bool { return len(c.FailingRules()) > 0 }

// FailingRules lists, sorted, the rules whose findings fail on the ranks
// held: the fail findings of GangRules over them.
func (c *GangCheck) FailingRules() []string {
	var out []string
	mixed := c.migRanks > 0 && c.fullRank > 0
	for _, x := range []struct {
		rule string
		on   bool
	}{
		{verdict.RuleRankFailed, c.failed > 0},
		{verdict.RuleGangMIGMixedWithFull, mixed},
		{verdict.RuleGangMIGSpansGPUs, len(c.parents) > 1},
		{verdict.RuleGangProfileMismatch, len(c.shapes) > 1 && !mixed},
		{verdict.RuleGangDuplicateDevice, c.duplicated > 0},
		{verdict.RuleGangNVLinkDomainSplit, len(c.domains) > 1},
		{verdict.RuleGangHealthMixed, c.sickFailing > 0 && c.sick < len(c.ranks)},
	} {
		if x.on {
			out = append(out, x.rule)
		}
	}
	sort.Strings(out)
	return out
}

// apply adds (sign 1) or removes (sign -1) a rank's contribution.
func (c *GangCheck) apply(k *contribution, sign int) {
	count := func(b bool, n *int) {
		if b {
			*n += sign
		}
	}
	count(k.failed, &c.failed)
	count(k.mig, &c.migRanks)
	count(k.fullGPU, &c.fullRank)
	count(k.sick, &c.sick)
	count(k.sickFailing, &c.sickFailing)
	for _, key := range k.keys {
		m := c.shapes
		switch key[0] {
		case 'p':
			m = c.parents
		case 'd':
			m = c.domains
		}
		if sign > 0 {
			m.add(key)
		} else {
			m.remove(key)
		}
	}
	for _, key := range k.devices {
		n := c.devices[key] + sign
		if n <= 0 {
			delete(c.devices, key)
		} else {
			c.devices[key] = n
		}
		if sign > 0 && n == 2 {
			c.duplicated++
		} else if sign < 0 && n == 1 {
			c.duplicated--
		}
	}
}

// migParent names the physical GPU of a MIG device on node.
func migParent(node string, d verdict.DeviceSummary) string {
	if d.GPUUUID != "" {
		return d.GPUUUID
	}
	return fmt.Sprintf("%s GPU %d", node, d.GPU)
}

// shapeOf is a device's shape as GANG_PROFILE_MISMATCH compares them.
func shapeOf(d verdict.DeviceSummary) string {
	s := d.Profile
	if d.SMs > 0 {
		s += fmt.Sprintf(" (%d SMs)", d.SMs)
	}
	return s
}

// healthOf says whether a rank's report has health findings, and whether
// one of them fails.
func healthOf(r verdict.Report) (sick, failing bool) {
	for _, f := range r.Findings {
		if IsHealthRule(f.Rule) {
			sick = true
			failing = failing || f.Severity == verdict.SeverityFail
		}
	}
	return sick, failing
}
