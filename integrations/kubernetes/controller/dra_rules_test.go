package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// maintRule taints every device of the dumps' driver NoSchedule.
func maintRule() *resourcev1.DeviceTaintRule {
	return &resourcev1.DeviceTaintRule{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceTaintRule"},
		ObjectMeta: metav1.ObjectMeta{Name: "maint"},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To("gpu.nvidia.com")},
			Taint:          resourcev1.DeviceTaint{Key: "gpu.example.com/maintenance", Effect: resourcev1.DeviceTaintEffectNoSchedule},
		},
	}
}

// The cached DeviceTaintRules reach the judge as the dump's reach
// diagnose: the job the rule's devices alone would serve waits, with
// the same findings, naming the rule.
func TestDRATaintRuleJudgedAsDiagnoseJudges(t *testing.T) {
	d, data := loadDRADump(t, "01-extended-resource-h100.yaml")
	rule := maintRule()
	doc, err := yaml.Marshal(rule)
	require.NoError(t, err)
	e := schedule.New()
	b := cluster.NewBuilder()
	require.NoError(t, cluster.Load(b, "dump.yaml", strings.NewReader(string(data)+"\n---\n"+string(doc)), nil))
	ws, err := b.Workloads()
	require.NoError(t, err)
	require.Len(t, ws, 1)
	want := e.Diagnose(e.NewCluster(b.Nodes()), ws[0])
	require.Equal(t, verdict.RuleDRADeviceUnhealthy, want.Rule, want.Report.Reason(0))

	d.objects.rules = []*resourcev1.DeviceTaintRule{rule}
	var nodes []corev1.Node
	for _, n := range d.objects.nodes {
		nodes = append(nodes, *n)
	}
	got, _, ok, err := judgeJob(e, nodes, d.state(), kubeflow.MustFromObject(d.job), nil, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, want.Rule, got.Rule)
	require.False(t, got.Hopeless)
	require.Equal(t, want.Report.Findings, got.Report.Findings)
	require.Contains(t, got.Report.Findings[0].Message, "gpu-0 on dgx-h100-0 (gpu.example.com/maintenance:NoSchedule from DeviceTaintRule maint)")
}

// The DRA device source and the validating webhook read the cached
// rules; where the API server serves none, the objects are known without
// them, and where it serves them they are not known before their cache
// has synced.
func TestDRACachesServeTaintRules(t *testing.T) {
	d := draTestCaches(t)
	c := &Controller{}
	c.dra.served, c.dra.slices, c.dra.claims, c.dra.synced = true, d.slices, d.claims, d.synced
	c.dra.nodes = toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	c.dra.templates = toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	o, err := c.dra.validateObjects(context.Background())
	require.NoError(t, err)
	require.NotNil(t, o)
	require.Empty(t, o.TaintRules)
	require.Empty(t, draCacheObjects{&c.dra}.TaintRules())

	c.dra.rulesServed = true
	o, err = c.dra.validateObjects(context.Background())
	require.NoError(t, err)
	require.Nil(t, o, "known before the rules' cache is there")

	rules := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	b := maintRule()
	a := maintRule()
	a.Name = "a-first"
	require.NoError(t, rules.Add(b))
	require.NoError(t, rules.Add(a))
	c.dra.rules = rules
	o, err = c.dra.validateObjects(context.Background())
	require.NoError(t, err)
	require.Equal(t, []*resourcev1.DeviceTaintRule{a, b}, o.TaintRules)
	require.Equal(t, []*resourcev1.DeviceTaintRule{a, b}, draCacheObjects{&c.dra}.TaintRules())

	// The device source fails the rank holding a device the rules taint.
	r, err := c.draSource().Rank(context.Background(), claimPod(), 0)
	require.NoError(t, err)
	require.True(t, r.Known)
	require.Equal(t, []string{verdict.RuleDeviceTainted}, r.Report.Report.RuleIDs())
	require.Contains(t, r.Report.Report.Findings[0].Message, "gpu.example.com/maintenance:NoSchedule from DeviceTaintRule a-first, gpu.example.com/maintenance:NoSchedule from DeviceTaintRule maint")
}
