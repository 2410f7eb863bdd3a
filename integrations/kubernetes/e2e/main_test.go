package e2e

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	if os.Getenv("RANKGATE_BENCH_CLIENTS") != "" {
		// The rank side of the latency check: no API server of its own.
		os.Exit(m.Run())
	}
	stop, err := setupEnv()
	if err != nil {
		if errors.Is(err, envtestutil.ErrBinariesMissing) && os.Getenv(envtestutil.SkipEnv) == "1" {
			fmt.Printf("skipping e2e (%s=1): %v\n", envtestutil.SkipEnv, err)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}
