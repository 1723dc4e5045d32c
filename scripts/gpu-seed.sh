#!/usr/bin/env bash
# The seed backend's features and this session's CLI changes on the GPU machine: the GPU suite
# (red-zone floor/fill/backtrace, watchdog, managed memory, audit, sweep after a sticky fault,
# TMA record/replay), then the same seen from the CLI. Builds nothing (see scripts/gpu-bin.sh).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
BIN=${BIN:-gpu-bin/gputape}
TESTS=${TESTS:-gpu-bin/gpu-tests}
chmod +x gpu-bin/* 2>/dev/null
export GPUTAPE_BIN=$BIN
unset GPUTAPE_DEBUG_SYNC_KERNELS
rc() { echo "-> exit $?"; }
{
  echo "== info"; $BIN info; rc
  if [ -z "${SKIP_SUITE:-}" ]; then
    echo "== gpu tests"; GPUTAPE_REQUIRE_GPU=1 $TESTS --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked|assert" | head -60
  fi
  echo "== record tma on cuda, replay on cuda and mock"
  $BIN record --backend cuda --workload tma -o "$OUT/h200_tma.gtape"; rc
  $BIN show "$OUT/h200_tma.gtape" --kernel tma_copy | grep -E "recorded|tma_copy<<<"
  $BIN replay "$OUT/h200_tma.gtape" --on cuda; rc
  $BIN replay "$OUT/h200_tma.gtape" --on cuda --as-graph --loop 5 | grep -E "match"; rc
  $BIN replay "$OUT/h200_tma.gtape"; rc
  echo "== demo: planted illegal address at step 4, teardown"
  $BIN demo --backend cuda --config tiny --steps 8 --fault-step 4 --fault-overrun 268435456 2>&1 | grep -E "failed|sweep|teardown|audit" | cut -c1-260
  echo "== replay --perfetto on cuda"
  $BIN replay traces/h200_tiny_step7.gtape --on cuda --perfetto "$OUT/step7_device.json"; rc
  python3 -c "import json,sys; v=json.load(open(sys.argv[1]))['traceEvents']; d=[e for e in v if e.get('cat')=='device']; print(len(d), 'device spans; first:', d[0]['name'], round(d[0]['dur'],1), 'us')" "$OUT/step7_device.json" 2>&1
  echo "== show of an H200 trace: typed scalars"
  $BIN show traces/h200_tiny_step7.gtape --kernel rmsnorm | grep -m1 -E "rmsnorm::rmsnorm<<<"
  echo "== GPUTAPE_OOM_WATCHDOG_MB above the card: the watchdog ends the process"
  timeout 60 env GPUTAPE_OOM_WATCHDOG_MB=1000000 GPUTAPE_OOM_WATCHDOG_MS=20 $BIN replay traces/h200_tiny_step7.gtape --on cuda --loop 3000 2>&1 | grep -E "OOM watchdog" | cut -c1-200; echo "-> exit ${PIPESTATUS[0]}"
} 2>&1 | tee "$OUT/gpu-seed.log"
