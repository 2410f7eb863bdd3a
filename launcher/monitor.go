package launcher

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rankgate/rankgate/verdict"
)

type eventKind int

const (
	evReady eventKind = iota + 1
	evFatal
	evFallback
)

// event tells the supervisor what the output showed. Each kind is sent at
// most once, so the channel's buffer never fills.
type event struct {
	kind    eventKind
	how     string // evReady: what made CMD ready
	finding verdict.Finding
}

// procState is one process that printed NCCL init lines, keyed by the
// "host:pid" of NCCL's line prefix (or "rank N" without one).
type procState struct {
	key          string
	rank, nranks int
	started      bool
	completed    bool
}

// ringSize is how many of the last NCCL lines a diagnosis shows.
const (
	ringSize    = 16
	ringLineMax = 400
	// maxProcs bounds the per-process table (mpirun forwards every rank's
	// output, so it can be large, but not unbounded).
	maxProcs = 1 << 16
	maxNames = 32
)

// monitor turns the lines the scanners hand on into state and events. The
// pumps of stdout and stderr call line concurrently.
type monitor struct {
	readyRe         *regexp.Regexp
	expect          int
	expectTransport Transport
	// derived: the expectation came from the preflight, not the user; it
	// applies only to communicators NCCL sees on one node.
	derived bool
	strict  bool

	ready  atomic.Bool
	events chan event

	// initMode: until ready, in a stream's first fatalScanBudget bytes;
	// lateMode: until ready, after that; runMode: once ready.
	initMode, lateMode, runMode scanMode

	mu         sync.Mutex
	procs      map[string]*procState
	order      []*procState
	completed  int
	sawNCCL    bool
	ring       [ringSize][]byte
	ringNext   int
	ringLen    int
	transports map[string]*tally
	names      []string
	// nNodes and localRanks as NCCL's "comm ... nNodes N localRanks L"
	// lines report them: the largest nNodes and the smallest localRanks.
	nNodes       int
	localRanks   int
	fatalSent    bool
	fallbackSent bool
	// mig: whether the rank's devices are MIG instances, for remediation
	// texts that fit the node.
	mig migKnown
	// lastWarn is the last NCCL WARN line: it names the host, process and
	// device of a failure that a generic line (PyTorch's wrapper) only
	// reports.
	lastWarn []byte
}

// setDevices tells the monitor the rank's device kinds ("gpu", "mig");
// none known leaves the remediation texts that cover both.
func (m *monitor) setDevices(kinds []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mig = migUnknown
	for _, k := range kinds {
		switch {
		case k == "mig":
			m.mig = migYes
			return
		case k == "gpu":
			m.mig = migNo
		}
	}
}

type tally struct {
	class Transport
	count int
}

func newMonitor(readyRe *regexp.Regexp, expect int, want Transport, derived, strict bool) *monitor {
	if expect < 1 {
		expect = 1
	}
	m := &monitor{
		readyRe: readyRe, expect: expect, expectTransport: want, derived: derived, strict: strict,
		events:     make(chan event, 4),
		procs:      map[string]*procState{},
		transports: map[string]*tally{},
		localRanks: -1,
	}
	m.runMode = scanMode{anchors: [][]byte{tokNCCL}}
	m.lateMode = scanMode{anchors: [][]byte{tokNCCL}}
	if readyRe != nil {
		if prefix, _ := readyRe.LiteralPrefix(); prefix != "" {
			m.lateMode.anchors = append(m.lateMode.anchors, []byte(prefix))
		} else {
			m.lateMode.all = true
		}
	}
	m.initMode = scanMode{all: m.lateMode.all, anchors: append(append(append([][]byte(nil), m.lateMode.anchors...), fatalAnchors...), rendezvousAnchors...)}
	return m
}

// mode is the scan mode for a stream's next chunk, seen bytes into it:
// until CMD is ready, the anchors of fatal lines and of the ready pattern
// too; after, NCCL lines only (transports).
func (m *monitor) mode(seen int64) *scanMode {
	switch {
	case m.ready.Load():
		return &m.runMode
	case seen < fatalScanBudget:
		return &m.initMode
	}
	return &m.lateMode
}

// markReady records readiness once and tells the supervisor.
func (m *monitor) markReady(how string) {
	if m.ready.CompareAndSwap(false, true) {
		m.events <- event{kind: evReady, how: how}
	}
}

// line handles one line (without its newline). b is only valid during
// the call.
func (m *monitor) line(b []byte) {
	initPhase := !m.ready.Load()
	if initPhase && m.readyRe != nil && m.readyRe.Match(b) {
		m.markReady(fmt.Sprintf("--ready-pattern %q matched", m.readyRe.String()))
	}
	// NCCL's INFO lines never are fatal (its fatal messages are WARN lines
	// and error strings): one search settles the common case.
	info := bytes.Index(b, tokNCCLInfo)
	isNCCL := info >= 0 || bytes.Contains(b, tokNCCL)
	var fp *fatalPattern
	rdzv := false
	if initPhase && info < 0 {
		fp = matchFatal(b)
		rdzv = fp == nil && rendezvousFailure(b)
	}
	if !isNCCL && fp == nil && !rdzv {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.remember(b)
	if isNCCL {
		m.sawNCCL = true
		if info >= 0 {
			m.ncclLine(b, info)
			if initPhase {
				msg := b[info+len(tokNCCLInfo):]
				if shmTraceFatal(msg) {
					m.fatal(b, fixShm, true)
				} else if fix := initTraceFatal(msg); fix != "" {
					m.fatal(b, fix, true)
				}
			}
		}
	}
	if fp != nil {
		m.fatal(b, fp.fix(m.mig), fp.generic)
	}
	if rdzv {
		m.rendezvousFatal(b)
	}
	if bytes.Contains(b, tokNCCLWarn) {
		m.lastWarn = append(m.lastWarn[:0], b[:min(len(b), ringLineMax)]...)
	}
}

// fatal sends the first fatal line before CMD is ready. A generic line
// (PyTorch's wrapper, an error code in NCCL's trace) also quotes the NCCL
// WARN line before it, which names the host, process and device and says
// what failed.
func (m *monitor) fatal(b []byte, fix string, generic bool) {
	if m.fatalSent || m.ready.Load() {
		return
	}
	m.fatalSent = true
	msg := "fatal line during NCCL init: " + clip(b, ringLineMax)
	if generic && len(m.lastWarn) > 0 {
		msg += "; NCCL said before it: " + clip(m.lastWarn, ringLineMax)
	}
	m.events <- event{kind: evFatal, finding: verdict.Finding{
		Rule: verdict.RuleNCCLFatal, Severity: verdict.SeverityFail,
		Message: msg, Remediation: fix,
	}}
}

// rendezvousFatal sends RENDEZVOUS_FAILED for a line that says torch's
// rendezvous failed, naming the address it could not reach.
func (m *monitor) rendezvousFatal(b []byte) {
	if m.fatalSent || m.ready.Load() {
		return
	}
	m.fatalSent = true
	msg := "torch's rendezvous failed before NCCL init"
	if a := rendezvousAddress(b); a != "" {
		msg += " (MASTER_ADDR:MASTER_PORT " + a + ")"
	}
	fix := fixRendezvous
	if bytes.Contains(b, []byte("server socket")) {
		fix = fixRendezvousListen
	}
	m.events <- event{kind: evFatal, finding: verdict.Finding{
		Rule: verdict.RuleRendezvousFailed, Severity: verdict.SeverityFail,
		Message: msg + ": " + clip(b, ringLineMax), Remediation: fix,
	}}
}

func (m *monitor) remember(b []byte) {
	b = b[:min(len(b), ringLineMax)]
	m.ring[m.ringNext] = append(m.ring[m.ringNext][:0], b...)
	m.ringNext = (m.ringNext + 1) % ringSize
	m.ringLen = min(m.ringLen+1, ringSize)
}

// ncclLine reads an NCCL INFO line ("NCCL INFO " at b[info]). It tells the lines apart by where
// NCCL puts their words: "- Init COMPLETE" / "- Init START" at the end,
// "Channel"/"CollNet ... via X" and "comm 0x... nNodes" at the start of the
// message, "N nvls channels" in the channel summary.
func (m *monitor) ncclLine(b []byte, info int) {
	b = bytes.TrimRight(b, " \t")
	switch {
	case bytes.HasSuffix(b, tokInitComplete):
		if ps := m.proc(b); ps != nil && !ps.completed {
			ps.completed = true
			m.completed++
			if m.completed >= m.expect {
				m.markReady(fmt.Sprintf("NCCL Init COMPLETE on %d local rank(s)", m.completed))
			}
		}
		return
	case bytes.HasSuffix(b, tokInitStart):
		if ps := m.proc(b); ps != nil {
			ps.started = true
		}
		return
	}
	msg := b[min(info+len(tokNCCLInfo), len(b)):]
	switch {
	case bytes.HasPrefix(msg, tokChannel) || bytes.HasPrefix(msg, tokCollNet):
		if name := transportName(msg); len(name) > 0 {
			m.observe(name, classifyTransport(name), b)
		}
	case bytes.HasPrefix(msg, tokComm):
		if n := intAfter(msg, tokNNodes); n > m.nNodes {
			m.nNodes = n
		}
		if l := intAfter(msg, tokLocalRanks); l >= 0 && (m.localRanks < 0 || l < m.localRanks) {
			m.localRanks = l
		}
	case len(msg) > 0 && msg[0] >= '0' && msg[0] <= '9':
		if j := bytes.Index(msg, tokNVLSChannels); j > 0 && numberBefore(msg, j) > 0 {
			m.observe([]byte("NVLS"), TransportP2P, b)
		}
	}
}

// proc finds or adds the process an Init line belongs to.
func (m *monitor) proc(b []byte) *procState {
	rank := intAfter(b, tokRank)
	nranks := intAfter(b, tokNRanks)
	key := procKey(b)
	var ps *procState
	if key != nil {
		ps = m.procs[string(key)]
	} else if rank >= 0 {
		ps = m.procs[fmt.Sprintf("rank %d", rank)]
	} else {
		return nil
	}
	if ps == nil {
		if len(m.order) >= maxProcs {
			return nil
		}
		k := string(key)
		if key == nil {
			k = fmt.Sprintf("rank %d", rank)
		}
		ps = &procState{key: k, rank: -1, nranks: -1}
		m.procs[k] = ps
		m.order = append(m.order, ps)
	}
	// The first communicator's rank is the process's rank.
	if ps.rank < 0 {
		ps.rank, ps.nranks = rank, nranks
	}
	return ps
}

func (m *monitor) observe(name []byte, class Transport, line []byte) {
	t := m.transports[string(name)]
	if t == nil {
		if len(m.names) >= maxNames {
			return
		}
		t = &tally{class: class}
		m.transports[string(name)] = t
		m.names = append(m.names, string(name))
	}
	t.count++
	want := m.expectTransport
	if want == TransportUnknown || class == TransportUnknown || class.speed() >= want.speed() || m.fallbackSent {
		return
	}
	if m.derived && m.nNodes != 1 {
		return
	}
	m.fallbackSent = true
	sev := verdict.SeverityWarn
	if m.strict {
		sev = verdict.SeverityFail
	}
	m.events <- event{kind: evFallback, finding: verdict.Finding{
		Rule: verdict.RuleTransportFallback, Severity: sev,
		Message:     fmt.Sprintf("NCCL connects ranks via %s (%s) where %s was expected%s: %s", name, class, want, m.derivedNote(), clip(line, ringLineMax)),
		Remediation: m.fallbackRemedy(class),
	}}
}

func (m *monitor) derivedNote() string {
	if m.derived {
		return " (derived from the preflight: the rank's full GPUs showed no P2P problem)"
	}
	return ""
}

func (m *monitor) fallbackRemedy(got Transport) string {
	if m.localRanks == 1 && m.nNodes > 1 {
		return fmt.Sprintf("NCCL sees every rank alone on its node (nNodes %d, localRanks 1): ranks in separate pods cannot use P2P or SHM even on one machine; "+
			"run one pod with all the node's GPUs and torchrun --nproc-per-node=<GPUs>", m.nNodes)
	}
	switch {
	case got == TransportNet && m.expectTransport == TransportSHM:
		return "ranks on one node should meet in shared memory: put them in one pod (or share /dev/shm and the IPC namespace), check NCCL_SHM_DISABLE"
	case got == TransportNet:
		return "ranks on one node should use P2P: put them in one pod, check NCCL_P2P_DISABLE, NCCL_P2P_LEVEL and that the GPUs are visible to every local rank"
	default:
		return "P2P between the GPUs is unavailable: check `nvidia-smi topo -p2p rw`, ACS/IOMMU settings, NCCL_P2P_DISABLE and NCCL_P2P_LEVEL"
	}
}

// numberBefore parses the decimal number that ends just before b[i-1].
func numberBefore(b []byte, i int) int {
	if i <= 0 {
		return -1
	}
	j := i
	for j > 0 && b[j-1] >= '0' && b[j-1] <= '9' {
		j--
	}
	return atoi(b[j:i])
}

func clip(b []byte, n int) string {
	s := strings.TrimSpace(string(b[:min(len(b), n)]))
	if len(b) > n {
		s += "..."
	}
	return s
}

// initState is a snapshot for a diagnosis.
type initState struct {
	expect     int
	completed  []string
	pending    []string // started NCCL init, never completed
	sawNCCL    bool
	transports []string
	last       []string
	nNodes     int
	localRanks int
}

func (m *monitor) snapshot() initState {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := initState{expect: m.expect, sawNCCL: m.sawNCCL, nNodes: m.nNodes, localRanks: m.localRanks}
	for _, p := range m.order {
		desc := p.key
		if p.rank >= 0 {
			desc = fmt.Sprintf("rank %d/%d (%s)", p.rank, p.nranks, p.key)
		}
		switch {
		case p.completed:
			s.completed = append(s.completed, desc)
		case p.started:
			s.pending = append(s.pending, desc)
		}
	}
	s.transports = m.transportList()
	for i := 0; i < m.ringLen; i++ {
		s.last = append(s.last, string(m.ring[(m.ringNext-m.ringLen+i+ringSize)%ringSize]))
	}
	return s
}

// transportList is "NET/Socket/0 x8 (net)" per transport seen, most used
// first. Callers hold mu.
func (m *monitor) transportList() []string {
	names := append([]string(nil), m.names...)
	sort.SliceStable(names, func(i, j int) bool { return m.transports[names[i]].count > m.transports[names[j]].count })
	out := make([]string, 0, len(names))
	for _, n := range names {
		t := m.transports[n]
		out = append(out, fmt.Sprintf("%s x%d (%s)", n, t.count, orDash(string(t.class))))
	}
	return out
}

// transportCounts copies the per-transport channel counts.
func (m *monitor) transportCounts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.names) == 0 {
		return nil
	}
	out := make(map[string]int, len(m.names))
	for n, t := range m.transports {
		out[n] = t.count
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// deviceKinds lists the kinds of the rank's devices; nil when unknown.
func deviceKinds(devs []verdict.DeviceSummary) []string {
	if devs == nil {
		return nil
	}
	out := make([]string, 0, len(devs))
	for _, d := range devs {
		out = append(out, d.Kind)
	}
	return out
}
