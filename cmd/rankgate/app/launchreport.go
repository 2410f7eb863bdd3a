package app

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/launcher"
	"github.com/rankgate/rankgate/verdict"
)

// launchReportKind is the kind of the document launch --report-file writes.
const launchReportKind = "LaunchReport"

// launchReport is what `launch --report-file` writes when the launch ends:
// one document about the whole launch, apart from CMD's output
// (docs/launch.md#report-file).
type launchReport struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Command    []string `json:"command"`
	// ExitCode is rankgate launch's exit code; Reason why rankgate failed
	// or ended the launch (the termination message), or its error.
	ExitCode int    `json:"exitCode"`
	Reason   string `json:"reason,omitempty"`
	// Started: CMD was started; Ready: it became ready (NCCL Init COMPLETE
	// on every local rank, --ready-pattern, --ready-file).
	Started           bool           `json:"started"`
	Ready             bool           `json:"ready"`
	ReadyAfterSeconds float64        `json:"readyAfterSeconds,omitempty"`
	ElapsedSeconds    float64        `json:"elapsedSeconds,omitempty"`
	Transports        map[string]int `json:"transports,omitempty"`
	// Gang is the gate's answer with --gang; Preflight the rank
	// preflight's report unless --no-preflight.
	Gang      *launchGang     `json:"gang,omitempty"`
	Preflight *verdict.Report `json:"preflight,omitempty"`
	// Findings are launch's own (pre-launch checks, NCCL init, transports),
	// after the preflight's.
	Findings []verdict.Finding `json:"findings"`
}

// launchGang is the gang verdict launch --gang waited for.
type launchGang struct {
	Job      string          `json:"job"`
	Expected int             `json:"expected,omitempty"`
	Verdict  *verdict.Report `json:"verdict,omitempty"`
	Action   string          `json:"action,omitempty"`
}

func newLaunchReport(argv []string) *launchReport {
	return &launchReport{APIVersion: verdict.APIVersion, Kind: launchReportKind, Command: argv, Findings: []verdict.Finding{}}
}

func (r *launchReport) gang(resp *gate.Response) {
	if resp != nil {
		r.Gang = &launchGang{Job: resp.Job, Expected: resp.Expected, Verdict: resp.Verdict, Action: resp.Action}
	}
}

// result records how launcher.Run ended.
func (r *launchReport) result(res launcher.Result) {
	r.Started, r.Ready = res.Started, res.Ready
	if res.Ready {
		r.ReadyAfterSeconds = res.ReadyAfter.Seconds()
	}
	r.ElapsedSeconds = res.Elapsed.Seconds()
	r.Transports = res.Transports
	r.Reason = res.Reason
	own := res.Findings
	if r.Preflight != nil && len(own) >= len(r.Preflight.Findings) {
		own = own[len(r.Preflight.Findings):]
	}
	r.Findings = append(r.Findings, own...)
}

// finish records the launch's exit.
func (r *launchReport) finish(err error) {
	r.ExitCode = verdict.Code(err)
	if r.Reason != "" || err == nil {
		return
	}
	// A silent exit (CMD's own code) has no reason of rankgate's.
	if ee, ok := err.(*verdict.ExitError); !ok || ee.Err != nil {
		r.Reason = err.Error()
	}
}

// writeLaunchReport writes the report to path: atomically (a temporary
// file renamed over it) when path is a regular file or new, directly when
// it is something else (/dev/fd/3, a pipe). Failing to write is told,
// never fatal, like the termination log: the exit code still tells.
func (a *App) writeLaunchReport(path string, r *launchReport, format string) {
	if !isDocument(format) {
		format = formatJSON
	}
	var b bytes.Buffer
	err := verdict.WriteDocument(&b, r, format)
	if err == nil {
		err = writeFileAtomic(path, b.Bytes())
	}
	if err != nil {
		fmt.Fprintf(a.Streams.Err, "rankgate: cannot write --report-file %s: %v\n", path, err)
	}
}

func writeFileAtomic(path string, data []byte) error {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, werr := f.Write(data)
		return errors.Join(werr, f.Close())
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	err = errors.Join(werr, tmp.Sync(), tmp.Close(), os.Chmod(tmp.Name(), 0o644))
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
