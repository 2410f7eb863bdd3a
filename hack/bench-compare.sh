#!/usr/bin/env bash
# A benchmark on a real API server, measured side by side for two builds
# in one run: the e2e test binary of BASE (a git ref) and of the working
# tree, run in turns (base, head, base, head, ...) on the same machine
# under the same load, so that a change on a measured path is judged
# against the build before it, not against numbers from another day.
#
#   make bench-compare BASE=REF [TEST=TestBenchGangLatency] [ROUNDS=3] [OUT=DIR]
#   bash hack/bench-compare.sh REF [DIR]
#
# Every run's JSON summary (RANKGATE_BENCH_OUT) and log go to DIR (default
# ./bench-compare-out); the last lines printed are one table, a row per
# run: build, round, p50, p90, p99, max and the load average before it
# (for a summary without latencies, such as the memory check's, the summary).
# Other RANKGATE_BENCH_* settings pass through (JOBS, WINDOW, ...).
#
# Exit status: 0 when every run finished (a run that misses its goal is
# still a result: its row says so), 2 on a bad ref or a build failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
base=${1:-${BASE:-}}
out=${2:-${OUT:-$root/bench-compare-out}}
test=${TEST:-TestBenchGangLatency}
rounds=${ROUNDS:-3}
[ -n "$base" ] || { echo "bench-compare: name the base build: BASE=REF (a commit, tag or branch)" >&2; exit 2; }
rev=$(git rev-parse --verify --quiet "$base^{commit}") || { echo "bench-compare: $base is not a commit here" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

wt=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"' EXIT
git worktree add --quiet --detach "$wt" "$rev"
# The same API server, etcd and scheduler binaries for both builds.
[ -e "$root/bin" ] && ln -sfn "$root/bin" "$wt/bin"

pkg=./integrations/kubernetes/e2e
echo "bench-compare: building $test's binaries: base $base (${rev:0:12}) and the working tree" >&2
(cd "$wt" && go test -c -o "$out/base.test" "$pkg") || exit 2
go test -c -o "$out/head.test" "$pkg" || exit 2

run() { # build round
  local dir="$out/$1-$2"
  mkdir -p "$dir"
  local src=$root
  [ "$1" = base ] && src=$wt
  (cd "$src/integrations/kubernetes/e2e" && RANKGATE_BENCH=1 RANKGATE_BENCH_OUT="$dir" TMPDIR=${TMPDIR:-/dev/shm} \
    "$out/$1.test" -test.run "^$test\$" -test.v -test.count 1 -test.timeout 40m >"$dir/log" 2>&1) || true
  echo "bench-compare: $1 round $2: $(grep -Eo -- '--- (PASS|FAIL|SKIP)' "$dir/log" | head -1 || echo 'no result') ($dir/log)" >&2
}
for i in $(seq 1 "$rounds"); do
  run base "$i"
  run head "$i"
done

printf '%-5s %-5s %-10s %-10s %-10s %-10s %s\n' build round p50 p90 p99 max load-before
for i in $(seq 1 "$rounds"); do
  for b in base head; do
    f=$(ls "$out/$b-$i"/*.json 2>/dev/null | head -1 || true)
    if [ -z "$f" ]; then
      printf '%-5s %-5s %s\n' "$b" "$i" "no result (see $out/$b-$i/log)"
      continue
    fi
    python3 - "$f" "$b" "$i" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
if "p99" not in d:  # not a latency summary (memory, ...): the summary itself
    print("%-5s %-5s %s" % (sys.argv[2], sys.argv[3], json.dumps(d, sort_keys=True)))
    sys.exit(0)
load = d.get("loadAvgBefore", d.get("loadAvg", ""))
print("%-5s %-5s %-10s %-10s %-10s %-10s %s" % (sys.argv[2], sys.argv[3], d.get("p50", "-"), d.get("p90", "-"), d.get("p99", "-"), d.get("max", d.get("allRanksHeld", "-")), load))
EOF
  done
done
