package controller

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func testLeaderEndpoint(t *testing.T, ip string, port int32, objs ...client.Object) (*leaderEndpoint, client.Client) {
	t.Helper()
	cl := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).Build()
	c := &Controller{opts: Options{Namespace: "rankgate-system", GateService: "rankgate-gate", Identity: "pod-a"}, log: logr.Discard(), client: cl, api: cl}
	return &leaderEndpoint{c: c, ns: "rankgate-system", svc: "rankgate-gate", ip: ip, port: port, family: discoveryv1.AddressTypeIPv4}, cl
}

func readSlice(t *testing.T, cl client.Client) *discoveryv1.EndpointSlice {
	t.Helper()
	s := &discoveryv1.EndpointSlice{}
	require.NoError(t, cl.Get(context.Background(), types.NamespacedName{Namespace: "rankgate-system", Name: "rankgate-gate-leader"}, s))
	return s
}

// The leader writes one endpoint, its own, not ready until it can decide,
// labelled for kube-proxy and owned by the Service; then ready.
func TestLeaderEndpointWrite(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "rankgate-gate", Namespace: "rankgate-system", UID: "svc-uid"}}
	le, cl := testLeaderEndpoint(t, "10.0.0.7", 8443, svc)
	ctx := context.Background()

	require.NoError(t, le.write(ctx, false, false))
	s := readSlice(t, cl)
	require.Equal(t, "rankgate-gate", s.Labels[discoveryv1.LabelServiceName])
	require.Equal(t, EndpointSliceManager, s.Labels[discoveryv1.LabelManagedBy])
	require.Equal(t, discoveryv1.AddressTypeIPv4, s.AddressType)
	require.Equal(t, []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "rankgate-gate", UID: "svc-uid"}}, s.OwnerReferences)
	require.Len(t, s.Ports, 1)
	require.Equal(t, "gate", *s.Ports[0].Name)
	require.EqualValues(t, 8443, *s.Ports[0].Port)
	require.Len(t, s.Endpoints, 1)
	require.Equal(t, []string{"10.0.0.7"}, s.Endpoints[0].Addresses)
	require.False(t, *s.Endpoints[0].Conditions.Ready)
	require.Equal(t, "pod-a", s.Endpoints[0].TargetRef.Name)

	require.NoError(t, le.write(ctx, true, false))
	s = readSlice(t, cl)
	require.True(t, *s.Endpoints[0].Conditions.Ready)
	require.True(t, le.namesOnly(s, true))
}

// A new leader overwrites the slice its predecessor wrote.
func TestLeaderEndpointTakeover(t *testing.T) {
	old, cl := testLeaderEndpoint(t, "10.0.0.7", 8443)
	ctx := context.Background()
	require.NoError(t, old.write(ctx, true, false))
	nu := &leaderEndpoint{c: old.c, ns: old.ns, svc: old.svc, ip: "10.0.0.8", port: 8443, family: discoveryv1.AddressTypeIPv4}
	require.NoError(t, nu.write(ctx, true, false))
	s := readSlice(t, cl)
	require.Equal(t, []string{"10.0.0.8"}, s.Endpoints[0].Addresses)

	// The old leader's periodic check and its withdrawal leave it alone.
	require.NoError(t, old.check(ctx, logr.Discard()))
	old.withdraw(logr.Discard())
	s = readSlice(t, cl)
	require.Len(t, s.Endpoints, 1)
	require.Equal(t, []string{"10.0.0.8"}, s.Endpoints[0].Addresses)

	// The new leader's withdrawal empties it.
	nu.withdraw(logr.Discard())
	require.Empty(t, readSlice(t, cl).Endpoints)
}

// The periodic check recreates a deleted slice and repairs the leader's
// own entry.
func TestLeaderEndpointCheck(t *testing.T) {
	le, cl := testLeaderEndpoint(t, "10.0.0.7", 8443)
	ctx := context.Background()
	require.NoError(t, le.check(ctx, logr.Discard()))
	require.True(t, le.namesOnly(readSlice(t, cl), true))

	s := readSlice(t, cl)
	s.Endpoints[0].Conditions.Ready = ptr.To(false)
	require.NoError(t, cl.Update(ctx, s))
	require.NoError(t, le.check(ctx, logr.Discard()))
	require.True(t, le.namesOnly(readSlice(t, cl), true))

	// Emptied (by a withdrawal that raced, or by hand): written again.
	s = readSlice(t, cl)
	s.Endpoints = []discoveryv1.Endpoint{}
	require.NoError(t, cl.Update(ctx, s))
	require.NoError(t, le.check(ctx, logr.Discard()))
	require.True(t, le.namesOnly(readSlice(t, cl), true))

	require.NoError(t, cl.Delete(ctx, readSlice(t, cl)))
	require.NoError(t, le.check(ctx, logr.Discard()))
	require.True(t, le.namesOnly(readSlice(t, cl), true))

	// Another address family: the slice is replaced (its type is immutable).
	s = readSlice(t, cl)
	s.AddressType = discoveryv1.AddressTypeIPv6
	require.NoError(t, cl.Update(ctx, s))
	require.NoError(t, le.write(ctx, true, false))
	require.Equal(t, discoveryv1.AddressTypeIPv4, readSlice(t, cl).AddressType)
}

// Publishing is off without a Service name, and refused without a valid
// pod IP.
func TestLeaderEndpointOff(t *testing.T) {
	c := &Controller{opts: Options{}}
	le, err := c.newLeaderEndpoint()
	require.Nil(t, le)
	require.NoError(t, err)
	c.opts.GateService = "rankgate-gate"
	le, err = c.newLeaderEndpoint()
	require.Nil(t, le)
	require.ErrorContains(t, err, "POD_IP")
}
