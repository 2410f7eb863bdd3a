#!/usr/bin/env bash
# Peak RSS of one offline preflight of an 8-GPU node split into 56 MIG
# instances (preflight/testdata/dgxa100-56mig.json), for the full binary and
# for the node build (-tags rankgate_node: preflight, inspect, demo, launch,
# init; no client-go). Prints one line per binary; `make bench` runs it.
set -euo pipefail
command -v /usr/bin/time >/dev/null || { echo "bench-rss: needs GNU time (apt-get install time)" >&2; exit 1; }
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
go build -trimpath -ldflags '-s -w' -o "$out/rankgate" ./cmd/rankgate
go build -trimpath -ldflags '-s -w' -tags rankgate_node -o "$out/rankgate-node" ./cmd/rankgate
snap=preflight/testdata/dgxa100-56mig.json
for b in rankgate rankgate-node; do
  best=""
  for i in 1 2 3 4 5; do
    kb=$( { /usr/bin/time -f '%M' "$out/$b" preflight --inventory "$snap" --devices 0:0 -o json >/dev/null; } 2>&1 | tail -1)
    if [ -z "$best" ] || [ "$kb" -lt "$best" ]; then best=$kb; fi
  done
  size=$(stat -c %s "$out/$b")
  printf 'BenchmarkPreflightRSS/%-14s 1 %8d peak-rss-KiB %8d binary-KiB\n' "$b" "$best" $((size / 1024))
done
