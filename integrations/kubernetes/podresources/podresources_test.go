package podresources

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// kubelet is a real gRPC server on a unix socket answering like a kubelet.
type kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	pods      []*podresourcesv1.PodResources
	getMissed bool // answer Get with Unimplemented, as kubelets without the gate do
	hang      bool
}

func (k *kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func (k *kubelet) Get(ctx context.Context, r *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	if k.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if k.getMissed {
		return k.UnimplementedPodResourcesListerServer.Get(ctx, r)
	}
	for _, p := range k.pods {
		if p.Name == r.PodName && p.Namespace == r.PodNamespace {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	return &podresourcesv1.GetPodResourcesResponse{}, nil
}

func serve(t *testing.T, k *kubelet) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	s := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(s, k)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return sock
}

func pods() []*podresourcesv1.PodResources {
	return []*podresourcesv1.PodResources{{
		Name: "train-worker-0", Namespace: "ml",
		Containers: []*podresourcesv1.ContainerResources{{
			Name: "pytorch",
			Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "nvidia.com/mig-3g.40gb", DeviceIds: []string{"MIG-b1c2d3e4-0000-5111-8222-333344445555"}},
				{ResourceName: "example.com/nic", DeviceIds: []string{"nic0"}},
			},
		}, {
			Name:    "sidecar",
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-aaaa", "GPU-aaaa"}}},
		}},
	}, {
		Name: "other", Namespace: "ml",
		Containers: []*podresourcesv1.ContainerResources{{Name: "c",
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-bbbb"}}}}},
	}}
}

func TestPodDevices(t *testing.T) {
	for _, tc := range []struct {
		name      string
		getMissed bool
	}{{"Get", false}, {"List fallback", true}} {
		t.Run(tc.name, func(t *testing.T) {
			sock := serve(t, &kubelet{pods: pods(), getMissed: tc.getMissed})
			ids, err := New(sock, 2*time.Second).PodDevices(context.Background(), "ml", "train-worker-0")
			require.NoError(t, err)
			require.Equal(t, []string{"GPU-aaaa", "MIG-b1c2d3e4-0000-5111-8222-333344445555"}, ids)
		})
	}
}

func TestPodDevicesUnknownPod(t *testing.T) {
	sock := serve(t, &kubelet{pods: pods(), getMissed: true})
	_, err := New(sock, 2*time.Second).PodDevices(context.Background(), "ml", "nope")
	require.ErrorContains(t, err, "knows no pod ml/nope")
}

func TestPodDevicesDeadline(t *testing.T) {
	sock := serve(t, &kubelet{pods: pods(), hang: true})
	start := time.Now()
	_, err := New(sock, 200*time.Millisecond).PodDevices(context.Background(), "ml", "train-worker-0")
	require.Error(t, err)
	require.Less(t, time.Since(start), 3*time.Second)
}

func TestPodDevicesNoSocket(t *testing.T) {
	_, err := New(filepath.Join(t.TempDir(), "absent.sock"), 300*time.Millisecond).PodDevices(context.Background(), "ml", "p")
	require.Error(t, err)
}
