//go:build !unix

package launcher

import (
	"context"
	"errors"

	"github.com/rankgate/rankgate/preflight"
)

// Run needs process groups and POSIX signals.
func Run(context.Context, Options) (Result, error) {
	return Result{ExitCode: preflight.ExitEnvironment}, errors.New("rankgate launch runs on Linux (and other Unix systems) only")
}
