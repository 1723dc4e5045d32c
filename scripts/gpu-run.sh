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
  echo "== gpu tests";       $TESTS --include-ignored --test-threads=1 2>&1
  echo "== capture table";   $BIN capture-table --on cuda > "$OUT/capture_table_cli.md" 2>&1; tail -2 "$OUT/capture_table_cli.md"
  echo "== record on cuda";  $BIN record --backend cuda --workload capture -o "$OUT/capture_cuda.gtape" && $BIN show "$OUT/capture_cuda.gtape" --summary
  echo "== launch bench";    $BIN bench-launch
} 2>&1 | tee "$OUT/gpu-run.log"
