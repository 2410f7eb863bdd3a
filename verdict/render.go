package verdict

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Output formats every face accepts with -o.
const (
	FormatText = "text"
	FormatJSON = "json"
	FormatYAML = "yaml"
)

// Formats lists the output formats, in the order help texts name them.
var Formats = []string{FormatText, FormatJSON, FormatYAML}

// Write renders r as one JSON or YAML document (a Document: with
// apiVersion and kind), or as the human text.
func Write(w io.Writer, r Report, format string) error {
	if format == FormatJSON || format == FormatYAML {
		return WriteDocument(w, NewDocument(r), format)
	}
	return WriteText(w, r)
}

// WriteDocument renders v as exactly one document: indented JSON ending in
// a newline, or YAML with the same content (the JSON's field names; keys
// in sorted order, as kubectl -o yaml prints them).
func WriteDocument(w io.Writer, v any, format string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == FormatYAML {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
	} else {
		b = append(b, '\n')
	}
	_, err = w.Write(b)
	return err
}

// WriteJSON renders r as one indented JSON document.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText renders r for a person: the verdict, the devices checked, then
// each finding with its fix.
func WriteText(w io.Writer, r Report) error {
	subject := ""
	if r.Subject != "" {
		subject = "  " + EscapeText(r.Subject)
	}
	fmt.Fprintf(w, "verdict: %s%s\n", strings.ToUpper(string(r.Verdict)), subject)
	if len(r.Devices) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DEVICE\tKIND\tGPU\tPROFILE\tSMS\tMEMORY")
		for _, d := range r.Devices {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", EscapeText(d.ID), EscapeText(d.Kind), d.GPU, orUnknown(EscapeText(d.Profile)), countOrUnknown(uint64(d.SMs), ""), countOrUnknown(d.MemoryMiB, " MiB"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Findings) == 0 {
		_, err := fmt.Fprintln(w, "\nno findings")
		return err
	}
	fmt.Fprintln(w)
	for _, f := range r.Findings {
		WriteFinding(w, f)
	}
	return nil
}

// WriteFinding renders one finding as the text report does, every string
// escaped for the terminal (EscapeText).
func WriteFinding(w io.Writer, f Finding) {
	fmt.Fprintf(w, "%-4s  %s\n", strings.ToUpper(EscapeText(string(f.Severity))), EscapeText(f.Rule))
	fmt.Fprintf(w, "      %s\n", EscapeText(f.Message))
	if f.Remediation != "" {
		fmt.Fprintf(w, "      fix: %s\n", EscapeText(f.Remediation))
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

func countOrUnknown(n uint64, unit string) string {
	if n == 0 {
		return "?"
	}
	return fmt.Sprint(n) + unit
}
