#!/usr/bin/env bash
# Live check of nvmlsource on a GPU machine (the device tool's machine):
# discovers the real GPUs through libnvidia-ml.so.1 with TestLiveNVML and
# keeps nvidia-smi's view next to it for comparison. Changes no GPU setting.
#
#   topology/nvmlsource/testdata/live-smoke.sh            # from the repo root
#
# Without Go on the machine, build the test binary first, where Go is:
#   go test -c -o topology/nvmlsource/nvmlsource.test ./topology/nvmlsource
# (*.test is git-ignored: name it in the device tool's carry list.)
# Results go to $OUT (default /tmp/nvml-live).
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
out="${OUT:-/tmp/nvml-live}"
mkdir -p "$out"

nvidia-smi -L >"$out/smi-L.txt" 2>&1
nvidia-smi topo -m >"$out/smi-topo.txt" 2>&1
nvidia-smi -q >"$out/smi-q.txt" 2>&1
nvidia-smi mig -lgip >"$out/smi-lgip.txt" 2>&1

export RANKGATE_NVML_LIVE=1 RANKGATE_NVML_LIVE_OUT="$out/nvml-inventory.json"
if command -v go >/dev/null 2>&1; then
	go test -count=1 -run 'TestLiveNVML|TestDefaultWithoutLibrary' -v ./topology/nvmlsource/ 2>&1 | tee "$out/live-test.txt"
else
	bin=topology/nvmlsource/nvmlsource.test
	[ -x "$bin" ] || { echo "no Go and no prebuilt $bin" >&2; exit 2; }
	(cd topology/nvmlsource && ./nvmlsource.test -test.count=1 -test.run 'TestLiveNVML' -test.v) 2>&1 | tee "$out/live-test.txt"
fi
status=${PIPESTATUS[0]}
echo "results in $out (exit $status)"
exit "$status"
