#!/usr/bin/env bash
# Where the flight recorder's cost on short steps comes from, on the H200: the outside
# engine (eager and graph) and the default decode step under flight_steps with the default
# flight recorder, without checkpoints (GPUTAPE_FLIGHT_STEPS huge: the recording alone),
# with host checkpoints, and without the budget. Builds nothing; gpu-bin/ holds
# flight-steps. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}
B=${B:-gpu-bin}
mkdir -p "$OUT"
chmod +x "$B"/* 2>/dev/null
STEPS=${STEPS:-300}
ROUNDS=${ROUNDS:-3}
fs() { GPUTAPE_FS_PHASES=1 GPUTAPE_STEP_CUDA=1 GPUTAPE_FS_STEPS=$STEPS GPUTAPE_FS_ROUNDS=$ROUNDS timeout 120 "$B/flight-steps" --bench 2>&1 | grep -v '^ '; }
{
  echo "== host cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== tools: $(command -v perf nsys ncu 2>/dev/null | tr '\n' ' ')"
  echo "== default flight recorder"; fs
  echo "== no checkpoints (the recording alone)"; GPUTAPE_FLIGHT_STEPS=1000000000 fs
  echo "== host checkpoints"; GPUTAPE_FLIGHT_DEVICE=0 fs
  echo "== device checkpoints, no budget"; GPUTAPE_FLIGHT_BUDGET=0 fs
  echo "== each device checkpoint's cost, outside engine eager, 100 steps"
  GPUTAPE_FLIGHT_CKPT_TIMES=1 GPUTAPE_FLIGHT_BUDGET=0 GPUTAPE_STEP_CUDA=1 GPUTAPE_FS_STEPS=100 GPUTAPE_FS_ROUNDS=1 \
    GPUTAPE_FS_ONLY=eager timeout 60 "$B/flight-steps" --bench 2>&1 | grep -E 'device checkpoint' | head -12
} 2>&1 | tee "$OUT/gpu-flight-diag.log"
