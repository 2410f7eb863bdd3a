package certs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
)

// listPage bounds one page of the metadata lists DistributeCA makes.
const listPage = 500

// CASource is where the CA bundle the rank pods trust comes from: the
// controller's own Rotator, or a file another issuer keeps (FileCA:
// cert-manager's ca.crt).
type CASource interface {
	// CABundle is the PEM bundle to distribute (nil: none yet).
	CABundle() []byte
	// Changed is signalled after the bundle changes.
	Changed() <-chan struct{}
}

// Distributor is the one writer of the CA ConfigMaps (CAConfigMap) in
// opted-in namespaces: at admission for a new job's namespace
// (EnsureCAConfigMap, through the mutating webhook), for a job opted in by
// its own label, and the leader's pass over every opted-in namespace
// (DistributeCA).
type Distributor struct {
	// Client reads and writes without a cache (ConfigMaps of one name
	// cluster-wide: no informer).
	Client    client.Client
	Namespace string // the controller's: its own copy is kept too
	Source    CASource
	Interval  time.Duration // between passes (default 1m)
	Log       logr.Logger
	// OptedIn names the namespaces whose CA ConfigMap DistributeCA keeps,
	// as the controller sees them (namespaces labelled rankgate.io/gate and
	// those of jobs opted in by their own setting). Unset: the namespaces
	// labelled rankgate.io/gate=enabled.
	OptedIn func(context.Context) (map[string]bool, error)
	// Publish, if set, records that every copy holds the bundle of that
	// fingerprint (Rotator.MarkPublished: its next CA waits for it), and
	// says whether the record now stands.
	Publish func(ctx context.Context, hash string) (bool, error)

	confirmed atomic.Pointer[string]
}

func (r *Distributor) interval() time.Duration {
	if r.Interval <= 0 {
		return time.Minute
	}
	return r.Interval
}

// CAHash is the contract.AnnotationCAHash of a CA bundle.
func CAHash(ca []byte) string {
	h := sha256.Sum256(ca)
	return hex.EncodeToString(h[:])
}

// EnsureCAConfigMap creates or updates the CA ConfigMap (named
// CAConfigMap, nothing else) in ns.
func (r *Distributor) EnsureCAConfigMap(ctx context.Context, ns string) error {
	pem := r.Source.CABundle()
	if pem == nil {
		return errors.New("no CA bundle yet")
	}
	ca := string(pem)
	hash := CAHash(pem)
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: CAConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: CAConfigMap,
			Labels: map[string]string{contract.LabelCABundle: "true"}, Annotations: map[string]string{contract.AnnotationCAHash: hash}},
			Data: map[string]string{"ca.crt": ca}}
		if err = r.Client.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
			return nil // another replica, at the same time
		}
		return err
	}
	if err != nil {
		return err
	}
	if cm.Data["ca.crt"] == ca && cm.Labels[contract.LabelCABundle] == "true" && cm.Annotations[contract.AnnotationCAHash] == hash {
		return nil
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[contract.LabelCABundle] = "true"
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[contract.AnnotationCAHash] = hash
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["ca.crt"] = ca
	return r.Client.Update(ctx, cm)
}

// DistributeCA keeps the CA ConfigMap in every opted-in namespace (OptedIn;
// jobs opted in by their own label also get theirs from the webhook) and
// in the controller's own namespace. It
// runs on the leader, every Interval. What it reads is bounded whatever
// tenants create: the opted-in namespaces, and the metadata of the
// ConfigMaps named CAConfigMap, page by page. It writes only ConfigMaps
// named CAConfigMap in opted-in namespaces, and only those whose CA
// fingerprint is not the current one.
func (r *Distributor) DistributeCA(ctx context.Context) error {
	t := time.NewTicker(r.interval())
	defer t.Stop()
	for {
		if err := r.distributeOnce(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error(err, "certificates: keeping the CA ConfigMaps")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-r.Source.Changed():
			// A new bundle (the next CA published): its copies go out now,
			// since the next CA signs only once they are confirmed.
		}
	}
}

func (r *Distributor) distributeOnce(ctx context.Context) error {
	pem := r.Source.CABundle()
	if pem == nil {
		return nil
	}
	want, err := r.optedIn(ctx)
	if err != nil {
		return fmt.Errorf("listing opted-in namespaces: %w", err)
	}
	// The controller's own namespace too: the scraper's CA ConfigMap
	// (ServiceMonitor overlay) lives there.
	want[r.Namespace] = true
	kept, err := r.caHashes(ctx)
	if err != nil {
		return fmt.Errorf("listing CA ConfigMaps: %w", err)
	}
	hash := CAHash(pem)
	var errs []error
	checked := time.Now()
	stale := toWrite(want, kept, hash, r.Namespace)
	for _, ns := range stale {
		if time.Since(checked) > recheckEvery {
			// A pass of stale copies (after a CA change, one per opted-in
			// namespace) takes a while: a namespace opted in meanwhile,
			// which has no copy at all, is not left waiting behind it.
			checked = time.Now()
			errs = append(errs, r.writeNew(ctx, want)...)
		}
		if err := r.EnsureCAConfigMap(ctx, ns); unwritable(err) {
			// Gone, or terminating: no rank pod will read its copy, and
			// the confirmation does not wait for it.
			delete(want, ns)
		} else if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return r.confirm(ctx, want, hash, len(stale) == 0)
}

// confirm tells Publish that every CA ConfigMap of want holds the bundle
// of fingerprint hash, once per bundle (the Rotator records it in its
// Secret, and its next CA signs only then). Unless the pass
// found nothing to write, it re-reads the ConfigMaps' fingerprints first:
// a copy another writer created meanwhile may hold an older bundle.
func (r *Distributor) confirm(ctx context.Context, want map[string]bool, hash string, fresh bool) error {
	if r.Publish == nil {
		return nil
	}
	if c := r.confirmed.Load(); c != nil && *c == hash {
		return nil
	}
	if !fresh {
		kept, err := r.caHashes(ctx)
		if err != nil {
			return fmt.Errorf("listing CA ConfigMaps: %w", err)
		}
		for ns := range want {
			if h, ok := kept[ns]; ok && h != hash {
				return nil // the next pass writes it
			}
		}
	}
	if ok, err := r.Publish(ctx, hash); err != nil || !ok {
		return err
	}
	r.Log.V(1).Info("certificates: every CA ConfigMap holds the bundle", "namespaces", len(want))
	r.confirmed.Store(&hash)
	return nil
}

// recheckEvery: how often a long pass looks for namespaces opted in since
// it started.
const recheckEvery = time.Second

// writeNew writes the CA ConfigMap of every namespace opted in now that
// want does not hold yet, and adds them to want.
func (r *Distributor) writeNew(ctx context.Context, want map[string]bool) []error {
	now, err := r.optedIn(ctx)
	if err != nil {
		return []error{fmt.Errorf("listing opted-in namespaces: %w", err)}
	}
	var errs []error
	for ns := range now {
		if want[ns] {
			continue
		}
		want[ns] = true
		if err := r.EnsureCAConfigMap(ctx, ns); unwritable(err) {
			delete(want, ns)
		} else if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
		}
	}
	return errs
}

// unwritable: the namespace is gone (NotFound) or refuses new objects
// (Forbidden: it is terminating).
func unwritable(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

// toWrite lists the namespaces of want whose CA ConfigMap is not the
// current one (kept: the fingerprint each holds): first those that have
// none (their rank pods cannot start without it) and first (the
// controller's own namespace), then the stale ones (during a rotation a
// stale bundle still holds the CA that signs), each group in name order.
func toWrite(want map[string]bool, kept map[string]string, hash, first string) []string {
	var urgent, stale []string
	for ns := range want {
		h, ok := kept[ns]
		switch {
		case ok && h == hash:
		case !ok || ns == first:
			urgent = append(urgent, ns)
		default:
			stale = append(stale, ns)
		}
	}
	slices.Sort(urgent)
	slices.Sort(stale)
	return append(urgent, stale...)
}

// optedIn is OptedIn, else the namespaces labelled rankgate.io/gate=enabled
// (their metadata, page by page).
func (r *Distributor) optedIn(ctx context.Context) (map[string]bool, error) {
	if r.OptedIn != nil {
		return r.OptedIn(ctx)
	}
	sel, err := labels.NewRequirement(contract.KeyGate, selection.In, []string{"enabled", "true"})
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	err = r.eachMeta(ctx, "Namespace", func(o *metav1.PartialObjectMetadata) {
		if o.DeletionTimestamp.IsZero() {
			want[o.Name] = true
		}
	}, client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*sel)})
	return want, err
}

// caHashes maps each namespace that has a ConfigMap named CAConfigMap to
// its contract.AnnotationCAHash. It reads metadata only, and only of ConfigMaps of
// that name: a tenant's other ConfigMaps, labelled or not, are never read.
func (r *Distributor) caHashes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := r.eachMeta(ctx, "ConfigMap", func(o *metav1.PartialObjectMetadata) {
		out[o.Namespace] = o.Annotations[contract.AnnotationCAHash]
	}, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", CAConfigMap)})
	return out, err
}

// eachMeta lists the metadata of the core/v1 objects of kind, listPage at
// a time.
func (r *Distributor) eachMeta(ctx context.Context, kind string, f func(*metav1.PartialObjectMetadata), opts ...client.ListOption) error {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind + "List"))
	cont := ""
	for {
		page := append(opts[:len(opts):len(opts)], client.Limit(listPage), client.Continue(cont))
		if err := r.Client.List(ctx, list, page...); err != nil {
			return err
		}
		for i := range list.Items {
			f(&list.Items[i])
		}
		if cont = list.Continue; cont == "" {
			return nil
		}
	}
}
