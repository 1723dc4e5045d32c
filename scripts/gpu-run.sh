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
chmod +x "$BIN" "$TESTS" 2>/dev/null
{
  echo "== info";            $BIN info
  echo "== gpu tests";       $TESTS --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked|differ|DIFFERS" | head -80
  echo "== capture table";   $BIN capture-table --on cuda > "$OUT/capture_table_cli.md" 2>&1; tail -2 "$OUT/capture_table_cli.md"
  echo "== demo cuda";       $BIN demo --backend cuda --steps 40 | tail -4
  echo "== demo mock";       $BIN demo --backend mock --steps 40 | tail -4
  echo "== demo fault";      $BIN demo --backend cuda --config tiny --steps 8 --fault-step 5 | grep -E "step|RED|gener"
  echo "== record";          $BIN record --backend cuda --step 5 -o "$OUT/h200_tiny_step5.gtape"
                             $BIN record --backend cuda --step 4 --fault-step 4 -o "$OUT/h200_tiny_fault_step4.gtape"
  echo "== replay x100";     $BIN replay "$OUT/h200_tiny_step5.gtape" --on cuda --loop 100
  echo "== replay eager x30";$BIN replay "$OUT/h200_tiny_step5.gtape" --on cuda --loop 30
  echo "== replay graph x30";$BIN replay "$OUT/h200_tiny_step5.gtape" --on cuda --as-graph --loop 30
  echo "== h200 trace on mock"; $BIN replay "$OUT/h200_tiny_step5.gtape" --on mock
  echo "== fault replay";    $BIN replay "$OUT/h200_tiny_fault_step4.gtape" --on cuda --scan-redzones
  echo "== mock fault on cuda"; $BIN replay traces/mock_tiny_fault_step4.gtape --on cuda --scan-redzones
  echo "== mock step on cuda";  $BIN replay traces/mock_tiny_step5.gtape --on cuda
  echo "== launch bench";    $BIN bench-launch
} 2>&1 | tee "$OUT/gpu-run.log"
