#!/usr/bin/env bash
# The flight recorder and the recorder's cost on the GPU machine. Builds nothing (see
# scripts/gpu-bin.sh). The dump first, then the costs, then the GPU suite. Writes logs and traces
# under $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
BIN=${BIN:-gpu-bin/gputape}
TESTS=${TESTS:-gpu-bin/gpu-tests}
chmod +x gpu-bin/* 2>/dev/null
unset GPUTAPE_DEBUG_SYNC_KERNELS
rc() { echo "-> exit $?"; }
{
  echo "== info"; $BIN info
  echo "== demo --flight, illegal address planted at step 37 of 64 (no debug sync)"
  $BIN demo --backend cuda --config tiny --steps 64 --fault-step 37 --fault-overrun 268435456 --flight "$OUT/flight" 2>&1 | grep -vE "^step +[0-9]+ +token" | cut -c1-300; rc
  DUMP=$(ls "$OUT"/flight/*.gtape | head -1); echo "dump: $DUMP"
  $BIN show "$DUMP" --summary | head -3
  echo "== replay the dump --on cuda"; $BIN replay "$DUMP" --on cuda 2>/dev/null; rc
  echo "== replay the dump on the mock"; $BIN replay "$DUMP" 2>/dev/null | head -8; rc
  echo "== minimize the dump --on cuda"; $BIN minimize "$DUMP" --on cuda -o "$OUT/flight-min.gtape" 2>&1 | head -4; rc
  echo "== step bench: flight recorder on and off at the Llama-3.2-1B and Llama-3-8B shapes, batch 1, 40 steps a median"
  GPUTAPE_STEP_CUDA=1 GPUTAPE_STEP_DIR=${GPUTAPE_STEP_DIR:-/tmp} GPUTAPE_STEP_N=40 \
    GPUTAPE_STEP_PRESETS=llama-3.2-1b,llama-3-8b GPUTAPE_STEP_BATCHES=1 \
    timeout 240 gpu-bin/step-bench 2>&1 | grep -vE "^\s+(eager|graph|restore|open)"; rc
  ROUNDS=${ROUNDS:-1 2} OUT="$OUT" BIN="$BIN" bash "$(dirname "$0")/gpu-flight-cost.sh"
  echo "== recorded step (full recording) vs not: record --steps 8..40 tiny (the step times print per step)"
  $BIN record --backend cuda --config tiny --steps 8..40 -o "$OUT/steps.gtape" | tail -2; rc
  $BIN replay "$OUT/steps.gtape" --on cuda --steps 20..22 | head -3; rc
  echo "== host cpu"; grep -m1 "model name" /proc/cpuinfo; nproc
  echo "== gpu tests"; GPUTAPE_BIN=$BIN GPUTAPE_REQUIRE_GPU=1 timeout 200 $TESTS --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked" | head -40
} 2>&1 | tee "$OUT/gpu-flight.log"
