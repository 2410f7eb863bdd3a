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
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CA ConfigMaps: what rank pods mount (webhook.CAConfigMapName, key ca.crt).
const (
	CAConfigMap = "rankgate-ca"
	// LabelCABundle marks the ConfigMaps the controller keeps.
	LabelCABundle = "rankgate.io/ca-bundle"
	labelGate     = gate.KeyGate
)

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
	nb, changed, err := Renew(b, r.DNSNames, r.Durations, r.Now())
	if err != nil {
		return err
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
	r.cur.Store(b)
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

// EnsureCAConfigMap creates or updates the CA ConfigMap in ns.
func (r *Rotator) EnsureCAConfigMap(ctx context.Context, ns string) error {
	b := r.cur.Load()
	if b == nil {
		return errors.New("no certificates yet")
	}
	ca := string(b.CAPEM())
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: CAConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: CAConfigMap,
			Labels: map[string]string{LabelCABundle: "true"}}, Data: map[string]string{"ca.crt": ca}}
		if err = r.Client.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
			return nil // another replica, at the same time
		}
		return err
	}
	if err != nil {
		return err
	}
	if cm.Data["ca.crt"] == ca && cm.Labels[LabelCABundle] == "true" {
		return nil
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[LabelCABundle] = "true"
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["ca.crt"] = ca
	return r.Client.Update(ctx, cm)
}

// DistributeCA keeps the CA ConfigMap in every namespace labelled
// rankgate.io/gate=enabled and in every namespace that has one already
// (jobs opted in by their own label get theirs from the webhook). It runs
// on the leader, every Interval.
func (r *Rotator) DistributeCA(ctx context.Context) error {
	r.defaults()
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		if err := r.distributeOnce(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error(err, "certificates: keeping the CA ConfigMaps")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (r *Rotator) distributeOnce(ctx context.Context) error {
	if r.cur.Load() == nil {
		return nil
	}
	sel, err := labels.NewRequirement(labelGate, selection.In, []string{"enabled", "true"})
	if err != nil {
		return err
	}
	nss := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nss, client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*sel)}); err != nil {
		return fmt.Errorf("listing opted-in namespaces: %w", err)
	}
	want := map[string]bool{}
	for _, ns := range nss.Items {
		if ns.DeletionTimestamp.IsZero() {
			want[ns.Name] = true
		}
	}
	cms := &corev1.ConfigMapList{}
	if err := r.Client.List(ctx, cms, client.MatchingLabels{LabelCABundle: "true"}); err != nil {
		return fmt.Errorf("listing CA ConfigMaps: %w", err)
	}
	for _, cm := range cms.Items {
		if cm.Name == CAConfigMap {
			want[cm.Namespace] = true
		}
	}
	var errs []error
	for ns := range want {
		if err := r.EnsureCAConfigMap(ctx, ns); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
		}
	}
	return errors.Join(errs...)
}
