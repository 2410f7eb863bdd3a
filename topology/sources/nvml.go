//go:build linux && cgo

package sources

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource"
)

// Library is the NVML library a source reads: go-nvml's interface (its
// mock servers in tests).
type Library = nvml.Interface

func nvmlSource(lib Library, opts []nvmlsource.Option) topology.Source {
	if lib != nil {
		return nvmlsource.New(lib, opts...)
	}
	return nvmlsource.NewDefault(opts...)
}
