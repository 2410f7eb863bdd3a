#!/usr/bin/env bash
# Builds a release into DIST (default dist/): the CLI for linux/amd64,
# linux/arm64 and darwin/arm64 (each also as rankgate_VERSION_OS_ARCH.tar.gz
# with LICENSE, the archives the krew plugin installs), the node build for
# both Linux arches, the install manifest (image pinned), the Helm chart
# package when helm is built (bin/tools), SHA256SUMS over all of them, and
# the krew plugin manifest rankgate.krew.yaml (hack/krew-manifest.sh).
#
#   hack/release.sh VERSION [DIST]     a release
#   hack/release.sh --cross            only compile every target (CI), into a temp dir
#
# Linux binaries use cgo (go-nvml dlopens libnvidia-ml at run time); a
# target other than this machine's needs Debian's cross gcc
# (gcc-aarch64-linux-gnu libc6-dev-arm64-cross, or gcc-x86-64-linux-gnu
# libc6-dev-amd64-cross). darwin/arm64 builds without cgo: there, the
# faces that read pasted outputs and the cluster work (diagnose, status,
# preflight --inventory); live NVML does not exist on macOS.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

cross=false
if [[ "${1:-}" == "--cross" ]]; then
	cross=true
	version=dev
	dist=$(mktemp -d)
	trap 'rm -rf "$dist"' EXIT
else
	version=${1:?usage: hack/release.sh VERSION [DIST] | --cross}
	dist=${2:-dist}
	case "$version" in
	v[0-9]*.[0-9]*.[0-9]*) ;;
	*) echo "VERSION $version: want vMAJOR.MINOR.PATCH" >&2; exit 2 ;;
	esac
	rm -rf "$dist" && mkdir -p "$dist"
fi

ldflags="-s -w -X github.com/rankgate/rankgate/cmd/rankgate/app.Version=$version \
-X github.com/rankgate/rankgate/cmd/rankgate/app.Commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
host=$($GO env GOARCH)

# cc ARCH: the C compiler for a Linux target.
cc() {
	if [[ "$1" == "$host" ]]; then echo gcc; return; fi
	case "$1" in
	arm64) echo aarch64-linux-gnu-gcc ;;
	amd64) echo x86_64-linux-gnu-gcc ;;
	*) echo "no C cross compiler known for $1" >&2; return 1 ;;
	esac
}

build() { # GOOS GOARCH CGO TAGS OUT
	local os=$1 arch=$2 cgo=$3 tags=$4 out=$5 compiler=gcc
	if [[ "$cgo" == 1 ]]; then
		compiler=$(cc "$arch")
		command -v "$compiler" >/dev/null || {
			echo "$compiler not found: apt-get install gcc-${compiler%-gcc} libc6-dev-${arch}-cross" | sed 's/gcc-x86_64/gcc-x86-64/' >&2
			exit 3
		}
	fi
	echo "build $out ($os/$arch, cgo=$cgo${tags:+, tags $tags})"
	CC=$compiler CGO_ENABLED=$cgo GOOS=$os GOARCH=$arch \
		$GO build -trimpath ${tags:+-tags "$tags"} -ldflags "$ldflags" -o "$dist/$out" ./cmd/rankgate
}

# The CLI's targets, OS/ARCH; plugins/rankgate.yaml names one platform
# for each (configs/krew_test.go checks it).
cli_targets="linux/amd64 linux/arm64 darwin/arm64"
for target in $cli_targets; do
	os=${target%/*} arch=${target#*/} cgo=0
	[[ "$os" == linux ]] && cgo=1
	build "$os" "$arch" "$cgo" "" "rankgate_${version}_${os}_${arch}"
done
for arch in amd64 arm64; do
	build linux "$arch" 1 rankgate_node "rankgate-node_${version}_linux_${arch}"
done
$cross && exit 0

# The archives krew installs: the binary as rankgate, and the LICENSE.
for target in $cli_targets; do
	name="rankgate_${version}_${target%/*}_${target#*/}"
	stage=$(mktemp -d)
	cp "$dist/$name" "$stage/rankgate"
	cp LICENSE "$stage/"
	tar -C "$stage" --owner=0 --group=0 --numeric-owner -czf "$dist/$name.tar.gz" rankgate LICENSE
	rm -rf "$stage"
done

make -s manifests RELEASE_VERSION="$version"
if [[ "$dist" != dist ]]; then mv dist/rankgate.yaml "$dist/"; fi
helm=$(ls bin/tools/helm-* 2>/dev/null | head -1 || true)
if [[ -n "$helm" && -d charts/rankgate ]]; then
	"$helm" package charts/rankgate --version "${version#v}" --app-version "$version" -d "$dist"
else
	echo "helm not built (make lint builds it) or no chart: no chart package" >&2
fi
(cd "$dist" && sha256sum -- * > SHA256SUMS)
hack/krew-manifest.sh "$version" "$dist"
echo "release $version in $dist:"
ls -1 "$dist"
