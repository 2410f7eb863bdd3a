package server

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// encoded is what the server writes for resp.
func encoded(a *answers, resp *gate.Response) string {
	rec := httptest.NewRecorder()
	if sa, ok := a.shared(resp); ok {
		sa.write(rec, resp.Rank)
	} else {
		_, _ = rec.Write(fitAnswer(resp, gate.MaxAnswer))
	}
	return rec.Body.String()
}

func randomAnswer(rng *rand.Rand) gate.Response {
	words := []string{"a", `","rank":0,"`, "<&>", "ü", `\`, "rank", `"`, "\n", "GPU-1"}
	word := func() string { return words[rng.IntN(len(words))] + words[rng.IntN(len(words))] }
	var findings []verdict.Finding
	for range rng.IntN(4) {
		findings = append(findings, verdict.Finding{Rule: verdict.RuleRankEnvironment, Severity: verdict.SeverityWarn, Message: word(), Ranks: []int{rng.IntN(9)}, Pods: []string{word()}})
	}
	v := verdict.NewReport(word(), findings)
	r := gate.Response{APIVersion: gate.APIVersion, State: gate.StateDecided, Job: "ml/PyTorchJob/" + word(), Expected: rng.IntN(5000), Reported: rng.IntN(5000), Verdict: &v}
	if rng.IntN(2) == 0 {
		d := time.Unix(rng.Int64N(2e9), rng.Int64N(1e9))
		if rng.IntN(2) == 0 {
			d = d.UTC()
		}
		r.Deadline = &d
	}
	if rng.IntN(2) == 0 {
		at := time.Unix(rng.Int64N(2e9), 0).UTC()
		r.DecidedAt = &at
	}
	if rng.IntN(2) == 0 {
		r.Action = word()
	}
	return r
}

// Each rank's answer from the shared encoding is byte for byte what
// encoding the rank's own Response gives, and a Response that differs
// from the one encoded in anything but its rank is not answered with it.
func TestSharedAnswerIsTheEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var a answers
	for i := 0; i < 500; i++ {
		base := randomAnswer(rng)
		for _, rank := range []int{0, -1, 7, 4095, 123456789, rng.IntN(1 << 20)} {
			r := base
			r.Rank = rank
			want, err := json.Marshal(&r)
			require.NoError(t, err)
			require.Equal(t, string(want)+"\n", encoded(&a, &r), "rank %d", rank)
		}
		// The same verdict with other fields: the answer follows them.
		other := base
		other.Reported++
		if rng.IntN(2) == 0 && other.Deadline != nil {
			d := other.Deadline.In(time.FixedZone("x", 3600))
			other.Deadline = &d
			other.Reported--
		}
		want, err := json.Marshal(&other)
		require.NoError(t, err)
		require.Equal(t, string(want)+"\n", encoded(&a, &other))
		require.Equal(t, string(want)+"\n", encoded(&a, &other), "encoded once, answered again")
	}
	waiting := gate.Response{APIVersion: gate.APIVersion, State: gate.StateWaiting, Job: "ml/PyTorchJob/j", Rank: 3, Expected: 8, Reported: 2}
	want, err := json.Marshal(&waiting)
	require.NoError(t, err)
	require.Equal(t, string(want)+"\n", encoded(&a, &waiting))
}

// A verdict too large to send whole is cut once, and the answer of every
// rank stays under MaxAnswer with the same findings.
func TestSharedAnswerOfAHugeVerdict(t *testing.T) {
	var findings []verdict.Finding
	for i := 0; i < 5000; i++ {
		findings = append(findings, verdict.Finding{Rule: verdict.RuleRankEnvironment, Severity: verdict.SeverityFail, Ranks: []int{i}, Message: strings.Repeat("x", 200)})
	}
	v := verdict.NewReport("huge", findings)
	var a answers
	var omitted int
	for _, rank := range []int{0, 9, 4999, -1} {
		r := gate.Response{APIVersion: gate.APIVersion, State: gate.StateDecided, Job: "ml/PyTorchJob/big", Rank: rank, Expected: 5000, Reported: 5000, Verdict: &v}
		out := encoded(&a, &r)
		require.Less(t, len(out), gate.MaxAnswer)
		var got gate.Response
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		require.Equal(t, rank, got.Rank)
		require.Positive(t, got.OmittedFindings)
		require.Equal(t, len(findings), len(got.Verdict.Findings)+got.OmittedFindings)
		if omitted == 0 {
			omitted = got.OmittedFindings
		}
		require.Equal(t, omitted, got.OmittedFindings)
	}
}

// The cache starts over past maxShared verdicts and stays correct.
func TestSharedAnswersBounded(t *testing.T) {
	var a answers
	for i := 0; i < 3*maxShared; i++ {
		v := verdict.NewReport(fmt.Sprint(i), nil)
		r := gate.Response{APIVersion: gate.APIVersion, State: gate.StateDecided, Job: "j", Rank: i, Verdict: &v}
		want, _ := json.Marshal(&r)
		require.Equal(t, string(want)+"\n", encoded(&a, &r))
		require.LessOrEqual(t, a.n.Load(), int64(maxShared))
	}
}
