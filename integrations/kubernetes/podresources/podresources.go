// Package podresources asks the kubelet which devices a pod was given,
// through its PodResources gRPC API on a node-local unix socket. rankgate
// uses it in a pod whose environment names no devices (CDI, for example).
package podresources

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/rankgate/rankgate/topology"
)

// DefaultSocket is where the kubelet serves the PodResources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxMessage bounds a List answer on a node with many pods.
const maxMessage = 16 << 20

// Client reads pods' devices from the kubelet.
type Client struct {
	socket  string
	timeout time.Duration
}

// New returns a client for the socket; every call is bounded by timeout.
func New(socket string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &Client{socket: socket, timeout: timeout}
}

// PodDevices returns the NVIDIA device IDs of the pod's containers, sorted
// and without duplicates. It uses Get and falls back to List on kubelets
// where Get is not enabled.
func (c *Client) PodDevices(ctx context.Context, namespace, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	cl := podresourcesv1.NewPodResourcesListerClient(conn)
	var pod *podresourcesv1.PodResources
	resp, err := cl.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: name, PodNamespace: namespace})
	switch {
	case err == nil:
		pod = resp.GetPodResources()
	case status.Code(err) == codes.Unimplemented:
		list, lerr := cl.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
		if lerr != nil {
			return nil, fmt.Errorf("podresources List: %w", lerr)
		}
		for _, p := range list.GetPodResources() {
			if p.GetName() == name && p.GetNamespace() == namespace {
				pod = p
				break
			}
		}
	default:
		return nil, fmt.Errorf("podresources Get %s/%s: %w", namespace, name, err)
	}
	if pod == nil {
		return nil, fmt.Errorf("the kubelet knows no pod %s/%s", namespace, name)
	}
	seen := map[string]bool{}
	var out []string
	for _, ctr := range pod.GetContainers() {
		for _, d := range ctr.GetDevices() {
			if !topology.IsGPUResource(d.GetResourceName()) {
				continue
			}
			for _, id := range d.GetDeviceIds() {
				if !seen[id] {
					seen[id] = true
					out = append(out, id)
				}
			}
		}
	}
	sort.Strings(out)
	return out, nil
}
