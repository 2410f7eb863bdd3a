package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
)

// The webhook port under attack, served by `rankgate controller` as a
// process of its own with the shipped GOMEMLIMIT (startGateProcess), the
// way the gate's hardening tests run it.

// webhookProc is a controller process serving the webhooks at addr.
type webhookProc struct {
	*gateProc
	addr string
}

// startWebhookProcess runs the controller with its webhook port on a free
// local port and the shipped bounds, plus extra flags.
func startWebhookProcess(t *testing.T, extra ...string) *webhookProc {
	t.Helper()
	addr := freePort(t)
	args := append([]string{"--webhook-addr", addr, "--init-image", initImage}, extra...)
	return &webhookProc{gateProc: startGateProcess(t, args...), addr: addr}
}

// reviewOf is an AdmissionReview of a PyTorchJob create, as the API
// server would send it.
func reviewOf(ns string, dryRun bool, object []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"e2e-1",`+
		`"kind":{"group":"kubeflow.org","version":"v1","kind":"PyTorchJob"},"resource":{"group":"kubeflow.org","version":"v1","resource":"pytorchjobs"},`+
		`"namespace":%q,"name":"j","operation":"CREATE","userInfo":{"username":"someone"},"dryRun":%v,"object":`, ns, dryRun)
	b.Write(object)
	b.WriteString(`}}`)
	return b.Bytes()
}

// gpuJobJSON is a small PyTorchJob with one GPU worker, opted in by label.
func gpuJobJSON(ns string) []byte {
	return []byte(`{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"j","namespace":"` + ns + `","labels":{"rankgate.io/gate":"enabled"}},` +
		`"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":1,"template":{"spec":{"containers":[{"name":"pytorch","image":"t","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}}}`)
}

// tinyObjectsJob is a PyTorchJob of about size bytes whose worker
// container's environment is a list of empty objects: the most Go memory
// per byte of JSON.
func tinyObjectsJob(size int) []byte { return tinyObjectsJobMeta(`{"name":"j"}`, size) }

// tinyObjectsJobMeta is tinyObjectsJob with the metadata given.
func tinyObjectsJobMeta(meta string, size int) []byte {
	head := `{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":` + meta + `,"spec":{"pytorchReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"p","image":"t","resources":{"limits":{"nvidia.com/gpu":"1"}},"env":[{}`
	tail := `]}]}}}}}}`
	var b bytes.Buffer
	b.Grow(size)
	b.WriteString(head)
	for b.Len()+len(tail)+3 < size {
		b.WriteString(",{}")
	}
	b.WriteString(tail)
	return b.Bytes()
}

// insecureClient posts to the webhook port as anyone in the cluster could.
func insecureClient(cert ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, Certificates: cert}, //nolint:gosec // the attacker's view
		DisableKeepAlives: true,
	}}
}

type reviewAnswer struct {
	status   int
	allowed  bool
	patch    []byte
	warnings []string
}

func postReview(t *testing.T, c *http.Client, addr string, body []byte) reviewAnswer {
	t.Helper()
	r, err := c.Post("https://"+addr+webhook.Path, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer r.Body.Close()
	out, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	a := reviewAnswer{status: r.StatusCode}
	if r.StatusCode == http.StatusOK {
		var rev struct {
			Response struct {
				Allowed  bool     `json:"allowed"`
				Patch    []byte   `json:"patch"`
				Warnings []string `json:"warnings"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal(out, &rev), "%s", out)
		a.allowed, a.patch, a.warnings = rev.Response.Allowed, rev.Response.Patch, rev.Response.Warnings
	}
	return a
}

// (a) A review over the body cap is refused unread (413); one under the
// cap full of tiny objects is not decoded into them (admitted unchanged,
// with a warning). Neither moves the process's memory much; before, each
// grew it by hundreds of MiB.
func TestE2EWebhookPortBoundsBodies(t *testing.T) {
	p := startWebhookProcess(t)
	c := insecureClient()
	require.Eventually(t, func() bool {
		a := postReview(t, c, p.addr, reviewOf("ml", true, gpuJobJSON("ml")))
		return a.status == http.StatusOK && a.allowed && len(a.patch) > 0
	}, 20*time.Second, 200*time.Millisecond, "a small review is mutated")
	before := p.snapshot(t)
	p.resetPeak(t)

	// Refused on the announced size, before any of the body is read.
	big := reviewOf("ml", true, tinyObjectsJob(7<<20-4<<10))
	require.Equal(t, http.StatusRequestEntityTooLarge, statusOfHeaders(t, p.addr, len(big)))

	under := reviewOf("ml", true, tinyObjectsJob(6<<20))
	a := postReview(t, c, p.addr, under)
	require.Equal(t, http.StatusOK, a.status)
	require.True(t, a.allowed)
	require.Empty(t, a.patch, "a job over the decode bounds is admitted unchanged")
	require.NotEmpty(t, a.warnings)
	require.Contains(t, a.warnings[0], "not gated")

	after := p.snapshot(t)
	t.Logf("before %v; after %v", before, after)
	require.Less(t, after.peak-before.rss, 48.0, "peak RSS grew by %.0f MiB", after.peak-before.rss)
}

// statusOfHeaders sends a review's headers announcing size bytes and
// reads the answer's status without sending the body.
func statusOfHeaders(t *testing.T, addr string, size int) int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the attacker's view
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", webhook.Path, addr, size)
	r, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	r.Body.Close()
	return r.StatusCode
}

// (b) Clients that send headers and never the body are cut within the
// header, decode-wait and body timeouts, a connection cap's worth at a
// time, and the process stays bounded; before, every one stayed open.
func TestE2EWebhookPortDropsSilentClients(t *testing.T) {
	p := startWebhookProcess(t)
	before := p.snapshot(t)
	p.resetPeak(t)
	const n = 1000
	start := time.Now()
	closed := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			closed[i] = silentClient(p.addr, start)
		}()
	}
	wg.Wait()
	var late int
	var last time.Duration
	for _, d := range closed {
		if d < 0 {
			late++
		}
		last = max(last, d)
	}
	after := p.snapshot(t)
	t.Logf("last connection closed after %v; %d still open at 45s; before %v; after %v", last, late, before, after)
	require.Zero(t, late, "connections still open after 45s")
	require.Less(t, after.peak-before.rss, 64.0, "peak RSS grew by %.0f MiB", after.peak-before.rss)
}

// silentClient connects, sends a review's headers and no body, and waits
// for the server to close the connection: the time that took, or -1 when
// it was still open 45 seconds after start.
func silentClient(addr string, start time.Time) time.Duration {
	deadline := start.Add(45 * time.Second)
	d := net.Dialer{Deadline: deadline}
	conn, err := tls.DialWithDialer(&d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the attacker's view
	if err != nil {
		if time.Now().Before(deadline) {
			return time.Since(start) // refused or cut during the handshake
		}
		return -1
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", webhook.Path, addr)
	_, err = io.Copy(io.Discard, bufio.NewReader(conn))
	var ne net.Error
	if err != nil && asNetErr(err, &ne) && ne.Timeout() {
		return -1
	}
	return time.Since(start)
}

func asNetErr(err error, ne *net.Error) bool {
	e, ok := err.(net.Error) //nolint:errorlint // the conn's own error
	if ok {
		*ne = e
	}
	return ok
}

// (c) Large dry-run creates through the API server, by a tenant who opted
// the job in by its own label, in flight together: legitimate big jobs
// (long environments) are still mutated, jobs whose environment is a list
// of empty objects are not decoded into them, and the process stays
// within its memory limit.
// Before, each cost about 105 MiB and six in flight passed the limit.
func TestE2EWebhookLargeDryRunsBounded(t *testing.T) {
	p := startWebhookProcess(t)
	installWebhooksCA(t, p.addr)
	ns := newNamespace(t, "e2e-wh-big", false)
	waitMutated(t, ns)
	before := p.snapshot(t)
	p.resetPeak(t)

	var wg sync.WaitGroup
	var mu sync.Mutex
	mutated := 0
	for round := range 3 {
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("big-%d-%d", round, i)
				if i%2 == 1 {
					u := &unstructured.Unstructured{}
					raw := tinyObjectsJobMeta(`{"name":"`+name+`","namespace":"`+ns+`","labels":{"rankgate.io/gate":"enabled"}}`, 2_800_000)
					if err := u.UnmarshalJSON(raw); err == nil {
						_ = k8s.Create(context.Background(), u, client.DryRunAll)
					}
					return
				}
				j := bigEnvJob(t, ns, name, 2_800_000)
				if err := k8s.Create(context.Background(), j, client.DryRunAll); err == nil && hasInit(j) {
					mu.Lock()
					mutated++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	after := p.snapshot(t)
	t.Logf("%d of 9 legitimate big jobs mutated; before %v; after %v", mutated, before, after)
	require.Less(t, after.peak, 192.0, "peak RSS %.0f MiB: the shipped limit is 256 MiB", after.peak)
	require.GreaterOrEqual(t, mutated, 5, "big legitimate jobs are still mutated")
}

// (d) The CA ConfigMap is written only where the controller itself sees
// the namespace opted in, never on a dry run, never where a review says:
// a review naming kube-system creates nothing there. Before, the
// controller wrote ConfigMap rankgate-ca into any namespace a review
// named, with its cluster-wide rights.
func TestE2EWebhookCAConfigMapOnlyWhereOptedIn(t *testing.T) {
	ensureNamespace(t, "kube-system")
	ctx := context.Background()
	cmKey := func(ns string) types.NamespacedName {
		return types.NamespacedName{Namespace: ns, Name: webhook.CAConfigMapName}
	}
	_ = k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: webhook.CAConfigMapName}})
	p := startWebhookProcess(t, "--manage-certs=true", "--cert-dir", t.TempDir(), "--cert-secret", "rankgate-e2e-wh-ca", "--webhook-config", "rankgate-e2e-none")
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNamespace, Name: "rankgate-e2e-wh-ca"}})
	})
	c := insecureClient()
	// Namespaces made after the controller's first distribution.
	dry := newNamespace(t, "e2e-wh-ca-dry", true)
	in := newNamespace(t, "e2e-wh-ca-in", true)

	a := postReview(t, c, p.addr, reviewOf("kube-system", false, gpuJobJSON("kube-system")))
	require.Equal(t, http.StatusOK, a.status)
	require.NotEmpty(t, a.patch, "the job is mutated as any other")
	a = postReview(t, c, p.addr, reviewOf(dry, true, gpuJobJSON(dry)))
	require.NotEmpty(t, a.patch)
	require.True(t, apierrors.IsNotFound(k8s.Get(ctx, cmKey("kube-system"), &corev1.ConfigMap{})), "no ConfigMap in kube-system")
	require.True(t, apierrors.IsNotFound(k8s.Get(ctx, cmKey(dry), &corev1.ConfigMap{})), "no ConfigMap on a dry run")

	require.Eventually(t, func() bool {
		postReview(t, c, p.addr, reviewOf(in, false, gpuJobJSON(in)))
		return k8s.Get(ctx, cmKey(in), &corev1.ConfigMap{}) == nil
	}, 20*time.Second, 200*time.Millisecond, "an opted-in namespace gets its ConfigMap from the webhook")
	require.True(t, apierrors.IsNotFound(k8s.Get(ctx, cmKey("kube-system"), &corev1.ConfigMap{})), "still none in kube-system")
}

// (e) With --webhook-client-ca the port completes no TLS handshake with a
// client that has no certificate, or one another CA signed; a client with
// a certificate of that CA is served.
func TestE2EWebhookClientCA(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "client-ca.crt")
	good, caPEM := clientCert(t, "system:apiserver")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))
	other, _ := clientCert(t, "intruder")
	p := startWebhookProcess(t, "--webhook-client-ca", caFile)
	body := reviewOf("ml", true, gpuJobJSON("ml"))

	for name, c := range map[string]*http.Client{"no certificate": insecureClient(), "another CA's": insecureClient(other)} {
		_, err := c.Post("https://"+p.addr+webhook.Path, "application/json", bytes.NewReader(body))
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "certificate", name)
	}
	a := postReview(t, insecureClient(good), p.addr, body)
	require.Equal(t, http.StatusOK, a.status)
	require.NotEmpty(t, a.patch)
}

// clientCert is a client certificate for cn and the PEM of the CA that
// signed it.
func clientCert(t *testing.T, cn string) (tls.Certificate, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn + " CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// installWebhooksCA installs the shipped webhook configurations pointed
// at addr, trusting the test CA (the controller runs with
// --manage-certs=false and the test certificates).
func installWebhooksCA(t *testing.T, addr string) {
	t.Helper()
	installWebhooks(t, addr)
	ca, err := os.ReadFile(certs.CAFile)
	require.NoError(t, err)
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("admissionregistration.k8s.io/v1")
		u.SetKind(kind)
		require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: "rankgate"}, u))
		whs, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		for i := range whs {
			require.NoError(t, unstructured.SetNestedField(whs[i].(map[string]any), base64.StdEncoding.EncodeToString(ca), "clientConfig", "caBundle"))
		}
		require.NoError(t, unstructured.SetNestedSlice(u.Object, whs, "webhooks"))
		require.NoError(t, k8s.Update(context.Background(), u))
	}
}

// waitMutated: the API server calls the webhook (it caches its clients).
func waitMutated(t *testing.T, ns string) {
	t.Helper()
	require.Eventually(t, func() bool {
		j := gpuPyTorchJob(ns, fmt.Sprintf("probe-%d", time.Now().UnixNano()), "nvidia.com/gpu", 1)
		j.Labels = map[string]string{"rankgate.io/gate": "enabled"}
		return k8s.Create(context.Background(), j, client.DryRunAll) == nil && hasInit(j)
	}, 30*time.Second, 200*time.Millisecond, "the webhook never mutated a job")
}

func hasInit(j *kubeflowv1.PyTorchJob) bool {
	w := j.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker]
	return w != nil && len(w.Template.Spec.InitContainers) > 0 && w.Template.Spec.InitContainers[0].Name == webhook.InitName
}

// bigEnvJob is a PyTorchJob of about size bytes of JSON, opted in by its
// own label, with a long environment of long values (within the webhook's
// decode bounds).
func bigEnvJob(t *testing.T, ns, name string, size int) *kubeflowv1.PyTorchJob {
	t.Helper()
	j := gpuPyTorchJob(ns, name, "nvidia.com/gpu", 1)
	j.Labels = map[string]string{"rankgate.io/gate": "enabled"}
	c := &j.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker].Template.Spec.Containers[0]
	value, per := strings.Repeat("v", 250), 280
	for i := 0; i < size/per; i++ {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("E%d", i), Value: value})
	}
	return j
}

// A job opted in by its own label, in a namespace that is not, still gets
// the CA ConfigMap its rank pods mount: from the leader, once the
// controller sees the job (the webhook no longer writes where only the
// review says so).
func TestE2EWebhookJobLabelGetsCA(t *testing.T) {
	c, _ := webhookController(t, "rankgate-tls-jl", controller.Options{})
	ctx := context.Background()
	ns := newNamespace(t, "e2e-wh-jl", false)
	j := gpuPyTorchJob(ns, "labelled", "nvidia.com/gpu", 1)
	j.Labels = map[string]string{"rankgate.io/gate": "enabled"}
	require.NoError(t, k8s.Create(ctx, j))
	t.Cleanup(func() { _ = k8s.Delete(ctx, j) })
	require.True(t, hasInit(j), "mutated")
	cm := &corev1.ConfigMap{}
	require.Eventually(t, func() bool {
		return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: webhook.CAConfigMapName}, cm) == nil
	}, 20*time.Second, 100*time.Millisecond, "the CA ConfigMap never reached the job's namespace")
	require.Equal(t, string(c.Certificates().Current().CAPEM()), cm.Data[webhook.CAKey])
}
