// Package offline builds an inventory from files: a rankgate snapshot, or
// one or more nvidia-smi outputs that combine into one node.
package offline

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/smi"
)

// MaxFileSize bounds what is read from one input file: pasted outputs are
// kilobytes, a 64-GPU -q -x a few megabytes.
const MaxFileSize = 32 << 20

// Load reads the files and builds one inventory. A snapshot stands alone; any
// number of nvidia-smi outputs combine. Errors are *topology.InputError.
func Load(paths []string, cat *topology.Catalog) (*topology.Inventory, error) {
	if len(paths) == 0 {
		return nil, &topology.InputError{Msg: "no inventory file given"}
	}
	var inputs []smi.Input
	var snap *topology.Inventory
	for _, p := range paths {
		data, err := readBounded(p)
		if err != nil {
			return nil, err
		}
		if topology.LooksLikeSnapshot(data) {
			if snap != nil || len(paths) > 1 {
				return nil, &topology.InputError{File: p, Msg: "a snapshot must be the only inventory file (it already holds the whole node)"}
			}
			inv, err := topology.DecodeSnapshot(p, data)
			if err != nil {
				return nil, err
			}
			inv.Source = "snapshot:" + p
			snap = inv
			continue
		}
		inputs = append(inputs, smi.Input{Name: p, Data: data})
	}
	if snap != nil {
		return snap, nil
	}
	return smi.Import(inputs, cat)
}

// Source returns a topology.Source over the files, read at each call.
func Source(paths []string, cat *topology.Catalog) topology.Source {
	return topology.SourceFunc(func(context.Context) (*topology.Inventory, error) { return Load(paths, cat) })
}

func readBounded(p string) ([]byte, error) {
	var r io.Reader
	if p == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(p)
		if err != nil {
			return nil, &topology.InputError{File: p, Msg: "cannot read inventory file", Err: err}
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, &topology.InputError{File: p, Msg: "cannot read inventory file", Err: err}
	}
	if len(data) > MaxFileSize {
		return nil, &topology.InputError{File: p, Msg: fmt.Sprintf("file is larger than %d MiB; not an nvidia-smi output or snapshot", MaxFileSize>>20)}
	}
	return data, nil
}
