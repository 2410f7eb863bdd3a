package controller

import (
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The controller's HTTP endpoints besides the gate (metrics, profiles)
// and small helpers.

func profilingHandlers(on bool) map[string]http.Handler {
	if !on {
		return nil
	}
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}

// metricsOptions: /metrics and the profiles behind TokenReview and
// SubjectAccessReview (metricsAuth) over HTTPS, unless only
// this host can reach them.
func metricsOptions(o Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsAddr, ExtraHandlers: profilingHandlers(o.Profiling)}
	if o.MetricsAddr == "0" || onLoopback(o.MetricsAddr) {
		return m
	}
	m.SecureServing = true
	now := clockOr(o.Clock).Now
	m.FilterProvider = func(cfg *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
		return metricsAuth(cfg, hc, now)
	}
	// Without tls.crt/tls.key there, a self-signed certificate.
	m.CertDir = o.CertDir
	return m
}

func onLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func ptrDuration(d time.Duration) *time.Duration { return &d }
