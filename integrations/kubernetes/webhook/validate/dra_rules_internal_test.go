package validate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
)

// The DRA source hands the DeviceTaintRules to the Builder with the
// other DRA objects.
func TestDRASourceAddsTaintRules(t *testing.T) {
	rule := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maint"}}
	src := draFrom(func(context.Context) (*DRAObjects, error) {
		return &DRAObjects{TaintRules: []*resourcev1.DeviceTaintRule{rule}}, nil
	})
	b := cluster.NewBuilder()
	known, err := src(context.Background(), b)
	require.NoError(t, err)
	require.True(t, known)
	require.Equal(t, []*resourcev1.DeviceTaintRule{rule}, b.DRAObjects().TaintRules())
}
