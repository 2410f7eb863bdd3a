package validate

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
)

// The DRA objects hand the DeviceTaintRules to the Builder with the
// other DRA objects, and the nodes where the source has them.
func TestDRASourceAddsTaintRules(t *testing.T) {
	rule := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maint"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	b := cluster.NewBuilder()
	require.NoError(t, (&DRAObjects{Nodes: []*corev1.Node{node}, TaintRules: []*resourcev1.DeviceTaintRule{rule}}).addTo(b))
	require.Equal(t, []*resourcev1.DeviceTaintRule{rule}, b.DRAObjects().TaintRules())
	require.Len(t, b.Nodes(), 1)
}
