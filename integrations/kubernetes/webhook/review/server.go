package review

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gateserver "github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
)

// Defaults of the bounds (Options).
const (
	// DefaultMaxBody: an AdmissionReview of an update carries the object
	// and the old object, each at most what the API server accepts in a
	// request (3 MiB), and a little more.
	DefaultMaxBody           = 2*(3<<20) + 512<<10
	DefaultMaxConns          = 256
	DefaultMaxDecodes        = 4
	DefaultDecodeWait        = time.Second
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultBodyTimeout       = 3 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	maxHeaderBytes           = 32 << 10
)

// Options configure a Server.
type Options struct {
	// Addr is host:port.
	Addr string
	// GetCertificate serves the TLS certificate (required).
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// ClientCAFile, if set, names a PEM file of CAs: a client must present
	// a certificate signed by one of them (the API server's, configured
	// with an AdmissionConfiguration kubeConfigFile), or its TLS handshake
	// fails. Read at start.
	ClientCAFile string
	// MaxConns bounds the connections open at once; further clients wait
	// in the listen backlog.
	MaxConns int
	// MaxBody bounds a request body; a larger one is answered 413.
	MaxBody int64
	// MaxDecodes bounds the reviews read, decoded and judged at once; a
	// review that finds no slot within DecodeWait is answered 503 with
	// Retry-After (the API server then applies the webhook's
	// failurePolicy).
	MaxDecodes int
	DecodeWait time.Duration
	// ReadHeaderTimeout bounds the TLS handshake and the request headers,
	// BodyTimeout the body once a slot is free, IdleTimeout a kept-alive
	// connection between requests.
	ReadHeaderTimeout time.Duration
	BodyTimeout       time.Duration
	IdleTimeout       time.Duration
	Log               logr.Logger
}

func (o *Options) defaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.MaxDecodes <= 0 {
		o.MaxDecodes = DefaultMaxDecodes
	}
	def(&o.DecodeWait, DefaultDecodeWait)
	def(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&o.BodyTimeout, DefaultBodyTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
}

// Server serves the admission webhooks on every replica within the bounds
// of Options. It is a controller-runtime webhook.Server (the manager's
// WebhookServer): Register adds a handler, the manager starts it.
type Server struct {
	opts    Options
	mux     *http.ServeMux
	decodes chan struct{}

	mu      sync.Mutex
	started bool
}

var _ webhook.Server = (*Server)(nil)

// NewServer returns a server; Start listens and serves.
func NewServer(o Options) *Server {
	o.defaults()
	return &Server{opts: o, mux: http.NewServeMux(), decodes: make(chan struct{}, o.MaxDecodes)}
}

// NeedLeaderElection: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// WebhookMux is the server's mux (handlers added there are not bounded:
// use Register).
func (s *Server) WebhookMux() *http.ServeMux { return s.mux }

// Register serves hook at path behind the bounds. hook reads the body;
// Handler wraps an admission.Handler.
func (s *Server) Register(path string, hook http.Handler) {
	s.mux.Handle(path, s.bounded(hook))
}

// RegisterAdmission serves an admission.Handler at path (Handler).
func (s *Server) RegisterAdmission(path string, h admission.Handler) {
	s.Register(path, Handler(h, s.opts.MaxBody, s.opts.Log.WithValues("path", path)))
}

// bounded: the size announced first, then a decode slot, and only then is
// the body read, within BodyTimeout.
func (s *Server) bounded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.opts.MaxBody {
			http.Error(w, fmt.Sprintf("a body of %d bytes exceeds the limit of %d bytes", r.ContentLength, s.opts.MaxBody), http.StatusRequestEntityTooLarge)
			return
		}
		// Reads on the connection end at this deadline, moved once the
		// review has a slot: a client that sends headers and then trickles
		// (or never sends) the body is cut, and so is the server's discard
		// of a body it answered without reading.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(s.opts.DecodeWait + s.opts.BodyTimeout))
		if !s.acquire(r.Context()) {
			w.Header().Set("Retry-After", strconv.Itoa(int((s.opts.DecodeWait+time.Second-1)/time.Second)))
			http.Error(w, fmt.Sprintf("%d reviews are being read; retry", cap(s.decodes)), http.StatusServiceUnavailable)
			return
		}
		defer func() { <-s.decodes }()
		_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBody)
		h.ServeHTTP(w, r)
	})
}

func (s *Server) acquire(ctx context.Context) bool {
	select {
	case s.decodes <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(s.opts.DecodeWait)
	defer t.Stop()
	select {
	case s.decodes <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// tlsConfig: the gate's protocol versions and suites; HTTP/1.1 only, so
// that MaxConns bounds the requests in flight too (HTTP/2 multiplexes
// many over one connection); with ClientCAFile, a client certificate
// signed by one of its CAs is required.
func (s *Server) tlsConfig() (*tls.Config, error) {
	if s.opts.GetCertificate == nil {
		return nil, errors.New("webhook server: no serving certificate")
	}
	cfg := gateserver.TLSConfig(s.opts.GetCertificate)
	cfg.NextProtos = []string{"http/1.1"}
	if s.opts.ClientCAFile != "" {
		pem, err := os.ReadFile(s.opts.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("webhook server: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("webhook server: client CA %s: no PEM certificate in it", s.opts.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	cfg, err := s.tlsConfig()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("webhook server: listen on %s: %w", s.opts.Addr, err)
	}
	srv := &http.Server{
		Handler:           s.mux,
		TLSConfig:         cfg,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// A stuck client must not hold a connection forever on the write
		// side either; the API server waits at most 30 seconds.
		WriteTimeout: s.opts.ReadHeaderTimeout + s.opts.DecodeWait + s.opts.BodyTimeout + 30*time.Second,
		ErrorLog:     log.New(logWriter{s.opts.Log}, "", 0),
		BaseContext:  func(net.Listener) context.Context { return ctx },
	}
	tln := tls.NewListener(netutil.LimitListener(ln, s.opts.MaxConns), cfg)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tln) }()
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	s.opts.Log.Info("webhooks serving", "addr", ln.Addr().String(), "clientCA", s.opts.ClientCAFile != "",
		"maxConnections", s.opts.MaxConns, "maxDecodes", s.opts.MaxDecodes, "maxBody", s.opts.MaxBody)
	select {
	case err := <-errc:
		return fmt.Errorf("webhook server: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	return nil
}

// StartedChecker is healthy once the server listens.
func (s *Server) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.started {
			return errors.New("webhook server not started yet")
		}
		return nil
	}
}

// logWriter: handshake failures and cut connections are what anyone who
// can reach the port may cause: debug level, not errors.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info("webhook connection", "error", strings.TrimSpace(string(p)))
	return len(p), nil
}
