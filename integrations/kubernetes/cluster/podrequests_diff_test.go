package cluster

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/rankgate/rankgate/preflight/schedule"
)

// chooser draws the shape of a random pod: math/rand for the seeded
// differential test, the fuzzer's bytes for the fuzz target.
type chooser interface{ IntN(n int) int }

// byteChooser reads choices from fuzz input; past its end every choice is 0.
type byteChooser struct{ b []byte }

func (c *byteChooser) IntN(n int) int {
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0])
	c.b = c.b[1:]
	return v % n
}

var diffResourceNames = []corev1.ResourceName{"cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "hugepages-2Mi", "ephemeral-storage"}

func randQuantity(r chooser, name corev1.ResourceName) resource.Quantity {
	switch name {
	case "cpu":
		return *resource.NewMilliQuantity(int64(r.IntN(64_001)), resource.DecimalSI)
	case "memory", "hugepages-2Mi", "ephemeral-storage":
		return *resource.NewQuantity(int64(r.IntN(1<<16))<<20, resource.BinarySI)
	}
	return *resource.NewQuantity(int64(r.IntN(9)), resource.DecimalSI)
}

func randList(r chooser, names []corev1.ResourceName) corev1.ResourceList {
	n := r.IntN(len(names) + 1)
	if n == 0 {
		return nil
	}
	out := corev1.ResourceList{}
	for range n {
		name := names[r.IntN(len(names))]
		out[name] = randQuantity(r, name)
	}
	return out
}

func randContainer(r chooser, i int) corev1.Container {
	return corev1.Container{Name: fmt.Sprint("c", i), Resources: corev1.ResourceRequirements{
		Requests: randList(r, diffResourceNames), Limits: randList(r, diffResourceNames),
	}}
}

// randPodSpec draws a pod the API server could hold: app containers,
// init containers (some of them sidecars), overhead and pod-level
// resources for the resources Kubernetes admits there (cpu, memory,
// hugepages; PodRequests reads any name there, for the controller's pod
// cache, where the library reads only those).
func randPodSpec(r chooser) corev1.PodSpec {
	var spec corev1.PodSpec
	for i := range r.IntN(4) {
		c := randContainer(r, 10+i)
		if r.IntN(2) == 0 {
			always := corev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		spec.InitContainers = append(spec.InitContainers, c)
	}
	for i := range 1 + r.IntN(3) {
		spec.Containers = append(spec.Containers, randContainer(r, i))
	}
	if r.IntN(3) == 0 {
		spec.Overhead = randList(r, []corev1.ResourceName{"cpu", "memory"})
	}
	if r.IntN(3) == 0 {
		podLevel := []corev1.ResourceName{"cpu", "memory", "hugepages-2Mi"}
		spec.Resources = &corev1.ResourceRequirements{Requests: randList(r, podLevel), Limits: randList(r, podLevel)}
	}
	return spec
}

// defaulted applies the API server's defaulting that PodRequests reads
// through: a limit stands in for a missing request, for containers and
// for pod-level resources.
func defaulted(spec corev1.PodSpec) *corev1.Pod {
	fill := func(r *corev1.ResourceRequirements) {
		for name, q := range r.Limits {
			if _, ok := r.Requests[name]; !ok {
				if r.Requests == nil {
					r.Requests = corev1.ResourceList{}
				}
				r.Requests[name] = q
			}
		}
	}
	out := spec.DeepCopy()
	for i := range out.InitContainers {
		fill(&out.InitContainers[i].Resources)
	}
	for i := range out.Containers {
		fill(&out.Containers[i].Resources)
	}
	if out.Resources != nil {
		fill(out.Resources)
	}
	return &corev1.Pod{Spec: *out}
}

// libraryPodRequests is k8s.io/component-helpers' PodRequests of the
// defaulted pod, in the engine's units.
func libraryPodRequests(t testing.TB, spec corev1.PodSpec) schedule.Resources {
	want := schedule.Resources{schedule.ResourcePods: 1}
	for name, q := range resourcehelper.PodRequests(defaulted(spec), resourcehelper.PodResourcesOptions{}) {
		v, err := amount("", string(name), q)
		require.NoError(t, err)
		want[string(name)] = v
	}
	return want
}

// checkPodRequestsAgainstLibrary compares the two and, on a difference,
// prints the pod.
func checkPodRequestsAgainstLibrary(t testing.TB, spec corev1.PodSpec) {
	got, err := PodRequests(&spec)
	require.NoError(t, err)
	want := libraryPodRequests(t, spec)
	for k, v := range got {
		if v == 0 && want[k] == 0 {
			delete(got, k)
			delete(want, k)
		}
	}
	require.Equal(t, want, got, "pod spec: %+v", spec)
}

// PodRequests stays hand-written (see its comment); it must compute what
// k8s.io/component-helpers/resource.PodRequests computes.
func TestPodRequestsEqualsLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 1))
	for range 20000 {
		checkPodRequestsAgainstLibrary(t, randPodSpec(r))
	}
}

// go test ./integrations/kubernetes/cluster -run '^$' -fuzz FuzzPodRequestsEqualsLibrary -fuzztime 60s
func FuzzPodRequestsEqualsLibrary(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 0, 2, 5, 1, 200, 7, 9, 2, 1, 0, 0, 3, 2, 1, 4, 0, 0, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkPodRequestsAgainstLibrary(t, randPodSpec(&byteChooser{b: data}))
	})
}

// benchPod is a bound rank pod as the API server returns it: rankgate's
// init container, a sidecar and the training container.
func benchPod() *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	sidecar := ctr("proxy", rl("cpu", "100m", "memory", "64Mi"), rl("cpu", "100m", "memory", "64Mi"))
	sidecar.RestartPolicy = &always
	return &corev1.Pod{Spec: corev1.PodSpec{
		NodeName: "gpu-1",
		InitContainers: []corev1.Container{
			ctr("rankgate-init", rl("cpu", "50m", "memory", "32Mi", "nvidia.com/gpu", "8"), rl("cpu", "50m", "memory", "32Mi", "nvidia.com/gpu", "8")),
			sidecar,
		},
		Containers: []corev1.Container{
			ctr("pytorch", rl("cpu", "96", "memory", "1600Gi", "nvidia.com/gpu", "8", "ephemeral-storage", "100Gi"), rl("nvidia.com/gpu", "8")),
		},
	}}
}

// BenchmarkPodRequests measures the bound-pod hot path of Builder.AddPod
// (own) against k8s.io/component-helpers' PodRequests with its Reuse map,
// converted to the engine's units (library).
//
//	go test ./integrations/kubernetes/cluster -run '^$' -bench BenchmarkPodRequests -benchmem
func BenchmarkPodRequests(b *testing.B) {
	p := benchPod()
	b.Run("own", func(b *testing.B) {
		b.ReportAllocs()
		var s podScratch
		for b.Loop() {
			if err := s.compute(&p.Spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		var a acc
		reuse := corev1.ResourceList{}
		for b.Loop() {
			reuse = resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{Reuse: reuse})
			a.reset()
			for name, q := range reuse {
				v, err := amount("", string(name), q)
				if err != nil {
					b.Fatal(err)
				}
				a.add(string(name), v)
			}
		}
	})
}
