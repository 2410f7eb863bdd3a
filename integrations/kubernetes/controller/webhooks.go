package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/certs"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	mutate "github.com/rankgate/rankgate/integrations/kubernetes/webhook"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/launchergate"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
)

// WebhookOptions configure the admission webhooks and the controller's own
// certificates (part of Options).
type WebhookOptions struct {
	// WebhookAddr is where every replica serves the admission webhooks
	// over HTTPS ("" or "0": none; the command's default is ":9443").
	WebhookAddr string
	// InitImage is the image of the injected init container: the
	// controller's own (required to serve the mutating webhook).
	InitImage string
	// InitResources: the init container's cpu and memory (nil:
	// mutate.DefaultInitResources).
	InitResources *corev1.ResourceRequirements
	// GateURL is the gate's address the injected init containers use
	// (default https://rankgate-gate.<Namespace>.svc:443).
	GateURL string
	// AdmissionPolicies say, per check of the validating webhook (rule
	// ID), deny, warn or off; a check not named takes its default
	// (validate.DefaultPolicies). Validate with validate.CheckPolicies.
	AdmissionPolicies map[string]validate.Policy

	// ManageCerts: the controller keeps its own CA and serving certificate
	// in Secret CertSecret of its namespace, writes them to CertDir, injects
	// the CA bundle into MutatingWebhookConfiguration and
	// ValidatingWebhookConfiguration WebhookConfigName, and keeps the CA
	// ConfigMap in opted-in namespaces. Off: CertDir's files come from
	// elsewhere (cert-manager).
	ManageCerts bool
	CertSecret  string   // default "rankgate-tls"
	CertDNS     []string // default: the gate, metrics and webhook Services' names
	// WebhookConfigName names both webhook configurations (default
	// "rankgate").
	WebhookConfigName string
	CertDurations     certs.Durations // default certs.DefaultDurations
	CertInterval      time.Duration   // default 1m

	// WebhookClientCA, if set, is a PEM file of CAs: the webhook port then
	// completes a TLS handshake only with a client that presents a
	// certificate signed by one of them (the API server's, configured
	// through its admission control configuration). Off by default.
	WebhookClientCA string
	// Bounds of the webhook port (zero: review's defaults): connections
	// open at once, reviews read and decoded at once, the body size, the
	// time for the handshake and headers, for the body, and between
	// requests on a kept-alive connection.
	WebhookMaxConnections int
	WebhookMaxDecodes     int
	WebhookMaxBody        int64
	WebhookHeaderTimeout  time.Duration
	WebhookBodyTimeout    time.Duration
	WebhookIdleTimeout    time.Duration
}

// DefaultWebhookAddr is the command's --webhook-addr.
const DefaultWebhookAddr = ":9443"

// Names of the shipped Services (configs/deploy/service.yaml).
const (
	GateService    = "rankgate-gate"
	MetricsService = "rankgate-metrics"
	WebhookService = "rankgate-webhook"
)

func (o *Options) webhookDefaults() {
	if o.WebhookAddr == "" {
		o.WebhookAddr = "0"
	}
	if o.GateURL == "" {
		o.GateURL = "https://" + GateService + "." + o.Namespace + ".svc:443"
	}
	if o.WebhookConfigName == "" {
		o.WebhookConfigName = "rankgate"
	}
	if o.CertSecret == "" {
		o.CertSecret = "rankgate-tls"
	}
	if len(o.CertDNS) == 0 {
		for _, s := range []string{GateService, MetricsService, WebhookService} {
			o.CertDNS = append(o.CertDNS, s+"."+o.Namespace+".svc", s+"."+o.Namespace+".svc.cluster.local")
		}
	}
}

// setupCerts, with ManageCerts, creates or adopts the certificates before
// anything serves (the servers need them at start) and adds the rotator;
// either way it sets up the one writer of the CA ConfigMaps, from the
// rotator's bundle or from CertDir/ca.crt (cert-manager's).
func (c *Controller) setupCerts(mgr manager.Manager) error {
	cl, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return err
	}
	if !c.opts.ManageCerts {
		return c.setupFileCA(mgr, cl)
	}
	r := &certs.Rotator{Client: cl, Namespace: c.opts.Namespace, SecretName: c.opts.CertSecret, CertDir: c.opts.CertDir,
		DNSNames: c.opts.CertDNS, Durations: c.opts.CertDurations, Interval: c.opts.CertInterval, Log: c.log.WithName("certs")}
	if c.opts.WebhookAddr != "0" {
		r.MutatingWebhooks = []string{c.opts.WebhookConfigName}
		r.ValidatingWebhooks = []string{c.opts.WebhookConfigName}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Sync(ctx); err != nil {
		return fmt.Errorf("controller: certificates: %w", err)
	}
	c.certs = r
	if err := mgr.Add(r); err != nil {
		return err
	}
	return c.addDistributor(mgr, cl, r, r.MarkPublished)
}

// setupFileCA: certificates from elsewhere (cert-manager) come with their
// CA in CertDir/ca.crt; the controller distributes that bundle as it does
// its own. Without the file, rank pods need ConfigMap rankgate-ca copied in
// by hand (said once, at start).
func (c *Controller) setupFileCA(mgr manager.Manager, cl client.Client) error {
	if c.opts.Insecure || c.opts.CertDir == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := certs.NewFileCA(ctx, filepath.Join(c.opts.CertDir, certs.KeyCACert), c.opts.CertInterval, c.log.WithName("certs"))
	if err != nil {
		c.log.Info("no CA bundle to distribute: rank pods need ConfigMap "+certs.CAConfigMap+" (key ca.crt) in their namespace, copied by hand", "reason", err.Error())
		return nil
	}
	if err := mgr.Add(f); err != nil {
		return err
	}
	return c.addDistributor(mgr, cl, f, nil)
}

// addDistributor adds the one writer of the CA ConfigMaps; its pass over
// every opted-in namespace runs on the leader.
func (c *Controller) addDistributor(mgr manager.Manager, cl client.Client, src certs.CASource, publish func(context.Context, string) (bool, error)) error {
	c.caDist = &certs.Distributor{Client: cl, Namespace: c.opts.Namespace, Source: src, Interval: c.opts.CertInterval,
		Log: c.log.WithName("certs"), OptedIn: c.caNamespaces, Publish: publish}
	return mgr.Add(manager.RunnableFunc(c.caDist.DistributeCA))
}

// webhookServer is the manager's webhook server (nil when disabled): the
// bounded server of package review. Its certificate is the controller's
// own (ManageCerts) or CertDir's files, watched (registerWebhooks).
func (c *Controller) webhookServer() (*review.Server, error) {
	if c.opts.WebhookAddr == "0" {
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(c.opts.WebhookAddr); err != nil {
		return nil, fmt.Errorf("controller: webhook address %q: %w", c.opts.WebhookAddr, err)
	}
	if c.opts.WebhookClientCA != "" {
		if _, err := os.Stat(c.opts.WebhookClientCA); err != nil {
			return nil, fmt.Errorf("controller: --webhook-client-ca: %w", err)
		}
	}
	return review.NewServer(review.Options{
		Addr: c.opts.WebhookAddr, ClientCAFile: c.opts.WebhookClientCA,
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return c.webhookCert(h) },
		MaxConns:       c.opts.WebhookMaxConnections, MaxDecodes: c.opts.WebhookMaxDecodes, MaxBody: c.opts.WebhookMaxBody,
		ReadHeaderTimeout: c.opts.WebhookHeaderTimeout, BodyTimeout: c.opts.WebhookBodyTimeout, IdleTimeout: c.opts.WebhookIdleTimeout,
		Log: c.log.WithName("webhooks"),
	}), nil
}

// registerWebhooks adds the mutating handlers (rank init containers in
// job templates and the MPIJob launcher gate; in a JobSet's rank pods as
// they are created) and the validating handler, which judges
// placement with the schedule engine over the controller's node cache.
// self is the controller's own user name: its updates of jobs are never
// judged by the validating webhook.
func (c *Controller) registerWebhooks(mgr manager.Manager, s *review.Server, self string) error {
	if s == nil {
		return nil
	}
	if c.opts.InitImage == "" {
		return errors.New("controller: no init-container image for the mutating webhook (--init-image)")
	}
	if c.certs != nil {
		c.webhookCert = c.certs.GetCertificate
	} else {
		cw, err := certwatcher.New(filepath.Join(c.opts.CertDir, "tls.crt"), filepath.Join(c.opts.CertDir, "tls.key"))
		if err != nil {
			return fmt.Errorf("controller: webhook certificate in %s: %w", c.opts.CertDir, err)
		}
		if err := mgr.Add(cw); err != nil {
			return err
		}
		c.webhookCert = cw.GetCertificate
	}
	mo := mutate.Options{Image: c.opts.InitImage, GateURL: c.opts.GateURL, Audience: c.opts.Audience, GangTimeout: c.opts.GangTimeout,
		InitResources: c.opts.InitResources, RuntimeOf: runtimeReader(c.api), GPUClaim: c.dra.gpuClaim}
	if c.caDist != nil {
		mo.EnsureCA = c.caDist.EnsureCAConfigMap
		mo.OptedIn = c.namespaceOptedIn
	}
	mo.LauncherGate = &launchergate.Options{Image: c.opts.InitImage, GateURL: c.opts.GateURL, CAConfigMap: mutate.CAConfigMapName}
	m, err := mutate.NewMutator(mo)
	if err != nil {
		return err
	}
	s.RegisterAdmission(mutate.Path, m)
	s.RegisterAdmission(mutate.PodPath, m.Pods())
	if err := validate.CheckPolicies(c.opts.AdmissionPolicies); err != nil {
		return err
	}
	vo := validate.Options{Policies: c.opts.AdmissionPolicies, Nodes: validate.ListNodes(mgr.GetClient()), Fleet: c.state.Nodes.Fleet,
		DeviceClasses: c.dra.deviceClasses, DRAObjects: c.dra.validateObjects, Engine: c.engine}
	if self != "" {
		vo.TrustedUsers = []string{self}
	}
	s.RegisterAdmission(validate.Path, validate.NewHandler(vo))
	return nil
}

// runtimeReader reads the runtime a TrainJob names from the API server
// through api (not cached: it is read once per TrainJob created, at its
// admission), within a deadline shorter than the webhook's.
func runtimeReader(api client.Reader) func(context.Context, trainjob.RuntimeKey) (*trainjob.Runtime, error) {
	return func(ctx context.Context, key trainjob.RuntimeKey) (*trainjob.Runtime, error) {
		ctx, cancel := context.WithTimeout(ctx, runtimeReadTimeout)
		defer cancel()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(trainjob.GroupVersion.WithKind(key.Kind))
		if err := api.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name}, u); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		raw, err := u.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		rt, err := trainjob.DecodeRuntime(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		return rt, nil
	}
}

// runtimeReadTimeout bounds a runtimeReader read, within the shipped webhook
// timeout (5 s).
const runtimeReadTimeout = 2 * time.Second

// namespaceOptedIn: the namespace, as the controller's cache has it, is
// labelled rankgate.io/gate=enabled (or true). Jobs opted in by their own
// label get the CA ConfigMap from the reconciler, once the controller
// sees them (ensureJobCA).
func (c *Controller) namespaceOptedIn(ctx context.Context, name string) bool {
	ns := &corev1.Namespace{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		return false
	}
	return nsOptedIn(ns)
}

// nsOptedIn: ns is labelled rankgate.io/gate=enabled (or true) and not
// being deleted.
func nsOptedIn(ns *corev1.Namespace) bool {
	return ns.DeletionTimestamp.IsZero() && enabled(strings.ToLower(ns.Labels[contract.KeyGate]))
}

// ensureJobCA: a job opted in by its own label, in a namespace that is not,
// gets the CA ConfigMap its rank pods mount here, from the leader, as soon
// as the controller's cache has the job (the mutating webhook never takes
// a namespace from a review; the leader's periodic distribution,
// caNamespaces, would reach it only at its next pass). Once per namespace
// and CA.
func (c *Controller) ensureJobCA(ctx context.Context, o client.Object) {
	if c.caDist == nil || !enabled(gateSetting(o)) {
		return
	}
	pem := c.caDist.Source.CABundle()
	if pem == nil {
		return
	}
	b := certs.CAHash(pem)
	if prev, ok := c.jobCA.Load(o.GetNamespace()); ok && prev == b {
		return
	}
	if err := c.caDist.EnsureCAConfigMap(ctx, o.GetNamespace()); err != nil {
		c.log.Info("cannot write the gate's CA ConfigMap for a job opted in by its label; its rank pods wait for it", "namespace", o.GetNamespace(), "error", err.Error())
		return
	}
	c.jobCA.Store(o.GetNamespace(), b)
}

// Certificates is the controller's own CA (nil unless ManageCerts).
func (c *Controller) Certificates() *certs.Rotator { return c.certs }

// selfUser asks the API server who the controller is (SelfSubjectReview,
// allowed to every authenticated user by the built-in system:basic-user
// role), within a deadline. "" when it cannot tell: the validating webhook
// then lets the controller's writes through by what they change (only
// rankgate.io/ annotations and spec.runPolicy.suspend, which it never
// judges).
func selfUser(cs kubernetes.Interface, log logr.Logger) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		log.Info("cannot tell the controller's own identity (SelfSubjectReview); the validating webhook judges its updates by what they change", "error", err.Error())
		return ""
	}
	return r.Status.UserInfo.Username
}
