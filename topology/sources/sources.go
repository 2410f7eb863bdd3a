// Package sources chooses where a node's inventory comes from: files
// (a snapshot, or nvidia-smi outputs), an embedded sample node, or NVML on
// the node itself. Commands call New with what the user asked for and read
// the topology.Source it returns.
package sources

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource"
	"github.com/rankgate/rankgate/topology/offline"
	"github.com/rankgate/rankgate/verdict"
)

// Options say where the node's truth comes from. Files and Sample exclude
// each other; with neither, NVML is read.
type Options struct {
	// Files are a snapshot or nvidia-smi output files ("-": Stdin).
	Files []string
	Stdin io.Reader
	// Sample names an embedded sample node (configs.SampleNames).
	Sample string
	// Catalog infers MIG profiles from nvidia-smi outputs that lack them.
	Catalog *topology.Catalog
	// NVMLTimeout is the deadline of each NVML call (0: nvmlsource's
	// default).
	NVMLTimeout time.Duration
	// Log receives NVML discovery's debug lines (each call and its
	// duration); nil discards them.
	Log nvmlsource.Logger
	// NVML replaces the driver's library (tests: nvmltest); nil loads
	// libnvidia-ml. (An nvml.Interface in Linux builds with cgo.)
	NVML Library
}

// New returns the source o asks for. Its errors are usage errors (exit
// 2): both files and a sample, or an unknown sample.
func New(o Options) (topology.Source, error) {
	switch {
	case len(o.Files) > 0 && o.Sample != "":
		return nil, verdict.Exitf(verdict.ExitUsage, "--inventory and --sample exclude each other")
	case o.Sample != "":
		data, ok := configs.Sample(o.Sample)
		if !ok {
			return nil, verdict.Exitf(verdict.ExitUsage, "unknown sample %q (have %s)", o.Sample, strings.Join(configs.SampleNames(), ", "))
		}
		name := "sample:" + o.Sample
		return topology.SourceFunc(func(context.Context) (*topology.Inventory, error) {
			inv, err := topology.DecodeSnapshot(name, data)
			if err != nil {
				return nil, err
			}
			inv.Source = name
			return inv, nil
		}), nil
	case len(o.Files) > 0:
		files, stdin, cat := o.Files, o.Stdin, o.Catalog
		return topology.SourceFunc(func(ctx context.Context) (*topology.Inventory, error) {
			return offline.Load(ctx, files, stdin, cat)
		}), nil
	}
	var opts []nvmlsource.Option
	if o.NVMLTimeout > 0 {
		opts = append(opts, nvmlsource.WithCallTimeout(o.NVMLTimeout))
	}
	if o.Log != nil {
		opts = append(opts, nvmlsource.WithLogger(o.Log))
	}
	return nodeSource{nvmlSource(o.NVML, opts)}, nil
}

// nodeSource is NVML on this node, named after the node (NVML does not
// know the host's name).
type nodeSource struct{ src topology.Source }

func (s nodeSource) Inventory(ctx context.Context) (*topology.Inventory, error) {
	inv, err := s.src.Inventory(ctx)
	if err == nil && inv.Hostname == "" {
		inv.Hostname = NodeName()
	}
	return inv, err
}

// NodeName is the Kubernetes node's name (NODE_NAME, from the downward
// API), else the host name.
func NodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}
