package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
)

// TestBenchPodWebhookEndToEnd: the time the admission webhooks add to
// bringing up a 64-node TrainJob's pods (issue #23). rankgate's mutating
// webhooks are called for the TrainJob, the JobSet (whose `node` template
// they label) and each of the 64 `node` pods, which get the init container
// as they are made (docs/controller.md). So each round creates what the
// user and the controllers create,
// in order, against the real API server, as they would: the TrainJob (the
// user), its JobSet (the Trainer: trainjob.Derive of the torch-distributed
// runtime, the labels of the runtime patches, owned by the TrainJob), the
// `node` Job (the JobSet controller) and its 64 pods (the Job controller:
// slow-start batches of 1, 2, 4, ... created at once, each pod labelled,
// annotated, indexed and owned as it does it). The controllers' own
// reaction times are not in it, nor their client rate limits: the client
// is unthrottled, so the time measured is the API server's and the
// webhooks'.
//
// RANKGATE_BENCH_ROUNDS rounds (default 5, after one not counted) of
// three phases against the same API server and the same running
// controller: with the shipped webhook configurations installed (W);
// with them deleted and the API server seen to stop calling them, a
// TrainJob whose runtime carries the gate (G: the JobSet's node template
// has the init container the Pod webhook adds to a pod, and the job
// label: the same pods, no webhook calls); and one not gated at all (B). Even rounds run
// W G B, odd ones G B W, each phase after a pause of a second; the
// configurations are put back before W and a job seen mutated again.
// Reported for each phase: the TrainJob and JobSet create calls, per-pod
// create p50/p99 (all rounds), the pods' creation (first call to last
// answer) and the whole chain (TrainJob create to the last pod), median
// and max over the rounds; and the differences: added (W - B), of it
// webhookCalls (W - G) and gatedPods (G - B: larger pods, and the
// controller's work on gated pods). Pods carry the init container in W
// and G, not in B.
// RANKGATE_BENCH_TRAINJOB_NODES changes the node count (default 64).
//
//	RANKGATE_BENCH=1 go test ./integrations/kubernetes/e2e/ -run TestBenchPodWebhookEndToEnd -count=1 -v
func TestBenchPodWebhookEndToEnd(t *testing.T) {
	benchOnly(t)
	rounds, nodes := envInt("RANKGATE_BENCH_ROUNDS", 5), envInt("RANKGATE_BENCH_TRAINJOB_NODES", 64)
	ctx := context.Background()
	c, _ := webhookController(t, "rankgate-tls-bench-podwh", controller.Options{})
	// A fleet the pods fit (8 GPUs each), so that the Pending watchdog
	// leaves them be.
	for i := range nodes {
		name := fmt.Sprintf("bench-podwh-node-%d", i)
		gpuNode(t, name, "nvidia.com/gpu", 8)
		t.Cleanup(func() { _ = k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
	}
	cfg := rest.CopyConfig(restCfg)
	cfg.QPS, cfg.Burst = -1, 0
	cl, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	require.NoError(t, err)
	rt := torchRuntime(t)
	ns := newNamespace(t, "bench-podwh", true)
	configs := webhookConfigs(t)
	// The gated node template of the gated-from-the-runtime phase: what
	// the webhooks gave a pod of a TrainJob created now.
	first := createTrainJobPods(t, cl, rt, ns, "template", nodes, nil)
	require.Equal(t, "rank-init", first.template.Labels[contract.LabelInject], "the webhook did not label the node template")
	require.NotNil(t, first.gatedPod, "the Pod webhook gated no pod")
	gate := corev1.PodTemplateSpec{Spec: *first.gatedPod}

	// The phases run W G B in even rounds and G B W in odd ones (one
	// change of the configurations a round), each after a pause, so that
	// none always follows a change of the configurations or the deletion
	// of another phase's objects. Round -1 warms them up, not counted.
	installed := true
	install := func(on bool) {
		switch {
		case on && !installed:
			restoreWebhookConfigs(t, configs)
			waitInjected(t, c)
		case !on && installed:
			deleteWebhookConfigs(t)
			probeNS := newNamespace(t, "bench-podwh-probe", true)
			require.Eventually(t, func() bool {
				lat, mutated := createJobs(t, cl, probeNS, fmt.Sprintf("p%d", time.Now().UnixNano()), 1, 1)
				return len(lat) == 1 && mutated == 0
			}, 30*time.Second, 200*time.Millisecond, "the webhooks still answer after their configurations were deleted")
		}
		installed = on
	}
	phase := func(name string, gate *corev1.PodTemplateSpec) trainJobRound {
		time.Sleep(time.Second)
		return createTrainJobPods(t, cl, rt, ns, name, nodes, gate)
	}
	var with, gated, without []trainJobRound
	for r := -1; r < rounds; r++ {
		var w, g, wo trainJobRound
		withPhase := func() {
			install(true)
			w = phase(fmt.Sprintf("with-%d", r+1), nil)
			require.Equal(t, nodes, w.mutated, "round %d: pods without the init container with the webhooks installed", r)
			require.True(t, w.patched, "round %d: the TrainJob did not get the webhook's runtime patch", r)
		}
		if r%2 == 0 || r < 0 {
			withPhase()
		}
		install(false)
		g = phase(fmt.Sprintf("gated-%d", r+1), &gate)
		require.Equal(t, nodes, g.mutated, "round %d: pods of a runtime that carries the gate without it", r)
		require.False(t, g.patched, "round %d: the webhook was called without its configurations", r)
		wo = phase(fmt.Sprintf("without-%d", r+1), nil)
		require.Zero(t, wo.mutated, "round %d: pods with the init container without the webhooks", r)
		require.False(t, wo.patched, "round %d: the webhook was called without its configurations", r)
		if r%2 != 0 && r >= 0 {
			withPhase()
		}
		if r < 0 {
			continue
		}
		with, gated, without = append(with, w), append(gated, g), append(without, wo)
		t.Logf("round %d: %d pods in %s with, %s gated from the runtime, %s without; TrainJob to last pod %s, %s, %s", r,
			nodes, w.pods, g.pods, wo.pods, w.chain, g.chain, wo.chain)
	}

	summary := map[string]any{"rounds": rounds, "nodes": nodes, "cpus": runtime.NumCPU()}
	pw, pg, pwo := summarizeRounds(with), summarizeRounds(gated), summarizeRounds(without)
	summary["withWebhooks"], summary["gatedFromRuntime"], summary["withoutWebhooks"] = pw, pg, pwo
	diff := func(a, b map[string]string) map[string]string {
		out := map[string]string{}
		for _, k := range []string{"trainJobCreateP50", "jobSetCreateP50", "podCreateP50", "podCreateP99", "podsMedian", "chainMedian"} {
			out[k] = msDiff(a[k], b[k])
		}
		return out
	}
	// added: with the webhooks against without (ungated pods); of it, the
	// webhook calls (with against the same gated pods without calls) and
	// the gated pods themselves (larger, and the controller's work on them).
	summary["added"], summary["webhookCalls"], summary["gatedPods"] = diff(pw, pwo), diff(pw, pg), diff(pg, pwo)
	b, _ := json.Marshal(summary)
	t.Logf("a %d-node TrainJob's pods, %d rounds: %s", nodes, rounds, b)
	writeBenchResult(t, "podwebhook-end-to-end", b)
}

// trainJobRound is what one TrainJob's creation took.
type trainJobRound struct {
	trainJob, jobSet, job time.Duration
	podLat                []time.Duration
	pods                  time.Duration          // first pod create call to the last answer
	chain                 time.Duration          // TrainJob create call to the last pod's answer
	mutated               int                    // pods that carry the rankgate init container and the job-name label
	patched               bool                   // the TrainJob came back with the webhook's runtime patch
	template              corev1.PodTemplateSpec // the node pod template of the JobSet, as created
	gatedPod              *corev1.PodSpec        // a pod that came back with the init container
}

func summarizeRounds(rs []trainJobRound) map[string]string {
	var tj, js, pods, chain, lat []time.Duration
	for _, r := range rs {
		tj, js = append(tj, r.trainJob), append(js, r.jobSet)
		pods, chain = append(pods, r.pods), append(chain, r.chain)
		lat = append(lat, r.podLat...)
	}
	return map[string]string{
		"trainJobCreateP50": msStr(percentile(tj, .5)), "jobSetCreateP50": msStr(percentile(js, .5)),
		"podCreateP50": msStr(percentile(lat, .5)), "podCreateP99": msStr(percentile(lat, .99)), "podCreateMax": msStr(percentile(lat, 1)),
		"podsMedian": msStr(percentile(pods, .5)), "podsMax": msStr(percentile(pods, 1)),
		"chainMedian": msStr(percentile(chain, .5)), "chainMax": msStr(percentile(chain, 1)),
	}
}

func msStr(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// msDiff is a - b of two msStr values.
func msDiff(a, b string) string {
	var x, y float64
	_, _ = fmt.Sscanf(a, "%fms", &x)
	_, _ = fmt.Sscanf(b, "%fms", &y)
	return fmt.Sprintf("%.1fms", x-y)
}

// torchRuntime is the Trainer v2.3.0 ClusterTrainingRuntime
// torch-distributed (with a GPU request on its node container).
func torchRuntime(t *testing.T) *trainjob.Runtime {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "integrations", "kubeflow", "trainjob", "testdata", "torch-distributed.yaml"))
	require.NoError(t, err)
	js, err := yaml.YAMLToJSON(raw)
	require.NoError(t, err)
	rt, err := trainjob.DecodeRuntime(js)
	require.NoError(t, err)
	return rt
}

// createTrainJobPods creates a TrainJob of n nodes, its JobSet, its node
// Job and the Job's n pods, as the user and the controllers do, and
// deletes them after. With gate, the JobSet is made as from a runtime
// that carries the gate (configs/deploy/examples): its node template has
// gate's init container, volumes and job-name label, the JobSet the gate
// label.
func createTrainJobPods(t *testing.T, cl client.Client, rt *trainjob.Runtime, ns, name string, n int, gate *corev1.PodTemplateSpec) trainJobRound {
	t.Helper()
	ctx := context.Background()
	var r trainJobRound
	tj := benchTrainJobObject(ns, name, n)
	start := time.Now()
	require.NoError(t, cl.Create(ctx, tj))
	r.trainJob = time.Since(start)
	defer func() { _ = cl.Delete(ctx, tj) }()
	for _, p := range tj.Spec.RuntimePatches {
		r.patched = r.patched || p.Manager == contract.RuntimePatchManager
	}

	js := trainerJobSet(t, tj, rt)
	if gate != nil {
		gateFromRuntime(js, gate)
	}
	t0 := time.Now()
	require.NoError(t, cl.Create(ctx, js))
	r.jobSet = time.Since(t0)
	defer func() { _ = cl.Delete(ctx, js) }()
	for _, rj := range js.Spec.ReplicatedJobs {
		if rj.Name == "node" {
			r.template = rj.Template.Spec.Template
		}
	}

	job := jobSetNodeJob(js)
	t0 = time.Now()
	require.NoError(t, cl.Create(ctx, job))
	r.job = time.Since(t0)
	defer func() { _ = cl.Delete(ctx, job) }()
	defer func() {
		require.NoError(t, cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels{batchv1.JobNameLabel: job.Name}))
	}()

	var mu sync.Mutex
	t0 = time.Now()
	// The Job controller's slowStartBatch: batches of 1, 2, 4, ... pods
	// created at once, each after the last one's answers.
	for next, batch := 0, 1; next < n; next, batch = next+batch, batch*2 {
		size := min(batch, n-next)
		require.NoError(t, parallel(size, size, func(i int) error {
			p := jobIndexPod(job, next+i)
			s := time.Now()
			if err := cl.Create(ctx, p); err != nil {
				return err
			}
			d := time.Since(s)
			mu.Lock()
			defer mu.Unlock()
			r.podLat = append(r.podLat, d)
			if countInit(p.Spec) == 1 && p.Labels[controller.LabelJobName] == js.Name {
				r.mutated++
				if r.gatedPod == nil {
					r.gatedPod = &p.Spec
				}
			}
			return nil
		}))
	}
	r.pods, r.chain = time.Since(t0), time.Since(start)
	return r
}

// benchTrainJobObject is a TrainJob of n nodes of 8 GPUs (torchrun, 8
// processes a node) as a user writes it, with Kueue's queue label.
func benchTrainJobObject(ns, name string, n int) *trainjob.TrainJob {
	return &trainjob.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"team": "research"}},
		Spec: trainjob.Spec{
			RuntimeRef: trainjob.RuntimeRef{Name: "torch-distributed"},
			Trainer: &trainjob.Trainer{
				Image: ptr.To("nvcr.io/nvidia/pytorch:25.10-py3"), Command: []string{"torchrun", "/workspace/train.py"},
				Args: []string{"--config=configs/70b.yaml", "--bf16"},
				Env: []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "WARN"}, {Name: "NCCL_IB_HCA", Value: "mlx5"},
					{Name: "NCCL_SOCKET_IFNAME", Value: "eth0"}, {Name: "OMP_NUM_THREADS", Value: "8"}},
				NumNodes: ptr.To(int32(n)), NumProcPerNode: ptr.To(int32(8)),
				ResourcesPerNode: &corev1.ResourceRequirements{
					Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("96"),
						corev1.ResourceMemory: resource.MustParse("1000Gi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("90"), corev1.ResourceMemory: resource.MustParse("900Gi")},
				},
			},
		},
	}
}

// trainerJobSet is the JobSet the Trainer makes of tj (as the API server
// returned it) from rt: the derived spec, the labels of rt's template and
// of tj's runtime patches (rankgate.io/gate, from the webhook's patch),
// DNS hostnames, owned by tj; restartPolicy OnFailure where the runtime
// sets none, as the JobSet webhook defaults it.
func trainerJobSet(t *testing.T, tj *trainjob.TrainJob, rt *trainjob.Runtime) *jobsetapi.JobSet {
	t.Helper()
	spec, err := trainjob.Derive(tj, rt)
	require.NoError(t, err)
	spec.Network = &jobsetapi.Network{EnableDNSHostnames: ptr.To(true), Subdomain: tj.Name}
	for i := range spec.ReplicatedJobs {
		// The JobSet's own defaulting webhook (not running here).
		if ps := &spec.ReplicatedJobs[i].Template.Spec.Template.Spec; ps.RestartPolicy == "" {
			ps.RestartPolicy = corev1.RestartPolicyOnFailure
		}
	}
	labels := map[string]string{}
	for k, v := range rt.Spec.Template.Metadata.Labels {
		labels[k] = v
	}
	for _, p := range tj.Spec.RuntimePatches {
		if p.TrainingRuntimeSpec != nil && p.TrainingRuntimeSpec.Template != nil && p.TrainingRuntimeSpec.Template.Metadata != nil {
			for k, v := range p.TrainingRuntimeSpec.Template.Metadata.Labels {
				labels[k] = v
			}
		}
	}
	return &jobsetapi.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: tj.Name, Namespace: tj.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: trainjob.GroupVersion.String(), Kind: "TrainJob", Name: tj.Name, UID: tj.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: *spec,
	}
}

// jobSetNodeJob is Job 0 of js's ReplicatedJob `node` as the JobSet
// controller makes it from js as the API server returned it: the
// ReplicatedJob's Job template, its labels and annotations on the Job and
// on the pod template, the subdomain, owned by js.
func jobSetNodeJob(js *jobsetapi.JobSet) *batchv1.Job {
	var rj jobsetapi.ReplicatedJob
	for _, r := range js.Spec.ReplicatedJobs {
		if r.Name == "node" {
			rj = r
		}
	}
	name := js.Name + "-node-0"
	meta := map[string]string{
		jobset.LabelJobSetName: js.Name, jobset.LabelJobSetUID: string(js.UID), jobset.LabelReplicatedJob: "node",
		jobset.LabelJobIndex: "0", jobset.LabelJobGlobalIndex: "0", jobset.LabelRestartAttempt: "0",
		jobsetapi.ReplicatedJobReplicas: "1", jobsetapi.GlobalReplicasKey: strconv.Itoa(len(js.Spec.ReplicatedJobs)),
	}
	spec := *rj.Template.Spec.DeepCopy()
	labels, annotations := merged(rj.Template.Labels, meta), merged(rj.Template.Annotations, meta)
	spec.Template.Labels, spec.Template.Annotations = merged(spec.Template.Labels, meta), merged(spec.Template.Annotations, meta)
	if js.Spec.Network != nil {
		spec.Template.Spec.Subdomain = js.Spec.Network.Subdomain
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: js.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: jobset.GVK.GroupVersion().String(), Kind: "JobSet", Name: js.Name, UID: js.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: spec,
	}
}

// gateFromRuntime gives js's node template the init container, volumes
// and job-name label of gate (a gated node template), and js the gate
// label, as a runtime that carries them would.
func gateFromRuntime(js *jobsetapi.JobSet, gate *corev1.PodTemplateSpec) {
	js.Labels[contract.KeyGate] = "enabled"
	for i := range js.Spec.ReplicatedJobs {
		if js.Spec.ReplicatedJobs[i].Name != "node" {
			continue
		}
		pt := &js.Spec.ReplicatedJobs[i].Template.Spec.Template
		pt.Labels = merged(pt.Labels, map[string]string{controller.LabelJobName: js.Name})
		for _, c := range gate.Spec.InitContainers {
			if c.Name == webhook.InitName {
				pt.Spec.InitContainers = append([]corev1.Container{c}, pt.Spec.InitContainers...)
			}
		}
		for _, v := range gate.Spec.Volumes {
			if v.Name == webhook.TokenVolume || v.Name == webhook.CAVolume || v.Name == webhook.PodInfoVolume {
				pt.Spec.Volumes = append(pt.Spec.Volumes, v)
			}
		}
	}
}

func merged(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// jobIndexPod is the pod of completion index i of Indexed Job job (as the
// API server returned it), as the Job controller creates it: the template,
// the Job's labels (the selector's controller-uid, the job name) and the
// index as label and annotation, JOB_COMPLETION_INDEX in every container,
// the hostname of the index, a generated name, owned by the Job, the
// namespace's service account. (The
// Job controller's tracking finalizer is left out: without that
// controller nothing would remove it.)
func jobIndexPod(job *batchv1.Job, i int) *corev1.Pod {
	idx := strconv.Itoa(i)
	t := job.Spec.Template.DeepCopy()
	labels := merged(t.Labels, map[string]string{
		batchv1.ControllerUidLabel: string(job.UID), "controller-uid": string(job.UID),
		batchv1.JobNameLabel: job.Name, "job-name": job.Name, batchv1.JobCompletionIndexAnnotation: idx,
	})
	annotations := merged(t.Annotations, map[string]string{batchv1.JobCompletionIndexAnnotation: idx})
	env := corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: fmt.Sprintf("metadata.annotations['%s']", batchv1.JobCompletionIndexAnnotation)}}}
	for k := range t.Spec.InitContainers {
		t.Spec.InitContainers[k].Env = append(t.Spec.InitContainers[k].Env, env)
	}
	for k := range t.Spec.Containers {
		t.Spec.Containers[k].Env = append(t.Spec.Containers[k].Env, env)
	}
	t.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, i)
	if t.Spec.ServiceAccountName == "" {
		// What the ServiceAccount admission plugin (off in this API
		// server) does, with the namespace's service account.
		t.Spec.ServiceAccountName = serviceAccount
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: fmt.Sprintf("%s-%d-", job.Name, i), Namespace: job.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: t.Spec,
	}
}

var webhookConfigKinds = []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}

// webhookConfigs are the installed configurations (with the CA bundle the
// controller injected), to be put back after deleteWebhookConfigs.
func webhookConfigs(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, kind := range webhookConfigKinds {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("admissionregistration.k8s.io/v1")
		u.SetKind(kind)
		require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: "rankgate"}, u))
		for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"} {
			unstructured.RemoveNestedField(u.Object, "metadata", f)
		}
		out = append(out, u)
	}
	return out
}

func deleteWebhookConfigs(t *testing.T) {
	t.Helper()
	for _, kind := range webhookConfigKinds {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("admissionregistration.k8s.io/v1")
		u.SetKind(kind)
		u.SetName("rankgate")
		require.NoError(t, k8s.Delete(context.Background(), u))
	}
}

func restoreWebhookConfigs(t *testing.T, configs []*unstructured.Unstructured) {
	t.Helper()
	for _, u := range configs {
		require.NoError(t, k8s.Create(context.Background(), u.DeepCopy()))
	}
}
