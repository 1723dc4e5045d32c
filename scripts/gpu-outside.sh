#!/usr/bin/env bash
# The outside engine (examples/outside_engine) on the H200, as a user runs it: wrapped with
# RecordingBackend::from_env, GPUTAPE_FLIGHT on, a fault at a step nobody chose. For each
# failure: does the engine die, is there a dump, does `gputape replay --on cuda` reproduce it
# (exit status), is the kernel named, does `minimize --on cuda` shrink it; then the engine's
# own tool replays the dump on the mock with its CPU bodies; then captures on checkpoint
# steps with the step hook inside the capture. Builds nothing: run scripts/gpu-bin.sh first
# (it puts gputape and outside_engine into gpu-bin/). Prints everything on stdout (logs
# quoted in full) and a table last.
set -uo pipefail
B=${B:-gpu-bin}
W=$(mktemp -d)
OUT=$W/logs
mkdir -p "$OUT"
rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s | %s | %s |' "$@")"); }

fault_row() { # name, engine args...
    local name=$1; shift
    local dir=$W/$name
    echo "=== $name: outside_engine run --backend cuda $*"
    if [ "$1 $2" = "--fault hang" ]; then
        # The engine hangs: its recorder dumps after 2 s; the engine is killed after 20.
        GPUTAPE_FLIGHT=$dir GPUTAPE_FLIGHT_HANG_S=2 timeout -s KILL 20 \
            "$B/outside_engine" run --backend cuda --steps 40 "$@" >"$OUT/$name-engine.log" 2>&1
    else
        GPUTAPE_FLIGHT=$dir "$B/outside_engine" run --backend cuda --steps 40 "$@" >"$OUT/$name-engine.log" 2>&1
    fi
    local ec=$?
    tail -3 "$OUT/$name-engine.log"
    local dump
    dump=$(ls "$dir"/*.gtape 2>/dev/null | head -1)
    if [ -z "$dump" ]; then row "$name" "exit $ec" "none" "-" "-" "-"; return; fi
    "$B/gputape" show "$dump" --summary | head -4
    grep -Eo "checkpoints: [0-9]+|incomplete_checkpoints: [0-9]+|device_checkpoints: [a-z]+" "$OUT/$name-engine.log" | tr "\n" " "; echo
    GPUTAPE_REPLAY_DEADLINE_S=${DEADLINE:-} "$B/gputape" replay "$dump" --on cuda >"$OUT/$name-replay.log" 2>&1
    local rc=$?
    head -40 "$OUT/$name-replay.log"
    local verdict kernel
    verdict=$(grep -Eo 'hang REPRODUCED|REPRODUCED|not reproduced|NOT CHECKED' "$OUT/$name-replay.log" | head -1)
    kernel=$(grep -Eo 'outside::oe_[a-z_]+' "$OUT/$name-replay.log" | head -1)
    "$B/gputape" minimize "$dump" --on cuda -o "$dir/small.gtape" >"$OUT/$name-minimize.log" 2>&1
    local mc=$?
    head -3 "$OUT/$name-minimize.log"
    local shrink
    shrink=$(grep -Eo 'calls: [0-9]+ -> [0-9]+' "$OUT/$name-minimize.log" | head -1)
    "$B/gputape" replay "$dir/small.gtape" --on cuda >"$OUT/$name-small.log" 2>&1
    local sc=$?
    GPUTAPE_REPLAY_DEADLINE_S=${DEADLINE:-} "$B/outside_engine" replay "$dump" >"$OUT/$name-mock.log" 2>&1
    local mock=$?
    echo "mock replay with the engine's tool: exit $mock"; head -12 "$OUT/$name-mock.log"
    row "$name" "exit $ec" "yes" "${verdict:-?}, exit $rc" "${kernel:-no}" "${shrink:-failed} (exit $mc; small replays: exit $sc); mock tool: exit $mock"
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
fault_row oob --fault oob --fault-step 23
fault_row assert --fault assert --fault-step 23
fault_row graph-oob --fault oob --fault-step 23 --graph-at 0
DEADLINE=10 fault_row hang --fault hang --fault-step 23
# A sticky fault after the ring went round: a 1 MiB ring against 3 MiB that the device
# rewrites every 10 steps (each rewrite takes several checkpoints to go through the ring:
# incomplete ones), a checkpoint due every 2 steps, the fault at step 155.
GPUTAPE_FLIGHT_RING_MB=1 GPUTAPE_FLIGHT_STEPS=2 GPUTAPE_FLIGHT_BUDGET=0 \
    fault_row ring-oob --fault oob --fault-step 155 --steps 200 --churn-mb 3

# Captures on checkpoint steps (GPUTAPE_FLIGHT_STEPS=8: step 7 is the 8th boundary), the step
# hook inside the capture, no fault: the engine must run to the end with the recorder on.
for at in 7 15 3; do
    for mode in global relaxed; do
        dir=$W/cap-$at-$mode
        GPUTAPE_FLIGHT=$dir GPUTAPE_FLIGHT_STEPS=8 "$B/outside_engine" run --backend cuda \
            --steps 40 --graph-at "$at" --capture-mode "$mode" >"$OUT/cap-$at-$mode.log" 2>&1
        ec=$?
        tail -3 "$OUT/cap-$at-$mode.log"
        row "capture at step $at ($mode), flight on" "exit $ec" "$(ls "$dir"/*.gtape 2>/dev/null | wc -l) dump(s)" "-" "-" "-"
    done
done

echo
echo "| failure | engine | flight dump | replay --on cuda | kernel named | minimize --on cuda |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
rm -rf "$W"
