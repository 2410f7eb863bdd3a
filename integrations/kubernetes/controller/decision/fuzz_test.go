package decision

import (
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/verdict"
)

// FuzzRecordedDecision: the rankgate.io/ annotations of a job or a verdict
// record are outside input (anyone who can edit the job can write them).
// Reading them never panics; a verdict read back renders to annotations
// that read back to the same verdict, action and decider; the per-job
// overrides fall back to the defaults when they do not parse.
func FuzzRecordedDecision(f *testing.F) {
	d := &Decision{Report: verdict.NewReport("ml/PyTorchJob/j: 2 of 2 ranks reported", nil), DecidedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), DecidedBy: "replica-a"}
	a := Annotations(d)
	f.Add(a[contract.AnnotationVerdict], a[contract.AnnotationReport], a[contract.AnnotationDecidedAt], a[contract.AnnotationAction], "15m", "suspend")
	f.Add("fail", `{"verdict":"fail","findings":[{"rule":"GANG_INCOMPLETE","severity":"fail"}]}`, "yesterday", "delete", "-1s", "DELETE")
	f.Add("warn", `{"verdict":"pass"}`, "", "", "1e400h", "")
	f.Add("pass", `{`, "2026-11-30T12:00:00Z", "annotate", "0", "annotate")
	f.Fuzz(func(t *testing.T, wantVerdict, report, decidedAt, action, timeout, onFail string) {
		l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.AnnotationVerdict: wantVerdict, contract.AnnotationReport: report,
			contract.AnnotationDecidedAt: decidedAt, contract.AnnotationAction: action, contract.AnnotationDecidedBy: "x", contract.AnnotationGangTimeout: timeout, contract.AnnotationOnFail: onFail}}}
		got, ok := FromJob(l)
		if ok {
			switch got.Report.Verdict {
			case verdict.VerdictPass, verdict.VerdictWarn, verdict.VerdictFail:
			default:
				t.Fatalf("read verdict %q", got.Report.Verdict)
			}
			if string(got.Report.Verdict) != wantVerdict {
				t.Fatalf("verdict %q read as %q", wantVerdict, got.Report.Verdict)
			}
			again, ok := FromJob(&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: Annotations(got)}})
			if !ok || again.Report.Verdict != got.Report.Verdict || again.DecidedBy != got.DecidedBy ||
				(got.Report.Failed() && again.Action != got.Action) {
				t.Fatalf("round trip: %+v -> %+v", got, again)
			}
		}
		if d, err := JobTimeout(l, time.Minute); d <= 0 || (err != nil && d != time.Minute) {
			t.Fatalf("timeout %q: %v %v", timeout, d, err)
		}
		if a := JobAction(l, ActionSuspend); !ValidAction(a) {
			t.Fatalf("action %q from %q", a, onFail)
		}
	})
}
