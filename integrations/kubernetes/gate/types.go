// Package gate is the wire protocol between `rankgate init` (one per rank
// pod) and `rankgate controller`: an HTTPS JSON API where a rank reports its
// own preflight and long-polls for the job-wide (gang) verdict.
//
// Endpoints (all JSON, all authenticated by a projected service-account
// token with audience "rankgate" in `Authorization: Bearer`):
//
//	POST /v1/report?wait=30s   body ReportRequest  -> Response
//	GET  /v1/verdict?namespace=NS&pod=POD&wait=30s -> Response
//
// Both answer 200 with State "waiting" (ask again) or "decided" (Verdict
// set). A report is idempotent: a rank sends it again on every poll, which is
// what makes a controller restart lose nothing. Errors are ErrorBody with a
// stable Code; Retryable codes come with HTTP 503 and Retry-After.
//
// This package is the wire format and the client; the server and the
// token authentication are in gate/server (so that rankgate init links no
// Kubernetes API types). docs/gate-protocol.md documents the protocol for
// authors of other clients.
package gate

import (
	"fmt"
	"net/http"
	"time"

	"github.com/rankgate/rankgate/verdict"
)

// APIVersion names this version of the wire format. A server refuses
// requests of another version.
const APIVersion = "gate.rankgate.io/v1"

// Audience is the token audience the controller accepts by default.
const Audience = "rankgate"

// MaxBody bounds an answer body (what a client reads). The server keeps
// its answers far below it (see Response).
const MaxBody = 1 << 20

// Bounds of a report (POST /v1/report). A rank's report names at most the
// devices of one node (8 GPUs with 7 MIG instances each is 56) and a few
// findings per device or GPU pair; a server refuses a report beyond any of
// these with BadRequest, and stops reading the body at MaxReportBody bytes.
const (
	// MaxReportBody is the largest report body, in bytes.
	MaxReportBody = 256 << 10
	// MaxReportFindings bounds report.findings.
	MaxReportFindings = 512
	// MaxReportDevices bounds report.devices.
	MaxReportDevices = 256
	// MaxFindingItems bounds each list of a finding (devices, ranks,
	// nodes, pods).
	MaxFindingItems = 128
	// MaxTextLen bounds a finding's message and remediation, in bytes.
	MaxTextLen = 8 << 10
	// MaxNameLen bounds every other string (names, versions, device
	// fields), in bytes. Rule IDs have their own form (verdict.ValidRuleID).
	MaxNameLen = 512
	// MaxNetInterfaces bounds net.interfaces: a pod's own network
	// namespace has a few; a host-network pod sees every veth of the node.
	MaxNetInterfaces = 256
	// MaxNetHCAs bounds net.hcas (RDMA devices of one node).
	MaxNetHCAs = 64
	// MaxNetNameLen bounds an interface or RDMA device name, in bytes
	// (Linux allows 15 and 63).
	MaxNetNameLen = 64
)

// Paths of the API.
const (
	PathReport  = "/v1/report"
	PathVerdict = "/v1/verdict"
)

// ReportRequest is one rank's report: the pod it speaks for and its own
// preflight report. The controller takes the rank number, the job and the
// node from the pod object, not from here.
type ReportRequest struct {
	APIVersion string `json:"apiVersion"`
	Namespace  string `json:"namespace"`
	Pod        string `json:"pod"`
	// Node is the host name as the rank sees it; informational (the
	// controller uses the pod's spec.nodeName when it is set).
	Node              string         `json:"node,omitempty"`
	DriverVersion     string         `json:"driverVersion,omitempty"`
	CUDADriverVersion string         `json:"cudaDriverVersion,omitempty"`
	Report            verdict.Report `json:"report"`
	// Net is the rank's network as NCCL sees it. Optional: a report
	// without it (older clients, or a network that could not be read)
	// leaves the rank's network unknown, never empty.
	Net *RankNet `json:"net,omitempty"`
	// NCCLVersion is the rank's NCCL version ("2.27.3") when the client
	// knows it; optional.
	NCCLVersion string `json:"ncclVersion,omitempty"`
}

// RankNet is a rank's network as NCCL sees it: what NCCL_SOCKET_IFNAME
// and NCCL_IB_HCA select from.
type RankNet struct {
	// Interfaces are the IP interface names of the rank's network
	// namespace (eth0, net1, ib0, lo, ...).
	Interfaces []string `json:"interfaces"`
	// HCAs are the node's RDMA devices (/sys/class/infiniband: mlx5_0,
	// ...), names without ports.
	HCAs []string `json:"hcas,omitempty"`
	// HCAsKnown says HCAs is the whole list (empty: the node has none).
	// HCAs listed imply it.
	HCAsKnown bool `json:"hcasKnown,omitempty"`
}

// Check refuses a network beyond the MaxNet* bounds. A client checks it
// before sending: a report the server refuses fails the rank.
func (n *RankNet) Check() error {
	if n == nil {
		return nil
	}
	for _, l := range []struct {
		field string
		names []string
		limit int
	}{{"net.interfaces", n.Interfaces, MaxNetInterfaces}, {"net.hcas", n.HCAs, MaxNetHCAs}} {
		if len(l.names) > l.limit {
			return fmt.Errorf("%s: %d entries exceed the limit of %d", l.field, len(l.names), l.limit)
		}
		for i, v := range l.names {
			if v == "" || len(v) > MaxNetNameLen {
				return fmt.Errorf("%s[%d]: %d bytes: want 1 to %d", l.field, i, len(v), MaxNetNameLen)
			}
		}
	}
	return nil
}

// Validate checks the fields a server needs.
func (r *ReportRequest) Validate() error {
	switch {
	case r.APIVersion != APIVersion:
		return fmt.Errorf("apiVersion %q is not supported (want %q)", r.APIVersion, APIVersion)
	case r.Namespace == "" || r.Pod == "":
		return fmt.Errorf("namespace and pod are required")
	case r.Report.Verdict != verdict.VerdictPass && r.Report.Verdict != verdict.VerdictWarn && r.Report.Verdict != verdict.VerdictFail:
		return fmt.Errorf("report.verdict %q: want pass, warn or fail", r.Report.Verdict)
	}
	if err := r.checkBounds(); err != nil {
		return err
	}
	for i, f := range r.Report.Findings {
		if !verdict.ValidRuleID(f.Rule) {
			return fmt.Errorf("report.findings[%d].rule %q is not a rule ID (an upper-case letter, then at most 63 upper-case letters, digits or underscores)", i, f.Rule)
		}
	}
	return nil
}

// Clean strips from every string the rank supplied what could act on a
// terminal or reorder text (verdict.CleanText): the controller stores
// reports only after it, in the Gang, the job's annotations and its Events.
func (r *ReportRequest) Clean() {
	r.Node = verdict.CleanText(r.Node)
	r.DriverVersion = verdict.CleanText(r.DriverVersion)
	r.CUDADriverVersion = verdict.CleanText(r.CUDADriverVersion)
	r.NCCLVersion = verdict.CleanText(r.NCCLVersion)
	if r.Net != nil {
		for _, l := range [][]string{r.Net.Interfaces, r.Net.HCAs} {
			for i := range l {
				l[i] = verdict.CleanText(l[i])
			}
		}
	}
	r.Report.Clean()
}

// checkBounds refuses a report larger than a rank sends (the Max* bounds).
func (r *ReportRequest) checkBounds() error {
	var err error
	name := func(field, v string) {
		if err == nil && len(v) > MaxNameLen {
			err = fmt.Errorf("%s: %d bytes exceed the limit of %d", field, len(v), MaxNameLen)
		}
	}
	text := func(field, v string) {
		if err == nil && len(v) > MaxTextLen {
			err = fmt.Errorf("%s: %d bytes exceed the limit of %d", field, len(v), MaxTextLen)
		}
	}
	count := func(field string, n, limit int) {
		if err == nil && n > limit {
			err = fmt.Errorf("%s: %d entries exceed the limit of %d", field, n, limit)
		}
	}
	name("namespace", r.Namespace)
	name("pod", r.Pod)
	name("node", r.Node)
	name("driverVersion", r.DriverVersion)
	name("cudaDriverVersion", r.CUDADriverVersion)
	name("ncclVersion", r.NCCLVersion)
	if err == nil {
		err = r.Net.Check()
	}
	name("report.subject", r.Report.Subject)
	count("report.findings", len(r.Report.Findings), MaxReportFindings)
	count("report.devices", len(r.Report.Devices), MaxReportDevices)
	for i := range r.Report.Findings {
		f := &r.Report.Findings[i]
		at := fmt.Sprintf("report.findings[%d]", i)
		name(at+".rule", f.Rule)
		name(at+".severity", string(f.Severity))
		text(at+".message", f.Message)
		text(at+".remediation", f.Remediation)
		count(at+".devices", len(f.Devices), MaxFindingItems)
		count(at+".ranks", len(f.Ranks), MaxFindingItems)
		count(at+".nodes", len(f.Nodes), MaxFindingItems)
		count(at+".pods", len(f.Pods), MaxFindingItems)
		for _, l := range [][]string{f.Devices, f.Nodes, f.Pods} {
			for _, v := range l {
				name(at+" list entry", v)
			}
		}
		if err != nil {
			return err
		}
	}
	for i := range r.Report.Devices {
		d := &r.Report.Devices[i]
		at := fmt.Sprintf("report.devices[%d]", i)
		name(at+".id", d.ID)
		name(at+".kind", d.Kind)
		name(at+".gpuUuid", d.GPUUUID)
		name(at+".profile", d.Profile)
		name(at+".fabricCluster", d.FabricCluster)
	}
	return err
}

// State of a rank's job as the gate sees it.
type State string

// States.
const (
	// StateWaiting: the gang is not decided yet; report or poll again.
	StateWaiting State = "waiting"
	// StateDecided: Verdict holds the job-wide verdict.
	StateDecided State = "decided"
)

// Response answers both endpoints.
type Response struct {
	APIVersion string `json:"apiVersion"`
	State      State  `json:"state"`
	// Job is "<namespace>/<kind>/<name>".
	Job  string `json:"job"`
	Rank int    `json:"rank"`
	// Expected ranks (from the job spec) and how many have reported.
	Expected int `json:"expected"`
	Reported int `json:"reported"`
	// Deadline is when the gang fails if ranks are still missing; zero when
	// the first report is not recorded yet.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Verdict is the gang report, set when State is decided.
	Verdict   *verdict.Report `json:"verdict,omitempty"`
	DecidedAt *time.Time      `json:"decidedAt,omitempty"`
	// Action is what the controller did to the job on a fail verdict:
	// suspend, delete or annotate.
	Action string `json:"action,omitempty"`
	// OmittedFindings counts the verdict's findings left out of this
	// answer to keep it under MaxAnswer bytes (the job's Event and
	// annotation keep the reason).
	OmittedFindings int `json:"omittedFindings,omitempty"`
}

// MaxAnswer bounds the answers a server sends, well under MaxBody.
const MaxAnswer = MaxBody / 2

// Error codes (ErrorBody.Code): a stable vocabulary for clients.
const (
	CodeBadRequest      = "BadRequest"      // 400: malformed request; do not retry
	CodeUnauthenticated = "Unauthenticated" // 401: no or invalid token
	CodeForbidden       = "Forbidden"       // 403: the token is not the reporting pod's
	CodeNotARank        = "NotARank"        // 422: the pod is not a rank of a gated job
	CodeNotOptedIn      = "NotOptedIn"      // 422: the job is not opted in to the gate
	CodeNotLeader       = "NotLeader"       // 503: this replica does not hold the gangs; retry
	CodeUnavailable     = "Unavailable"     // 503: starting, or the API server failed; retry
	CodeTooManyRequests = "TooManyRequests" // 429: over a per-pod or per-address limit; retry after Retry-After
)

// Error is an API error, both as the server returns it and as the client
// reads it.
type Error struct {
	// HTTPStatus is not serialised; the status line carries it.
	HTTPStatus int    `json:"-"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	// RetryAfter is a hint for retryable errors.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string { return fmt.Sprintf("gate: %s: %s", e.Code, e.Message) }

// ExitCode is what a rank exits with when the gate refuses it for good: 2
// when the request or the pod is wrong (BadRequest, NotARank, NotOptedIn),
// else 3.
func (e *Error) ExitCode() int {
	switch e.Code {
	case CodeBadRequest, CodeNotARank, CodeNotOptedIn:
		return verdict.ExitUsage
	}
	return verdict.ExitEnvironment
}

// Retryable reports whether asking again may succeed.
func (e *Error) Retryable() bool {
	return e.HTTPStatus == http.StatusServiceUnavailable || e.HTTPStatus == http.StatusTooManyRequests ||
		e.HTTPStatus >= 500 || e.Code == CodeNotLeader || e.Code == CodeUnavailable
}

// Errorf builds an *Error with the HTTP status of its code.
func Errorf(code string, format string, args ...any) *Error {
	return &Error{HTTPStatus: statusOf(code), Code: code, Message: fmt.Sprintf(format, args...)}
}

func statusOf(code string) int {
	switch code {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotARank, CodeNotOptedIn:
		return http.StatusUnprocessableEntity
	case CodeTooManyRequests:
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable
}

// ErrorBody is the JSON body of every non-200 answer.
type ErrorBody struct {
	APIVersion string `json:"apiVersion"`
	Code       string `json:"code"`
	Message    string `json:"message"`
}
