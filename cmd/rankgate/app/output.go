package app

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/rankgate/rankgate/verdict"
)

// Output formats.
const (
	formatText = "text"
	formatJSON = "json"
)

func checkFormat(f string) error {
	if f != formatText && f != formatJSON {
		return verdict.Exitf(verdict.ExitUsage, "output format %q: want text or json", f)
	}
	return nil
}

// printReport writes a report as JSON or as a human table.
func (a *App) printReport(r verdict.Report, format string) error {
	return writeReport(a.Streams.Out, r, format)
}

func writeReport(w io.Writer, r verdict.Report, format string) error {
	if format == formatJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	subject := ""
	if r.Subject != "" {
		subject = "  " + r.Subject
	}
	fmt.Fprintf(w, "verdict: %s%s\n", strings.ToUpper(string(r.Verdict)), subject)
	if len(r.Devices) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DEVICE\tKIND\tGPU\tPROFILE\tSMS\tMEMORY")
		for _, d := range r.Devices {
			sms, mem := "?", "?"
			if d.SMs > 0 {
				sms = fmt.Sprint(d.SMs)
			}
			if d.MemoryMiB > 0 {
				mem = fmt.Sprintf("%d MiB", d.MemoryMiB)
			}
			prof := d.Profile
			if prof == "" {
				prof = "?"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", d.ID, d.Kind, d.GPU, prof, sms, mem)
		}
		tw.Flush()
	}
	if len(r.Findings) == 0 {
		fmt.Fprintln(w, "\nno findings")
		return nil
	}
	fmt.Fprintln(w)
	for _, f := range r.Findings {
		fmt.Fprintf(w, "%-4s  %s\n", strings.ToUpper(string(f.Severity)), f.Rule)
		fmt.Fprintf(w, "      %s\n", f.Message)
		if f.Remediation != "" {
			fmt.Fprintf(w, "      fix: %s\n", f.Remediation)
		}
	}
	return nil
}
