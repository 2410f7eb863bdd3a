package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/certs"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
)

// The mutating webhooks' admissions of a 64-node TrainJob (issue #23,
// "Pod webhook admission p99 <= 5 ms server-side with 50 concurrent"): the
// shipped configuration sends the job webhook the TrainJob (which gets the
// runtime patch that carries the opt-in) and the JobSet the Trainer makes
// of it (whose `node` template gets the rankgate.io/inject label), and the
// Pod webhook each of the 64 `node` pods the Job controller makes from
// that template, which gets the init container. So the admissions
// measured are those three, and, for the cheapest path, a `node` pod of a
// JobSet that is not opted in (the shipped objectSelector never sends it):
// it passes untouched.
//
//	go test ./integrations/kubernetes/webhook/ -run '^$' -bench BenchmarkPodAdmission -benchtime 200x

const (
	benchNodes     = 64
	benchNamespace = "ml"
	benchPlainNS   = "team-b"
)

// benchTrainJob is a 64-node TrainJob as a user writes it (torchrun on
// 8 GPUs a node), in an opted-in namespace, as the API server sends it.
func benchTrainJob() *trainjob.TrainJob {
	return &trainjob.TrainJob{
		TypeMeta: metav1.TypeMeta{APIVersion: trainjob.GroupVersion.String(), Kind: "TrainJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "llm-pretrain", Namespace: benchNamespace, UID: "5c0a6f3e-6d5b-4f0e-9a51-3d1f4b0f2a11",
			Labels: map[string]string{"team": "research", "kueue.x-k8s.io/queue-name": "gpu"}, CreationTimestamp: metav1.Now()},
		Spec: trainjob.Spec{
			RuntimeRef: trainjob.RuntimeRef{Name: "torch-distributed", Kind: ptr.To(trainjob.KindClusterTrainingRuntime)},
			Suspend:    ptr.To(true),
			Trainer: &trainjob.Trainer{
				Image:   ptr.To("nvcr.io/nvidia/pytorch:25.10-py3"),
				Command: []string{"torchrun", "/workspace/train.py"},
				Args:    []string{"--config=configs/70b.yaml", "--bf16"},
				Env: []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "WARN"}, {Name: "NCCL_IB_HCA", Value: "mlx5"},
					{Name: "NCCL_SOCKET_IFNAME", Value: "eth0"}, {Name: "OMP_NUM_THREADS", Value: "8"}},
				NumNodes:       ptr.To(int32(benchNodes)),
				NumProcPerNode: ptr.To(int32(8)),
				ResourcesPerNode: &corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("1000Gi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("90"), corev1.ResourceMemory: resource.MustParse("900Gi")},
				},
			},
			// Kueue's own patch, written before the webhook sees the job.
			RuntimePatches: []trainjob.RuntimePatch{{Manager: "kueue.x-k8s.io/manager", TrainingRuntimeSpec: &trainjob.TrainingRuntimeSpecPatch{
				Template: &trainjob.JobSetTemplatePatch{Metadata: &trainjob.PatchMetadata{Labels: map[string]string{"kueue.x-k8s.io/podset": "node"}}}}}},
		},
	}
}

// benchJobSet is the JobSet the Trainer makes of tj from the
// torch-distributed runtime (trainjob.Derive), owned by tj, with the
// labels of its runtime patches (the webhook's rankgate.io/gate among them).
func benchJobSet(b *testing.B, tj *trainjob.TrainJob) *jobsetapi.JobSet {
	raw, err := os.ReadFile(filepath.Join("..", "..", "kubeflow", "trainjob", "testdata", "torch-distributed.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		b.Fatal(err)
	}
	rt, err := trainjob.DecodeRuntime(js)
	if err != nil {
		b.Fatal(err)
	}
	spec, err := trainjob.Derive(tj, rt)
	if err != nil {
		b.Fatal(err)
	}
	labels := map[string]string{"trainer.kubeflow.org/trainjob-name": tj.Name, contract.KeyGate: "enabled"}
	for _, p := range tj.Spec.RuntimePatches {
		if p.TrainingRuntimeSpec != nil && p.TrainingRuntimeSpec.Template != nil && p.TrainingRuntimeSpec.Template.Metadata != nil {
			for k, v := range p.TrainingRuntimeSpec.Template.Metadata.Labels {
				labels[k] = v
			}
		}
	}
	spec.Network = &jobsetapi.Network{EnableDNSHostnames: ptr.To(true), Subdomain: tj.Name}
	return &jobsetapi.JobSet{
		TypeMeta: metav1.TypeMeta{APIVersion: jobset.GVK.GroupVersion().String(), Kind: "JobSet"},
		ObjectMeta: metav1.ObjectMeta{Name: tj.Name, Namespace: tj.Namespace, Labels: labels, UID: "0f3c8e7a-1b2d-4c5e-8f90-a1b2c3d4e5f6",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: trainjob.GroupVersion.String(), Kind: "TrainJob", Name: tj.Name, UID: tj.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: *spec,
	}
}

// benchNodePod is pod i of the `node` Job of js as the Job controller
// creates it (labels of the JobSet and the Job, completion index, owner
// Job, JOB_COMPLETION_INDEX), in namespace ns.
func benchNodePod(js *jobsetapi.JobSet, ns string, i int) *corev1.Pod {
	var rj *jobsetapi.ReplicatedJob
	for k := range js.Spec.ReplicatedJobs {
		if js.Spec.ReplicatedJobs[k].Name == "node" {
			rj = &js.Spec.ReplicatedJobs[k]
		}
	}
	job := js.Name + "-node-0"
	idx := strconv.Itoa(i)
	labels := map[string]string{
		jobset.LabelJobSetName: js.Name, jobset.LabelJobSetUID: string(js.UID), jobset.LabelReplicatedJob: "node",
		jobset.LabelJobIndex: "0", jobset.LabelJobGlobalIndex: "0", jobset.LabelRestartAttempt: "0",
		jobsetapi.ReplicatedJobReplicas: "1", jobsetapi.GlobalReplicasKey: "1",
		jobset.LabelCompletionIndex: idx, batchv1.JobNameLabel: job, "job-name": job,
		batchv1.ControllerUidLabel: "9e8d7c6b-5a49-4838-a271-605f4e3d2c1b", "controller-uid": "9e8d7c6b-5a49-4838-a271-605f4e3d2c1b",
	}
	for k, v := range rj.Template.Spec.Template.Labels {
		labels[k] = v
	}
	spec := *rj.Template.Spec.Template.Spec.DeepCopy()
	spec.Hostname, spec.Subdomain = job+"-"+idx, js.Name
	for c := range spec.Containers {
		spec.Containers[c].Env = append(spec.Containers[c].Env, corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", Value: idx})
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: job + "-" + idx + "-", Namespace: ns, Labels: labels,
			Annotations: map[string]string{jobset.LabelCompletionIndex: idx, jobsetapi.JobSetNameKey: js.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job, UID: "9e8d7c6b-5a49-4838-a271-605f4e3d2c1b",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: spec,
	}
}

// benchReview is the AdmissionReview the API server sends for a create
// of obj (kind gvk) in ns.
func benchReview(b *testing.B, gvk metav1.GroupVersionKind, resource, ns, name string, obj any, uid int) []byte {
	raw, err := json.Marshal(obj)
	if err != nil {
		b.Fatal(err)
	}
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID(fmt.Sprint(uid)), Operation: admissionv1.Create, Namespace: ns, Name: name, Kind: gvk,
			Resource: metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource},
			UserInfo: authnv1.UserInfo{Username: "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kubeflow-system", "system:authenticated"}},
			Object: kruntime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(ar)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

type staticCA []byte

func (c staticCA) CABundle() []byte       { return c }
func (staticCA) Changed() <-chan struct{} { return nil }

// benchMutator is the mutator as the controller sets it up
// (controller.registerWebhooks): OptedIn reads the namespace from an
// informer store and deep-copies it, as the manager's cached client does;
// EnsureCA is the CA Distributor's, over an in-memory client that holds
// the namespace's ConfigMap (the controller's is an uncached GET to the
// API server: that round trip is not here).
func benchMutator(b *testing.B) *Mutator {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace, Labels: map[string]string{contract.KeyGate: "enabled", "kubernetes.io/metadata.name": benchNamespace}}},
		{ObjectMeta: metav1.ObjectMeta{Name: benchPlainNS, Labels: map[string]string{"kubernetes.io/metadata.name": benchPlainNS}}},
	} {
		if err := store.Add(ns); err != nil {
			b.Fatal(err)
		}
	}
	ca := staticCA("-----BEGIN CERTIFICATE-----\nMIIB...bench...\n-----END CERTIFICATE-----\n")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: certs.CAConfigMap,
		Labels: map[string]string{contract.LabelCABundle: "true"}, Annotations: map[string]string{contract.AnnotationCAHash: certs.CAHash(ca)}},
		Data: map[string]string{"ca.crt": string(ca)}}
	dist := &certs.Distributor{Client: fake.NewClientBuilder().WithObjects(cm).Build(), Namespace: "rankgate-system", Source: ca, Log: logr.Discard()}
	m, err := NewMutator(Options{
		Image: "ghcr.io/rankgate/rankgate:v1.2.3", GateURL: "https://rankgate-gate.rankgate-system.svc:443", GangTimeout: 10 * time.Minute,
		EnsureCA: dist.EnsureCAConfigMap,
		OptedIn: func(_ context.Context, name string) bool {
			o, ok, err := store.GetByKey(name)
			if err != nil || !ok {
				return false
			}
			ns := o.(*corev1.Namespace).DeepCopy()
			return ns.DeletionTimestamp.IsZero() && contract.GateEnabled(ns.Labels[contract.KeyGate])
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// benchCase is one kind of admission: its review bodies (one per
// concurrent sender) and what its answer must be.
type benchCase struct {
	name, path string
	bodies     [][]byte
	patched    bool
}

func benchCases(b *testing.B, concurrent int) []benchCase {
	tj := benchTrainJob()
	js := benchJobSet(b, tj)
	// The JobSet as the job webhook admitted it: its node template
	// labelled.
	gated := js.DeepCopy()
	for k := range gated.Spec.ReplicatedJobs {
		if t := &gated.Spec.ReplicatedJobs[k].Template.Spec.Template; asksDevices(rankResources(&t.Spec, nil)) {
			t.Labels = merged(t.Labels, map[string]string{contract.LabelInject: contract.ValueInjectRanks, "training.kubeflow.org/job-name": js.Name})
		}
	}
	trainJobs, jobSets := make([][]byte, concurrent), make([][]byte, concurrent)
	pods, plain := make([][]byte, concurrent), make([][]byte, concurrent)
	for i := range concurrent {
		t := tj.DeepCopy()
		t.Name = fmt.Sprintf("%s-%d", tj.Name, i)
		trainJobs[i] = benchReview(b, trainJobKind, "trainjobs", benchNamespace, t.Name, t, i)
		s := js.DeepCopy()
		s.Name = t.Name
		jobSets[i] = benchReview(b, jobSetKind, "jobsets", benchNamespace, s.Name, s, i)
		p := benchNodePod(gated, benchNamespace, i%benchNodes)
		pods[i] = benchReview(b, podGVK, "pods", benchNamespace, "", p, i)
		p = benchNodePod(js, benchPlainNS, i%benchNodes)
		plain[i] = benchReview(b, podGVK, "pods", benchPlainNS, "", p, i)
	}
	return []benchCase{{"TrainJob", Path, trainJobs, true}, {"JobSet", Path, jobSets, true},
		{"Pod", PodPath, pods, true}, {"Pod-not-opted-in", PodPath, plain, false}}
}

// serve posts body to path on the server's mux, as the API server does.
func serve(h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	return rec
}

// checkAnswer: HTTP 200, allowed, and a patch exactly when patched. Fully
// decoded (once per body, before the clock runs) or, while the clock
// runs, read cheaply from the bytes.
func checkAnswer(b *testing.B, rec *httptest.ResponseRecorder, patched, decode bool) {
	if rec.Code != http.StatusOK {
		b.Errorf("HTTP %d: %s", rec.Code, rec.Body)
		return
	}
	if !decode {
		body := rec.Body.Bytes()
		if !bytes.Contains(body, []byte(`"allowed":true`)) || bytes.Contains(body, []byte(`"patch":`)) != patched {
			b.Errorf("answer %s: want allowed, patched %v", body, patched)
		}
		return
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		b.Errorf("answer %s: %v", rec.Body, err)
		return
	}
	if !out.Response.Allowed || (len(out.Response.Patch) > 0) != patched {
		b.Errorf("allowed %v, patch %q: want allowed, patched %v", out.Response.Allowed, out.Response.Patch, patched)
	}
}

// BenchmarkPodAdmission50Concurrent: each iteration is 50 admissions at
// once through the controller's webhook server (review.Server with its
// default bounds: 4 reviews decoded at once, the rest wait for a slot),
// AdmissionReview JSON in, answer out, for each kind the webhook sees of a
// 64-node TrainJob, and a node pod that must pass untouched. p50/p99/max
// are per admission, server-side (queueing for a decode slot included);
// allocs and bytes per admission.
func BenchmarkPodAdmission50Concurrent(b *testing.B) {
	const concurrent = 50
	for _, c := range benchCases(b, concurrent) {
		b.Run(c.name, func(b *testing.B) {
			h := benchServer(b)
			for _, body := range c.bodies {
				checkAnswer(b, serve(h, c.path, body), c.patched, true) // warm, and checked
			}
			lat := make([]time.Duration, 0, b.N*concurrent)
			burst := make([]time.Duration, 0, b.N*concurrent)
			var mu sync.Mutex
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for range b.N {
				var wg sync.WaitGroup
				start := make(chan struct{})
				var released time.Time
				for i := range concurrent {
					wg.Go(func() {
						<-start
						t0 := time.Now()
						rec := serve(h, c.path, c.bodies[i])
						end := time.Now()
						checkAnswer(b, rec, c.patched, false)
						mu.Lock()
						lat = append(lat, end.Sub(t0))
						burst = append(burst, end.Sub(released))
						mu.Unlock()
					})
				}
				released = time.Now()
				close(start)
				wg.Wait()
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			reportLatency(b, lat, "")
			reportLatency(b, burst, "burst-")
			b.ReportMetric(0, "ns/op")
			n := float64(len(lat))
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/admission")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/admission")
			b.ReportMetric(float64(len(c.bodies[0])), "review-bytes")
		})
	}
}

// reportLatency reports p50, p99 and max of lat in ms, each metric's
// name prefixed.
func reportLatency(b *testing.B, lat []time.Duration, prefix string) {
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), prefix+"p50-ms")
	b.ReportMetric(q(0.99), prefix+"p99-ms")
	b.ReportMetric(q(1), prefix+"max-ms")
}

// BenchmarkPodAdmission: one admission at a time through the same
// server, per kind: the handler's own cost (ns/op, allocs/op).
func BenchmarkPodAdmission(b *testing.B) {
	for _, c := range benchCases(b, 1) {
		b.Run(c.name, func(b *testing.B) {
			h := benchServer(b)
			checkAnswer(b, serve(h, c.path, c.bodies[0]), c.patched, true)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if rec := serve(h, c.path, c.bodies[0]); rec.Code != http.StatusOK {
					b.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// benchServer is the controller's webhook server (default bounds) with
// both mutating handlers, as controller.registerWebhooks sets them up.
func benchServer(b *testing.B) http.Handler {
	s := review.NewServer(review.Options{Log: logr.Discard()})
	m := benchMutator(b)
	s.RegisterAdmission(Path, m)
	s.RegisterAdmission(PodPath, m.Pods())
	return s.WebhookMux()
}

func merged(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
