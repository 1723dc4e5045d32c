#!/usr/bin/env bash
# Faults as engines meet them, on the GPU machine: recorded with no sync after each launch
# (GPUTAPE_DEBUG_SYNC_KERNELS unset), replayed in one `replay` each, exit statuses printed.
# Builds nothing (see scripts/gpu-bin.sh). Writes logs and traces under $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
BIN=${BIN:-gpu-bin/gputape}
TESTS=${TESTS:-gpu-bin/gpu-tests}
chmod +x "$BIN" "$TESTS" 2>/dev/null
unset GPUTAPE_DEBUG_SYNC_KERNELS
rc() { echo "-> exit $?"; }
{
  echo "== info"; $BIN info
  echo "== gpu tests"; GPUTAPE_REQUIRE_GPU=1 $TESTS --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked" | head -40
  echo "== illegal address, recorded as an engine runs (no debug sync)"
  $BIN record --backend cuda --config tiny --step 4 --fault-step 4 --fault-overrun 268435456 -o "$OUT/h200_tiny_async_illegal_step4.gtape" 2>&1 | cut -c1-300; rc
  $BIN show "$OUT/h200_tiny_async_illegal_step4.gtape" | grep -E "ERR|never" | cut -c1-200
  echo "== replay --on cuda"; $BIN replay "$OUT/h200_tiny_async_illegal_step4.gtape" --on cuda 2>/dev/null; rc
  echo "== replay --on cuda --json (faults)"; $BIN replay "$OUT/h200_tiny_async_illegal_step4.gtape" --on cuda --json 2>/dev/null | grep -E '"(passed|observed_at|kernel|seq|reproduced|window)"' | head -20; rc
  echo "== replay --on mock"; $BIN replay "$OUT/h200_tiny_async_illegal_step4.gtape" 2>/dev/null; rc
  echo "== minimize --on cuda"; time $BIN minimize "$OUT/h200_tiny_async_illegal_step4.gtape" --on cuda -o "$OUT/h200_ill_min.gtape" 2>&1 | head -12; rc
  echo "== replay of the minimized trace --on cuda"; $BIN replay "$OUT/h200_ill_min.gtape" --on cuda 2>/dev/null; rc
  echo "== red-zone overrun (64 bytes), recorded as an engine runs"
  $BIN record --backend cuda --config tiny --step 4 --fault-step 4 -o "$OUT/h200_tiny_redzone_step4.gtape" 2>/dev/null | tail -1; rc
  echo "== replay --on cuda"; $BIN replay "$OUT/h200_tiny_redzone_step4.gtape" --on cuda 2>/dev/null; rc
  echo "== replay --on cuda --scan-redzones"; $BIN replay "$OUT/h200_tiny_redzone_step4.gtape" --on cuda --scan-redzones 2>/dev/null; rc
  echo "== replay --on mock"; $BIN replay "$OUT/h200_tiny_redzone_step4.gtape" 2>/dev/null; rc
  echo "== fault inside a graph launch (illegal address)"
  $BIN record --backend cuda --workload graph-fault --fault-overrun 268435456 -o "$OUT/h200_graph_fault.gtape" 2>&1 | cut -c1-300; rc
  $BIN show "$OUT/h200_graph_fault.gtape" | grep -E "ERR|launch_graph|capture" | cut -c1-160
  echo "== replay --on cuda"; $BIN replay "$OUT/h200_graph_fault.gtape" --on cuda 2>/dev/null; rc
  echo "== replay --on cuda --as-graph"; $BIN replay "$OUT/h200_graph_fault.gtape" --on cuda --as-graph 2>&1; rc
  echo "== mock fixtures on cuda"
  for t in traces/mock_tiny_async_illegal_step4.gtape traces/mock_graph_fault.gtape traces/h200_tiny_fault_step4.gtape traces/h200_tiny_illegal_step4.gtape; do
    echo "-- $t"; $BIN replay $t --on cuda 2>/dev/null | grep -E "fault at|raised|past the end|writes|divergence|DIVERGENCE"; rc
  done
  echo "== clean step: replay x30 eager and as graph (no regression)"
  $BIN replay traces/h200_tiny_step7.gtape --on cuda --loop 30 | grep -E "match|eager replay"; rc
  $BIN replay traces/h200_tiny_step7.gtape --on cuda --as-graph --loop 30 | grep -E "match|graph replay|whole step"; rc
  echo "== trim on cuda"; $BIN trim traces/h200_tiny_step7.gtape --on cuda --range 30.. -o "$OUT/trim.gtape"; rc
  $BIN replay "$OUT/trim.gtape" --on cuda | head -2; rc
} 2>&1 | tee "$OUT/gpu-faults.log"
