#!/usr/bin/env bash
# The final build on the GPU machine: the GPU suite, the capture table, and the fault and
# flight scenarios once more. Builds nothing (see scripts/gpu-bin.sh).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
BIN=${BIN:-gpu-bin/gputape}
TESTS=${TESTS:-gpu-bin/gpu-tests}
chmod +x gpu-bin/* 2>/dev/null
unset GPUTAPE_DEBUG_SYNC_KERNELS
export GPUTAPE_BIN=$BIN
rc() { echo "-> exit $?"; }
{
  echo "== gpu tests"; GPUTAPE_REQUIRE_GPU=1 $TESTS --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked" | head -40
  echo "== capture table --strict"; $BIN capture-table --on cuda --strict 2>&1 | tail -2; rc
  for t in traces/h200_tma.gtape traces/mock_graph_fault.gtape traces/h200_graph_fault.gtape traces/h200_tiny_async_illegal_step4.gtape traces/h200_tiny_redzone_step4.gtape traces/mock_tiny_async_illegal_step4.gtape; do
    echo "== replay $t --on cuda"; $BIN replay $t --on cuda 2>/dev/null | grep -E "fault at|raised|past the end|writes|DIVERGENCE|of [0-9]+ match"; rc
  done
  echo "== demo --flight (illegal address at step 37)"; rm -rf "$OUT/flight"
  $BIN demo --backend cuda --config tiny --steps 64 --fault-step 37 --fault-overrun 268435456 --flight "$OUT/flight" 2>&1 | grep -E "dumped|step 37 failed" | cut -c1-200
  $BIN replay "$OUT"/flight/*.gtape --on cuda 2>/dev/null | grep -E "fault at|raised|match"; rc
  echo "== replay x30 eager / graph of the clean step"; $BIN replay traces/h200_tiny_step7.gtape --on cuda --loop 30 | grep -E "match|eager replay"; rc
  $BIN replay traces/h200_tiny_step7.gtape --on cuda --as-graph --loop 30 | grep -E "match|whole step"; rc
  echo "== the seed backend and CLI, from the command line"; SKIP_SUITE=1 OUT="$OUT" bash scripts/gpu-seed.sh 2>&1 | grep -v "^== info" 
  echo "== record on cuda into a shared blob store, twice; replay both on cuda"
  rm -rf "$OUT/store"
  $BIN record --backend cuda --step 5 --blobs "$OUT/store" -o "$OUT/s5.gtape" | tail -1; rc
  $BIN record --backend cuda --step 6 --blobs "$OUT/store" -o "$OUT/s6.gtape" | tail -1; rc
  du -sb "$OUT/store" "$OUT/s5.gtape" "$OUT/s6.gtape"
  $BIN replay "$OUT/s5.gtape" --on cuda | tail -1; rc
  $BIN replay "$OUT/s6.gtape" --on cuda --as-graph --loop 5 | grep -E "match"; rc
  rm -rf "$OUT/store" "$OUT"/s5.gtape "$OUT"/s6.gtape
  echo "== recorder bench: this build and the session's start (f3f7058), interleaved"
  for r in 1 2; do
    echo "-- old round $r"; gpu-bin/recorder-bench-old | grep -E "^\| launch|^\| record_event|^\| flight"
    echo "-- new round $r"; gpu-bin/recorder-bench | grep -E "^\| launch|^\| record_event|^\| flight"
  done
} 2>&1 | tee "$OUT/gpu-final.log"
