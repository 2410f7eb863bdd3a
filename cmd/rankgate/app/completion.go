package app

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/launcher"
)

// outputFormatsAnnotation, on a command, lists the -o values it takes
// (comma-separated) when they are not those checkFormat accepts.
const outputFormatsAnnotation = "rankgate.io/output-formats"

// flagValues are the values of the flags that take one of a few words,
// for shell completion (cobra's completion command, its __complete).
func flagValues() map[string][]string {
	m := map[string][]string{
		"log-level":        {"debug", "info", "warn", "error"},
		"log-format":       {"console", "json"},
		"expect-transport": {string(launcher.TransportP2P), string(launcher.TransportSHM), string(launcher.TransportNet)},
		"sample":           configs.SampleNames(),
	}
	for k, v := range buildFlagValues() {
		m[k] = v
	}
	return m
}

// registerCompletions gives every flag with a fixed set of values its
// completion, on every command, and each command's -o its formats.
func registerCompletions(root *cobra.Command) {
	values := flagValues()
	done := map[*pflag.Flag]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		visit := func(f *pflag.Flag) {
			if done[f] {
				return
			}
			var words []string
			switch {
			case f.Name == "output":
				words = outputFormats(c)
			case values[f.Name] != nil:
				words = values[f.Name]
			default:
				return
			}
			done[f] = true
			_ = c.RegisterFlagCompletionFunc(f.Name, completeWords(words))
		}
		c.PersistentFlags().VisitAll(visit)
		c.Flags().VisitAll(visit)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// outputFormats are the -o values of c: its annotation's, else every
// format checkFormat accepts.
func outputFormats(c *cobra.Command) []string {
	if s, ok := c.Annotations[outputFormatsAnnotation]; ok {
		return strings.Split(s, ",")
	}
	var out []string
	for _, f := range []string{formatText, formatJSON, "yaml"} {
		if checkFormat(f) == nil {
			out = append(out, f)
		}
	}
	return out
}

// completeWords offers the words that start with what was typed, and no
// file names.
func completeWords(words []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return matching(words, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

func matching(words []string, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, w := range words {
		if strings.HasPrefix(w, prefix) {
			out = append(out, w)
		}
	}
	return out
}
