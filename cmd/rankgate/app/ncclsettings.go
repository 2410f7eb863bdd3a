package app

import (
	"context"
	"fmt"
	"os"

	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/verdict"
)

// sysfs is where the node's RDMA devices are listed (class/infiniband).
const sysfs = "/sys"

// judgeNCCLSettings adds the NCCL settings rules for one rank to its
// preflight report: env against the devices r judged and, when the node's
// facts come from the machine itself (not files), its network interfaces
// and RDMA devices.
func judgeNCCLSettings(env *ncclenv.Env, r verdict.Report, offline bool) verdict.Report {
	var nw *ncclenv.Net
	if !offline {
		nw, _ = ncclenv.ReadLocalNet(sysfs) // what it could not read stays unknown
	}
	rank := ncclenv.LocalRank(env, r, nw)
	return ncclenv.Merge(r, ncclenv.Check(ncclenv.Input{Scope: ncclenv.ScopeLocal, Ranks: []ncclenv.Rank{rank}}))
}

// readEnvFile reads --env-file (- for stdin).
func (a *App) readEnvFile(ctx context.Context, path string) (*ncclenv.Env, error) {
	data, err := fileinput.ReadFile(ctx, path, a.Streams.In, ncclenv.MaxEnvFile)
	if err != nil {
		return nil, inputError(ctx, err)
	}
	e, err := ncclenv.ParseEnvFile(data)
	if err != nil {
		return nil, inputError(ctx, fmt.Errorf("--env-file %s: %w", path, err))
	}
	return e, nil
}

// ownEnv is this process's environment, the one CMD inherits.
func ownEnv() *ncclenv.Env { return ncclenv.FromEnviron(os.Environ()) }
