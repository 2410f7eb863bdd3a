package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"

	"github.com/rankgate/rankgate/verdict"
)

func transientNode(gpus string, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{}
	n.Name = "n1"
	n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus), corev1.ResourceCPU: resource.MustParse("96")}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	return n
}

// A device plugin re-registering (GPU allocatable drops) or a node
// changing readiness holds every hopeless verdict back for
// transientSettle; more
// devices, or other changes, do not.
func TestTransientNodeChangesHoldHopelessVerdicts(t *testing.T) {
	hopeless := verdict.NewReport("j", []verdict.Finding{{Rule: verdict.RuleShapeMismatch, Severity: verdict.SeverityFail}})
	for _, tc := range []struct {
		name   string
		o, n   *corev1.Node
		settle bool
	}{
		{"device plugin re-registers", transientNode("8", corev1.ConditionTrue), transientNode("0", corev1.ConditionTrue), true},
		{"GPU resource gone", transientNode("8", corev1.ConditionTrue), func() *corev1.Node {
			n := transientNode("8", corev1.ConditionTrue)
			n.Status.Allocatable = nil
			return n
		}(), true},
		{"node restarts", transientNode("8", corev1.ConditionTrue), transientNode("8", corev1.ConditionFalse), true},
		{"more devices", transientNode("4", corev1.ConditionTrue), transientNode("8", corev1.ConditionTrue), false},
		{"nothing GPU changes", transientNode("8", corev1.ConditionTrue), transientNode("8", corev1.ConditionTrue), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wd := &watchdog{clk: clock.RealClock{}}
			wd.noteNodeChange(tc.o, tc.n)
			left, ok := wd.settling(hopeless)
			require.Equal(t, tc.settle, ok)
			if tc.settle {
				require.InDelta(t, transientSettle.Seconds(), left.Seconds(), 1)
			}
		})
	}
	wd := &watchdog{clk: clock.RealClock{}}
	wd.transientAt = time.Now().Add(-transientSettle - time.Second)
	_, ok := wd.settling(hopeless)
	require.False(t, ok, "settled")
}
