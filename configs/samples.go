package configs

import (
	"embed"
	"path"
	"sort"
	"strings"
)

// samples are inventory snapshots of realistic nodes, so that rankgate can
// show a real verdict on a machine without a GPU (`rankgate demo`,
// `preflight --sample`).
//
//go:embed samples/*.json
var samples embed.FS

// Sample returns the snapshot of the named sample node.
func Sample(name string) ([]byte, bool) {
	if strings.ContainsAny(name, "/\\") {
		return nil, false
	}
	b, err := samples.ReadFile(path.Join("samples", name+".json"))
	return b, err == nil
}

// SampleNames lists the embedded samples.
func SampleNames() []string {
	ents, _ := samples.ReadDir("samples")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(out)
	return out
}
