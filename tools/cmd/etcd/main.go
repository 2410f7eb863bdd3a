// Command etcd is etcd built from go.etcd.io/etcd/server/v3 at the version
// pinned in tools/go.mod. It exists so tests can run a real etcd next to a
// real kube-apiserver (see hack/build-test-binaries.sh).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
