//go:build linux

package launcher

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rankgate/rankgate/verdict"
)

// What a launch says: findings on stderr, the init-timeout diagnosis, the
// termination log.

func (r *runner) timeoutFinding() verdict.Finding {
	s := r.mon.snapshot()
	msg := fmt.Sprintf("NCCL init did not complete within %s: %d of %d local rank(s) reported Init COMPLETE",
		r.opts.InitTimeout, len(s.completed), s.expect)
	var ranks []int
	if len(s.pending) > 0 {
		msg += "; never completed: " + strings.Join(s.pending, ", ")
		r.mon.mu.Lock()
		for _, p := range r.mon.order {
			if p.started && !p.completed && p.rank >= 0 {
				ranks = append(ranks, p.rank)
			}
		}
		r.mon.mu.Unlock()
	}
	if missing := s.expect - len(s.completed) - len(s.pending); missing > 0 {
		msg += fmt.Sprintf("; %d process(es) printed no NCCL Init START", missing)
	}
	rem := "a rank waits for its peers: check that every pod of the job is Running, that the ranks reach each other " +
		"(MASTER_ADDR/MASTER_PORT, NCCL_SOCKET_IFNAME), and the preflight findings; raise --init-timeout if init is only slow"
	if !s.sawNCCL {
		msg += "; no NCCL line was seen at all"
		rem = "CMD never reached NCCL init, or NCCL's lines do not reach rankgate: a rendezvous that waits for missing ranks " +
			"(torchrun, init_process_group), or mpirun without -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS; use --ready-pattern for non-NCCL readiness"
	}
	return verdict.Finding{Rule: verdict.RuleNCCLInitTimeout, Severity: verdict.SeverityFail, Message: msg, Remediation: rem, Ranks: ranks}
}

// initProgress is the progress line while the init watchdog waits: what
// for, how far NCCL init got, the time left.
func (r *runner) initProgress() string {
	var what string
	switch {
	case r.opts.ReadyPattern != nil:
		what = fmt.Sprintf("waiting for CMD to be ready (--ready-pattern %q)", r.opts.ReadyPattern.String())
	case r.opts.ReadyFile != "":
		what = fmt.Sprintf("waiting for CMD to be ready (--ready-file %s)", r.opts.ReadyFile)
	default:
		s := r.mon.snapshot()
		what = fmt.Sprintf("waiting for NCCL init: %d of %d local rank(s) reported Init COMPLETE", len(s.completed), s.expect)
		if len(s.pending) > 0 {
			what += fmt.Sprintf(", %d started", len(s.pending))
		}
	}
	left := max(time.Until(r.startedAt.Add(r.opts.InitTimeout)), 0).Round(time.Second)
	return fmt.Sprintf("%s; %s left until --init-timeout", what, left)
}

// printDiagnosis explains an init timeout: ranks, transports, NCCL's
// view, the preflight, NCCL's last lines.
func (r *runner) printDiagnosis(f verdict.Finding) {
	s := r.mon.snapshot()
	var b strings.Builder
	fmt.Fprintf(&b, "FAIL %s: NCCL init did not complete within %s\n", f.Rule, r.opts.InitTimeout)
	fmt.Fprintf(&b, "  local ranks: %d expected, %d completed init\n", s.expect, len(s.completed))
	for _, c := range s.completed {
		fmt.Fprintf(&b, "    completed: %s\n", c)
	}
	for _, p := range s.pending {
		fmt.Fprintf(&b, "    NEVER COMPLETED: %s\n", p)
	}
	if missing := s.expect - len(s.completed) - len(s.pending); missing > 0 {
		fmt.Fprintf(&b, "    %d process(es) printed no NCCL Init START\n", missing)
	}
	if len(s.transports) > 0 {
		fmt.Fprintf(&b, "  transports: %s\n", strings.Join(s.transports, ", "))
	} else {
		b.WriteString("  transports: none connected yet\n")
	}
	if s.nNodes > 0 {
		fmt.Fprintf(&b, "  NCCL's view: nNodes %d, localRanks %d\n", s.nNodes, s.localRanks)
	}
	if p := r.opts.Preflight; p != nil {
		fmt.Fprintf(&b, "  preflight: %s\n", p.Verdict)
		for _, pf := range p.Findings {
			fmt.Fprintf(&b, "    %s %s: %s\n", strings.ToUpper(string(pf.Severity)), pf.Rule, pf.Message)
		}
	} else {
		b.WriteString("  preflight: skipped\n")
	}
	if len(s.last) > 0 {
		b.WriteString("  last NCCL lines:\n")
		for _, l := range s.last {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	} else {
		b.WriteString("  no NCCL line was seen\n")
	}
	fmt.Fprintf(&b, "  fix: %s", f.Remediation)
	r.say(b.String())
}

func (r *runner) printFinding(f verdict.Finding) {
	msg := fmt.Sprintf("%s %s: %s", strings.ToUpper(string(f.Severity)), f.Rule, f.Message)
	if f.Remediation != "" {
		msg += "\n  fix: " + f.Remediation
	}
	r.say(msg)
}

func (r *runner) say(msg string) { r.errw.say(msg) }

func (r *runner) writeTerminationLog(reason string) {
	if reason == "" {
		return
	}
	if err := verdict.WriteTerminationLog(r.opts.TerminationLog, reason); err != nil {
		r.say(fmt.Sprintf("cannot write termination log %s: %v", r.opts.TerminationLog, errors.Unwrap(err)))
	}
}

// oneFinding is a finding as one termination-message paragraph.
func oneFinding(f verdict.Finding) string {
	s := f.Rule + ": " + f.Message
	if f.Remediation != "" {
		s += " Fix: " + f.Remediation
	}
	return s
}
