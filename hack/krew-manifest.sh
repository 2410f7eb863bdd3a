#!/usr/bin/env bash
# Renders the krew plugin manifest (plugins/rankgate.yaml) for a release:
# VERSION, and each archive's sha256 from DIST/SHA256SUMS. Writes
# DIST/rankgate.krew.yaml; fails when an archive the manifest names has
# no checksum.
#
#   hack/krew-manifest.sh VERSION DIST
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: hack/krew-manifest.sh VERSION DIST}
dist=${2:?usage: hack/krew-manifest.sh VERSION DIST}
sums="$dist/SHA256SUMS"
[[ -f "$sums" ]] || { echo "$sums: not found" >&2; exit 2; }

out=$(sed "s/\${VERSION}/$version/g" plugins/rankgate.yaml)
while read -r sum file; do
	file=${file#\*}
	out=${out//"\${SHA256_$file}"/$sum}
done <"$sums"
if grep -q '\${' <<<"$out"; then
	echo "plugins/rankgate.yaml: no checksum in $sums for: $(grep -o '\${SHA256_[^}]*}' <<<"$out" | tr '\n' ' ')" >&2
	exit 3
fi
printf '%s\n' "$out" >"$dist/rankgate.krew.yaml"
