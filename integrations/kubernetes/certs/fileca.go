package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/rankgate/rankgate/internal/fileinput"
)

// maxCAFile bounds the CA bundle file: a few certificates.
const maxCAFile = 1 << 20

// FileCA is a CASource read from a PEM file another issuer keeps current
// (cert-manager writes ca.crt next to tls.crt in the Secret mounted as the
// certificate directory), re-read every Interval.
type FileCA struct {
	Path     string
	Interval time.Duration // default 1m
	Log      logr.Logger

	pem     atomic.Pointer[[]byte]
	changed chan struct{}
}

// NewFileCA reads path once: a missing or unusable file is an error here,
// so that a misconfigured install fails at start, not at a rank.
func NewFileCA(ctx context.Context, path string, interval time.Duration, log logr.Logger) (*FileCA, error) {
	f := &FileCA{Path: path, Interval: interval, Log: log, changed: make(chan struct{}, 1)}
	if err := f.read(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// CABundle implements CASource.
func (f *FileCA) CABundle() []byte {
	if p := f.pem.Load(); p != nil {
		return *p
	}
	return nil
}

// Changed implements CASource.
func (f *FileCA) Changed() <-chan struct{} { return f.changed }

// NeedLeaderElection: every replica serves the mutating webhook, which
// writes the ConfigMap of a new job's namespace.
func (f *FileCA) NeedLeaderElection() bool { return false }

// Start re-reads the file every Interval until ctx ends; an unreadable
// file keeps the last good bundle (and is logged).
func (f *FileCA) Start(ctx context.Context) error {
	iv := f.Interval
	if iv <= 0 {
		iv = time.Minute
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := f.read(ctx); err != nil && ctx.Err() == nil {
				f.Log.Error(err, "certificates: keeping the last CA bundle read")
			}
		}
	}
}

func (f *FileCA) read(ctx context.Context) error {
	b, err := fileinput.ReadFile(ctx, f.Path, nil, maxCAFile)
	if err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("CA bundle %s: no PEM certificate in it", f.Path)
	}
	if old := f.pem.Load(); old != nil && bytes.Equal(*old, b) {
		return nil
	}
	f.pem.Store(&b)
	select {
	case f.changed <- struct{}{}:
	default:
	}
	return nil
}
