#!/usr/bin/env bash
# Issue 28 on the H200 in one call: the per-step table (benches/flight_steps.rs: the outside
# engine, the default decode step, the 1B and 8B shapes at batch 1 and 16), each device
# checkpoint's cost to both threads on the 1B step (GPUTAPE_FLIGHT_CKPT_TIMES), and the
# outside engine's sticky fault after its ring went round plus captures on checkpoint steps.
# Builds nothing: gpu-bin/ holds flight-steps, gputape and outside_engine. Logs under $OUT.
# PART=1: the first table only (outside engine, decode, 1B); PART=2: the rest (8B and on),
# so that each half fits one device call.
set -uo pipefail
OUT=${OUT:-gpu-out}
B=${B:-gpu-bin}
mkdir -p "$OUT"
chmod +x "$B"/* 2>/dev/null
STEPS=${STEPS:-500}
ROUNDS=${ROUNDS:-5}
PART=${PART:-all}
{
if [ "$PART" != 2 ]; then
  echo "== host cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== flight_steps: outside engine, default decode, llama-3.2-1b batch 1 and 16; $STEPS steps x $ROUNDS rounds"
  GPUTAPE_STEP_CUDA=1 GPUTAPE_FS_STEPS=$STEPS GPUTAPE_FS_ROUNDS=$ROUNDS \
    GPUTAPE_FS_PRESETS=llama-3.2-1b GPUTAPE_FS_BATCHES=1,16 \
    GPUTAPE_FS_PHASES=1 timeout 400 "$B/flight-steps" --bench 2>&1 | grep -v '^ '
fi
if [ "$PART" != 1 ]; then
  echo "== flight_steps: llama-3-8b batch 1 and 16; ${STEPS8:-$STEPS} steps x ${ROUNDS8:-$ROUNDS} rounds"
  GPUTAPE_STEP_CUDA=1 GPUTAPE_FS_STEPS=${STEPS8:-$STEPS} GPUTAPE_FS_ROUNDS=${ROUNDS8:-$ROUNDS} GPUTAPE_FS_PHASES=1 \
    GPUTAPE_FS_ONLY=llama-3-8b GPUTAPE_FS_PRESETS=llama-3-8b GPUTAPE_FS_BATCHES=1,16 \
    timeout 420 "$B/flight-steps" --bench 2>&1 | grep -v '^ '
  echo "== each device checkpoint's cost, llama-3.2-1b batch 1, 200 steps (every 4th line)"
  GPUTAPE_FLIGHT_CKPT_TIMES=1 GPUTAPE_STEP_CUDA=1 GPUTAPE_FS_STEPS=200 GPUTAPE_FS_ROUNDS=1 \
    GPUTAPE_FS_ONLY=llama GPUTAPE_FS_PRESETS=llama-3.2-1b GPUTAPE_FS_BATCHES=1 \
    timeout 60 "$B/flight-steps" --bench 2>&1 | grep -E 'device checkpoint' | awk 'NR%4==1' | head -40
  echo "== outside engine: 1 MiB ring, 3 MiB rewritten every 10 steps, out-of-range read at step 155"
  d=$(mktemp -d)
  GPUTAPE_FLIGHT=$d GPUTAPE_FLIGHT_RING_MB=1 GPUTAPE_FLIGHT_STEPS=2 GPUTAPE_FLIGHT_BUDGET=0 \
    "$B/outside_engine" run --backend cuda --steps 200 --fault oob --fault-step 155 --churn-mb 3 2>&1 | tail -2
  "$B/gputape" replay "$d"/*.gtape --on cuda >"$d/replay.log" 2>&1
  rc=$?
  grep -E 'replayed|REPRODUCED|not reproduced' "$d/replay.log"
  echo "replay exit: $rc"
  for at in 7 3; do for mode in global relaxed; do
    GPUTAPE_FLIGHT=$d/cap GPUTAPE_FLIGHT_STEPS=8 "$B/outside_engine" run --backend cuda --steps 40 \
      --graph-at $at --capture-mode $mode >/dev/null 2>&1
    echo "capture at step $at ($mode), flight on: exit $?"
  done; done
  rm -rf "$d"
fi
} 2>&1 | tee "$OUT/gpu-flight-final-$PART.log"
