package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/verdict"
)

// DRA jobs judged by the controller's Pending watchdog and validating
// webhook on the devices published in ResourceSlices, as NVIDIA's DRA
// driver v0.4.1 publishes them, with the real kube-scheduler allocating
// claims: the same verdicts, rule IDs and text as `rankgate diagnose`
// (dra_diagnose_test.go).

// migSlice publishes, on node, the driver's slice of one H100 split into
// seven 1g.10gb MIG devices and the DeviceClass mig.nvidia.com
// (cluster/testdata/dra/02), and returns that file's claim template (a
// 7g.80gb device: none matches) in namespace ns, not created.
func migSlice(t testing.TB, node, ns string) *resourcev1.ResourceClaimTemplate {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "integrations", "kubernetes", "cluster", "testdata", "dra", "02-claim-profile-mismatch.yaml"))
	require.NoError(t, err)
	var objs []client.Object
	var tmpl *resourcev1.ResourceClaimTemplate
	for _, doc := range strings.Split(strings.ReplaceAll(string(data), "dgx-h100-1", node), "\n---\n") {
		switch {
		case strings.Contains(doc, "\nkind: DeviceClass\n") && strings.Contains(doc, "name: mig.nvidia.com"):
			dc := &resourcev1.DeviceClass{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), dc))
			objs = append(objs, dc)
		case strings.Contains(doc, "\nkind: ResourceSlice\n"):
			s := &resourcev1.ResourceSlice{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), s))
			objs = append(objs, s)
		case strings.Contains(doc, "\nkind: ResourceClaimTemplate\n"):
			tmpl = &resourcev1.ResourceClaimTemplate{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), tmpl))
			tmpl.Namespace = ns
		}
	}
	require.Len(t, objs, 2)
	require.NotNil(t, tmpl)
	draObjects(t, objs...)
	return tmpl
}

// claimTemplate creates a claim template in ns asking one device of class
// where the selector holds.
func claimTemplate(t testing.TB, ns, name, class, selector string) *resourcev1.ResourceClaimTemplate {
	t.Helper()
	exact := &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}
	if selector != "" {
		exact.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: selector}}}
	}
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: exact}}}}}}
	require.NoError(t, k8s.Create(context.Background(), tmpl))
	return tmpl
}

// withClaimFrom makes a rank pod get its device from a claim made from
// the template, instead of a device-plugin resource.
func withClaimFrom(tmpl string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl)}}
		claims := corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
		p.Spec.InitContainers[0].Resources, p.Spec.Containers[0].Resources = claims, claims
	}
}

// podClaim does what kube-controller-manager's resourceclaim controller
// (not running here) does for a pod's claim from a template: it creates
// the claim, owned by the pod, and names it in the pod's status.
func podClaim(t testing.TB, p *corev1.Pod, tmpl *resourcev1.ResourceClaimTemplate) {
	t.Helper()
	ctx := context.Background()
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: p.Name + "-gpu-x7k2q", Namespace: p.Namespace,
		Annotations:     map[string]string{"resource.kubernetes.io/pod-claim-name": "gpu"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: tmpl.Spec.Spec}
	require.NoError(t, k8s.Create(ctx, claim))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), claim) })
	for try := 0; ; try++ {
		f := &corev1.Pod{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(p), f))
		f.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}}
		err := k8s.Status().Update(ctx, f)
		if err == nil || !apierrors.IsConflict(err) || try > 5 {
			require.NoError(t, err)
			return
		}
	}
}

// claimJob creates a PyTorchJob (master + 1 worker) whose pods get one
// device each from a claim made from tmpl, on node.
func claimJob(t testing.TB, ns, name, node string, tmpl *resourcev1.ResourceClaimTemplate) (*kubeflowv1.PyTorchJob, []*corev1.Pod) {
	t.Helper()
	job := pytorchJob(t, ns, name, true, 1, nil)
	var pods []*corev1.Pod
	for _, rt := range []string{"master", "worker"} {
		p := rankPod(t, job, rt, 0, "", "", withClaimFrom(tmpl.Name), scheduled, onNode(node))
		podClaim(t, p, tmpl)
		pods = append(pods, p)
	}
	return job, pods
}

// holdGPU creates a pod outside any job whose claim (ResourceClaim
// <name>-gpu) asks one device of class on node, and waits until the
// scheduler allocated the claim.
func holdGPU(t testing.TB, ns, name, node, class string) {
	t.Helper()
	ctx := context.Background()
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu", Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
		}}}}}
	require.NoError(t, k8s.Create(ctx, claim))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), claim) })
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		NodeSelector:   map[string]string{"pending-test": node},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}},
		Containers: []corev1.Container{{Name: "hold", Image: "busybox",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
	}}
	scheduled(p)
	require.NoError(t, k8s.Create(ctx, p))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
	require.Eventually(t, func() bool {
		c := &resourcev1.ResourceClaim{}
		return k8s.Get(ctx, client.ObjectKeyFromObject(claim), c) == nil && c.Status.Allocation != nil
	}, 60*time.Second, 200*time.Millisecond, "the scheduler did not allocate %s's claim", name)
}

// draNode is a Ready node without device-plugin GPUs, labelled for the
// rank pods' node selector (onNode).
func draNode(t testing.TB, node string) {
	t.Helper()
	gpuNode(t, node, "example.com/none", 0)
	realNode(t, node, nil, map[string]string{"pending-test": node})
}

const nearest1g10gb = "no device matches; nearest: 7 x MIG 1g.10gb of NVIDIA H100 80GB HBM3 (16 SMs, 9984Mi, driver 580.126.20) on "

// (d) Claims whose selectors no published device satisfies (a 7g.80gb
// device on an H100 split into seven 1g.10gb): the real scheduler leaves
// both ranks Pending; the watchdog suspends the job within the default
// grace with SHAPE_MISMATCH naming the nearest devices, as diagnose does.
func TestE2EPendingDRANoDeviceSuspended(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-dra-nodev", true)
	startScheduler(t)
	node := "pend-dra-nodev"
	draNode(t, node)
	tmpl := migSlice(t, node, ns)
	require.NoError(t, k8s.Create(context.Background(), tmpl))
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	job, a, took := hopelessClaimJob(t, c, ns, "nodev", node, tmpl)
	require.NotContains(t, a[contract.AnnotationRules], verdict.RuleDRANotJudged)
	require.Contains(t, a[contract.AnnotationReason], "no device published in any ResourceSlice can serve a pod's DRA requests")
	require.Contains(t, a[contract.AnnotationReason], "profile == '7g.80gb': "+nearest1g10gb+node)
	ev := jobEvents(t, job)
	require.Len(t, ev["PendingFailed"], 1, "%v", ev)
	require.Contains(t, ev["PendingFailed"][0], "job suspended: SHAPE_MISMATCH")
	t.Logf("suspended after %s\nreason: %s", took.Round(time.Millisecond), a[contract.AnnotationReason])
}

// (e) Every device the job's claims match is held by another pod's
// allocated claim: the job waits, never suspended, and
// rankgate.io/waiting-for names the holders, as diagnose does.
func TestE2EPendingDRAWaitsForHolders(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-dra-held", true)
	startScheduler(t)
	node := "pend-dra-held"
	draNode(t, node)
	draObjects(t, clustertest.DeviceClass("gpu.nvidia.com", ""), clustertest.GPUSlice(node,
		clustertest.DRAGPU{UUID: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80},
		clustertest.DRAGPU{UUID: "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80}))
	holders := []string{"holder-a", "holder-b"}
	for _, h := range holders {
		holdGPU(t, ns, h, node, "gpu.nvidia.com")
	}
	tmpl := claimTemplate(t, ns, "h100", "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'")
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, pods := claimJob(t, ns, "held", node, tmpl)
	for _, p := range pods {
		waitUnschedulable(t, p)
	}
	var wf string
	require.Eventually(t, func() bool { wf = jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return wf != "" }, 20*time.Second, 100*time.Millisecond, c.logs.String())
	require.True(t, strings.HasPrefix(wf, verdict.RuleWaitCapacity+": "), wf)
	require.Contains(t, wf, "other allocated claims hold the matching devices")
	for _, h := range holders {
		require.Contains(t, wf, "ResourceClaim "+ns+"/"+h+"-gpu (pod "+ns+"/"+h+") holds gpu-")
	}
	// A change of the published devices re-judges the job: still waiting.
	s := &resourcev1.ResourceSlice{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Name: node + "-" + clustertest.NVIDIADRADriver + "-0"}, s))
	s.Spec.Pool.Generation++
	require.NoError(t, k8s.Update(context.Background(), s))
	time.Sleep(3 * time.Second)
	require.False(t, isSuspended(t, job), "a waiting DRA job was suspended:\n%s", c.logs.String())
	require.Empty(t, jobAnnotations(t, job)[contract.AnnotationVerdict])
	ev := jobEvents(t, job)
	require.Empty(t, ev["PendingFailed"], "%v", ev)
	require.NotEmpty(t, ev["PendingWaiting"], "%v", ev)
	t.Logf("waiting-for: %s", wf)
}

// (f) A PyTorchJob whose 2 pods ask nvidia.com/gpu: 1 each, which a
// DeviceClass maps (extendedResourceName), on a node whose ResourceSlice
// holds two H100s, one held by another pod's claim: judged on the DRA
// devices, never as "not offered". The scheduler serves the master; the
// worker waits for the held GPU, and rankgate.io/waiting-for names the
// claims holding both GPUs. Past the grace the job is never suspended.
func TestE2EPendingDRAExtendedResourceWaits(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-dra-ext", true)
	startScheduler(t)
	node := "pend-dra-h100"
	draNode(t, node)
	draObjects(t, clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu"), clustertest.GPUSlice(node,
		clustertest.DRAGPU{UUID: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80},
		clustertest.DRAGPU{UUID: "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80}))
	holdGPU(t, ns, "holder", node, "gpu.nvidia.com")
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, pods := schedJob(t, ns, "ext", nil, 1, "nvidia.com/gpu", 1, onNode(node))
	// One of the two ranks gets the free GPU (the scheduler serves
	// nvidia.com/gpu from the DeviceClass), the other waits.
	var waiting *corev1.Pod
	require.Eventually(t, func() bool {
		bound, pending := 0, 0
		for _, p := range pods {
			f := &corev1.Pod{}
			require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(p), f))
			switch {
			case f.Spec.NodeName == node:
				bound++
			case unschedulable(f):
				pending++
				waiting = f
			}
		}
		return bound == 1 && pending == 1
	}, 60*time.Second, 200*time.Millisecond, "the scheduler did not bind one rank and leave the other pending")
	var wf string
	require.Eventually(t, func() bool { wf = jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return wf != "" }, 20*time.Second, 100*time.Millisecond, c.logs.String())
	require.True(t, strings.HasPrefix(wf, verdict.RuleWaitCapacity+": "), wf)
	require.Contains(t, wf, "nvidia.com/gpu: 1 from DeviceClass gpu.nvidia.com")
	require.Contains(t, wf, "ResourceClaim "+ns+"/holder-gpu (pod "+ns+"/holder) holds gpu-")
	require.NotContains(t, wf, "offers no NVIDIA GPU")
	for i := 0; i < 3; i++ {
		labelNode(t, node, map[string]string{"resync": fmt.Sprint(i)})
		time.Sleep(time.Second)
	}
	require.False(t, isSuspended(t, job), "a DRA job was suspended:\n%s", c.logs.String())
	require.Empty(t, jobAnnotations(t, job)[contract.AnnotationVerdict])
	require.Empty(t, jobEvents(t, job)["PendingFailed"])
	t.Logf("%s waits: %s", waiting.Name, wf)
}

// (d, f) The controller's validating webhook on DRA jobs, with the
// default policies: a job whose claim template asks a MIG device no
// published device satisfies is refused with SHAPE_MISMATCH naming the
// nearest devices, as a job asking a MIG resource no node offers is; a
// job whose template asks a published MIG profile, and one asking
// nvidia.com/gpu that a DeviceClass serves from published H100s, are
// admitted.
func TestE2EControllerValidatesDRAJobs(t *testing.T) {
	webhookController(t, "rankgate-tls-dra", controller.Options{WebhookOptions: controller.WebhookOptions{AdmissionPolicies: validate.DefaultPolicies()}})
	ctx := context.Background()
	ns := newNamespace(t, "e2e-wh-dra", true)
	node := "e2e-wh-dra-mig"
	draNode(t, node)
	tmpl := migSlice(t, node, ns)
	require.NoError(t, k8s.Create(ctx, tmpl))
	fits := claimTemplate(t, ns, "mig-1g", "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")
	ext := "e2e-wh-dra-h100"
	draNode(t, ext)
	draObjects(t, clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu"), clustertest.GPUSlice(ext,
		clustertest.DRAGPU{UUID: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80},
		clustertest.DRAGPU{UUID: "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80}))

	claimed := func(name, tmpl string) *kubeflowv1.PyTorchJob {
		j := draPyTorchJob(ns, name, "", 0)
		for _, rs := range j.Spec.PyTorchReplicaSpecs {
			spec := &rs.Template.Spec
			spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl)}}
			spec.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
		}
		return j
	}
	// The webhook answers from the controller's caches, which trail the
	// API server by a moment: a refusal is waited for.
	refused := func(j *kubeflowv1.PyTorchJob) error {
		var err error
		require.Eventually(t, func() bool {
			err = k8s.Create(ctx, j.DeepCopy())
			if err == nil {
				_ = k8s.Delete(ctx, j.DeepCopy())
			}
			return err != nil
		}, 30*time.Second, 500*time.Millisecond, "the job was admitted")
		return err
	}
	err := refused(claimed("no-device", tmpl.Name))
	require.True(t, apierrors.IsForbidden(err), "%v", err)
	require.Contains(t, err.Error(), verdict.RuleShapeMismatch)
	require.Contains(t, err.Error(), "Fix:")
	require.Contains(t, err.Error(), "nearest: 7 x MIG 1g.10gb of NVIDIA H100 80GB HBM3")

	// The same problem through the device plugin: refused the same way.
	gpuNode(t, "e2e-wh-dra-plugin", "nvidia.com/mig-1g.10gb", 7)
	t.Cleanup(func() { _ = k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "e2e-wh-dra-plugin"}}) })
	err = refused(draPyTorchJob(ns, "no-mig-shape", "nvidia.com/mig-5g.999gb", 1))
	require.True(t, apierrors.IsForbidden(err), "%v", err)
	require.Contains(t, err.Error(), verdict.RuleShapeMismatch)

	good := claimed("mig-fits", fits.Name)
	require.NoError(t, k8s.Create(ctx, good))
	t.Cleanup(func() { _ = k8s.Delete(ctx, good) })
	viaClass := draPyTorchJob(ns, "ext-gpu", "nvidia.com/gpu", 1)
	require.NoError(t, k8s.Create(ctx, viaClass))
	t.Cleanup(func() { _ = k8s.Delete(ctx, viaClass) })
}

// draPyTorchJob is a PyTorchJob of a master and a worker whose containers
// ask n of res (nothing when res is "").
func draPyTorchJob(ns, name, res string, n int64) *kubeflowv1.PyTorchJob {
	c := corev1.Container{Name: "pytorch", Image: "nvcr.io/nvidia/pytorch:25.10-py3", Command: []string{"torchrun", "train.py"}}
	if res != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}
	}
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	return &kubeflowv1.PyTorchJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: *tmpl.DeepCopy()},
			kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(1)), Template: *tmpl.DeepCopy()},
		}},
	}
}

// hopelessClaimJob creates claimJob's job on node with tmpl, whose pods no
// device can serve: it returns the job once the watchdog suspended it
// (within the grace and a few seconds) with SHAPE_MISMATCH, its applied
// annotations, and how long it took.
func hopelessClaimJob(t *testing.T, c *ctrl, ns, name, node string, tmpl *resourcev1.ResourceClaimTemplate) (client.Object, map[string]string, time.Duration) {
	t.Helper()
	start := time.Now()
	job, pods := claimJob(t, ns, name, node, tmpl)
	for _, p := range pods {
		waitUnschedulable(t, p)
	}
	require.Eventually(t, func() bool { return isSuspended(t, job) }, controller.DefaultPendingGrace+15*time.Second, 100*time.Millisecond, c.logs.String())
	took := time.Since(start)
	require.Less(t, took, controller.DefaultPendingGrace+10*time.Second, "not within grace + a few seconds")
	a := appliedVerdict(t, job)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Equal(t, controller.ActionSuspend, a[contract.AnnotationAction])
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
	return job, a, took
}
