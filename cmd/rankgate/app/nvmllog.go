package app

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/rankgate/rankgate/topology/sources"
)

// nvmlLibrary replaces libnvidia-ml in tests (go-nvml's mock servers);
// nil in the binary.
var nvmlLibrary sources.Library

// nvmlLogger hands NVML discovery's debug lines to the command's logger
// (nvmlsource.Logger).
type nvmlLogger struct{ log *zap.Logger }

func (l nvmlLogger) Debugf(format string, args ...any) {
	if ce := l.log.Check(zap.DebugLevel, ""); ce != nil {
		ce.Message = fmt.Sprintf(format, args...)
		ce.Write()
	}
}
