#!/usr/bin/env bash
# The flight recorder's cost on the GPU machine, alone: per-step time off and on (interleaved),
# and the recorder bench of this build and the previous session's. Builds nothing.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
BIN=${BIN:-gpu-bin/gputape}
chmod +x gpu-bin/* 2>/dev/null
{
  echo "== per-step time, flight recorder off and on (64 steps, interleaved)"
  for round in 1 2 3 4; do
    for cfg in tiny default; do
      off=$($BIN demo --backend cuda --config $cfg --steps 64 | grep per-step)
      rm -rf "$OUT/flight-clean"
      on=$($BIN demo --backend cuda --config $cfg --steps 64 --flight "$OUT/flight-clean" | grep per-step)
      echo "round $round $cfg off: $off"
      echo "round $round $cfg on:  $on"
    done
  done
  echo "== recorder bench: this build and the previous session's, interleaved (host CPU, mock)"
  for r in 1 2; do
    echo "-- old (343d039) round $r"; gpu-bin/recorder-bench-old | grep -E "^\| launch|^\| record_event"
    echo "-- new round $r"; gpu-bin/recorder-bench | grep -E "^\| launch|^\| record_event|^\| flight"
  done
} 2>&1 | tee "$OUT/gpu-flight-cost.log"
