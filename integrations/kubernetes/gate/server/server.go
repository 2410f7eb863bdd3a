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
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// Backend decides. The controller implements it; tests use fakes. Errors
// that are not *Error become 503 Unavailable.
type Backend interface {
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
	Log     logr.Logger
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
}

// New builds a server; Start listens and serves.
func New(opts Options) *Server {
	if opts.MaxWait <= 0 {
		opts.MaxWait = 30 * time.Second
	}
	return &Server{opts: opts, serving: make(chan struct{})}
}

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
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	ln := s.ln
	if s.opts.GetCertificate != nil {
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.opts.GetCertificate, NextProtos: []string{"h2", "http/1.1"}}
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

// Handler is the HTTP handler, for tests and embedding.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+gate.PathReport, s.endpoint("report", s.report))
	mux.HandleFunc("GET "+gate.PathVerdict, s.endpoint("verdict", s.verdict))
	return mux
}

// endpoint wraps a gate call: the wait parameter and the caller's identity
// are checked first, and every answer is timed the same way.
func (s *Server) endpoint(name string, call func(*http.Request, Identity, time.Duration) (*gate.Response, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		resp, err := s.authorized(r, call)
		s.answer(w, name, start, resp, err)
	}
}

func (s *Server) authorized(r *http.Request, call func(*http.Request, Identity, time.Duration) (*gate.Response, error)) (*gate.Response, error) {
	wait, err := s.wait(r)
	if err != nil {
		return nil, err
	}
	id, err := s.authenticate(r)
	if err != nil {
		return nil, err
	}
	return call(r, id, wait)
}

func (s *Server) report(r *http.Request, id Identity, wait time.Duration) (*gate.Response, error) {
	var req gate.ReportRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, gate.MaxBody))
	if err := dec.Decode(&req); err != nil {
		return nil, gate.Errorf(gate.CodeBadRequest, "decoding report: %v", err)
	}
	if err := req.Validate(); err != nil {
		return nil, gate.Errorf(gate.CodeBadRequest, "%v", err)
	}
	if err := CheckPod(id, req.Namespace, req.Pod); err != nil {
		return nil, err
	}
	return s.opts.Backend.Report(r.Context(), id, &req, wait)
}

func (s *Server) verdict(r *http.Request, id Identity, wait time.Duration) (*gate.Response, error) {
	q := r.URL.Query()
	if err := CheckPod(id, q.Get("namespace"), q.Get("pod")); err != nil {
		return nil, err
	}
	return s.opts.Backend.Verdict(r.Context(), id, wait)
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
	return s.opts.Auth.Authenticate(r.Context(), strings.TrimSpace(token))
}

func (s *Server) answer(w http.ResponseWriter, endpoint string, start time.Time, resp *gate.Response, err error) {
	w.Header().Set("Content-Type", "application/json")
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
		_ = json.NewEncoder(w).Encode(resp)
	}
	if s.opts.Observe != nil {
		s.opts.Observe(endpoint, code, time.Since(start))
	}
}
