package gatetest

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"time"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// Request is one request to a scripted Gate.
type Request struct {
	// Method is GET (verdict poll) or POST (report).
	Method         string
	Namespace, Pod string
	// Wait is the long poll the client asked for.
	Wait time.Duration
	// Report is the body of a report.
	Report *gate.ReportRequest
	// At is when the request arrived.
	At time.Time
}

// Answer scripts a Gate: the answer to r now, or an error body. A
// "waiting" answer is asked again every 20ms while the request's wait
// lasts, as a real gate holds a long poll until the verdict.
type Answer func(r Request, now time.Time) (*gate.Response, *gate.ErrorBody)

// Gate is a scripted gate over TLS (a certificate of WriteCerts), for
// tests of the rank side: rankgate init and rankgate launch --gang.
type Gate struct {
	URL string
	srv *httptest.Server

	mu       sync.Mutex
	requests []Request
}

// StartGate serves answer at a local HTTPS address with the certificate
// in certs.Dir. Requests without "Authorization: Bearer <token>" are
// refused (token "" accepts any).
func StartGate(certs *Certs, token string, answer Answer) (*Gate, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(certs.Dir, "tls.crt"), filepath.Join(certs.Dir, "tls.key"))
	if err != nil {
		return nil, err
	}
	g := &Gate{}
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.serve(w, r, token, answer)
	}))
	g.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	g.srv.StartTLS()
	g.URL = g.srv.URL
	return g, nil
}

// Close stops the server.
func (g *Gate) Close() { g.srv.Close() }

// Requests returns the requests answered so far.
func (g *Gate) Requests() []Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Request(nil), g.requests...)
}

func (g *Gate) serve(w http.ResponseWriter, r *http.Request, token string, answer Answer) {
	q := r.URL.Query()
	req := Request{Method: r.Method, Namespace: q.Get("namespace"), Pod: q.Get("pod"), At: time.Now()}
	if v := q.Get("wait"); v != "" {
		req.Wait, _ = time.ParseDuration(v)
	}
	var eb *gate.ErrorBody
	switch {
	case token != "" && r.Header.Get("Authorization") != "Bearer "+token:
		eb = &gate.ErrorBody{Code: gate.CodeUnauthenticated, Message: "wrong token"}
	case r.Method == http.MethodPost && r.URL.Path == gate.PathReport:
		var rr gate.ReportRequest
		body, err := io.ReadAll(io.LimitReader(r.Body, gate.MaxReportBody))
		if err == nil {
			err = json.Unmarshal(body, &rr)
		}
		if err == nil {
			err = rr.Validate()
		}
		if err != nil {
			eb = &gate.ErrorBody{Code: gate.CodeBadRequest, Message: err.Error()}
		}
		req.Report, req.Namespace, req.Pod = &rr, rr.Namespace, rr.Pod
	case r.Method == http.MethodGet && r.URL.Path == gate.PathVerdict:
	default:
		eb = &gate.ErrorBody{Code: gate.CodeBadRequest, Message: "unexpected " + r.Method + " " + r.URL.Path}
	}
	g.mu.Lock()
	g.requests = append(g.requests, req)
	g.mu.Unlock()
	var resp *gate.Response
	if eb == nil {
		resp, eb = g.hold(r, req, answer)
	}
	w.Header().Set("Content-Type", "application/json")
	if eb != nil {
		eb.APIVersion = gate.APIVersion
		w.WriteHeader(gate.Errorf(eb.Code, "%s", eb.Message).HTTPStatus)
		_ = json.NewEncoder(w).Encode(eb)
		return
	}
	resp.APIVersion = gate.APIVersion
	_ = json.NewEncoder(w).Encode(resp)
}

// hold asks answer until it decides, the request's wait ends or the
// client goes away.
func (g *Gate) hold(r *http.Request, req Request, answer Answer) (*gate.Response, *gate.ErrorBody) {
	end := req.At.Add(req.Wait)
	for {
		now := time.Now()
		resp, eb := answer(req, now)
		if eb != nil || resp == nil || resp.State == gate.StateDecided || !now.Before(end) {
			if resp == nil && eb == nil {
				eb = &gate.ErrorBody{Code: gate.CodeUnavailable, Message: "no answer scripted"}
			}
			return resp, eb
		}
		select {
		case <-r.Context().Done():
			return nil, &gate.ErrorBody{Code: gate.CodeUnavailable, Message: "the client went away"}
		case <-time.After(min(20*time.Millisecond, end.Sub(now))):
		}
	}
}
