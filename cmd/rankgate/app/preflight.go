package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/integrations/kubernetes/podresources"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource"
	"github.com/rankgate/rankgate/topology/offline"
	"github.com/rankgate/rankgate/verdict"
)

// terminationMessageMax is the kubelet's limit for a termination message.
const terminationMessageMax = 4096

// addInventoryFlags registers the flags that choose where the node's truth
// comes from. Shared by preflight, inspect, init and launch.
func addInventoryFlags(cmd *cobra.Command) {
	cmd.Flags().StringArray("inventory", nil, "read the node from a snapshot or nvidia-smi output files instead of NVML (repeatable; - for stdin)")
	cmd.Flags().String("sample", "", "use an embedded sample node instead of NVML: "+strings.Join(configs.SampleNames(), ", "))
	cmd.Flags().Duration("nvml-timeout", 5*time.Second, "deadline for each NVML call")
	cmd.Flags().String("catalog", "", "MIG profile catalog file replacing the embedded one")
	cmd.Flags().StringP("output", "o", formatText, "output format: text or json")
}

// addPreflightFlags registers the rank preflight flags.
func addPreflightFlags(cmd *cobra.Command) {
	addInventoryFlags(cmd)
	cmd.Flags().String("devices", "", "the rank's devices: GPU-/MIG- UUIDs, GPU indices N, MIG devices N:M (comma-separated); default from NVIDIA_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES, then the kubelet PodResources API")
	cmd.Flags().String("expect-profile", "", "the profile every device must have: a MIG profile such as 2g.20gb, or full")
	cmd.Flags().Bool("require-p2p", false, "make P2P_UNSUPPORTED between the rank's GPUs a failure instead of a warning")
	cmd.Flags().String("known-bad-drivers", "", "known-bad driver table file replacing the embedded one")
	cmd.Flags().String("termination-log", "", "on failure, write a short reason to this file (Kubernetes: /dev/termination-log)")
	cmd.Flags().String("pod-resources-socket", podresources.DefaultSocket, "kubelet PodResources socket, used in a pod when the environment names no devices")
}

func (a *App) newPreflightCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check that this rank's devices can run a distributed job",
		Long: `preflight reads the node's GPUs and MIG instances (NVML, or files with
--inventory, or an embedded --sample), resolves the devices this rank was
given, and runs the rank rules. Exit 0 pass (warnings allowed), 1 fail,
2 bad input, 3 NVML/driver failure, 4 an NVML call hung past its deadline.`,
		Example: `  rankgate preflight
  rankgate preflight --devices MIG-1b2c... --expect-profile 3g.40gb -o json
  rankgate preflight --inventory smi-L.txt --inventory topo.txt --devices 0,1
  rankgate preflight --sample h100-mig --devices 0:0,1:0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, _, err := a.rankPreflight(cmd.Context())
			if err != nil {
				return err
			}
			if err := a.printReport(r, a.Config.String("output")); err != nil {
				return err
			}
			if r.Failed() {
				a.writeTerminationLog(r.Reason(terminationMessageMax))
				return silentExit(verdict.ExitFail)
			}
			return nil
		},
	}
	addPreflightFlags(cmd)
	return cmd
}

// rankPreflight runs the rank rules for this process's devices and returns
// the report and the inventory it judged (init sends its driver versions). An error is
// an *ExitError: 2 bad input, 3 environment, 4 hung NVML call; for NVML
// failures the report with the NVML_* finding has already been printed.
func (a *App) rankPreflight(ctx context.Context) (verdict.Report, *topology.Inventory, error) {
	format := a.Config.String("output")
	if err := checkFormat(format); err != nil {
		return verdict.Report{}, nil, err
	}
	drivers := preflight.DefaultDriverTable()
	if p := a.Config.String("known-bad-drivers"); p != "" {
		var err error
		if drivers, err = preflight.ReadDriverTableFile(ctx, p); err != nil {
			return verdict.Report{}, nil, inputError(ctx, err)
		}
	}
	alloc, err := a.allocation(ctx)
	if err != nil {
		return verdict.Report{}, nil, err
	}
	inv, cat, err := a.loadInventory(ctx)
	if err != nil {
		return verdict.Report{}, nil, err
	}
	mode := preflight.ModeFor(alloc, a.offlineInventory())
	r := preflight.RankRules(preflight.RankInput{
		Inventory: inv, Allocation: alloc, ExpectProfile: a.Config.String("expect-profile"),
		RequireP2P: a.Config.Bool("require-p2p"), Catalog: cat, Drivers: drivers, Mode: mode,
	})
	r.Subject = subject(inv, alloc) + "; " + mode.Describe()
	return r, inv, nil
}

// offlineInventory: the node's facts come from files or a sample, not NVML.
func (a *App) offlineInventory() bool {
	return len(a.Config.Strings("inventory")) > 0 || a.Config.String("sample") != ""
}

func subject(inv *topology.Inventory, alloc topology.Allocation) string {
	node := inv.Hostname
	if node == "" {
		node = inv.Source
	}
	from := alloc.From
	if alloc.All {
		from += " (all)"
	}
	return fmt.Sprintf("node %s, driver %s, devices from %s", node, orUnknown(inv.DriverVersion), from)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// loadInventory reads the node: files, a sample, or NVML.
func (a *App) loadInventory(ctx context.Context) (*topology.Inventory, *topology.Catalog, error) {
	cat := topology.DefaultCatalog()
	if p := a.Config.String("catalog"); p != "" {
		var err error
		if cat, err = topology.ReadCatalogFile(ctx, p); err != nil {
			return nil, nil, inputError(ctx, err)
		}
	}
	files := a.Config.Strings("inventory")
	sample := a.Config.String("sample")
	var inv *topology.Inventory
	var err error
	switch {
	case len(files) > 0 && sample != "":
		return nil, nil, exitf(verdict.ExitUsage, "--inventory and --sample exclude each other")
	case sample != "":
		data, ok := configs.Sample(sample)
		if !ok {
			return nil, nil, exitf(verdict.ExitUsage, "unknown sample %q (have %s)", sample, strings.Join(configs.SampleNames(), ", "))
		}
		inv, err = topology.DecodeSnapshot("sample:"+sample, data)
		if err == nil {
			inv.Source = "sample:" + sample
		}
	case len(files) > 0:
		inv, err = offline.Load(ctx, files, a.Streams.In, cat)
	default:
		src := nvmlsource.NewDefault(nvmlsource.WithCallTimeout(a.Config.Duration("nvml-timeout")))
		inv, err = src.Inventory(ctx)
		if err == nil && inv.Hostname == "" {
			inv.Hostname = nodeName()
		}
	}
	if err != nil {
		return nil, nil, a.inventoryError(ctx, err)
	}
	return inv, cat, nil
}

// inventoryError maps discovery and input errors to exit codes; NVML
// failures also become a report with their NVML_* rule.
func (a *App) inventoryError(ctx context.Context, err error) error {
	if exit, ok := interrupted(ctx, err); ok {
		return exit
	}
	var ie *topology.InputError
	if errors.As(err, &ie) {
		return &ExitError{Code: verdict.ExitUsage, Err: err}
	}
	var de *topology.DiscoveryError
	if errors.As(err, &de) {
		r := verdict.NewReport("NVML discovery", []verdict.Finding{{
			Rule: de.Rule(), Severity: verdict.SeverityFail,
			Message: de.Error(), Remediation: de.Remediation,
		}})
		_ = a.printReport(r, a.Config.String("output"))
		a.writeTerminationLog(r.Reason(terminationMessageMax))
		code := verdict.ExitEnvironment
		if de.Hung {
			code = verdict.ExitTimeout
		}
		return silentExit(code)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &ExitError{Code: verdict.ExitTimeout, Err: err}
	}
	return &ExitError{Code: verdict.ExitEnvironment, Err: err}
}

func nodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

// allocation finds the rank's devices: --devices, then the environment,
// then (in a pod) the kubelet PodResources API, else every device of the
// node.
func (a *App) allocation(ctx context.Context) (topology.Allocation, error) {
	if s := a.Config.String("devices"); s != "" {
		refs, err := topology.ParseDeviceList(s)
		if err != nil {
			return topology.Allocation{}, exitf(verdict.ExitUsage, "--devices: %v", err)
		}
		return topology.Allocation{From: "--devices", Refs: refs}, nil
	}
	alloc, ok, err := topology.AllocationFromEnv(os.LookupEnv, listDir)
	if err != nil {
		return alloc, exitf(verdict.ExitUsage, "%v", err)
	}
	if ok {
		return alloc, nil
	}
	pod, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	sock := a.Config.String("pod-resources-socket")
	if pod != "" && ns != "" && sock != "" {
		if _, err := os.Stat(sock); err == nil {
			c := podresources.New(sock, a.Config.Duration("nvml-timeout"))
			refs, err := c.PodDevices(ctx, ns, pod)
			if err != nil {
				return alloc, exitf(verdict.ExitEnvironment, "kubelet PodResources API at %s: %v", sock, err)
			}
			return topology.Allocation{From: "podresources", Refs: refs}, nil
		}
	}
	return topology.Allocation{From: topology.FromDefault, All: true}, nil
}

func listDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

// writeTerminationLog writes the reason where Kubernetes reads it. Failing
// to write is logged, never fatal: the exit code still tells.
func (a *App) writeTerminationLog(reason string) {
	p := a.Config.String("termination-log")
	if p == "" {
		return
	}
	if len(reason) > terminationMessageMax {
		reason = reason[:terminationMessageMax]
	}
	if err := os.WriteFile(p, []byte(reason), 0o644); err != nil {
		a.Log.Warn("cannot write termination log")
		fmt.Fprintf(a.Streams.Err, "rankgate: cannot write termination log %s: %v\n", p, err)
	}
}
