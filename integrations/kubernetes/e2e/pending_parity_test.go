package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/verdict"
)

// `rankgate diagnose job` and the controller give the same verdict on the
// same cluster. The real binary's diagnose reads the envtest API server
// (its live loader) while the job's pods are unschedulable and its grace
// runs; then the controller fails the job. Verdict, rule IDs and the text
// of every finding are compared with the controller's annotations.
func TestE2EPendingDiagnoseParity(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-parity", true)
	startScheduler(t)
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	kubeconfig := kubeconfigFile(t)
	grace := map[string]string{contract.AnnotationPendingGrace: "8s"}
	// The nodes of (g), then of (j); each subtest deletes its own.
	g := func(t testing.TB) {
		a100All1g20(t, "parity-a100-1g-a")
		a100All1g20(t, "parity-a100-1g-b")
	}
	j := func(t testing.TB) {
		gpuNode(t, "parity-h100-single", "nvidia.com/gpu", 1)
		realNode(t, "parity-h100-single", map[string]int64{"nvidia.com/gpu": 1}, map[string]string{
			"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "81559",
			"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single",
			"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success",
		})
	}
	for _, tc := range []struct {
		name, res, rule string
		nodes           func(testing.TB)
	}{
		{"g-shape", "nvidia.com/mig-2g.20gb", verdict.RuleShapeMismatch, g},
		{"j-strategy", "nvidia.com/mig-1g.10gb", verdict.RuleStrategyMismatch, j},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.nodes(t)
			job, _ := pendingJob(t, ns, tc.name, grace, tc.res, 1)
			var out, errb bytes.Buffer
			cmd := exec.Command(binary, "diagnose", "job", ns+"/"+job.Name, "--kind", "PyTorchJob", "--kubeconfig", kubeconfig, "-o", "json")
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "diagnose passed: %s %s", out.String(), errb.String())
			require.Equal(t, verdict.ExitFail, ee.ExitCode(), errb.String())
			var diag verdict.Report
			require.NoError(t, json.Unmarshal(out.Bytes(), &diag), out.String())
			require.False(t, isSuspended(t, job), "the controller acted before diagnose ran")

			require.Eventually(t, func() bool { return isSuspended(t, job) }, 20*time.Second, 100*time.Millisecond, c.logs.String())
			a := appliedVerdict(t, job)
			var ctl verdict.Report
			require.NoError(t, json.Unmarshal([]byte(a[contract.AnnotationReport]), &ctl))
			require.Equal(t, string(diag.Verdict), a[contract.AnnotationVerdict])
			require.Equal(t, diag.Verdict, ctl.Verdict)
			require.Contains(t, diag.RuleIDs(), tc.rule)
			require.Equal(t, diag.RuleIDs(), ctl.RuleIDs())
			var dRules []string
			for _, f := range diag.Findings {
				if f.Severity != verdict.SeverityInfo && !contains(dRules, f.Rule) {
					dRules = append(dRules, f.Rule)
				}
			}
			require.Equal(t, strings.Join(dRules, ","), a[contract.AnnotationRules])
			require.Equal(t, len(diag.Findings), len(ctl.Findings), "diagnose: %v\ncontroller: %v", diag.RuleIDs(), ctl.RuleIDs())
			for i := range diag.Findings {
				d, k := diag.Findings[i], ctl.Findings[i]
				require.Equal(t, d.Rule, k.Rule)
				require.Equal(t, d.Severity, k.Severity, d.Rule)
				require.Equal(t, d.Message, k.Message, d.Rule)
				require.Equal(t, d.Remediation, k.Remediation, d.Rule)
				if d.Severity == verdict.SeverityFail {
					require.Contains(t, a[contract.AnnotationReason], d.Line())
				}
			}
			t.Logf("diagnose and controller agree: %s %v", diag.Verdict, diag.RuleIDs())
		})
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
