//go:build !(linux && cgo)

package nvmlsource

import (
	"context"
	"fmt"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// Source, in a build without NVML (not Linux, or no cgo), reads nothing:
// Inventory fails with class LIBRARY_NOT_FOUND.
type Source struct{ opts options }

var _ topology.Source = (*Source)(nil)

// NewDefault returns the Source of this build, which has no NVML.
func NewDefault(opts ...Option) *Source {
	s := &Source{opts: options{log: nopLogger{}}}
	for _, o := range opts {
		o(&s.opts)
	}
	return s
}

// Inventory fails: this build cannot load libnvidia-ml.
func (s *Source) Inventory(ctx context.Context) (*topology.Inventory, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("NVML discovery: %w", err)
	}
	return nil, &topology.DiscoveryError{
		Class: verdict.ClassLibraryNotFound, Op: "nvmlInit()",
		Message:     "this build of rankgate has no NVML (live GPU discovery exists only in Linux builds, which load libnvidia-ml.so.1)",
		Remediation: "Run the Linux build on the GPU node (or in its container); here, judge the node from its outputs.",
	}
}
