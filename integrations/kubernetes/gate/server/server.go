// Package server is the controller side of the gate API (package gate):
// the HTTPS server, and authentication of ranks by their pod-bound
// service-account tokens with TokenReview. It is kept apart from package
// gate so that rankgate init, which only needs the client, links no
// Kubernetes API types.
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// Backend decides. The controller implements it; tests use fakes. Errors
// that are not *Error become 503 Unavailable.
//
// A Response's Verdict must not change once the Backend has returned it:
// the server encodes each verdict once and answers every rank whose
// Response points to it (and matches it but for Rank) with those bytes.
// Share one *verdict.Report among a gang's answers; copy it to change it.
type Backend interface {
	// Admit says whether id may send a report: its pod exists with id's
	// UID and is a rank of an opted-in job, and this replica decides (else
	// NotLeader). The server asks before it reads a report's body, so
	// that only ranks can make it decode one. The context it returns
	// (ctx, or one carrying what it resolved) is the one Report gets, so
	// that the sender is not resolved twice.
	Admit(ctx context.Context, id Identity) (context.Context, error)
	// Report records (or re-records) the rank's report, then waits up to
	// wait for the verdict. id is authenticated and speaks for req's pod.
	Report(ctx context.Context, id Identity, req *gate.ReportRequest, wait time.Duration) (*gate.Response, error)
	// Verdict waits up to wait for the verdict of id's job without
	// reporting.
	Verdict(ctx context.Context, id Identity, wait time.Duration) (*gate.Response, error)
}

// Options configure a Server.
type Options struct {
	// Addr to listen on (host:port) unless Listener is set.
	Addr     string
	Listener net.Listener
	// GetCertificate serves the TLS certificate (certwatcher's, so that
	// rotated certificates are picked up). Nil serves plain HTTP: tests only.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	Auth           Authenticator
	Backend        Backend
	// MaxWait caps a long poll (default 30s).
	MaxWait time.Duration
	// MaxConns bounds the connections open at once (default
	// DefaultMaxConns); further clients wait in the listen backlog.
	MaxConns int
	// MaxDecodes bounds the report bodies read and decoded at once
	// (default DefaultMaxDecodes); a report that finds no slot within
	// DecodeWait (default 2s) is answered Unavailable with Retry-After.
	MaxDecodes int
	DecodeWait time.Duration
	// BodyTimeout bounds the time to read a request body (default
	// DefaultBodyTimeout). Headers are bounded by ReadHeaderTimeout (10s).
	BodyTimeout time.Duration
	// MaxPollsPerPod bounds a pod's requests in progress at once (default
	// DefaultMaxPollsPerPod); more are answered TooManyRequests.
	MaxPollsPerPod int
	Log            logr.Logger
	// Observe, if set, is called once per request (for metrics).
	Observe func(endpoint, code string, d time.Duration)
}

// Server is the gate's HTTPS server. It runs on every controller replica:
// the Backend answers NotLeader on replicas that do not hold the gangs.
type Server struct {
	opts Options

	mu      sync.Mutex
	ln      net.Listener
	serving chan struct{}

	decodes chan struct{} // a slot per report being read and decoded
	polls   *perPod       // requests in progress per pod
	decoded atomic.Int64  // report bodies read

	answers answers  // decided answers, encoded once per verdict
	date    httpDate // the Date header of this second
}

// Defaults of the bounds (Options).
const (
	DefaultMaxConns       = 2048
	DefaultMaxDecodes     = 8
	DefaultBodyTimeout    = 5 * time.Second
	DefaultMaxPollsPerPod = 4
	// maxHeaderBytes bounds a request's headers: a projected token is
	// about 1 KiB.
	maxHeaderBytes = 32 << 10
)

// New builds a server; Start listens and serves.
func New(opts Options) *Server {
	if opts.MaxWait <= 0 {
		opts.MaxWait = 30 * time.Second
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxDecodes <= 0 {
		opts.MaxDecodes = DefaultMaxDecodes
	}
	if opts.DecodeWait <= 0 {
		opts.DecodeWait = 2 * time.Second
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.MaxPollsPerPod <= 0 {
		opts.MaxPollsPerPod = DefaultMaxPollsPerPod
	}
	return &Server{opts: opts, serving: make(chan struct{}), decodes: make(chan struct{}, opts.MaxDecodes), polls: newPerPod(opts.MaxPollsPerPod)}
}

// ReportsRead is how many report bodies the server has read and decoded
// (a sender that is not admitted must not move it).
func (s *Server) ReportsRead() int64 { return s.decoded.Load() }

// NeedLeaderElection: the gate answers on every replica (controller-runtime
// manager.LeaderElectionRunnable).
func (s *Server) NeedLeaderElection() bool { return false }

// Addr is the address the server listens on, once it does (nil before).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Serving is closed once the listener is open.
func (s *Server) Serving() <-chan struct{} { return s.serving }

// Listen opens the listener now (Start does it if not done), so callers can
// learn the port before serving.
func (s *Server) Listen() (net.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr(), nil
	}
	ln := s.opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.opts.Addr); err != nil {
			return nil, fmt.Errorf("gate: listen on %s: %w", s.opts.Addr, err)
		}
	}
	s.ln = ln
	return ln.Addr(), nil
}

// Start serves until ctx ends (controller-runtime manager.Runnable).
func (s *Server) Start(ctx context.Context) error {
	if _, err := s.Listen(); err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		// Handshake failures and cut connections are what anyone who can
		// reach the port may cause: debug level, not errors.
		ErrorLog:    log.New(logWriter{s.opts.Log}, "", 0),
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	ln := netutil.LimitListener(s.ln, s.opts.MaxConns)
	if s.opts.GetCertificate != nil {
		srv.TLSConfig = TLSConfig(s.opts.GetCertificate)
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	close(s.serving)
	s.opts.Log.Info("gate serving", "addr", s.ln.Addr().String(), "tls", s.opts.GetCertificate != nil)
	select {
	case err := <-errc:
		return fmt.Errorf("gate: %w", err)
	case <-ctx.Done():
	}
	// Long polls end with ctx (BaseContext); give them a moment to answer.
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	return nil
}

// TLSConfig is the gate's TLS configuration: TLS 1.2 or later, and with
// TLS 1.2 only forward-secret AEAD suites (ECDHE with AES-GCM or
// ChaCha20-Poly1305; TLS 1.3 suites are all AEAD).
func TLSConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: getCert,
		NextProtos:     []string{"h2", "http/1.1"},
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
	}
}

// Handler is the HTTP handler, for tests and embedding.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+gate.PathReport, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// Until the body is read, reads on the connection end at this
		// deadline: a client that sends headers and then trickles (or
		// never sends) the body is cut, and so is the server's discard of
		// a body it refused without reading.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(start.Add(s.opts.BodyTimeout))
		resp, err := s.report(r, rc)
		s.answer(w, "report", start, resp, err)
	})
	mux.HandleFunc("GET "+gate.PathVerdict, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		resp, err := s.verdict(r)
		s.answer(w, "verdict", start, resp, err)
	})
	return mux
}

// report: the cheap checks first (size, token, the pod's own limit), then
// the backend says whether the sender is a rank it decides for, and only
// then is the body read and decoded, one of MaxDecodes at a time.
func (s *Server) report(r *http.Request, rc *http.ResponseController) (*gate.Response, error) {
	if r.ContentLength > gate.MaxReportBody {
		return nil, gate.Errorf(gate.CodeBadRequest, "report body of %d bytes exceeds the limit of %d bytes", r.ContentLength, gate.MaxReportBody)
	}
	wait, err := s.wait(r)
	if err != nil {
		return nil, err
	}
	id, err := s.authenticate(r)
	if err != nil {
		return nil, err
	}
	release, err := s.polls.acquire(id)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, err := s.opts.Backend.Admit(r.Context(), id)
	if err != nil {
		return nil, err
	}
	req, err := s.readReport(r, rc)
	if err != nil {
		return nil, err
	}
	if err := CheckPod(id, req.Namespace, req.Pod); err != nil {
		return nil, err
	}
	return s.opts.Backend.Report(ctx, id, req, wait)
}

// readReport reads and decodes the body of an admitted report.
func (s *Server) readReport(r *http.Request, rc *http.ResponseController) (*gate.ReportRequest, error) {
	select {
	case s.decodes <- struct{}{}:
	default:
		t := time.NewTimer(s.opts.DecodeWait)
		defer t.Stop()
		select {
		case s.decodes <- struct{}{}:
		case <-t.C:
			return nil, &gate.Error{HTTPStatus: http.StatusServiceUnavailable, Code: gate.CodeUnavailable, RetryAfter: time.Second,
				Message: fmt.Sprintf("%d reports are being read; retry", cap(s.decodes))}
		case <-r.Context().Done():
			return nil, gate.Errorf(gate.CodeUnavailable, "waiting to read the report: %v", r.Context().Err())
		}
	}
	defer func() { <-s.decodes }()
	s.decoded.Add(1)
	_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	data, err := io.ReadAll(io.LimitReader(r.Body, gate.MaxReportBody+1))
	if err == nil {
		// Read to the end: the server now notices a client that goes away
		// during the long poll, and no deadline may cut that poll. After a
		// failed read the deadline stays, so that the server's discard of
		// the rest of the body ends too.
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, gate.Errorf(gate.CodeBadRequest, "the report body did not arrive within %s", s.opts.BodyTimeout)
		}
		return nil, gate.Errorf(gate.CodeBadRequest, "reading the report body: %v", err)
	}
	return DecodeReport(data)
}

// DecodeReport decodes and validates a report body. Its shape (nesting,
// list lengths, string lengths) is checked on the token stream before
// anything is allocated for it, so that the decoded report is never much
// larger than the bounds in package gate allow. A report with a malformed
// rule ID is refused; every other string is cleaned of control and bidi
// characters before anyone stores or shows it.
func DecodeReport(data []byte) (*gate.ReportRequest, error) {
	if len(data) > gate.MaxReportBody {
		return nil, gate.Errorf(gate.CodeBadRequest, "report body exceeds the limit of %d bytes", gate.MaxReportBody)
	}
	if err := checkShape(data); err != nil {
		return nil, gate.Errorf(gate.CodeBadRequest, "decoding report: %v", err)
	}
	var req gate.ReportRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, gate.Errorf(gate.CodeBadRequest, "decoding report: %v", err)
	}
	if err := req.Validate(); err != nil {
		return nil, gate.Errorf(gate.CodeBadRequest, "%v", err)
	}
	req.Clean()
	return &req, nil
}

// Shape bounds of any JSON a report may hold: a report nests five deep
// (request, report, findings, finding, list), the lists of the report
// object hold findings or devices and all other lists at most
// MaxFindingItems, objects a few more keys than the types have.
const (
	maxDepth = 6
	maxKeys  = 32
)

// checkShape scans the raw bytes (it allocates nothing); json.Unmarshal
// checks the syntax after it.
func checkShape(data []byte) error {
	type frame struct {
		array  bool
		commas int
		limit  int // entries of a list
	}
	var stack [maxDepth]frame
	depth := 0
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			j := i + 1
			for ; j < len(data) && data[j] != '"'; j++ {
				if data[j] == '\\' {
					j++
				}
			}
			if n := j - i - 1; n > gate.MaxTextLen {
				return fmt.Errorf("a string of %d bytes exceeds the limit of %d", n, gate.MaxTextLen)
			}
			i = j
		case '{', '[':
			if depth == maxDepth {
				return fmt.Errorf("nested deeper than %d", maxDepth)
			}
			limit := gate.MaxFindingItems
			if depth == 2 {
				// A list of the report object: findings or devices.
				limit = max(gate.MaxReportFindings, gate.MaxReportDevices)
			}
			stack[depth] = frame{array: c == '[', limit: limit}
			depth++
		case '}', ']':
			if depth == 0 {
				return errors.New("unbalanced brackets")
			}
			depth--
		case ',':
			if depth == 0 {
				return errors.New("more than one JSON value")
			}
			f := &stack[depth-1]
			f.commas++
			if f.array && f.commas >= f.limit {
				return fmt.Errorf("a list has more than %d entries", f.limit)
			}
			if !f.array && f.commas >= maxKeys {
				return fmt.Errorf("an object has more than %d keys", maxKeys)
			}
		}
	}
	return nil
}

func (s *Server) verdict(r *http.Request) (*gate.Response, error) {
	wait, err := s.wait(r)
	if err != nil {
		return nil, err
	}
	id, err := s.authenticate(r)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	if err := CheckPod(id, q.Get("namespace"), q.Get("pod")); err != nil {
		return nil, err
	}
	release, err := s.polls.acquire(id)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.opts.Backend.Verdict(r.Context(), id, wait)
}

// fitAnswer encodes resp in at most limit bytes: a verdict too large to
// send (a gang of thousands of failed ranks) is sent with its lists cut to
// MaxListedRanks entries, its texts to MaxTextLen, and then only its first
// findings (the heaviest, as a report orders them).
func fitAnswer(resp *gate.Response, limit int) []byte {
	b, err := json.Marshal(resp)
	if err == nil && (len(b) < limit || resp.Verdict == nil) {
		return append(b, '\n')
	}
	v := *resp.Verdict
	v.Findings = make([]verdict.Finding, len(resp.Verdict.Findings))
	v.Devices = nil
	cut := func(xs []string) []string { return xs[:min(len(xs), preflight.MaxListedRanks)] }
	text := func(s string) string {
		if len(s) > gate.MaxTextLen {
			return strings.ToValidUTF8(s[:gate.MaxTextLen], "") + "..."
		}
		return s
	}
	for i, f := range resp.Verdict.Findings {
		f.Ranks = f.Ranks[:min(len(f.Ranks), preflight.MaxListedRanks)]
		f.Devices, f.Nodes, f.Pods = cut(f.Devices), cut(f.Nodes), cut(f.Pods)
		f.Message, f.Remediation = text(f.Message), text(f.Remediation)
		v.Findings[i] = f
	}
	out := *resp
	out.Verdict = &v
	// Room for the answer without findings, then findings while they fit.
	all := v.Findings
	v.Findings = []verdict.Finding{}
	out.OmittedFindings = len(all)
	empty, _ := json.Marshal(&out)
	room := limit - len(empty) - 64
	n := 0
	for _, f := range all {
		fb, _ := json.Marshal(f)
		if room -= len(fb) + 1; room < 0 {
			break
		}
		n++
	}
	v.Findings = all[:n]
	out.OmittedFindings = len(all) - n
	b, _ = json.Marshal(&out)
	return append(b, '\n')
}

type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info("gate connection", "error", strings.TrimSpace(string(p)))
	return len(p), nil
}

// perPod counts each pod's requests in progress.
type perPod struct {
	limit int
	mu    sync.Mutex
	n     map[string]int
}

func newPerPod(limit int) *perPod { return &perPod{limit: limit, n: map[string]int{}} }

func (p *perPod) acquire(id Identity) (func(), error) {
	key := id.PodUID
	if key == "" {
		key = id.Namespace + "/" + id.Pod
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[key] >= p.limit {
		return nil, &gate.Error{HTTPStatus: http.StatusTooManyRequests, Code: gate.CodeTooManyRequests, RetryAfter: time.Second,
			Message: fmt.Sprintf("pod %s/%s has %d requests in progress, the most a pod may have", id.Namespace, id.Pod, p.limit)}
	}
	p.n[key]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.n[key]--; p.n[key] <= 0 {
			delete(p.n, key)
		}
	}, nil
}

func (s *Server) wait(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, gate.Errorf(gate.CodeBadRequest, "wait=%q is not a duration like 30s", v)
	}
	return min(d, s.opts.MaxWait), nil
}

func (s *Server) authenticate(r *http.Request) (Identity, error) {
	h := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		token = ""
	}
	return s.opts.Auth.Authenticate(r.Context(), strings.TrimSpace(token), r.RemoteAddr)
}

func (s *Server) answer(w http.ResponseWriter, endpoint string, start time.Time, resp *gate.Response, err error) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Date"] = s.date.header(time.Now())
	code := "OK"
	if err != nil {
		var ge *gate.Error
		if !errors.As(err, &ge) {
			ge = gate.Errorf(gate.CodeUnavailable, "%v", err)
		}
		code = ge.Code
		if ge.Code == gate.CodeNotLeader {
			// A Service spreads connections, not requests, over the
			// replicas: close this one so that the client's retry dials
			// again and may reach the leader (HTTP/2: GOAWAY).
			w.Header().Set("Connection", "close")
		}
		if ge.Retryable() {
			ra := ge.RetryAfter
			if ra <= 0 {
				ra = time.Second
			}
			w.Header().Set("Retry-After", strconv.Itoa(int((ra+time.Second-1)/time.Second)))
		}
		status := ge.HTTPStatus
		if status == 0 {
			status = gate.Errorf(ge.Code, "").HTTPStatus
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(gate.ErrorBody{APIVersion: gate.APIVersion, Code: ge.Code, Message: ge.Message})
		if status >= 500 {
			s.opts.Log.V(1).Info("gate request failed", "endpoint", endpoint, "code", ge.Code, "message", ge.Message)
		} else {
			s.opts.Log.Info("gate request refused", "endpoint", endpoint, "code", ge.Code, "message", ge.Message)
		}
	} else {
		resp.APIVersion = gate.APIVersion
		if sa, ok := s.answers.shared(resp); ok {
			sa.write(w, resp.Rank)
		} else {
			_, _ = w.Write(fitAnswer(resp, gate.MaxAnswer))
		}
	}
	if s.opts.Observe != nil {
		s.opts.Observe(endpoint, code, time.Since(start))
	}
}
