package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/rankgate/rankgate/internal/fileformat"
)

// EncodeSnapshot writes an inventory as indented JSON headed by
// SnapshotAPIVersion and SnapshotKind.
func EncodeSnapshot(inv *Inventory) ([]byte, error) {
	c := *inv
	c.APIVersion, c.Kind = SnapshotAPIVersion, SnapshotKind
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// LooksLikeSnapshot reports whether data is a JSON object, the only form a
// snapshot takes; nvidia-smi outputs never start with '{'.
func LooksLikeSnapshot(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n\ufeff")
	t = bytes.TrimPrefix(t, []byte("\xef\xbb\xbf"))
	return len(t) > 0 && t[0] == '{'
}

// snapshotFile is what a snapshot file may hold: the inventory with its
// header, or the inventory under the old header, a single "version".
type snapshotFile struct {
	Inventory
	Version string `json:"version"`
}

// DecodeSnapshot decodes a snapshot strictly: unknown fields, a missing
// header or another apiVersion or kind, trailing data and broken invariants
// are errors. Snapshots with the old header ("version": "rankgate.io/v1")
// decode too, and come out with the current header. name is the file name
// used in errors.
func DecodeSnapshot(name string, data []byte) (*Inventory, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f snapshotFile
	if err := dec.Decode(&f); err != nil {
		// A file of another kind fails on its first key unknown to a
		// snapshot; its header says more.
		if h, ok := fileformat.PeekJSON(data); ok {
			if herr := SnapshotFormat.Check(h); herr != nil {
				return nil, &InputError{File: name, Msg: "inventory snapshot", Err: herr}
			}
		}
		return nil, &InputError{File: name, Line: jsonErrorLine(data, err), Msg: "not a valid rankgate inventory snapshot", Err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &InputError{File: name, Msg: "trailing data after the snapshot object"}
	}
	if err := SnapshotFormat.Check(fileformat.Header{APIVersion: f.APIVersion, Kind: f.Kind, Version: f.Version}); err != nil {
		return nil, &InputError{File: name, Msg: "inventory snapshot", Err: err}
	}
	inv := f.Inventory
	if err := inv.Validate(); err != nil {
		return nil, &InputError{File: name, Msg: "inconsistent snapshot", Err: err}
	}
	inv.Normalize()
	return &inv, nil
}

// jsonErrorLine turns a decoder error's byte offset into a 1-based line.
func jsonErrorLine(data []byte, err error) int {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return 0
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}
