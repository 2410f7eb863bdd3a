// Package certs is the controller's own certificate authority: a CA and a
// serving certificate for the gate, the webhooks and /metrics, kept in a
// Secret in the controller's namespace, rotated before they expire, with
// the CA bundle injected into the controller's webhook configurations.
//
// Every replica runs a Rotator: it reads the Secret, creates or renews
// what is due (optimistic concurrency on the Secret: one replica's write
// wins, the others adopt it), serves the certificate from memory
// (GetCertificate) and writes tls.crt, tls.key and ca.crt to its
// certificate directory for the servers that read files.
//
// CA rotation never breaks a client holding the bundle: the next CA is
// published in the bundle (ca.crt) at least one Lookahead before it
// signs, and signs only once every copy of the bundle the controller
// keeps (the CA ConfigMaps of opted-in namespaces) is confirmed to hold
// it, or, failing that, half a Lookahead before the signer expires;
// the previous CA stays in the bundle until it expires.
package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Keys of the Secret.
const (
	KeyCACert     = "ca.crt" // the bundle clients trust: current, next and previous CA
	KeyCAKey      = "ca.key" // the signing CA's key (its certificate: caSigner)
	KeyCASigner   = "ca-signer.crt"
	KeyNextCACert = "next-ca.crt"
	KeyNextCAKey  = "next-ca.key"
	KeyCert       = "tls.crt"
	KeyKey        = "tls.key"
)

// Durations: how long a CA and a serving certificate are valid, and how
// long before the end each is renewed.
type Durations struct {
	CA, Cert, Lookahead time.Duration
}

// DefaultDurations: a CA for ten years, serving certificates for a year,
// renewed 90 days before they end.
var DefaultDurations = Durations{CA: 10 * 365 * 24 * time.Hour, Cert: 365 * 24 * time.Hour, Lookahead: 90 * 24 * time.Hour}

// keyPair is a certificate and its key.
type keyPair struct {
	cert    *x509.Certificate
	certPEM []byte
	keyPEM  []byte
}

// Bundle is what the Secret holds, parsed.
type Bundle struct {
	signer  *keyPair
	next    *keyPair
	serving *keyPair
	trusted [][]byte // PEM blocks of ca.crt
}

// CAPEM is the bundle clients must trust.
func (b *Bundle) CAPEM() []byte { return bytes.Join(b.trusted, nil) }

// Data renders the Secret's data.
func (b *Bundle) Data() map[string][]byte {
	d := map[string][]byte{
		KeyCACert: b.CAPEM(), KeyCASigner: b.signer.certPEM, KeyCAKey: b.signer.keyPEM,
		KeyCert: b.serving.certPEM, KeyKey: b.serving.keyPEM,
	}
	if b.next != nil {
		d[KeyNextCACert], d[KeyNextCAKey] = b.next.certPEM, b.next.keyPEM
	}
	return d
}

// TLSCertificate is the serving certificate for a tls.Config.
func (b *Bundle) TLSCertificate() (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(b.serving.certPEM, b.serving.keyPEM)
	return &c, err
}

// ServingSerial identifies the serving certificate (tests, logs).
func (b *Bundle) ServingSerial() string { return b.serving.cert.SerialNumber.String() }

// SignerSerial identifies the signing CA.
func (b *Bundle) SignerSerial() string { return b.signer.cert.SerialNumber.String() }

// Parse reads a Secret's data; a missing or damaged key is an error (the
// caller then renews).
func Parse(d map[string][]byte) (*Bundle, error) {
	signer, err := parsePair(d[KeyCASigner], d[KeyCAKey])
	if err != nil {
		return nil, fmt.Errorf("signing CA: %w", err)
	}
	serving, err := parsePair(d[KeyCert], d[KeyKey])
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	b := &Bundle{signer: signer, serving: serving}
	if len(d[KeyNextCACert]) > 0 {
		if b.next, err = parsePair(d[KeyNextCACert], d[KeyNextCAKey]); err != nil {
			return nil, fmt.Errorf("next CA: %w", err)
		}
	}
	rest := d[KeyCACert]
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		b.trusted = append(b.trusted, pem.EncodeToMemory(blk))
	}
	return b, nil
}

func parsePair(certPEM, keyPEM []byte) (*keyPair, error) {
	blk, _ := pem.Decode(certPEM)
	if blk == nil {
		return nil, errors.New("no PEM certificate")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, err
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, err
	}
	return &keyPair{cert: c, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// Renew returns the bundle as it must be at now (b may be nil: a new CA),
// and whether it differs from b. published is the fingerprint (CAHash)
// of the bundle every distributed copy was last confirmed to hold: the
// next CA starts signing once the signer is within one Lookahead of its
// end and published is b's own bundle, or, unconfirmed, within half a
// Lookahead (a serving certificate must never outlive its signer).
func Renew(b *Bundle, dns []string, d Durations, now time.Time, published string) (*Bundle, bool, error) {
	var err error
	if b == nil {
		ca, err := newCA(now, d.CA)
		if err != nil {
			return nil, false, err
		}
		b = &Bundle{signer: ca}
		if err := b.issue(dns, d, now); err != nil {
			return nil, false, err
		}
		b.trim(now)
		return b, true, nil
	}
	changed := false
	// One Lookahead before the signer's renewal: publish the next CA.
	if b.next == nil && now.After(b.signer.cert.NotAfter.Add(-2*d.Lookahead)) {
		if b.next, err = newCA(now, d.CA); err != nil {
			return nil, false, err
		}
		changed = true
	}
	if b.next != nil && now.After(b.signer.cert.NotAfter.Add(-d.Lookahead)) &&
		(published == CAHash(b.CAPEM()) || now.After(b.signer.cert.NotAfter.Add(-d.Lookahead/2))) {
		b.signer, b.next = b.next, nil
		b.serving = nil
		changed = true
	}
	// A serving certificate already reaching its signer's end is not
	// renewed again while the next CA waits to sign: a new one could not
	// last longer.
	due := b.serving != nil && now.After(b.serving.cert.NotAfter.Add(-d.Lookahead)) && b.serving.cert.NotAfter.Before(b.signer.cert.NotAfter)
	if b.serving == nil || due ||
		!slices.Equal(b.serving.cert.DNSNames, dns) || b.serving.cert.CheckSignatureFrom(b.signer.cert) != nil {
		if err := b.issue(dns, d, now); err != nil {
			return nil, false, err
		}
		changed = true
	}
	if b.trim(now) {
		changed = true
	}
	return b, changed, nil
}

// trim sets the trusted bundle to the signer, the next CA and every
// earlier CA not yet expired; it reports a change.
func (b *Bundle) trim(now time.Time) bool {
	want := [][]byte{b.signer.certPEM}
	if b.next != nil {
		want = append(want, b.next.certPEM)
	}
	for _, p := range b.trusted {
		blk, _ := pem.Decode(p)
		if blk == nil {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil || now.After(c.NotAfter) || slices.ContainsFunc(want, func(w []byte) bool { return bytes.Equal(w, p) }) {
			continue
		}
		want = append(want, p)
	}
	same := len(want) == len(b.trusted)
	for i := 0; same && i < len(want); i++ {
		same = bytes.Equal(want[i], b.trusted[i])
	}
	b.trusted = want
	return !same
}

func (b *Bundle) issue(dns []string, d Durations, now time.Time) error {
	end := now.Add(d.Cert)
	if end.After(b.signer.cert.NotAfter) {
		end = b.signer.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: first(dns, "rankgate")},
		DNSNames:    slices.Clone(dns),
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    end,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	kp, err := sign(tmpl, b.signer)
	if err != nil {
		return err
	}
	b.serving = kp
	return nil
}

func first(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

func newCA(now time.Time, valid time.Duration) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "rankgate-ca", Organization: []string{"rankgate"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(valid),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	return sign(tmpl, nil)
}

// sign creates a key and a certificate signed by parent (self-signed when
// nil).
func sign(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)); err != nil {
		return nil, err
	}
	parentCert, signKey := tmpl, any(key)
	if parent != nil {
		parentCert = parent.cert
		blk, _ := pem.Decode(parent.keyPEM)
		if blk == nil {
			return nil, errors.New("CA key is not PEM")
		}
		if signKey, err = x509.ParseECPrivateKey(blk.Bytes); err != nil {
			return nil, fmt.Errorf("CA key: %w", err)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, &key.PublicKey, signKey)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: c,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}, nil
}

// WriteFiles writes tls.crt, tls.key and ca.crt into dir when they differ,
// each by rename, so that a reader never sees half a file.
func (b *Bundle) WriteFiles(dir string) error {
	for name, data := range map[string][]byte{KeyCert: b.serving.certPEM, KeyKey: b.serving.keyPEM, KeyCACert: b.CAPEM()} {
		p := filepath.Join(dir, name)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
			continue
		}
		tmp, err := os.CreateTemp(dir, "."+name+"-*")
		if err != nil {
			return err
		}
		_, werr := tmp.Write(data)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o600), os.Rename(tmp.Name(), p)); err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
	}
	return nil
}
