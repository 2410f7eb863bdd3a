package preflight

import (
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// gapRules: INPUT_INCOMPLETE for what pasted outputs leave out. A gap is
// no verdict on the node; it says which part of the paste was not judged,
// so that a pass does not read as "every GPU is fine".
func gapRules(inv *topology.Inventory) []verdict.Finding {
	if len(inv.Gaps) == 0 {
		return nil
	}
	return []verdict.Finding{{
		Rule: verdict.RuleInputIncomplete, Severity: verdict.SeverityWarn,
		Message:     "the pasted outputs leave parts out, which are not judged: " + strings.Join(inv.Gaps, "; "),
		Remediation: "paste the whole output of each command (nothing elided), or run `rankgate preflight` on the node",
	}}
}

// migUnknownFinding: a GPU in MIG mode whose table was cut before its MIG
// devices section: its instances are unknown, not absent.
func migUnknownFinding(d topology.Device) verdict.Finding {
	return verdict.Finding{
		Rule: verdict.RuleInputIncomplete, Severity: verdict.SeverityWarn, Devices: []string{d.ID()},
		Message:     fmt.Sprintf("%s has MIG mode enabled, but the paste is truncated before the table's MIG devices section: its MIG instances are unknown (not judged as missing)", d.Name()),
		Remediation: "paste the whole `nvidia-smi` table, down to its closing border and the \"MIG devices:\" box, or `nvidia-smi -L` with it",
	}
}
