#!/usr/bin/env bash
# Two builds of the driver shim against each other on the H200, interleaved PAIRS times:
# gpu-bin/gputape-shim (this build) and $OLD (a directory holding another build's
# libcuda.so.1). Each time: the Llama decode inside one process, generates alternating
# between the recording paused and running, with the recorder's own time per generate
# (scripts/gpu-driver-cost.sh, ROUNDS=0 INPROC=1), then the fake driver's launch_cost
# (gpu-bin/shim-cost, built by scripts/shim-cost.sh): 448 parameter bytes through `extra`,
# and 3 parameters through `kernelParams` (PARAM_BYTES 0). Builds nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/${B:-gpu-bin}
OLD=$(realpath "${OLD:-$B/shim-old}")
PAIRS=${PAIRS:-2}
OUT=${OUT:-/tmp/gt-shim-ab}
mkdir -p "$OUT"
echo "== cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); counter flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'constant_tsc\|nonstop_tsc' | tr '\n' ' ')"
for p in $(seq 1 "$PAIRS"); do
    for build in new old; do
        dir=$B/gputape-shim
        [ "$build" = old ] && dir=$OLD
        echo "== pair $p, $build shim ($dir)"
        GPUTAPE_SHIM_DIR=$dir ROUNDS=0 INPROC=1 OUT=$OUT/$build.$p scripts/gpu-driver-cost.sh 2>&1 |
            grep -E '^\| (flight|recorded) \||recorder self time'
        for ps in 448 0; do
            echo "fake driver, --flight, PARAM_BYTES $ps: $(GPUTAPE_SHIM_DIR=$dir GPUTAPE_REAL_LIBCUDA=$B/shim-cost/libfakecuda.so \
                "$B/gputape" run --flight "$OUT/ff" -- "$B/shim-cost/launch_cost" 40 5000 "$ps" 2>/dev/null | grep paused)"
        done
    done
done
