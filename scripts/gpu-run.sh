#!/usr/bin/env bash
# Everything that runs on the GPU machine, in one go. Builds nothing: expects the release binary
# and the GPU test binary (stripped copies in gpu-bin/, see ARCHITECTURE.md) from a build here.
# Writes logs and artefacts under $OUT (or ./gpu-out).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export GPUTAPE_OUT="$OUT"
BIN=${BIN:-gpu-bin/gputape}
TESTS=${TESTS:-gpu-bin/gpu-tests}
chmod +x "$BIN" "$TESTS" gpu-bin/*-bench 2>/dev/null
STEP=traces/h200_tiny_step5.gtape
FAULT=traces/h200_tiny_fault_step4.gtape
{
  echo "== info";              $BIN info
  echo "== gpu tests";         GPUTAPE_REQUIRE_GPU=1 $TESTS --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked|differ|DIFFERS|Error|error" | head -80
  echo "== capture table";     $BIN capture-table --on cuda --strict > "$OUT/capture_table_cli.md" 2>&1; tail -2 "$OUT/capture_table_cli.md"
  echo "== demo cuda default"; $BIN demo --backend cuda --steps 40 | tail -3
  echo "== demo cuda tiny";    $BIN demo --backend cuda --config tiny --steps 40 | tail -3
  echo "== demo fault";        $BIN demo --backend cuda --config tiny --steps 8 --fault-step 5 2>/dev/null | grep -E "RED|gener"
  echo "== replay x100";       $BIN replay $STEP --on cuda --loop 100
  echo "== replay eager x30";  $BIN replay $STEP --on cuda --loop 30
  echo "== replay graph x30";  $BIN replay $STEP --on cuda --as-graph --loop 30
  echo "== fault replay";      $BIN replay $FAULT --on cuda 2>/dev/null
  echo "== mock fault on cuda"; $BIN replay traces/mock_tiny_fault_step4.gtape --on cuda --scan-redzones 2>/dev/null
  echo "== mock step on cuda"; $BIN replay traces/mock_tiny_step5.gtape --on cuda --loop 10
  echo "== record + analyze on cuda"; $BIN record --backend cuda --config tiny --step 7 -o "$OUT/h200_step7.gtape" && $BIN analyze "$OUT/h200_step7.gtape" --capture | head -3
  # The original step (the demo), and eager and graph replays of the step just recorded,
  # interleaved and repeated (the host's speed drifts between processes): eager as the step
  # ran, graph, and graph with programmatic dependent launch.
  for round in 1 2 3; do
    echo "== original step: demo cuda tiny, 40 steps (round $round)"; $BIN demo --backend cuda --config tiny --steps 40 | grep per-step
    echo "== this build's step, eager x100 (round $round)"; $BIN replay "$OUT/h200_step7.gtape" --on cuda --loop 100 | grep -E "match|eager replay"
    echo "== this build's step, graph x100 (round $round)"; $BIN replay "$OUT/h200_step7.gtape" --on cuda --as-graph --loop 100 | grep -E "graph replay|captured|whole step|match|differ"
    echo "== this build's step, graph x100 --pdl (round $round)"; $BIN replay "$OUT/h200_step7.gtape" --on cuda --as-graph --loop 100 --pdl | grep -E "graph replay|captured|whole step|match|differ"
  done
  echo "== this build's step, eager x100 --pdl"; $BIN replay "$OUT/h200_step7.gtape" --on cuda --loop 100 --pdl | grep -E "match|eager replay"
  echo "== per-call timing of this build's step (5 x plain, 5 x --sync-each; aggregated off the machine)"
  $BIN show "$OUT/h200_step7.gtape" > "$OUT/step7-show.txt"
  for i in 1 2 3 4 5; do
    $BIN replay "$OUT/h200_step7.gtape" --on cuda --timing | grep -E "^  #" | sed "s/^/plain /"
    $BIN replay "$OUT/h200_step7.gtape" --on cuda --timing --sync-each | grep -E "^  #" | sed "s/^/sync /"
  done > "$OUT/timing-raw.txt"; wc -l < "$OUT/timing-raw.txt"
  echo "== demo cuda tiny, PDL"; GPUTAPE_PDL=1 $BIN demo --backend cuda --config tiny --steps 40 | tail -3
  echo "== illegal address";   GPUTAPE_DEBUG_SYNC_KERNELS=1 $BIN record --backend cuda --config tiny --step 4 --fault-step 4 --fault-overrun 268435456 -o "$OUT/h200_tiny_illegal_step4.gtape" 2>/dev/null
                               $BIN show "$OUT/h200_tiny_illegal_step4.gtape" | grep -E "ERR|never|CUT" | cut -c1-160
                               $BIN replay traces/h200_tiny_illegal_step4.gtape --on cuda --sync-each 2>/dev/null
                               $BIN replay traces/h200_tiny_illegal_step4.gtape --on cuda 2>/dev/null
                               $BIN replay traces/h200_tiny_illegal_step4.gtape --on mock 2>/dev/null
  echo "== pointer table";     $BIN record --backend cuda --workload pointer-table -o "$OUT/pt.gtape" && \
                               { $BIN replay "$OUT/pt.gtape" --on cuda; $BIN replay "$OUT/pt.gtape" --on cuda --fixed-addresses; }
  echo "== launch bench";      $BIN bench-launch
  echo "== host cpu";          grep -m1 "model name" /proc/cpuinfo; nproc
  if [ -x gpu-bin/recorder-bench ]; then
    echo "== recorder bench (host CPU, mock)"; gpu-bin/recorder-bench
  fi
  if [ -x gpu-bin/replay-bench ]; then
    echo "== replay bench (host CPU, mock)";   gpu-bin/replay-bench
  fi
} 2>&1 | tee "$OUT/gpu-run.log"
