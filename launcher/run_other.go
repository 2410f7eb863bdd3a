//go:build !linux

package launcher

import (
	"context"
	"errors"

	"github.com/rankgate/rankgate/verdict"
)

// Run needs Linux.
func Run(context.Context, Options) (Result, error) {
	return Result{ExitCode: verdict.ExitEnvironment}, errors.New("rankgate launch runs on Linux only: it needs process groups, a child subreaper and tee(2)")
}
