package preflight

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/internal/fileformat"
	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// DriverTable is the known-bad driver table (configs/known-bad-drivers.yaml).
type DriverTable struct {
	// APIVersion and Kind are the file header: DriverTableAPIVersion and
	// DriverTableKind.
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Entries    []DriverEntry `json:"entries"`
}

// The known-bad driver table format. Tables written before the header had a
// kind carry `version: rankgate.io/v1` and still load.
const (
	DriverTableAPIVersion = "rankgate.io/v1"
	DriverTableKind       = "KnownBadDrivers"
)

// DriverTableFormat is the table's header as this build checks it.
var DriverTableFormat = fileformat.Format{
	APIVersion: DriverTableAPIVersion, Kind: DriverTableKind,
	LegacyVersion: "rankgate.io/v1",
}

// driverTableFile is a table with either header.
type driverTableFile struct {
	DriverTable
	Version string `json:"version"`
}

// DriverEntry is one known-bad driver condition.
type DriverEntry struct {
	ID        string           `json:"id"`
	Drivers   []string         `json:"drivers"`
	Condition string           `json:"condition"`
	Severity  verdict.Severity `json:"severity"`
	Problem   string           `json:"problem"`
	Fix       string           `json:"fix"`
	Source    string           `json:"source"`
}

// NodeShape is what a driver condition is matched against. Both preflight
// (from an inventory) and diagnose (from node labels) can fill it.
type NodeShape struct {
	Driver string
	// HasMIG and HasFull: at least one MIG-enabled GPU / one GPU with MIG
	// off. Both true is the "mixed" shape.
	HasMIG  bool
	HasFull bool
	// Products are the GPU product names; Profiles the MIG profiles present.
	Products []string
	Profiles []string
}

// ShapeOf derives the node shape from an inventory.
func ShapeOf(inv *topology.Inventory) NodeShape {
	s := NodeShape{Driver: inv.DriverVersion}
	seen := map[string]bool{}
	for _, g := range inv.GPUs {
		switch {
		case g.MIGCurrent == topology.ModeEnabled || len(g.MIGDevices) > 0:
			s.HasMIG = true
		case g.MIGCurrent == topology.ModeDisabled || g.MIGCurrent == topology.ModeUnsupported:
			s.HasFull = true
		}
		s.Products = append(s.Products, g.Name)
		for _, m := range g.MIGDevices {
			p := topology.GIProfileName(m.Profile)
			if p != "" && !seen[p] {
				seen[p] = true
				s.Profiles = append(s.Profiles, p)
			}
		}
	}
	return s
}

// DefaultDriverTable parses the embedded table; it is tested, so a failure
// is a build defect.
func DefaultDriverTable() *DriverTable {
	t, err := ParseDriverTable(configs.KnownBadDrivers)
	if err != nil {
		panic(fmt.Sprintf("embedded known-bad driver table is invalid: %v", err))
	}
	return t
}

// MaxDriverTableSize bounds a known-bad driver table file: the embedded
// one is 2 KiB.
const MaxDriverTableSize = 1 << 20

// ReadDriverTableFile reads and parses a table file: a regular file of at
// most MaxDriverTableSize bytes.
func ReadDriverTableFile(ctx context.Context, path string) (*DriverTable, error) {
	data, err := fileinput.ReadFile(ctx, path, nil, MaxDriverTableSize)
	if err != nil {
		return nil, fmt.Errorf("known-bad driver table: %w", err)
	}
	t, err := ParseDriverTable(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseDriverTable decodes and validates a table (YAML or JSON) strictly:
// unknown keys, a missing header and another apiVersion or kind are errors.
func ParseDriverTable(data []byte) (*DriverTable, error) {
	var f driverTableFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		// A file of another kind fails on its first key unknown to a
		// table; its header says more.
		if h, ok := fileformat.PeekYAML(data); ok {
			if herr := DriverTableFormat.Check(h); herr != nil {
				return nil, fmt.Errorf("known-bad driver table: %w", herr)
			}
		}
		return nil, fmt.Errorf("known-bad driver table: %w", err)
	}
	if err := DriverTableFormat.Check(fileformat.Header{APIVersion: f.APIVersion, Kind: f.Kind, Version: f.Version}); err != nil {
		return nil, fmt.Errorf("known-bad driver table: %w", err)
	}
	t := f.DriverTable
	t.APIVersion, t.Kind = DriverTableAPIVersion, DriverTableKind
	for _, e := range t.Entries {
		if e.ID == "" || len(e.Drivers) == 0 || e.Fix == "" || e.Source == "" {
			return nil, fmt.Errorf("known-bad driver table: entry %q needs id, drivers, fix and source", e.ID)
		}
		if e.Severity != verdict.SeverityWarn && e.Severity != verdict.SeverityFail {
			return nil, fmt.Errorf("known-bad driver table: entry %s: severity %q must be warn or fail", e.ID, e.Severity)
		}
		if _, err := parseCondition(e.Condition); err != nil {
			return nil, fmt.Errorf("known-bad driver table: entry %s: %w", e.ID, err)
		}
	}
	return &t, nil
}

type condition struct {
	any, mixed     bool
	model, profile string
}

func parseCondition(s string) (condition, error) {
	switch s {
	case "any":
		return condition{any: true}, nil
	case "mig-mixed-with-full":
		return condition{mixed: true}, nil
	}
	var c condition
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, ":")
		switch {
		case ok && k == "model" && v != "":
			c.model = v
		case ok && k == "profile" && v != "":
			c.profile = v
		default:
			return c, fmt.Errorf("condition %q: want any, mig-mixed-with-full or model:<name> [profile:<profile>]", s)
		}
	}
	if c.model == "" {
		return c, fmt.Errorf("condition %q: want any, mig-mixed-with-full or model:<name> [profile:<profile>]", s)
	}
	return c, nil
}

// Match returns the entries that apply to a node shape.
func (t *DriverTable) Match(s NodeShape) []DriverEntry {
	var out []DriverEntry
	for _, e := range t.Entries {
		if !driverListed(e.Drivers, s.Driver) {
			continue
		}
		c, _ := parseCondition(e.Condition)
		switch {
		case c.any:
		case c.mixed:
			if !(s.HasMIG && s.HasFull) {
				continue
			}
		default:
			if !containsFold(s.Products, c.model) {
				continue
			}
			if c.profile != "" && !containsExact(s.Profiles, c.profile) {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

func driverListed(list []string, v string) bool {
	for _, d := range list {
		if d == "*" || (v != "" && d == v) {
			return true
		}
	}
	return false
}

func containsFold(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(strings.ToUpper(s), strings.ToUpper(sub)) {
			return true
		}
	}
	return false
}

func containsExact(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}
