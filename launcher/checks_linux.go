//go:build linux

package launcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/verdict"
)

// Pre-launch checks and the environment CMD gets.

// checkNproc: NPROC_EXCEEDS_DEVICES.
func (r *runner) checkNproc() (verdict.Finding, bool) {
	if r.opts.Devices == nil {
		return verdict.Finding{}, false
	}
	info, ok := torchrunNproc(r.opts.Command, r.getenv)
	if !ok || info.n == 0 {
		return verdict.Finding{}, false
	}
	devs := r.opts.Devices
	if info.n <= len(devs) {
		return verdict.Finding{}, false
	}
	ids := make([]string, len(devs))
	mig := 0
	for i, d := range devs {
		ids[i] = d.ID
		if d.Kind == "mig" {
			mig++
		}
	}
	what := fmt.Sprintf("%d device(s)", len(devs))
	why := "two processes on one GPU fail NCCL init (\"Duplicate GPU detected\" / \"Multiple Ranks are using the same GPU\")"
	if mig > 0 {
		what = fmt.Sprintf("%d MIG device(s)", len(devs))
		why = "more than one process per MIG device fails NCCL init (\"Multiple Ranks are using the same GPU/Partition\"), and CUDA shows each process only one MIG device"
	}
	if len(devs) == 0 {
		what = "no device"
	}
	return verdict.Finding{
		Rule: verdict.RuleNprocExceedsDevices, Severity: verdict.SeverityFail, Devices: ids,
		Message: fmt.Sprintf("torchrun would start %d local processes (%s=%s) but the rank has %s: %s",
			info.n, info.from, info.raw, what, why),
		Remediation: fmt.Sprintf("set --nproc-per-node (PyTorchJob: spec.nprocPerNode) to at most %d, or request %d devices for the pod", len(devs), info.n),
	}, true
}

func (r *runner) getenv(key string) string {
	prefix := key + "="
	v := ""
	for _, kv := range r.opts.Env {
		if strings.HasPrefix(kv, prefix) {
			v = kv[len(prefix):] // the last one wins, as in exec
		}
	}
	return v
}

func (r *runner) lookupEnv(key string) bool {
	prefix := key + "="
	for _, kv := range r.opts.Env {
		if strings.HasPrefix(kv, prefix) {
			return true
		}
	}
	return false
}

// checkHostfile: HOSTFILE_INVALID, HOSTFILE_SLOTS, HOST_UNREACHABLE.
func (r *runner) checkHostfile(ctx context.Context) (verdict.Finding, bool) {
	path := r.opts.MPIHostfile
	data, err := fileinput.ReadFile(ctx, path, nil, MaxHostfileSize)
	var hf *Hostfile
	var fe *fileinput.Error
	switch {
	case errors.As(err, &fe):
		err = errors.New(fe.Reason()) // the message names the file
	case err == nil:
		hf, err = ParseHostfile(data)
	}
	if err != nil {
		return verdict.Finding{
			Rule: verdict.RuleHostfileInvalid, Severity: verdict.SeverityFail,
			Message:     fmt.Sprintf("MPI hostfile %s: %v", path, err),
			Remediation: "write one host per line: \"host slots=N\" (Open MPI) or \"host:N\" (Intel MPI, MPICH)",
		}, true
	}
	names := make([]string, len(hf.Hosts))
	for i, h := range hf.Hosts {
		names[i] = h.Name
	}
	if np, over, isMPI := mpirunNP(r.opts.Command); isMPI && np > 0 && !over {
		if total, known := hf.TotalSlots(); known && np > total {
			return verdict.Finding{
				Rule: verdict.RuleHostfileSlots, Severity: verdict.SeverityFail, Nodes: names,
				Message: fmt.Sprintf("mpirun -np %d needs %d slots but hostfile %s gives %d on %d host(s)",
					np, np, path, total, len(hf.Hosts)),
				Remediation: "make -np equal to workers x slotsPerWorker (MPIJob: spec.slotsPerWorker and the Worker replicas), or add workers",
			}, true
		}
	}
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, r.opts.HostsTimeout)
	defer cancel()
	fails := waitHosts(hctx, names, r.opts.SSHPort, r.opts.Resolver, r.opts.Dialer)
	if ctx.Err() != nil {
		return verdict.Finding{}, false
	}
	if len(fails) == 0 {
		r.say(fmt.Sprintf("%d MPI host(s) reachable on port %d after %s", len(names), r.opts.SSHPort, time.Since(start).Round(time.Millisecond)))
		return verdict.Finding{}, false
	}
	var lines []string
	failed := make([]string, 0, len(fails))
	for i, f := range fails {
		failed = append(failed, f.host)
		if i < 10 {
			lines = append(lines, f.String())
		}
	}
	if len(fails) > 10 {
		lines = append(lines, fmt.Sprintf("and %d more", len(fails)-10))
	}
	return verdict.Finding{
		Rule: verdict.RuleHostUnreachable, Severity: verdict.SeverityFail, Nodes: failed,
		Message: fmt.Sprintf("%d of %d MPI host(s) not reachable on port %d within %s: %s",
			len(fails), len(names), r.opts.SSHPort, r.opts.HostsTimeout, strings.Join(lines, "; ")),
		Remediation: "check that the worker pods are Running and their sshd listens (kubectl get pods; MPIJob launcherCreationPolicy: WaitForWorkersReady); " +
			"hostnames resolve through the job's headless service",
	}, true
}

// prepareEnv sets NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT when the user
// set neither (the watchdog needs NCCL's INFO lines), and turns the
// watchdog off when the environment hides them.
func (r *runner) prepareEnv() []string {
	env := r.opts.Env
	if !r.lookupEnv("NCCL_DEBUG") && !r.lookupEnv("NCCL_DEBUG_SUBSYS") {
		env = append(env[:len(env):len(env)], "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT")
	}
	get := func(k string) string {
		v := ""
		for _, kv := range env {
			if strings.HasPrefix(kv, k+"=") {
				v = kv[len(k)+1:]
			}
		}
		return v
	}
	r.watchdog = r.opts.InitTimeout > 0
	hidden := ncclHidden(get("NCCL_DEBUG"), get("NCCL_DEBUG_SUBSYS"), get("NCCL_DEBUG_FILE"))
	if hidden != "" && r.watchdog && r.opts.ReadyPattern == nil && r.opts.ReadyFile == "" {
		r.watchdog = false
		f := verdict.Finding{
			Rule: verdict.RuleNCCLDebugHidden, Severity: verdict.SeverityWarn,
			Message:     hidden + ", so the NCCL init watchdog cannot see Init COMPLETE and is off",
			Remediation: "unset NCCL_DEBUG and NCCL_DEBUG_SUBSYS (rankgate then sets INFO/INIT), or set NCCL_DEBUG=INFO with INIT in NCCL_DEBUG_SUBSYS, or use --ready-pattern / --ready-file",
		}
		r.findings = append(r.findings, f)
		r.printFinding(f)
	}
	expect := r.opts.LocalRanks
	if expect <= 0 {
		expect = 1
		if info, ok := torchrunNproc(r.opts.Command, r.getenv); ok && info.n > 0 {
			expect = info.n
		} else if ok && r.opts.Devices != nil && len(r.opts.Devices) > 0 {
			expect = len(r.opts.Devices) // --nproc-per-node gpu
		} else if np, _, isMPI := mpirunNP(r.opts.Command); isMPI && np > 0 {
			expect = np // mpirun forwards every rank's output
		}
	}
	r.mon = newMonitor(r.opts.ReadyPattern, expect, r.opts.ExpectTransport, r.opts.ExpectDerived, r.opts.StrictTransport)
	r.mon.setDevices(deviceKinds(r.opts.Devices))
	return env
}
