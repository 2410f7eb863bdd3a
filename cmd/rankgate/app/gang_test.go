//go:build linux

package app

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/gatetest"
	"github.com/rankgate/rankgate/verdict"
)

// fakeGate answers GET /v1/verdict: "waiting" for the first waits polls,
// then answer (nil: waiting for ever). It checks the launcher's identity
// and token as the gate receives them.
func fakeGate(t *testing.T, certs *gatetest.Certs, waits int, answer *verdict.Report, refuse *gate.ErrorBody) (string, *atomic.Int32) {
	t.Helper()
	var polls atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != gate.PathVerdict {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		q := r.URL.Query()
		if r.Header.Get("Authorization") != "Bearer launcher-token" || q.Get("namespace") != "ml" || q.Get("pod") != "mpi-launcher-x1" {
			http.Error(w, "bad identity", http.StatusBadRequest)
			return
		}
		n := polls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if refuse != nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_ = json.NewEncoder(w).Encode(refuse)
			return
		}
		resp := gate.Response{APIVersion: gate.APIVersion, State: gate.StateWaiting, Job: "ml/MPIJob/mpi", Rank: -1, Expected: 2, Reported: 1}
		if answer != nil && int(n) > waits {
			resp.State, resp.Verdict, resp.Reported = gate.StateDecided, answer, 2
			if answer.Failed() {
				resp.Action = "suspend"
			}
		} else {
			time.Sleep(50 * time.Millisecond) // a short long-poll
		}
		_ = json.NewEncoder(w).Encode(resp)
	}))
	cert, err := tls.LoadX509KeyPair(filepath.Join(certs.Dir, "tls.crt"), filepath.Join(certs.Dir, "tls.key"))
	require.NoError(t, err)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, &polls
}

func TestLaunchGang(t *testing.T) {
	dir := t.TempDir()
	certs, err := gatetest.WriteCerts(dir, "127.0.0.1")
	require.NoError(t, err)
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte("launcher-token\n"), 0o600))
	pod := map[string]string{"POD_NAME": "mpi-launcher-x1", "POD_NAMESPACE": "ml"}
	pass := verdict.NewReport("ml/MPIJob/mpi", nil)
	fail := verdict.NewReport("ml/MPIJob/mpi", []verdict.Finding{{Rule: verdict.RuleGangMIGSpansGPUs, Severity: verdict.SeverityFail,
		Message: "ranks 0 and 1 sit on MIG instances of two GPUs", Remediation: "use full GPUs"}})

	for _, tc := range []struct {
		name    string
		waits   int
		answer  *verdict.Report
		refuse  *gate.ErrorBody
		extra   []string
		code    int
		started bool
		want    []string
	}{
		{name: "pass after waiting: CMD starts", waits: 2, answer: &pass, code: 0, started: true,
			want: []string{"waiting for the gang verdict of ml/MPIJob/mpi", "gang verdict for ml/MPIJob/mpi: pass; starting CMD"}},
		{name: "fail: exit 1 with the reason, CMD never starts", waits: 1, answer: &fail, code: verdict.ExitFail,
			want: []string{"gang verdict fail for ml/MPIJob/mpi (job action: suspend)", "GANG_MIG_SPANS_GPUS", "CMD not started"}},
		{name: "no verdict by --gang-timeout: exit 4", extra: []string{"--gang-timeout", "1s", "--gang-poll", "1s"}, code: verdict.ExitTimeout,
			want: []string{"no gang verdict for pod ml/mpi-launcher-x1 within --gang-timeout 1s"}},
		{name: "the gate refuses the pod: exit 2", refuse: &gate.ErrorBody{APIVersion: gate.APIVersion, Code: gate.CodeNotOptedIn, Message: "MPIJob ml/mpi is not opted in"},
			code: verdict.ExitUsage, want: []string{"NotOptedIn", "not opted in"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, polls := fakeGate(t, certs, tc.waits, tc.answer, tc.refuse)
			marker := filepath.Join(t.TempDir(), "started")
			term := filepath.Join(t.TempDir(), "termination-log")
			args := append([]string{"launch", "--gang", "--gate-url", url, "--ca-file", certs.CAFile, "--token-file", tok,
				"--no-preflight", "--init-timeout", "0", "--termination-log", term}, tc.extra...)
			args = append(args, "--", "sh", "-c", `touch "$0"; echo cmd ran`, marker)
			code, out, stderr := run(t, pod, args...)
			t.Logf("stderr:\n%s", stderr)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
			_, statErr := os.Stat(marker)
			require.Equal(t, tc.started, statErr == nil, "CMD started: %v\nstderr:\n%s", statErr == nil, stderr)
			msg := stderr
			if b, err := os.ReadFile(term); err == nil {
				msg += string(b)
			}
			for _, w := range tc.want {
				require.Contains(t, msg, w)
			}
			require.Positive(t, polls.Load())
			if tc.started {
				require.Equal(t, "cmd ran\n", out)
			}
		})
	}
}

func TestLaunchGangUsage(t *testing.T) {
	code, _, stderr := run(t, nil, "launch", "--gang", "--gate-url", "https://127.0.0.1:1", "--", "true")
	require.Equal(t, verdict.ExitUsage, code, stderr)
	require.Contains(t, stderr, "POD_NAME")
	code, _, stderr = run(t, map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ml"}, "launch", "--gang", "--", "true")
	require.Equal(t, verdict.ExitUsage, code, stderr)
	require.Contains(t, stderr, "--gate-url")
}

func TestCopyBinary(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := run(t, nil, "copy-binary", dir)
	require.Equal(t, 0, code, stderr)
	self, err := os.Executable()
	require.NoError(t, err)
	want, err := os.ReadFile(self)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "rankgate"))
	require.NoError(t, err)
	require.Equal(t, want, got)
	st, err := os.Stat(filepath.Join(dir, "rankgate"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), st.Mode().Perm())
	code, _, _ = run(t, nil, "copy-binary", filepath.Join(dir, "missing"))
	require.Equal(t, verdict.ExitEnvironment, code)
}
