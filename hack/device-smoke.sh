#!/usr/bin/env bash
# Device smoke run: real NVML through rankgate on a GPU machine. It needs no
# Go toolchain there: `make device-smoke` builds .device/rankgate here, and
# the device tool carries .device to the machine. It only reads: it never
# changes GPU settings (MIG mode included).
#
#   bash .device/device-smoke.sh          # writes to $OUT (or ./smoke-out)
set -u
bin=${RANKGATE_BIN:-.device/rankgate}
out=${OUT:-smoke-out}
mkdir -p "$out"
log="$out/smoke-log.txt"
: >"$log"
run() { # name, then the command; stdout to $out/name, status and time to the log
  local name=$1; shift
  local t0=$EPOCHREALTIME
  "$@" >"$out/$name" 2>>"$log"
  local rc=$?
  awk -v n="$name" -v rc="$rc" -v a="$t0" -v b="$EPOCHREALTIME" -v c="$*" 'BEGIN{printf "%-16s rc=%d %.3fs  %s\n", n, rc, b-a, c}' >>"$log"
}
{ uname -a; nvidia-smi --version 2>&1 | head -5; } >>"$log"
run smi-L.txt nvidia-smi -L
run smi-q-x.xml nvidia-smi -q -x
run smi-topo-m.txt nvidia-smi topo -m
run inspect.json "$bin" inspect -o json
run preflight.json "$bin" preflight -o json --termination-log "$out/termination.txt"
# Offline import of the same node's nvidia-smi outputs: compare with NVML.
run import.json "$bin" inspect -o json --inventory "$out/smi-L.txt" --inventory "$out/smi-q-x.xml" --inventory "$out/smi-topo-m.txt"
{ echo "--- human preflight"; "$bin" preflight 2>&1; echo "rc=$?"; echo "--- inspect"; "$bin" inspect 2>&1; } >>"$log"
# nvmlsource's live test: discovery through the real driver, every field
# logged (make device-smoke builds the test binary beside rankgate).
if [ -x .device/nvmlsource.test ]; then
  { echo "--- TestLiveNVML"; RANKGATE_NVML_LIVE=1 .device/nvmlsource.test -test.count=1 -test.run 'TestLiveNVML' -test.v 2>&1; echo "rc=$?"; } >>"$log"
fi
# Node health and NVLink fabric (issue 14): what nvidia-smi says, what
# NVML discovery recorded (health, fabric, persistence per GPU), and the
# health findings of the live preflight. The first `nvidia-smi -L` above is
# timed in the log: with persistence off it includes the GPU's
# initialization (PERSISTENCE_OFF's cost).
{
  echo "--- nvidia-smi -q health sections"
  nvidia-smi -q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT,PERFORMANCE 2>&1 | grep -E 'GPU 0|Pending|Remapping Failure|Uncorrectable|Active|Slowdown|Power Brake' | head -80
  nvidia-smi -q 2>&1 | grep -E -A6 '^ *(Fabric|GPU Reset Status)$' | head -60
  nvidia-smi --query-gpu=index,persistence_mode,clocks_event_reasons.active --format=csv 2>&1
  echo "--- NVML health as rankgate recorded it"
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys
inv=json.load(open(sys.argv[1]))
for g in inv.get("gpus",[]):
    print(g["index"], "persistence=%s" % g.get("persistence"), "health=%s" % json.dumps(g.get("health")), "fabric=%s" % json.dumps(g.get("fabric")))' "$out/inspect.json"
  else
    grep -E '"(health|fabric|persistence|remapPending|remapFailure|volatileUncorrectedEcc|retiredPagesPending|throttle|unsupported|state|status|clusterUuid|cliqueId)"' "$out/inspect.json"
  fi
  echo "--- health findings of the live preflight"
  grep -E '"rule": "(GPU_|NVLINK_FABRIC|PERSISTENCE_OFF|CLOCKS_THROTTLED)' "$out/preflight.json" || echo "none"
} >>"$log" 2>&1
# Peak RSS of one live preflight (GNU time when present).
if command -v /usr/bin/time >/dev/null; then /usr/bin/time -v "$bin" preflight -o json 2>&1 >/dev/null | grep -E 'Maximum resident|Elapsed' >>"$log"; fi
rm -f "$out/termination.txt"
ls -la "$out" >>"$log"
