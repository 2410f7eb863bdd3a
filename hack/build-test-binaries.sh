#!/usr/bin/env bash
# Builds the real etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
# JobSet controller, Kubeflow Trainer controller and Kueue controller manager
# that the envtest-based tests run (integrations/kubernetes/envtestutil, the
# e2e scheduler, the e2e real chain TrainJob -> JobSet -> Job -> pod, with or
# without Kueue) into bin/k8s/, from the Go modules pinned under tools/:
#   tools/go.mod          k8s.io/kubernetes (kube-apiserver)
#   tools/cmd/kube-scheduler/go.mod
#                         k8s.io/kubernetes (kube-scheduler; the same pinned
#                         version, checked below, in its own module so that
#                         adding it left kube-apiserver's inputs untouched)
#   tools/cmd/etcd/go.mod go.etcd.io/etcd/server/v3 (etcd; its own module
#                         because k8s.io/kubernetes requires a newer etcd)
#   tools/cmd/kube-controller-manager/go.mod
#                         k8s.io/kubernetes (the Job controller; same version)
#   tools/cmd/jobset-controller/go.mod
#                         sigs.k8s.io/jobset (its main package, a go.mod tool)
#   tools/cmd/trainer-controller-manager/go.mod
#                         github.com/kubeflow/trainer/v2 (cmd/trainer-controller-manager)
#   tools/cmd/kueue-controller-manager/go.mod
#                         sigs.k8s.io/kueue (cmd/kueue, a go.mod tool)
# The JobSet's and the Trainer's webhook configurations are rendered from
# their modules' own kustomizations (with $KUSTOMIZE, default
# bin/tools/kustomize-v5.8.0) into jobset-webhooks.yaml and
# trainer-webhooks.yaml next to the binaries; Kueue's install
# (config/default: its CRDs with their conversion webhooks, its webhook
# configurations, Service and certificate Secret, names as its internal
# certificate management expects them) into kueue-install.yaml.
# A binary is rebuilt only when it is missing or when the go.mod/go.sum of
# its module changed (a sha256 stamp is kept next to it). The Go build cache
# is left alone, so a rebuild after a version bump is incremental.
# A cold kube-apiserver build takes ~10 minutes on 2 cores.
#
# Usage: hack/build-test-binaries.sh [-f]   (-f: rebuild even if up to date)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${RANKGATE_TEST_BIN_DIR:-$ROOT/bin/k8s}"
FORCE=0
[[ "${1:-}" == "-f" ]] && FORCE=1

# Version strings baked into kube-apiserver; without them it reports
# v0.0.0-master, which clients and version-gated code treat oddly.
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$ROOT/tools/go.mod")"
K8S_VERSION="${K8S_VERSION:-v0.0.0}"
for m in kube-scheduler kube-controller-manager; do
	v="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$ROOT/tools/cmd/$m/go.mod")"
	if [[ "$v" != "$K8S_VERSION" ]]; then
		echo "tools/cmd/$m/go.mod pins k8s.io/kubernetes $v, tools/go.mod $K8S_VERSION: keep them equal" >&2
		exit 2
	fi
done
ver="${K8S_VERSION#v}"
K8S_MAJOR="${ver%%.*}"
rest="${ver#*.}"
K8S_MINOR="${rest%%.*}"

mkdir -p "$OUT"

stamp_of() { # module dir -> hash of its go.mod and go.sum (+ this script's version knobs)
	(cd "$1" && cat go.mod go.sum) | { cat; echo "ldflags-rev:1"; } | sha256sum | awk '{print $1}'
}

build() { # name module-dir package ldflags
	local name="$1" dir="$2" pkg="$3" ldflags="$4"
	local bin="$OUT/$name" stamp="$OUT/$name.stamp" want
	want="$(stamp_of "$dir")"
	if [[ $FORCE == 0 && -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
		echo "$name: up to date ($bin)"
		return
	fi
	echo "$name: building $pkg (module $dir) ..."
	local start=$SECONDS
	rm -f "$stamp"
	(cd "$dir" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
		go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" "$pkg")
	mv -f "$bin.tmp" "$bin"
	echo "$want" >"$stamp"
	echo "$name: built in $((SECONDS - start))s, $(du -h "$bin" | cut -f1)"
}

# etcd first: small, and fails fast if the toolchain or proxy is broken.
build etcd "$ROOT/tools/cmd/etcd" . "-s -w"

vpkg=k8s.io/component-base/version
build kube-apiserver "$ROOT/tools" ./cmd/kube-apiserver "-s -w \
 -X $vpkg.gitVersion=$K8S_VERSION \
 -X $vpkg.gitMajor=$K8S_MAJOR \
 -X $vpkg.gitMinor=$K8S_MINOR \
 -X $vpkg.gitTreeState=clean"

build kube-scheduler "$ROOT/tools/cmd/kube-scheduler" . "-s -w \
 -X $vpkg.gitVersion=$K8S_VERSION \
 -X $vpkg.gitMajor=$K8S_MAJOR \
 -X $vpkg.gitMinor=$K8S_MINOR \
 -X $vpkg.gitTreeState=clean"

build kube-controller-manager "$ROOT/tools/cmd/kube-controller-manager" . "-s -w \
 -X $vpkg.gitVersion=$K8S_VERSION \
 -X $vpkg.gitMajor=$K8S_MAJOR \
 -X $vpkg.gitMinor=$K8S_MINOR \
 -X $vpkg.gitTreeState=clean"

build jobset-controller "$ROOT/tools/cmd/jobset-controller" sigs.k8s.io/jobset "-s -w"
build trainer-controller-manager "$ROOT/tools/cmd/trainer-controller-manager" \
	github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager "-s -w"
build kueue-controller-manager "$ROOT/tools/cmd/kueue-controller-manager" sigs.k8s.io/kueue/cmd/kueue "-s -w"

# The webhook configurations each ships, rendered by its own kustomization
# (the JobSet's patches scope its pod webhooks to JobSet pods).
KUSTOMIZE="${KUSTOMIZE:-$ROOT/bin/tools/kustomize-v5.8.0}"
render() { # out module-dir module kustomization-dir-in-module
	local out="$OUT/$1" dir
	dir="$(cd "$2" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' "$3")"
	if [[ -f "$out" && "$out" -nt "$2/go.sum" && "$out" -nt "${BASH_SOURCE[0]}" ]]; then
		echo "$1: up to date"
		return
	fi
	if [[ ! -x "$KUSTOMIZE" ]]; then
		echo "$KUSTOMIZE missing: run \`make $KUSTOMIZE\` (or set KUSTOMIZE)" >&2
		exit 2
	fi
	"$KUSTOMIZE" build "$dir/$4" >"$out.tmp"
	mv -f "$out.tmp" "$out"
	echo "$1: rendered from $3 $4"
}
render jobset-webhooks.yaml "$ROOT/tools/cmd/jobset-controller" sigs.k8s.io/jobset config/components/webhook
render trainer-webhooks.yaml "$ROOT/tools/cmd/trainer-controller-manager" github.com/kubeflow/trainer/v2 manifests/base/webhook
render kueue-install.yaml "$ROOT/tools/cmd/kueue-controller-manager" sigs.k8s.io/kueue config/default
