package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// EncodeSnapshot writes an inventory as indented, versioned JSON.
func EncodeSnapshot(inv *Inventory) ([]byte, error) {
	c := *inv
	c.Version = SnapshotVersion
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

// DecodeSnapshot decodes a snapshot strictly: unknown fields, a missing or
// other version, trailing data and broken invariants are errors. name is the
// file name used in errors.
func DecodeSnapshot(name string, data []byte) (*Inventory, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var inv Inventory
	if err := dec.Decode(&inv); err != nil {
		return nil, &InputError{File: name, Line: jsonErrorLine(data, err), Msg: "not a valid rankgate inventory snapshot", Err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &InputError{File: name, Msg: "trailing data after the snapshot object"}
	}
	if inv.Version != SnapshotVersion {
		return nil, &InputError{File: name, Msg: fmt.Sprintf("snapshot version %q is not supported (want %q)", inv.Version, SnapshotVersion)}
	}
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
