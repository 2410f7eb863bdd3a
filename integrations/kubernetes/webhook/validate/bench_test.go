package validate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// h100Full: 8 full H100s, MIG disabled, mixed strategy.
func h100Full(name string) corev1.Node {
	return gpuNode(name, map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
		"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success",
	}, map[string]int{"nvidia.com/gpu": 8})
}

// benchFleet: 64 GPU nodes (32 A100 with all-1g.10gb, 32 full H100) and
// 64 CPU nodes, as the controller's node cache would hold them.
func benchFleet() []corev1.Node {
	var out []corev1.Node
	for i := range 32 {
		out = append(out, a100Mixed(fmt.Sprintf("a100-%02d", i)), h100Full(fmt.Sprintf("h100-%02d", i)))
	}
	for i := range 64 {
		out = append(out, gpuNode(fmt.Sprintf("cpu-%02d", i), nil, nil))
	}
	for i := range out {
		out[i].ResourceVersion = fmt.Sprint(1000 + i)
	}
	return out
}

// benchJobs are realistic jobs: a MIG PyTorchJob with torchrun, a
// full-GPU PyTorchJob of 16 pods, an MPIJob, and a hopeless one (denied).
func benchJobs() []runtime.Object {
	env := func(s *corev1.PodSpec) {
		s.Containers[0].Env = append(s.Containers[0].Env,
			corev1.EnvVar{Name: "NCCL_DEBUG", Value: "INFO"}, corev1.EnvVar{Name: "OMP_NUM_THREADS", Value: "8"})
	}
	return []runtime.Object{
		kubeflowtest.MakePyTorchJob("mig", "ml").Master().Workers(7).Request("nvidia.com/mig-1g.10gb", "1").Request("cpu", "4").Request("memory", "32Gi").
			PodSpec(torchrun("--nproc-per-node=1", "--rdzv-backend=c10d", "train.py")).PodSpec(env).Obj(),
		kubeflowtest.MakePyTorchJob("full", "ml").Master().Workers(15).Request("nvidia.com/gpu", "8").Request("cpu", "90").Request("memory", "900Gi").
			PodSpec(torchrun("--nproc-per-node=8", "train.py", "--bf16")).PodSpec(env).Obj(),
		kubeflowtest.MakeMPIJob("mpi", "ml").Workers(8).WorkerRequest("nvidia.com/gpu", "8").Obj(),
		kubeflowtest.MakePyTorchJob("bad", "ml").Master().Workers(3).Request("nvidia.com/mig-1g.5gb", "1").Obj(),
	}
}

func reviewBody(b *testing.B, obj runtime.Object, uid int) []byte {
	j, err := kubeflow.FromObject(obj)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		b.Fatal(err)
	}
	gvk := j.GVK()
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID(fmt.Sprint(uid)), Operation: admissionv1.Create, Namespace: j.Namespace(), Name: j.Name(),
			Kind:     metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
			Resource: metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: "jobs"},
			Object:   runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(ar)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkAdmission50Concurrent: each iteration is 50 admissions at once
// (AdmissionReview JSON in, through the webhook's HTTP handler, answer
// out), each judging its job against the 128-node fleet with every check
// on. p50/p99/max are per admission, server-side.
func BenchmarkAdmission50Concurrent(b *testing.B) {
	const concurrent = 50
	fleet := benchFleet()
	wh := &admission.Webhook{Handler: validate.NewHandler(validate.Options{
		Nodes: func(context.Context) ([]corev1.Node, error) { return fleet, nil },
	})}
	jobs := benchJobs()
	bodies := make([][]byte, concurrent)
	for i := range bodies {
		bodies[i] = reviewBody(b, jobs[i%len(jobs)], i)
	}
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				t0 := time.Now()
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, validate.Path, bytes.NewReader(bodies[i]))
				req.Header.Set("Content-Type", "application/json")
				wh.ServeHTTP(rec, req)
				d := time.Since(t0)
				if rec.Code != http.StatusOK {
					b.Errorf("HTTP %d: %s", rec.Code, rec.Body)
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkAdmission is one admission alone (the MIG PyTorchJob).
func BenchmarkAdmission(b *testing.B) {
	fleet := benchFleet()
	h := validate.NewHandler(validate.Options{Nodes: func(context.Context) ([]corev1.Node, error) { return fleet, nil }})
	req := request(b, benchJobs()[0], admissionv1.Create)
	b.ReportAllocs()
	for range b.N {
		if resp := h.Handle(context.Background(), req); !resp.Allowed {
			b.Fatal(resp.Result.Message)
		}
	}
}

// BenchmarkAdmissionFleetSource: one admission of the MIG PyTorchJob
// against the 128-node fleet as the controller served it before and as it
// serves it now: nodes listed from the manager's cache for each
// admission (a deep copy of every node, as controller-runtime's cached
// client lists them) and prepared once per change of the nodes, against
// the controller's node model passed as the prepared cluster (Fleet).
func BenchmarkAdmissionFleetSource(b *testing.B) {
	fleet := benchFleet()
	listed := func(context.Context) ([]corev1.Node, error) {
		out := make([]corev1.Node, len(fleet))
		for i := range fleet {
			fleet[i].DeepCopyInto(&out[i])
		}
		return out, nil
	}
	bld := cluster.NewBuilder()
	gpuNodes := 0
	for i := range fleet {
		if err := bld.AddNode(&fleet[i]); err != nil {
			b.Fatal(err)
		}
		if len(fleet[i].Status.Allocatable) > 0 {
			gpuNodes++
		}
	}
	engine := schedule.New()
	cl := engine.NewCluster(bld.Nodes())
	for name, o := range map[string]validate.Options{
		"nodes-listed": {Nodes: listed, Engine: engine},
		"fleet":        {Nodes: listed, Engine: engine, Fleet: func(context.Context) (*schedule.Cluster, int, error) { return cl, gpuNodes, nil }},
	} {
		b.Run(name, func(b *testing.B) {
			h := validate.NewHandler(o)
			req := request(b, benchJobs()[0], admissionv1.Create)
			b.ReportAllocs()
			for range b.N {
				if resp := h.Handle(context.Background(), req); !resp.Allowed {
					b.Fatal(resp.Result.Message)
				}
			}
		})
	}
}

// BenchmarkAdmissionDRANodes: one admission of a PyTorchJob whose ranks
// get 1g.10gb MIG devices through a claim template (judged on the
// published devices: cluster/testdata/dra/02), in a cluster of that DRA
// node and the 128-node fleet, with the prepared fleet (Fleet) as the
// controller passes it: the nodes the DRA judgement needs listed for the
// admission (a deep copy of each, as controller-runtime's cached client
// lists them) or handed over by the DRA source (the controller's caches,
// not copied).
func BenchmarkAdmissionDRANodes(b *testing.B) {
	ctx := context.Background()
	ns, dcs, dra, job := draDump(b, mig1gTemplate)
	for _, rs := range job.Spec.PyTorchReplicaSpecs {
		rs.Template.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("mig-1g")
	}
	dumped, err := ns(ctx)
	if err != nil {
		b.Fatal(err)
	}
	all := append(benchFleet(), dumped...)
	listed := func(context.Context) ([]corev1.Node, error) {
		out := make([]corev1.Node, len(all))
		for i := range all {
			all[i].DeepCopyInto(&out[i])
		}
		return out, nil
	}
	objs, err := dra(ctx)
	if err != nil {
		b.Fatal(err)
	}
	withNodes := *objs
	bld := cluster.NewBuilder()
	gpuNodes := 0
	for i := range all {
		withNodes.Nodes = append(withNodes.Nodes, &all[i])
		if err := bld.AddNode(&all[i]); err != nil {
			b.Fatal(err)
		}
		if len(all[i].Status.Allocatable) > 0 {
			gpuNodes++
		}
	}
	engine := schedule.New()
	cl := engine.NewCluster(bld.Nodes())
	fleet := func(context.Context) (*schedule.Cluster, int, error) { return cl, gpuNodes, nil }
	for _, tc := range []struct {
		name string
		src  *validate.DRAObjects
	}{{"nodes-listed", objs}, {"nodes-from-source", &withNodes}} {
		b.Run(tc.name, func(b *testing.B) {
			h := validate.NewHandler(validate.Options{Nodes: listed, Fleet: fleet, Engine: engine, DeviceClasses: dcs,
				DRAObjects: func(context.Context) (*validate.DRAObjects, error) { return tc.src, nil }})
			req := request(b, job, admissionv1.Create)
			b.ReportAllocs()
			for range b.N {
				if resp := h.Handle(ctx, req); !resp.Allowed {
					b.Fatal(resp.Result.Message)
				}
			}
		})
	}
}
