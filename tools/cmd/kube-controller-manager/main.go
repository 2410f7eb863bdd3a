// Command kube-controller-manager is the Kubernetes controller manager
// built from k8s.io/kubernetes at the version pinned in go.mod (the same as
// kube-apiserver's and kube-scheduler's). The end-to-end tests run it with
// only the Job controller (--controllers=job), so that the pods of a JobSet
// or a TrainJob are made by the real Job controller, with the labels,
// annotations and completion indexes it gives them (see
// hack/build-test-binaries.sh).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version" // for version metric registration
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
