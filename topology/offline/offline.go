// Package offline builds an inventory from files: a rankgate snapshot, or
// one or more nvidia-smi outputs that combine into one node.
package offline

import (
	"context"
	"errors"
	"io"

	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/smi"
)

// MaxFileSize bounds what is read from one input file, a snapshot or an
// nvidia-smi output: pasted outputs are kilobytes, `nvidia-smi -q` of eight
// H100s 105 KiB, so a 64-GPU -q -x is a few megabytes.
const MaxFileSize = 16 << 20

// Load reads the files and builds one inventory. A snapshot stands alone; any
// number of nvidia-smi outputs combine. "-" is stdin, read until ctx ends.
// Errors are *topology.InputError, or ctx's error wrapped when it ended a
// read of stdin.
func Load(ctx context.Context, paths []string, stdin io.Reader, cat *topology.Catalog) (*topology.Inventory, error) {
	if len(paths) == 0 {
		return nil, &topology.InputError{Msg: "no inventory file given"}
	}
	var inputs []smi.Input
	var snap *topology.Inventory
	for _, p := range paths {
		data, err := fileinput.ReadFile(ctx, p, stdin, MaxFileSize)
		if err != nil {
			return nil, readError(p, err)
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
func Source(paths []string, stdin io.Reader, cat *topology.Catalog) topology.Source {
	return topology.SourceFunc(func(ctx context.Context) (*topology.Inventory, error) { return Load(ctx, paths, stdin, cat) })
}

func readError(p string, err error) error {
	var fe *fileinput.Error
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err // not bad input: the caller was interrupted
	}
	if errors.As(err, &fe) {
		if p == fileinput.Stdin {
			p = "standard input"
		}
		return &topology.InputError{File: p, Msg: "inventory: " + fe.Reason()}
	}
	return &topology.InputError{File: p, Msg: "cannot read inventory file", Err: err}
}
