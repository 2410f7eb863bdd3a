package gangstore

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"unique"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/verdict"
)

// heldReport is a rank's report as its open gang holds it until the
// verdict: JSON, compressed (an 8-GPU report with two findings, 2.0 KB of
// JSON and about 2 KB once decoded, packs into about 0.5 KB). 1,000 open
// gangs of 8 hold 7,000 and more of them; they are unpacked only when the
// gang is decided. What the Gang's ranks show is kept
// unpacked, and the early-fail check keeps its own keys
// (preflight.GangCheck), both sharing the report's strings. A gang of more
// than packMaxRanks ranks holds its reports as they are: unpacking
// thousands would delay its verdict (about 27 µs each), and its ranks'
// connections cost far more memory than their reports. The rank's
// network (interfaces, RDMA devices) is held apart from the report as one
// interned string: the ranks of a job, and of every job on like nodes,
// share it.
type heldReport struct {
	pod, node string
	source    string // rr.Source
	verdict   verdict.Verdict
	rules     []string // ruleIDs of the report
	devices   []string // the first MaxRankDevices device IDs
	// dra: the first MaxRankDevices devices (ID, profile, DRA name) of a
	// report made from a DRA allocation.
	dra    []verdict.DeviceSummary
	packed []byte
	plain  *preflight.RankReport // instead of packed
	net    heldNet
}

// packMaxRanks: the largest gang whose reports are packed.
const packMaxRanks = 64

var packers = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(io.Discard, flate.BestSpeed) // the level is valid: no error
	return w
}}

var unpackers sync.Pool // of io.ReadCloser that are flate.Resetter

// holdReport holds rr for a gang of expected ranks: packed unless the
// gang is larger than packMaxRanks. Encoding it cannot fail (strings,
// numbers and lists into memory).
func holdReport(rr preflight.RankReport, expected int) heldReport {
	h := summarize(rr)
	h.net, rr.Net = holdNet(rr.Net), nil
	rr.NCCLVersion = unique.Make(rr.NCCLVersion).Value()
	if expected > packMaxRanks {
		h.plain = &rr
		return h
	}
	var buf bytes.Buffer
	w := packers.Get().(*flate.Writer)
	defer packers.Put(w)
	w.Reset(&buf)
	err := json.NewEncoder(w).Encode(&rr)
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		panic(fmt.Sprintf("rankgate: packing a rank report: %v", err))
	}
	h.packed = bytes.Clone(buf.Bytes())
	return h
}

// summarize keeps what a Gang's status shows of rr.
func summarize(rr preflight.RankReport) heldReport {
	h := heldReport{pod: rr.Pod, node: rr.Node, source: rr.Source, verdict: rr.Report.Verdict, rules: RuleIDs(rr.Report, MaxRankRules)}
	for i := range rr.Report.Devices {
		if i == v1alpha1.MaxRankDevices {
			break
		}
		d := rr.Report.Devices[i]
		h.devices = append(h.devices, d.ID)
		if d.DRA != "" && rr.Source == preflight.SourceDRA {
			h.dra = append(h.dra, verdict.DeviceSummary{ID: d.ID, Profile: d.Profile, DRA: d.DRA})
		}
	}
	return h
}

// MaxRankRules: the rule IDs a Gang shows per rank.
const MaxRankRules = 32

// RuleIDs are the rule IDs of rep's fail and warn findings, each once, at
// most n.
func RuleIDs(rep verdict.Report, n int) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range rep.Findings {
		if f.Severity != verdict.SeverityInfo && !seen[f.Rule] && len(out) < n {
			seen[f.Rule] = true
			out = append(out, f.Rule)
		}
	}
	return out
}

// summary is the rank's report as far as a Gang's status shows it: verdict,
// the rules of its fail and warn findings, its first devices.
func (h heldReport) summary(rank int) preflight.RankReport {
	rr := preflight.RankReport{Rank: rank, Pod: h.pod, Node: h.node, Source: h.source, Report: verdict.Report{Verdict: h.verdict}}
	for _, r := range h.rules {
		rr.Report.Findings = append(rr.Report.Findings, verdict.Finding{Rule: r, Severity: verdict.SeverityWarn})
	}
	if len(h.dra) > 0 {
		rr.Report.Devices = append(rr.Report.Devices, h.dra...)
		return rr
	}
	for _, id := range h.devices {
		rr.Report.Devices = append(rr.Report.Devices, verdict.DeviceSummary{ID: id})
	}
	return rr
}

// unpackAll unpacks held reports, on every CPU for a large gang.
func unpackAll(held []heldRank) []preflight.RankReport {
	out := make([]preflight.RankReport, len(held))
	workers := min(runtime.GOMAXPROCS(0), len(held)/64+1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(held); i = int(next.Add(1) - 1) {
				out[i] = held[i].h.report()
			}
		}()
	}
	wg.Wait()
	return out
}

// heldRank is a held report and its rank.
type heldRank struct {
	rank int
	h    heldReport
}

// report unpacks the held report. It fails only if the bytes this process
// packed were damaged.
func (h heldReport) report() preflight.RankReport {
	rr := h.unpack()
	rr.Net = h.net.net()
	return rr
}

// unpack is the held report without its network.
func (h heldReport) unpack() preflight.RankReport {
	if h.plain != nil {
		return *h.plain
	}
	src := bytes.NewReader(h.packed)
	r, _ := unpackers.Get().(io.ReadCloser)
	if r == nil {
		r = flate.NewReader(src)
	} else if err := r.(flate.Resetter).Reset(src, nil); err != nil {
		panic(fmt.Sprintf("rankgate: resetting a decompressor: %v", err))
	}
	defer unpackers.Put(r)
	var rr preflight.RankReport
	if err := json.NewDecoder(r).Decode(&rr); err != nil {
		panic(fmt.Sprintf("rankgate: a held rank report does not unpack: %v", err))
	}
	return rr
}

// heldNet is a held rank's network: its JSON, interned (unique), so that
// ranks with the same interfaces and RDMA devices hold one copy; the zero
// value is an unknown network.
type heldNet struct {
	h unique.Handle[string]
}

// holdNet interns n; nil (unknown) stays unknown.
func holdNet(n *ncclenv.Net) heldNet {
	if n == nil {
		return heldNet{}
	}
	b, err := json.Marshal(n)
	if err != nil {
		panic(fmt.Sprintf("rankgate: encoding a rank's network: %v", err)) // string lists and a bool always encode
	}
	return heldNet{h: unique.Make(string(b))}
}

// net decodes the held network; nil when unknown.
func (h heldNet) net() *ncclenv.Net {
	if h.h == (unique.Handle[string]{}) {
		return nil
	}
	var n ncclenv.Net
	if err := json.Unmarshal([]byte(h.h.Value()), &n); err != nil {
		panic(fmt.Sprintf("rankgate: a held rank network does not decode: %v", err))
	}
	return &n
}
