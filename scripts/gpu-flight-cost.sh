#!/usr/bin/env bash
# The flight recorder's cost on the GPU machine, alone: per-step time off and on (interleaved),
# the recorder bench (of the previous build too, if gpu-bin/recorder-bench-old is there), and a long
# full recording.
# Builds nothing.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
BIN=${BIN:-gpu-bin/gputape}
chmod +x gpu-bin/* 2>/dev/null
{
  echo "== per-step time, flight recorder off and on (64 steps, interleaved)"
  for round in ${ROUNDS:-1 2 3 4}; do
    for cfg in tiny default; do
      off=$($BIN demo --backend cuda --config $cfg --steps 64 | grep per-step)
      rm -rf "$OUT/flight-clean"
      on=$($BIN demo --backend cuda --config $cfg --steps 64 --flight "$OUT/flight-clean" | grep per-step)
      echo "round $round $cfg off: $off"
      echo "round $round $cfg on:  $on"
    done
  done
  echo "== recorder bench (host CPU, mock), twice"
  for r in 1 2; do
    if [ -x gpu-bin/recorder-bench-old ]; then
      echo "-- old round $r"; gpu-bin/recorder-bench-old | sed -n '/^recorder overhead/,/^encode of one/p'
    fi
    echo "-- round $r"; gpu-bin/recorder-bench | sed -n '/^recorder overhead/,/^encode of one/p'
  done
  echo "== full recording over 6M calls (300 rounds): the mean, and the slow rounds a file grow makes"
  for r in 1 2; do GPUTAPE_BENCH_HOT=full gpu-bin/recorder-bench; done
} 2>&1 | tee "$OUT/gpu-flight-cost.log"
