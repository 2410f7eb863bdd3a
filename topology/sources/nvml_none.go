//go:build !(linux && cgo)

package sources

import (
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource"
)

// Library is the NVML library a source reads; a build without NVML (not
// Linux, or no cgo) has none to give.
type Library = any

func nvmlSource(_ Library, opts []nvmlsource.Option) topology.Source {
	return nvmlsource.NewDefault(opts...)
}
