package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/verdict"
)

// The real kube-scheduler allocates two H100s, published in a
// ResourceSlice as NVIDIA's DRA driver does, to two pods' claims; a third
// pod asks nvidia.com/gpu: 1, which the DeviceClass gpu.nvidia.com serves.
// `rankgate diagnose pod` on the live cluster judges it on the devices:
// it waits (WAIT_CAPACITY), and the finding names the claims and the pods
// that hold them, as the scheduler allocated them.
func TestE2EDiagnoseDRAWaitsForAllocatedClaims(t *testing.T) {
	ns := newNamespace(t, "e2e-diagnose-dra", false)
	startScheduler(t)
	node := "diag-dra-h100"
	gpuNode(t, node, "example.com/none", 0)
	realNode(t, node, nil, map[string]string{"pending-test": node})
	draObjects(t, clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu"), clustertest.GPUSlice(node,
		clustertest.DRAGPU{UUID: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80},
		clustertest.DRAGPU{UUID: "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80}))
	ctx := context.Background()

	holders := []string{"holder-a", "holder-b"}
	for _, name := range holders {
		claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu", Namespace: ns},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
			}}}}}
		require.NoError(t, k8s.Create(ctx, claim))
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{"pending-test": node},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}},
			Containers: []corev1.Container{{Name: "hold", Image: "busybox",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		}}
		scheduled(p)
		require.NoError(t, k8s.Create(ctx, p))
	}
	// The scheduler allocates each claim when it binds its pod.
	require.Eventually(t, func() bool {
		for _, name := range holders {
			c := &resourcev1.ResourceClaim{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-gpu"}, c); err != nil || c.Status.Allocation == nil {
				return false
			}
		}
		return true
	}, 60*time.Second, 200*time.Millisecond, "the scheduler did not allocate the holders' claims")

	waiter := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: ns}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"pending-test": node},
		Containers: []corev1.Container{{Name: "train", Image: "busybox", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}},
	}}
	scheduled(waiter)
	require.NoError(t, k8s.Create(ctx, waiter))
	require.Eventually(t, func() bool {
		p := &corev1.Pod{}
		return k8s.Get(ctx, client.ObjectKeyFromObject(waiter), p) == nil && unschedulable(p)
	}, 60*time.Second, 200*time.Millisecond, "the scheduler did not mark the pod unschedulable")

	var out, errb bytes.Buffer
	cmd := exec.Command(binary, "diagnose", "pod", ns+"/trainer", "--kubeconfig", kubeconfigFile(t), "-o", "json")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "diagnose: %v %s", err, errb.String())
		t.Fatalf("diagnose exit %d: %s %s", ee.ExitCode(), out.String(), errb.String())
	}
	var diag verdict.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &diag), out.String())
	var msg string
	for _, f := range diag.Findings {
		require.NotEqual(t, verdict.RuleDRANotJudged, f.Rule, f.Message)
		if f.Rule == verdict.RuleWaitCapacity {
			msg = f.Message
		}
	}
	require.NotEmpty(t, msg, "diagnose: %v\n%s", diag.RuleIDs(), out.String())
	for _, name := range holders {
		require.Contains(t, msg, "ResourceClaim "+ns+"/"+name+"-gpu (pod "+ns+"/"+name+") holds gpu-")
	}
	require.Contains(t, msg, "NVIDIA H100 80GB HBM3 (80Gi, driver 580.95.5) on "+node)
	t.Logf("diagnose: %s", msg)
}

// The NVIDIA driver's slice of one H100 split into seven 1g.10gb MIG
// devices (testdata/dra/02 of the cluster package, on this test's node);
// a pod's claim template asks a 7g.80gb device. The real scheduler leaves
// the pod Pending; live diagnose says no published device can serve it,
// naming the nearest (SHAPE_MISMATCH, exit 1).
func TestE2EDiagnoseDRAClaimNoDeviceServes(t *testing.T) {
	ns := newNamespace(t, "e2e-diagnose-dra-mig", false)
	startScheduler(t)
	node := "diag-dra-mig"
	gpuNode(t, node, "example.com/none", 0)
	realNode(t, node, nil, map[string]string{"pending-test": node})
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
	ctx := context.Background()
	require.NoError(t, k8s.Create(ctx, tmpl))

	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "llama-7g", Namespace: ns}, Spec: corev1.PodSpec{
		NodeSelector:   map[string]string{"pending-test": node},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl.Name)}},
		Containers: []corev1.Container{{Name: "train", Image: "busybox",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
	}}
	scheduled(p)
	require.NoError(t, k8s.Create(ctx, p))
	// The pod's claim from the template, as kube-controller-manager's
	// resourceclaim controller (not running here) makes it: owned by the
	// pod and named in its status.
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: p.Name + "-gpu-x7k2q", Namespace: ns,
		Annotations:     map[string]string{"resource.kubernetes.io/pod-claim-name": "gpu"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: tmpl.Spec.Spec}
	require.NoError(t, k8s.Create(ctx, claim))
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}}
	require.NoError(t, k8s.Status().Update(ctx, p))
	require.Eventually(t, func() bool {
		got := &corev1.Pod{}
		return k8s.Get(ctx, client.ObjectKeyFromObject(p), got) == nil && unschedulable(got)
	}, 60*time.Second, 200*time.Millisecond, "the scheduler did not mark the pod unschedulable")

	var out, errb bytes.Buffer
	cmd := exec.Command(binary, "diagnose", "pod", ns+"/llama-7g", "--kubeconfig", kubeconfigFile(t), "-o", "json")
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee) && ee.ExitCode() == verdict.ExitFail, "diagnose: %v %s %s", err, out.String(), errb.String())
	var diag verdict.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &diag), out.String())
	var msg string
	for _, f := range diag.Findings {
		if f.Rule == verdict.RuleShapeMismatch {
			msg = f.Message
		}
	}
	require.NotEmpty(t, msg, "diagnose: %v\n%s", diag.RuleIDs(), out.String())
	require.Contains(t, msg, "profile == '7g.80gb': no device matches; nearest: 7 x MIG 1g.10gb of NVIDIA H100 80GB HBM3 (16 SMs, 9984Mi, driver 580.126.20) on "+node)
	t.Logf("diagnose: %s", msg)
}
