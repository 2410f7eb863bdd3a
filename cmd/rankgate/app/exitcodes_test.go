//go:build !rankgate_node

package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// Every error type of the faces carries its exit code; verdict.Code is the
// one place that reads it.
func TestErrorTypesCarryTheirExitCodes(t *testing.T) {
	deadline := fmt.Errorf("waiting: %w", context.DeadlineExceeded)
	notFound := &fileinput.Error{Path: "ca.crt", Err: fs.ErrNotExist}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"snapshot syntax", &topology.InputError{File: "n.json", Msg: "bad"}, verdict.ExitUsage},
		{"NVML failure", &topology.DiscoveryError{Class: "DRIVER_NOT_LOADED"}, verdict.ExitEnvironment},
		{"NVML call hung", &topology.DiscoveryError{Class: "TIMEOUT", Hung: true, Err: deadline}, verdict.ExitTimeout},
		{"unreadable input", fmt.Errorf("config file: %w", notFound), verdict.ExitUsage},
		{"dump syntax", &cluster.InputError{File: "d.yaml", Doc: 1, Err: errors.New("x")}, verdict.ExitUsage},
		{"no such job", &cluster.NotFoundError{What: "PyTorchJob ml/x"}, verdict.ExitUsage},
		{"ambiguous job", &cluster.ArgError{Msg: "say which"}, verdict.ExitUsage},
		{"API server too slow", &cluster.APIError{Err: deadline}, verdict.ExitEnvironment},
		{"gate CA missing", &gate.ClientError{Err: fmt.Errorf("gate CA file: %w", notFound)}, verdict.ExitEnvironment},
		{"not opted in", &gate.WaitError{Err: gate.Errorf(gate.CodeNotOptedIn, "no")}, verdict.ExitUsage},
		{"token refused", &gate.WaitError{Err: gate.Errorf(gate.CodeUnauthenticated, "no")}, verdict.ExitEnvironment},
		{"no verdict in time", &gate.WaitError{Err: errors.Join(context.DeadlineExceeded, gate.Errorf(gate.CodeUnavailable, "x"))}, verdict.ExitTimeout},
		{"interrupted wait", &gate.WaitError{Err: context.Canceled}, verdict.ExitEnvironment},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, verdict.Code(tc.err))
		})
	}
}
