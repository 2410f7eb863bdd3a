package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
)

// CAConfigMap names the CA ConfigMaps: what rank pods mount
// (webhook.CAConfigMapName, key ca.crt).
const CAConfigMap = "rankgate-ca"

// Rotator keeps the Secret, the files, the webhooks' CA bundle and the
// CA ConfigMaps of opted-in namespaces.
type Rotator struct {
	// Client reads and writes without a cache (the Secret, two webhook
	// configurations, ConfigMaps: a cluster-wide Secret informer would be
	// neither needed nor allowed).
	Client     client.Client
	Namespace  string // the controller's
	SecretName string // default "rankgate-tls"
	// CertDir receives tls.crt, tls.key and ca.crt (optional).
	CertDir  string
	DNSNames []string
	// Names of the webhook configurations whose caBundle it keeps.
	MutatingWebhooks, ValidatingWebhooks []string
	Durations                            Durations     // default DefaultDurations
	Interval                             time.Duration // how often each replica re-reads the Secret (default 1m)
	Log                                  logr.Logger
	Now                                  func() time.Time

	cur     atomic.Pointer[Bundle]
	tlsCert atomic.Pointer[tls.Certificate]
	missing map[string]bool // webhook configurations not found (logged once)
	// changed is signalled when the bundle clients trust changes; the
	// leader's Distributor waits on it.
	changed chan struct{}
}

// CABundle is the bundle clients trust (CASource), nil before the first
// Sync.
func (r *Rotator) CABundle() []byte {
	if b := r.cur.Load(); b != nil {
		return b.CAPEM()
	}
	return nil
}

// Changed is signalled once after each change of the bundle (CASource).
func (r *Rotator) Changed() <-chan struct{} { return r.changed }

// MarkPublished records in the Secret (contract.AnnotationCAPublished)
// that every distributed copy holds the bundle of fingerprint hash: Renew
// lets the next CA sign only once it names the bundle holding it. It
// reports whether the Secret now says so: false when the Secret moved on
// to another bundle meanwhile, or another replica's write came first (the
// next pass tries again).
func (r *Rotator) MarkPublished(ctx context.Context, hash string) (bool, error) {
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.SecretName}
	sec := &corev1.Secret{}
	if err := r.Client.Get(ctx, key, sec); err != nil {
		return false, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if sec.Annotations[contract.AnnotationCAPublished] == hash {
		return true, nil
	}
	if CAHash(sec.Data[KeyCACert]) != hash {
		return false, nil
	}
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	sec.Annotations[contract.AnnotationCAPublished] = hash
	if err := r.Client.Update(ctx, sec); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return false, fmt.Errorf("recording the published CA bundle in Secret %s: %w", key, err)
	}
	return true, nil
}

func (r *Rotator) defaults() {
	if r.SecretName == "" {
		r.SecretName = "rankgate-tls"
	}
	if r.Durations == (Durations{}) {
		r.Durations = DefaultDurations
	}
	if r.Interval <= 0 {
		r.Interval = time.Minute
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.missing == nil {
		r.missing = map[string]bool{}
	}
	if r.changed == nil {
		r.changed = make(chan struct{}, 1)
	}
}

// NeedLeaderElection: every replica serves, so every replica rotates.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Start re-syncs every Interval until ctx ends.
func (r *Rotator) Start(ctx context.Context) error {
	r.defaults()
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := r.Sync(ctx); err != nil && ctx.Err() == nil {
				r.Log.Error(err, "certificates: sync failed; serving the current ones")
			}
		}
	}
}

// Current is the bundle in use (nil before the first Sync).
func (r *Rotator) Current() *Bundle { return r.cur.Load() }

// GetCertificate serves the current certificate (tls.Config).
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.tlsCert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("certificates: none yet")
}

// Sync reads the Secret, renews what is due (creating it if missing),
// adopts the result and injects the CA bundle into the webhooks.
func (r *Rotator) Sync(ctx context.Context) error {
	r.defaults()
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.SecretName}
	sec := &corev1.Secret{}
	err := r.Client.Get(ctx, key, sec)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	var b *Bundle
	if exists {
		if b, err = Parse(sec.Data); err != nil {
			r.Log.Info("certificates: Secret unusable, issuing new ones", "secret", key.String(), "reason", err.Error())
			b = nil
		}
	}
	var waiting string // the signer while a next CA waits to sign
	if b != nil && b.next != nil {
		waiting = b.SignerSerial()
	}
	published := sec.Annotations[contract.AnnotationCAPublished]
	confirmed := b != nil && published == CAHash(b.CAPEM())
	nb, changed, err := Renew(b, r.DNSNames, r.Durations, r.Now(), published)
	if err != nil {
		return err
	}
	if waiting != "" && nb.SignerSerial() != waiting && !confirmed {
		r.Log.Info("certificates: the next CA signs before every CA ConfigMap was confirmed to hold it (its signer ends soon); a rank pod holding an older copy fails TLS until the copy is rewritten",
			"secret", key.String(), "ca", nb.SignerSerial())
	}
	if b == nil {
		changed = true
	}
	if changed {
		if !exists {
			sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.SecretName,
				Labels: map[string]string{"app.kubernetes.io/name": "rankgate-controller"}}, Type: corev1.SecretTypeOpaque, Data: nb.Data()}
			err = r.Client.Create(ctx, sec)
		} else {
			sec.Data = nb.Data()
			err = r.Client.Update(ctx, sec)
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			// Another replica wrote first: adopt what it wrote.
			return r.Sync(ctx)
		}
		if err != nil {
			return fmt.Errorf("writing Secret %s: %w", key, err)
		}
		r.Log.Info("certificates: renewed", "secret", key.String(), "serving", nb.ServingSerial(), "ca", nb.SignerSerial(), "notAfter", nb.serving.cert.NotAfter)
	}
	if err := r.adopt(nb); err != nil {
		return err
	}
	return r.inject(ctx, nb.CAPEM())
}

func (r *Rotator) adopt(b *Bundle) error {
	if old := r.cur.Load(); old != nil && bytes.Equal(old.serving.certPEM, b.serving.certPEM) && bytes.Equal(old.CAPEM(), b.CAPEM()) {
		return nil
	}
	c, err := b.TLSCertificate()
	if err != nil {
		return err
	}
	if r.CertDir != "" {
		if err := b.WriteFiles(r.CertDir); err != nil {
			return fmt.Errorf("writing certificates to %s: %w", r.CertDir, err)
		}
	}
	r.tlsCert.Store(c)
	prev := r.cur.Swap(b)
	if prev == nil || !bytes.Equal(prev.CAPEM(), b.CAPEM()) {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
	return nil
}

// inject sets every webhook's caBundle in the named configurations.
func (r *Rotator) inject(ctx context.Context, ca []byte) error {
	var errs []error
	for _, name := range r.MutatingWebhooks {
		o := &admissionregistrationv1.MutatingWebhookConfiguration{}
		errs = append(errs, r.injectOne(ctx, name, o, func() bool {
			changed := false
			for i := range o.Webhooks {
				if !bytes.Equal(o.Webhooks[i].ClientConfig.CABundle, ca) {
					o.Webhooks[i].ClientConfig.CABundle, changed = ca, true
				}
			}
			return changed
		}))
	}
	for _, name := range r.ValidatingWebhooks {
		o := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		errs = append(errs, r.injectOne(ctx, name, o, func() bool {
			changed := false
			for i := range o.Webhooks {
				if !bytes.Equal(o.Webhooks[i].ClientConfig.CABundle, ca) {
					o.Webhooks[i].ClientConfig.CABundle, changed = ca, true
				}
			}
			return changed
		}))
	}
	return errors.Join(errs...)
}

func (r *Rotator) injectOne(ctx context.Context, name string, o client.Object, set func() bool) error {
	kind := fmt.Sprintf("%T", o)[len("*v1."):]
	for range 3 {
		if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, o); err != nil {
			if apierrors.IsNotFound(err) {
				if !r.missing[kind+"/"+name] {
					r.Log.Info("certificates: webhook configuration not installed; nothing to inject", "kind", kind, "name", name)
					r.missing[kind+"/"+name] = true
				}
				return nil
			}
			return fmt.Errorf("reading %s %s: %w", kind, name, err)
		}
		delete(r.missing, kind+"/"+name)
		if !set() {
			return nil
		}
		err := r.Client.Update(ctx, o)
		if err == nil {
			r.Log.Info("certificates: CA bundle injected", "kind", kind, "name", name)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("injecting the CA bundle into %s %s: %w", kind, name, err)
		}
	}
	return nil
}
