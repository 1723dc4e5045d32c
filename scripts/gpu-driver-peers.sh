#!/usr/bin/env bash
# Peer dumps at the driver level on the H200: two PyTorch processes under one
# `gputape run --flight` (as one process per GPU would be, here on the one GPU): the first
# spins a kernel for about 30 s (scripts/gpu-hang.py, GPUTAPE_HANG_CYCLES=6e10) and waits in
# its sync; 6 s later the second starts and hits the out-of-range embedding's device-side assert
# (scripts/gpu-embedding-oob.py). No hang deadline is set: the first process dumps because the
# second did. Each dump is shown; the faulting process's is replayed on CUDA. Then the shim's
# cost per launch on this machine's CPU against the fake driver (gpu-bin/shim-cost/, from
# scripts/shim-cost.sh's build), to split the recorder's own cost from what a real program adds.
# Builds nothing: run scripts/gpu-bin.sh (and copy the shim-cost binaries) first.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-drv-peers}
rm -rf "$OUT/peers"
mkdir -p "$OUT"
G="$B/gputape"
t0=$(date +%s)
GPUTAPE_HANG_CYCLES=6e10 "$G" run --flight "$OUT/peers" -- sh -c \
    "$PY scripts/gpu-hang.py & sleep 6; $PY scripts/gpu-embedding-oob.py; wait" 2>&1 | tail -30
echo "--- gputape run exit ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s"
ls -la "$OUT/peers"
for t in "$OUT"/peers/*.gtape; do
    echo "=== $t"
    info=$("$G" show "$t" --json | $PY -c 'import json,sys; v=json.load(sys.stdin); d=v.get("dump") or {}; print("reason:", d.get("reason")); print("in_flight:", d.get("in_flight")); print("calls:", len(v["calls"]), "last:", v["calls"][-1]["call"] if v["calls"] else None)')
    echo "$info"
    # The faulting process's dump replays; the peer's would run its 30 s kernel again.
    if ! echo "$info" | grep -q '^reason: peer:'; then
        "$G" replay "$t" --on cuda 2>&1 | tail -4
        echo "replay exit ${PIPESTATUS[0]}"
    fi
done
if [ -x "$B/shim-cost/launch_cost" ]; then
    echo "=== the shim's cost per launch against the fake driver, this machine's CPU"
    for r in 1 2 3; do
        for mode in flight recorded; do
            case $mode in
                flight) args=(--flight "$OUT/cost-flight") ;;
                recorded) args=(-o "$OUT/cost.gtape") ;;
            esac
            echo "$mode $r: $(GPUTAPE_REAL_LIBCUDA="$PWD/$B/shim-cost/libfakecuda.so" "$G" run "${args[@]}" -- "$B/shim-cost/launch_cost" 2>/dev/null | grep '^paused')"
            rm -f "$OUT/cost.gtape"
        done
    done
fi
