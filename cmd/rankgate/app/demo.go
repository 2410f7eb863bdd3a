package app

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// demoSample is the embedded node the demo runs on: two H100s in MIG mode.
const demoSample = "h100-mig"

func (a *App) newDemoCommand() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run two real preflights on an embedded sample node (no GPU needed)",
		Long: `demo runs the rank rules on the embedded sample node h100-mig (two H100
80GB GPUs split into MIG instances) twice: a rank given MIG instances on
both GPUs (fails: MIG_SPANS_GPUS, MIG_MULTIPLE_PER_PROCESS) and a rank given
one 3g.40gb instance (passes). Exit 0 when both verdicts come out as shown.

With -o json or -o yaml it prints one document: the list of both reports,
in the order above (the shape of diagnose --offline -o json).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			data, _ := configs.Sample(demoSample)
			inv, err := topology.DecodeSnapshot("sample:"+demoSample, data)
			if err != nil {
				return verdict.Exitf(verdict.ExitEnvironment, "embedded sample: %v", err)
			}
			runs := []struct {
				title   string
				devices []string
				expect  string
				want    verdict.Verdict
			}{
				{"rank given MIG 3g.40gb instances on GPU 0 and GPU 1", []string{"0:0", "1:0"}, "3g.40gb", verdict.VerdictFail},
				{"rank given one MIG 3g.40gb instance of GPU 0", []string{"0:0"}, "3g.40gb", verdict.VerdictPass},
			}
			ok := true
			reports := make([]verdict.Report, 0, len(runs))
			for i, run := range runs {
				r := preflight.RankRules(preflight.RankInput{
					Inventory: inv, Allocation: topology.Allocation{From: "--devices", Refs: run.devices},
					ExpectProfile: run.expect, Catalog: topology.DefaultCatalog(), Drivers: preflight.DefaultDriverTable(),
				})
				r.Subject = fmt.Sprintf("sample node %s: %s (--devices %v --expect-profile %s)", demoSample, run.title, run.devices, run.expect)
				ok = ok && r.Verdict == run.want
				reports = append(reports, r)
				if isDocument(format) {
					continue
				}
				if i > 0 {
					fmt.Fprintln(a.Streams.Out)
				}
				fmt.Fprintf(a.Streams.Out, "== rankgate preflight --sample %s --devices %s --expect-profile %s\n", demoSample, strings.Join(run.devices, ","), run.expect)
				if err := a.printReport(r, format); err != nil {
					return err
				}
			}
			if isDocument(format) {
				if err := a.printDocument(verdict.NewDocumentList(reports), format); err != nil {
					return err
				}
			}
			if !ok {
				return verdict.Exitf(verdict.ExitFail, "demo verdicts differ from the expected fail/pass")
			}
			return nil
		},
	}
	addOutputFlag(cmd.Flags(), &format, " (json, yaml: one list of both reports)")
	return cmd
}
