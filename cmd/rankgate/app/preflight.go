package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/integrations/kubernetes/podresources"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/sources"
	"github.com/rankgate/rankgate/verdict"
)

// inventoryOptions choose where the node's truth comes from. Shared by
// preflight, inspect, init and launch.
type inventoryOptions struct {
	Inventory   []string
	Sample      string
	NVMLTimeout time.Duration
	Catalog     string
	Output      string
}

func (o *inventoryOptions) addFlags(f *pflag.FlagSet) {
	f.StringArrayVar(&o.Inventory, "inventory", nil, "read the node from a snapshot or nvidia-smi output files instead of NVML (repeatable; - for stdin)")
	f.StringVar(&o.Sample, "sample", "", "use an embedded sample node instead of NVML: "+strings.Join(configs.SampleNames(), ", "))
	f.DurationVar(&o.NVMLTimeout, "nvml-timeout", 5*time.Second, "deadline for each NVML call")
	f.StringVar(&o.Catalog, "catalog", "", "MIG profile catalog file replacing the embedded one")
	addOutputFlag(f, &o.Output, "")
}

// preflightOptions are the rank preflight's (preflight, init, launch).
type preflightOptions struct {
	inventoryOptions
	Devices            string
	ExpectProfile      string
	RequireP2P         bool
	KnownBadDrivers    string
	TerminationLog     string
	PodResourcesSocket string
}

func (o *preflightOptions) addFlags(f *pflag.FlagSet) {
	o.inventoryOptions.addFlags(f)
	f.StringVar(&o.Devices, "devices", "", "the rank's devices: GPU-/MIG- UUIDs, GPU indices N, MIG devices N:M (comma-separated); default from NVIDIA_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES, then the kubelet PodResources API")
	f.StringVar(&o.ExpectProfile, "expect-profile", "", "the profile every device must have: a MIG profile such as 2g.20gb, or full")
	f.BoolVar(&o.RequireP2P, "require-p2p", false, "make P2P_UNSUPPORTED between the rank's GPUs a failure instead of a warning")
	f.StringVar(&o.KnownBadDrivers, "known-bad-drivers", "", "known-bad driver table file replacing the embedded one")
	f.StringVar(&o.TerminationLog, "termination-log", "", "on failure, write a short reason to this file (Kubernetes: /dev/termination-log)")
	f.StringVar(&o.PodResourcesSocket, "pod-resources-socket", podresources.DefaultSocket, "kubelet PodResources socket, used in a pod when the environment names no devices")
}

func (a *App) newPreflightCommand() *cobra.Command {
	o := &preflightOptions{}
	var envFile string
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
  rankgate preflight --sample h100-mig --devices 0:0,1:0
  rankgate preflight --env-file nccl.env`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var env *ncclenv.Env
			if envFile != "" {
				var err error
				if env, err = a.readEnvFile(cmd.Context(), envFile); err != nil {
					return err
				}
			}
			r, _, err := a.rankPreflight(cmd.Context(), o)
			if err != nil {
				return err
			}
			if env != nil {
				r = judgeNCCLSettings(env, r, o.offline())
			}
			if err := a.printReport(r, o.Output); err != nil {
				return err
			}
			if r.Failed() {
				a.writeTerminationLog(o.TerminationLog, r.Reason(verdict.TerminationMax))
				return verdict.Silent(verdict.ExitFail)
			}
			return nil
		},
	}
	o.addFlags(cmd.Flags())
	cmd.Flags().StringVar(&envFile, "env-file", "", "judge the NCCL settings in this file (NAME=VALUE lines, as a shell, docker --env-file or nccl.conf writes them; - for stdin) against the rank's devices and the node's network")
	return cmd
}

// rankPreflight runs the rank rules for this process's devices and returns
// the report and the inventory it judged (init sends its driver versions).
// An error carries its exit code (verdict.Code): 2 bad input, 3
// environment, 4 hung NVML call; for NVML failures the report with the
// NVML_* finding has already been printed.
func (a *App) rankPreflight(ctx context.Context, o *preflightOptions) (verdict.Report, *topology.Inventory, error) {
	if err := checkFormat(o.Output); err != nil {
		return verdict.Report{}, nil, err
	}
	cat, drivers, err := preflight.LoadTables(ctx, o.Catalog, o.KnownBadDrivers)
	if err != nil {
		return verdict.Report{}, nil, inputError(ctx, err)
	}
	alloc, err := topology.ResolveAllocation(ctx, topology.AllocationQuery{
		Devices: o.Devices, KubeletSocket: o.PodResourcesSocket,
		Kubelet: podresources.New(o.PodResourcesSocket, o.NVMLTimeout).PodDevices,
	})
	if err != nil {
		return verdict.Report{}, nil, err
	}
	inv, err := a.readInventory(ctx, &o.inventoryOptions, cat, o.TerminationLog)
	if err != nil {
		return verdict.Report{}, nil, err
	}
	mode := preflight.ModeFor(alloc, o.offline())
	r := preflight.RankRules(preflight.RankInput{
		Inventory: inv, Allocation: alloc, ExpectProfile: o.ExpectProfile,
		RequireP2P: o.RequireP2P, Catalog: cat, Drivers: drivers, Mode: mode,
	})
	r.Subject = subject(inv, alloc) + "; " + mode.Describe()
	return r, inv, nil
}

// offline: the node's facts come from files or a sample, not NVML.
func (o *inventoryOptions) offline() bool {
	return len(o.Inventory) > 0 || o.Sample != ""
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

// readInventory reads the node from the source the options choose.
func (a *App) readInventory(ctx context.Context, o *inventoryOptions, cat *topology.Catalog, termLog string) (*topology.Inventory, error) {
	src, err := sources.New(sources.Options{
		Files: o.Inventory, Stdin: a.Streams.In, Sample: o.Sample, Catalog: cat,
		NVMLTimeout: o.NVMLTimeout, Log: nvmlLogger{a.Log}, NVML: nvmlLibrary,
	})
	if err != nil {
		return nil, err
	}
	inv, err := src.Inventory(ctx)
	if err != nil {
		return nil, a.discoveryFailed(ctx, err, o.Output, termLog)
	}
	return inv, nil
}

// discoveryFailed handles an inventory that could not be read: a signal
// exits 128+N; an NVML failure also becomes a report with its NVML_* rule
// (printed, and written to the termination log). The error keeps its own
// exit code (verdict.Code).
func (a *App) discoveryFailed(ctx context.Context, err error, format, termLog string) error {
	if exit, ok := interrupted(ctx, err); ok {
		return exit
	}
	var de *topology.DiscoveryError
	if !errors.As(err, &de) {
		return err
	}
	fix := de.Remediation
	if de.Class == verdict.ClassLibraryNotFound {
		// No driver library at all: often a laptop or CI runner, not a
		// broken GPU node.
		fix += " Not on a GPU node? Judge a node from its outputs instead: --inventory FILE (nvidia-smi -q, -L or its table, or a rankgate inspect snapshot), or --sample NAME (" + strings.Join(configs.SampleNames(), ", ") + ")."
	}
	r := verdict.NewReport("NVML discovery", []verdict.Finding{{
		Rule: de.Rule(), Severity: verdict.SeverityFail,
		Message: de.Detail(), Remediation: fix,
	}})
	_ = a.printReport(r, format)
	a.writeTerminationLog(termLog, r.Reason(verdict.TerminationMax))
	return verdict.Quiet(err)
}

// writeTerminationLog writes the reason where Kubernetes reads it. Failing
// to write is told, never fatal: the exit code still tells.
func (a *App) writeTerminationLog(p, reason string) {
	if err := verdict.WriteTerminationLog(p, reason); err != nil {
		fmt.Fprintf(a.Streams.Err, "rankgate: cannot write termination log %s: %v\n", p, errors.Unwrap(err))
	}
}
