package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/verdict"
)

// gangBackend decides at once: the gang rules over the reported rank and a
// healthy full-GPU rank, as the controller would run them over hostile
// report contents.
type gangBackend struct{}

func (gangBackend) Admit(ctx context.Context, _ server.Identity) (context.Context, error) {
	return ctx, nil
}

func (gangBackend) Report(_ context.Context, _ server.Identity, req *gate.ReportRequest, _ time.Duration) (*gate.Response, error) {
	peer := verdict.NewReport("node-b", nil)
	peer.Devices = []verdict.DeviceSummary{{ID: "GPU-b", Kind: "gpu", GPU: 0, GPUUUID: "GPU-b", Profile: "full", SMs: 132}}
	var nw *ncclenv.Net
	if req.Net != nil {
		nw = &ncclenv.Net{Interfaces: req.Net.Interfaces, HCAs: req.Net.HCAs, HCAsKnown: req.Net.HCAsKnown || len(req.Net.HCAs) > 0}
	}
	// Settings that make the NIC rules read every rank's network.
	env := ncclenv.NewEnv(map[string]string{"NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IGNORE_NET_MISMATCH": "1"})
	rep := preflight.GangRules(preflight.GangInput{Job: "ml/PyTorchJob/j", Expected: 2, Ranks: []preflight.RankReport{
		{Rank: 0, Pod: req.Pod, Node: req.Node, DriverVersion: req.DriverVersion, CUDADriverVersion: req.CUDADriverVersion, Report: req.Report,
			Net: nw, NCCLVersion: req.NCCLVersion},
		{Rank: 1, Pod: "p1", Node: "node-b", DriverVersion: "580.65.06", CUDADriverVersion: "13.0", Report: peer,
			Net: &ncclenv.Net{Interfaces: []string{"eth0", "lo"}, HCAs: []string{"mlx5_0"}, HCAsKnown: true}},
	}, NCCL: map[int]ncclenv.Rank{0: {Env: env}, 1: {Env: env}}})
	return &gate.Response{State: gate.StateDecided, Job: "ml/PyTorchJob/j", Expected: 2, Reported: 2, Verdict: &rep}, nil
}

func (gangBackend) Verdict(context.Context, server.Identity, time.Duration) (*gate.Response, error) {
	return nil, gate.Errorf(gate.CodeUnavailable, "not used")
}

// FuzzReportBody: any report body a pod can send is answered with a
// well-formed gate answer (a verdict or an error code), never a panic, and
// the gang rules survive any report that passes validation.
func FuzzReportBody(f *testing.F) {
	ok := &gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: "ml", Pod: "p0", Node: "node-a", DriverVersion: "580.65.06", CUDADriverVersion: "13.0",
		Report: verdict.NewReport("node-a", nil)}
	ok.Report.Devices = []verdict.DeviceSummary{{ID: "MIG-1", Kind: "mig", GPU: 0, GPUUUID: "GPU-a", Profile: "1g.10gb", SMs: 14}}
	b, _ := json.Marshal(ok)
	f.Add(b)
	f.Add([]byte(`{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0","report":{"verdict":"fail","findings":[{"rule":"X","severity":"fail","ranks":[-1,99999999]}],"devices":[{"id":"","kind":"","gpu":-5,"sms":-1},{"id":"","kind":"","gpu":-5}]}}`))
	f.Add([]byte(`{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0","report":{"verdict":"pass","devices":null,"findings":null}}`))
	f.Add([]byte(`{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0","net":{"interfaces":["eth0","lo","net1"],"hcas":["mlx5_0","mlx5_1"],"hcasKnown":true},"ncclVersion":"2.27.3-1",` +
		`"report":{"verdict":"pass","devices":[{"id":"MIG-1","kind":"mig","gpu":0,"gpuUuid":"GPU-a","profile":"1g.10gb","sms":14}]}}`))
	f.Add([]byte(`{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0","net":{"interfaces":[],"hcas":[""]},"ncclVersion":"v2..x","report":{"verdict":"pass"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	s := server.New(server.Options{Auth: fakeAuth{"tok-p0": {Namespace: "ml", Pod: "p0"}}, Backend: gangBackend{}, Log: logr.Discard()})
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, gate.PathReport, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-p0")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			var r gate.Response
			if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil || r.Verdict == nil {
				t.Fatalf("200 without a verdict: %v %s", err, rec.Body.String())
			}
			switch r.Verdict.Verdict {
			case verdict.VerdictPass, verdict.VerdictWarn, verdict.VerdictFail:
			default:
				t.Fatalf("verdict %q", r.Verdict.Verdict)
			}
		case http.StatusBadRequest, http.StatusForbidden:
			var e gate.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
				t.Fatalf("%d without an error body: %v %s", rec.Code, err, rec.Body.String())
			}
		default:
			t.Fatalf("HTTP %d for %q: %s", rec.Code, body, rec.Body.String())
		}
	})
}

// FuzzDecodedReportIsClean: whatever body a rank sends, a report the gate
// accepts has rule IDs of the rule-ID form and no string that could act
// on a terminal (control characters, bidi controls, bytes not UTF-8).
func FuzzDecodedReportIsClean(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0","node":"n\u001b[2J","driverVersion":"5\u202e80",` +
		`"report":{"verdict":"fail","subject":"s\u0007","findings":[{"rule":"NO_DEVICES","severity":"fail","message":"m\u009b31m\r\nx",` +
		`"remediation":"r\u2066","devices":["d\u0000"],"nodes":["\u200f"],"pods":["p\u007f"]}],"devices":[{"id":"i\u001b","kind":"k","gpu":0,"profile":"p\t"}]}}`))
	f.Add([]byte(`{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0","report":{"verdict":"pass","findings":[{"rule":"X\u001b","severity":"warn"}]}}`))
	f.Add([]byte(`{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0","ncclVersion":"2.27\u202e","net":{"interfaces":["eth\u001b0","\u200f"],"hcas":["mlx5\u0000"]},"report":{"verdict":"pass"}}`))
	f.Add([]byte("{\"apiVersion\":\"gate.rankgate.io/v1\",\"namespace\":\"ml\",\"pod\":\"p0\",\"report\":{\"verdict\":\"pass\",\"subject\":\"\xff\xfe\",\"findings\":[]}}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := server.DecodeReport(body)
		if err != nil {
			return
		}
		r := req.Report
		strs := []string{req.Node, req.DriverVersion, req.CUDADriverVersion, req.NCCLVersion, r.Subject, r.Mode}
		if req.Net != nil {
			strs = append(append(strs, req.Net.Interfaces...), req.Net.HCAs...)
		}
		for _, fd := range r.Findings {
			if !verdict.ValidRuleID(fd.Rule) {
				t.Fatalf("accepted rule %q", fd.Rule)
			}
			strs = append(append(append(append(strs, fd.Message, fd.Remediation, string(fd.Severity)), fd.Devices...), fd.Nodes...), fd.Pods...)
		}
		for _, d := range r.Devices {
			strs = append(strs, d.ID, d.Kind, d.GPUUUID, d.Profile, d.FabricCluster)
		}
		for _, s := range strs {
			if verdict.CleanText(s) != s {
				t.Fatalf("accepted report holds %q", s)
			}
		}
	})
}
