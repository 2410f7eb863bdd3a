// Package fileformat checks the header of rankgate's data files: every file
// format (inventory snapshot, MIG profile catalog, known-bad driver table)
// names its own apiVersion and kind, as Kubernetes objects do, so that each
// format can change version on its own and a file given to the wrong flag is
// refused by name rather than by its first unknown key.
package fileformat

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Format is one file format as this build reads and writes it.
type Format struct {
	// APIVersion is the one version of the format this build reads and
	// writes, e.g. "rankgate.io/v1".
	APIVersion string
	// Kind names the format, e.g. "NodeInventory".
	Kind string
	// LegacyVersion is the value of the single `version` field that files of
	// this format carried before apiVersion and kind; such files still load.
	// Empty when the format never had that header.
	LegacyVersion string
}

// Header is the part of a file that says which format it is. A file has
// either APIVersion and Kind, or (written before them) Version alone.
type Header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Version    string `json:"version"`
}

// Check returns nil when a file with header h is of format f at the version
// this build reads. The kind is checked first: a file given to the wrong
// flag is told so by name, whatever its version.
func (f Format) Check(h Header) error {
	if h.Version != "" {
		if h.APIVersion != "" || h.Kind != "" {
			return fmt.Errorf("the header has both version (the old form) and apiVersion/kind: keep only apiVersion: %s and kind: %s", f.APIVersion, f.Kind)
		}
		if f.LegacyVersion == "" || h.Version != f.LegacyVersion {
			return fmt.Errorf("version %q is not supported (want apiVersion: %s and kind: %s)", h.Version, f.APIVersion, f.Kind)
		}
		return nil
	}
	switch {
	case h.APIVersion == "" && h.Kind == "":
		return fmt.Errorf("missing apiVersion and kind (want apiVersion: %s and kind: %s)", f.APIVersion, f.Kind)
	case h.Kind == "":
		return fmt.Errorf("missing kind (want kind: %s)", f.Kind)
	case h.Kind != f.Kind:
		return fmt.Errorf("the file has kind %s, not %s: it is another format", h.Kind, f.Kind)
	case h.APIVersion == "":
		return fmt.Errorf("missing apiVersion (want apiVersion: %s)", f.APIVersion)
	case h.APIVersion != f.APIVersion:
		return fmt.Errorf("apiVersion %q is not supported by this build (want apiVersion: %s)", h.APIVersion, f.APIVersion)
	}
	return nil
}

// PeekJSON reads only the header of a JSON object, ignoring every other
// key. ok is false when data is not a JSON object with string header
// fields; the strict decoder then says what is wrong.
func PeekJSON(data []byte) (h Header, ok bool) {
	return h, json.Unmarshal(data, &h) == nil
}

// PeekYAML is PeekJSON for a YAML (or JSON) document.
func PeekYAML(data []byte) (h Header, ok bool) {
	return h, yaml.Unmarshal(data, &h) == nil
}
