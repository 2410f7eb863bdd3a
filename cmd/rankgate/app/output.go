package app

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/rankgate/rankgate/verdict"
)

// Output formats. Every face with -o takes all three; json and yaml print
// the same single document (docs/configuration.md#output-formats).
const (
	formatText = verdict.FormatText
	formatJSON = verdict.FormatJSON
	formatYAML = verdict.FormatYAML
)

// formatList is "text, json or yaml", for help and error texts.
var formatList = strings.Join(verdict.Formats[:len(verdict.Formats)-1], ", ") + " or " + verdict.Formats[len(verdict.Formats)-1]

func checkFormat(f string) error {
	if !slices.Contains(verdict.Formats, f) {
		return verdict.Exitf(verdict.ExitUsage, "output format %q: want %s", f, formatList)
	}
	return nil
}

// outputValue is -o/--output: checked when it is set (flag, config file or
// RANKGATE_OUTPUT), so that a wrong value is a usage error (exit 2) before
// the command does anything.
type outputValue struct{ p *string }

func (v outputValue) String() string { return *v.p }
func (v outputValue) Type() string   { return "format" }
func (v outputValue) Set(s string) error {
	if !slices.Contains(verdict.Formats, s) {
		return fmt.Errorf("output format %q: want %s", s, formatList)
	}
	*v.p = s
	return nil
}

// addOutputFlag adds -o/--output (default text) writing to p.
func addOutputFlag(f *pflag.FlagSet, p *string, help string) {
	*p = formatText
	f.VarP(outputValue{p}, "output", "o", "output format: "+formatList+help)
}

// isDocument: the format prints one machine-readable document.
func isDocument(format string) bool { return format == formatJSON || format == formatYAML }

// printReport writes a report as one JSON or YAML document, or as a human
// report.
func (a *App) printReport(r verdict.Report, format string) error {
	return verdict.Write(a.Streams.Out, r, format)
}

// printDocument writes v as one JSON or YAML document on stdout.
func (a *App) printDocument(v any, format string) error {
	return verdict.WriteDocument(a.Streams.Out, v, format)
}
