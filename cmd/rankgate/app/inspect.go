package app

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

func (a *App) newInspectCommand() *cobra.Command {
	o := &inventoryOptions{}
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Print the node's GPU inventory (the bug-report snapshot)",
		Long: `inspect prints what rankgate knows about the node: GPUs, MIG instances,
links and driver. With -o json it prints the versioned snapshot that
--inventory reads back; attach it to bug reports. -o yaml prints the same
snapshot as YAML, for reading (--inventory reads the JSON form).`,
		Example: `  rankgate inspect -o json > node.json
  rankgate inspect --inventory smi-L.txt --inventory topo-m.txt -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format := o.Output
			if err := checkFormat(format); err != nil {
				return err
			}
			cat, _, err := preflight.LoadTables(cmd.Context(), o.Catalog, "")
			if err != nil {
				return inputError(cmd.Context(), err)
			}
			inv, err := a.readInventory(cmd.Context(), o, cat, "")
			if err != nil {
				return err
			}
			if isDocument(format) {
				b, err := topology.EncodeSnapshot(inv)
				if err == nil && format == formatYAML {
					b, err = yaml.JSONToYAML(b)
				}
				if err != nil {
					return verdict.Exitf(verdict.ExitEnvironment, "encode snapshot: %v", err)
				}
				_, err = a.Streams.Out.Write(b)
				return err
			}
			writeInventory(a, inv)
			return nil
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func writeInventory(a *App, inv *topology.Inventory) {
	w := a.Streams.Out
	fmt.Fprintf(w, "node %s  driver %s  CUDA %s  source %s\n\n", orUnknown(inv.Hostname), orUnknown(inv.DriverVersion), orUnknown(inv.CUDADriverVersion), inv.Source)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tUUID\tNAME/PROFILE\tSMS\tMEMORY\tMIG\tBUS")
	for _, g := range inv.GPUs {
		mig := string(g.MIGCurrent)
		if g.MIGPending != "" && g.MIGPending != g.MIGCurrent {
			mig += " (pending " + string(g.MIGPending) + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Index, dash(g.UUID), dash(g.Name), num(g.SMs), mib(g.MemoryMiB), dash(mig), dash(g.PCIBusID))
		for _, m := range g.MIGDevices {
			fmt.Fprintf(tw, "  %d:%d\t%s\t%s\t%s\t%s\tGI %s CI %s\t\n", g.Index, m.Index, dash(m.UUID), dash(m.Profile), num(m.SMs), mib(m.MemoryMiB), id(m.GPUInstanceID), id(m.ComputeInstanceID))
		}
	}
	tw.Flush()
	if len(inv.Links) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LINK\tLEVEL\tNVLINKS\tP2P READ\tP2P WRITE")
		for _, l := range inv.Links {
			fmt.Fprintf(tw, "%d-%d\t%s\t%s\t%s\t%s\n", l.A, l.B, dash(l.Level), num(l.NVLinks), dash(string(l.P2PRead)), dash(string(l.P2PWrite)))
		}
		tw.Flush()
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func mib(n uint64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%d MiB", n)
}

// id renders a GI/CI ID; -1 means the source did not say.
func id(n int) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}
