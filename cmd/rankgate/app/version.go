package app

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/verdict"
)

// Commit and BuildDate are set at build time like Version (-ldflags "-X
// .../app.Commit=... -X .../app.BuildDate=..."). Left unset, they come
// from the build information the Go toolchain records (vcs.revision,
// vcs.time), as Version comes from the module version.
var (
	Commit    = ""
	BuildDate = ""
)

// unsetVersion is Version's value when no -ldflags set it.
const unsetVersion = "dev"

// versionInfo is what `rankgate version` prints; the JSON names are
// kubectl version's.
type versionInfo struct {
	Version string `json:"version"`
	// GitCommit is the source revision; GitTreeState "dirty" when the
	// tree had changes not committed, "clean" when it had none.
	GitCommit    string `json:"gitCommit,omitempty"`
	GitTreeState string `json:"gitTreeState,omitempty"`
	BuildDate    string `json:"buildDate,omitempty"`
	GoVersion    string `json:"goVersion"`
	Compiler     string `json:"compiler"`
	Platform     string `json:"platform"`
	// Build is "full" (every command) or "node" (-tags rankgate_node: the
	// commands that run on a GPU node, without client-go).
	Build string `json:"build"`
}

// currentVersion is this binary's version information.
func currentVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return resolveVersion(Version, Commit, BuildDate, bi)
}

// resolveVersion fills what -ldflags left unset from the toolchain's
// build information (bi may be nil).
func resolveVersion(version, commit, date string, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{
		Version: version, GitCommit: commit, BuildDate: date,
		GoVersion: runtime.Version(), Compiler: runtime.Compiler,
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Build: buildFlavour,
	}
	if bi == nil {
		return v
	}
	if (v.Version == "" || v.Version == unsetVersion) && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if v.GitCommit == "" {
				v.GitCommit = s.Value
			}
		case "vcs.time":
			if v.BuildDate == "" {
				v.BuildDate = s.Value
			}
		case "vcs.modified":
			switch s.Value {
			case "true":
				v.GitTreeState = "dirty"
			case "false":
				v.GitTreeState = "clean"
			}
		}
	}
	if v.Version == "" {
		v.Version = unsetVersion
	}
	return v
}

func (a *App) newVersionCommand() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version [-o json|yaml]",
		Short: "Print the version, commit, build date, Go version, platform and build of this binary",
		Long: `version prints what this binary is: its version, the source commit and
build date (set at build time, else read from the build information the Go
toolchain records), the Go version, the platform, and which build it is:
full (every command) or node (the commands that run on a GPU node).`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{outputFormatsAnnotation: strings.Join(versionFormats, ",")},
		RunE: func(*cobra.Command, []string) error {
			return writeVersion(a.Streams.Out, currentVersion(), format)
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", formatText, "output format: text, json or yaml")
	return cmd
}

var versionFormats = []string{formatText, formatJSON, "yaml"}

func writeVersion(w io.Writer, v versionInfo, format string) error {
	switch format {
	case formatJSON:
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	case formatText:
		tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
		commit := orUnknown(v.GitCommit)
		if v.GitTreeState == "dirty" {
			commit += " (with changes not committed)"
		}
		fmt.Fprintf(tw, "Version:\t%s\n", v.Version)
		fmt.Fprintf(tw, "Git commit:\t%s\n", commit)
		fmt.Fprintf(tw, "Build date:\t%s\n", orUnknown(v.BuildDate))
		fmt.Fprintf(tw, "Go version:\t%s (%s)\n", v.GoVersion, v.Compiler)
		fmt.Fprintf(tw, "Platform:\t%s\n", v.Platform)
		fmt.Fprintf(tw, "Build:\t%s\n", buildFlavourText)
		return tw.Flush()
	}
	return verdict.Exitf(verdict.ExitUsage, "output format %q: want text, json or yaml", format)
}
