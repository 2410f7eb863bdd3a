package app

import (
	"github.com/rankgate/rankgate/verdict"
)

// Output formats.
const (
	formatText = verdict.FormatText
	formatJSON = verdict.FormatJSON
)

func checkFormat(f string) error {
	if f != formatText && f != formatJSON {
		return verdict.Exitf(verdict.ExitUsage, "output format %q: want text or json", f)
	}
	return nil
}

// printReport writes a report as JSON or as a human table.
func (a *App) printReport(r verdict.Report, format string) error {
	return verdict.Write(a.Streams.Out, r, format)
}
