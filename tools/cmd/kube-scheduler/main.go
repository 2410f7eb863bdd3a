// Command kube-scheduler is the Kubernetes scheduler built from
// k8s.io/kubernetes at the version pinned in tools/go.mod. It exists so the
// end-to-end tests can have a real scheduler place (or refuse to place) pods
// against the envtest API server (see hack/build-test-binaries.sh).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version" // for version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
