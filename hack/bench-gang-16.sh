#!/usr/bin/env bash
# The 1,000 jobs x 8 ranks gang latency check (TestBenchGangLatency) with
# the control plane on cores of its own: kube-apiserver, etcd, the
# controller (the test process) and the rank clients each run on their own
# CPUs (taskset), as in a cluster whose API server has cores of its own.
# For a machine with 16 or more cores.
#
#   make bench-gang-16 [OUT=DIR]        # or: bash hack/bench-gang-16.sh [DIR]
#
# Results go to DIR (else $OUT, else ./bench-gang-16-out): the test's log
# (bench-gang-16.log), its JSON summary (gang-latency.json: p50/p90/p99/max,
# the pinning read back), CPU profiles of the kube-apiserver and of the
# controller, and the machine and settings (machine.txt).
#
# Environment:
#   JOBS=1000 RANKS=8 WINDOW=60s  the load (RANKGATE_BENCH_JOBS, _RANKS, _WINDOW)
#   RANKGATE_BENCH_APISERVER_CPUS=0-7  RANKGATE_BENCH_ETCD_CPUS=8-9
#   RANKGATE_BENCH_CONTROLLER_CPUS=10-12  RANKGATE_BENCH_CLIENT_CPUS=13-15
#                                 the CPUs of each role
#   FORCE=1                       run on fewer than 16 cores (name CPU lists
#                                 that exist there; roles may then share)
#   KUBE_QPS=N                    the controller's --kube-api-qps (default 200)
#
# Exit status: the test's (0: p99 within the goal, 100 ms above 200 jobs,
# 50 ms up to 200), 2 when the machine or the settings do not fit.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
die() { echo "bench-gang-16: $*" >&2; exit 2; }

export RANKGATE_BENCH_APISERVER_CPUS=${RANKGATE_BENCH_APISERVER_CPUS:-0-7}
export RANKGATE_BENCH_ETCD_CPUS=${RANKGATE_BENCH_ETCD_CPUS:-8-9}
export RANKGATE_BENCH_CONTROLLER_CPUS=${RANKGATE_BENCH_CONTROLLER_CPUS:-10-12}
export RANKGATE_BENCH_CLIENT_CPUS=${RANKGATE_BENCH_CLIENT_CPUS:-13-15}
roles=(APISERVER ETCD CONTROLLER CLIENT)

cores=$(nproc)
if [ "$cores" -lt 16 ]; then
  [ "${FORCE:-}" = 1 ] || die "needs 16 cores so that each role has cores of its own; this machine gives $cores (FORCE=1 runs anyway, with CPU lists that exist here)"
  echo "bench-gang-16: WARNING: $cores cores, not 16: the numbers do not measure an API server with cores of its own" >&2
fi
command -v taskset >/dev/null || die "needs taskset (util-linux)"

# Each list must name CPUs this process may use; lists that overlap are
# allowed only with FORCE=1.
expand() { # a CPU list, one CPU a line
  local IFS=, part
  for part in $1; do
    case $part in *-*) seq "${part%-*}" "${part#*-}" ;; *) echo "$part" ;; esac
  done
}
mine=$(taskset -pc $$ | sed 's/.*: //')
for r in "${roles[@]}"; do
  v=RANKGATE_BENCH_${r}_CPUS
  taskset -c "${!v}" true 2>/dev/null || die "$v=${!v}: not a CPU list (CPUs here: $mine)"
  missing=$(comm -23 <(expand "${!v}" | sort -u) <(expand "$mine" | sort -u) | sort -n | paste -sd, -)
  [ -z "$missing" ] || die "$v=${!v}: CPUs $missing are not available here (CPUs here: $mine)"
done
shared=$(for r in "${roles[@]}"; do v=RANKGATE_BENCH_${r}_CPUS; expand "${!v}"; done | sort -n | uniq -d | paste -sd, -)
if [ -n "$shared" ]; then
  [ "${FORCE:-}" = 1 ] || die "CPUs $shared are given to more than one role (FORCE=1 allows it)"
  echo "bench-gang-16: WARNING: CPUs $shared are shared by roles" >&2
fi

out=${1:-${OUT:-bench-gang-16-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# What the run needs: kube-apiserver and etcd (bin/k8s), the e2e test
# binary. The e2e suite builds the rankgate binary itself.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
make -s test-binaries
go test -c -o "$work/e2e.test" ./integrations/kubernetes/e2e/

# etcd and kube-apiserver are started by envtest from RANKGATE_TEST_BIN_DIR:
# wrappers that exec the real binaries under taskset, so that every thread
# of theirs is pinned from the start.
bindir=${RANKGATE_TEST_BIN_DIR:-$root/bin/k8s}
mkdir -p "$work/k8s"
for b in kube-apiserver:APISERVER etcd:ETCD; do
  name=${b%%:*} v=RANKGATE_BENCH_${b##*:}_CPUS
  [ -x "$bindir/$name" ] || die "$bindir/$name missing (make test-binaries)"
  printf '#!/bin/sh\nexec taskset -c %s %s "$@"\n' "${!v}" "$bindir/$name" >"$work/k8s/$name"
  chmod +x "$work/k8s/$name"
done

# etcd's data on tmpfs where there is one; 8,000 ranks hold connections.
if [ -z "${TMPDIR:-}" ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "cores: $cores"
  grep -m1 'model name' /proc/cpuinfo 2>/dev/null || true
  echo "kernel: $(uname -sr)"
  echo "memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "jobs: ${JOBS:-1000} x ${RANKS:-8} ranks, window ${WINDOW:-60s}, kube-api-qps ${KUBE_QPS:-default}"
  for r in "${roles[@]}"; do v=RANKGATE_BENCH_${r}_CPUS; echo "$v=${!v}"; done
  echo "open files: $(ulimit -n)"
} | tee "$out/machine.txt"

cd integrations/kubernetes/e2e
set +e
env RANKGATE_BENCH=1 RANKGATE_BENCH_OUT="$out" RANKGATE_TEST_BIN_DIR="$work/k8s" \
  RANKGATE_BENCH_JOBS="${JOBS:-1000}" RANKGATE_BENCH_RANKS="${RANKS:-8}" RANKGATE_BENCH_WINDOW="${WINDOW:-60s}" \
  ${KUBE_QPS:+RANKGATE_BENCH_KUBE_QPS="$KUBE_QPS"} \
  taskset -c "$RANKGATE_BENCH_CONTROLLER_CPUS" "$work/e2e.test" \
  -test.run '^TestBenchGangLatency$' -test.count 1 -test.v -test.timeout 40m 2>&1 | tee "$out/bench-gang-16.log"
rc=${PIPESTATUS[0]}
set -e
echo "bench-gang-16: exit $rc; results in $out" >&2
grep -h 'last report -> all ranks hold the verdict' "$out/bench-gang-16.log" >&2 || true
exit "$rc"
