#!/usr/bin/env bash
# Issue 28's table on the GPU machine: benches/flight_steps.rs (per-step mean, median, p99 and
# slowest, plain against flight, interleaved; with the recorder's floor, the same steps over a
# mock that runs no kernel bodies, on this host's CPU), then the GPU suite. Builds nothing:
# gpu-bin/ holds flight-steps, gpu-tests, gputape and outside_engine (stripped, built here).
# PART=small: the outside engine, the default decode step and the 1B shape at batch 1 and 16,
# then the GPU suite; PART=8b: the 8B shape at batch 1 and 16. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
chmod +x gpu-bin/* 2>/dev/null
unset GPUTAPE_DEBUG_SYNC_KERNELS
STEPS=${STEPS:-500}
ROUNDS=${ROUNDS:-5}
rc() { echo "-> exit $?"; }
{
  echo "== host cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  case "${PART:-small}" in
    small)
      echo "== flight_steps: outside engine, default decode, llama-3.2-1b at batch 1 and 16; $STEPS steps x $ROUNDS rounds"
      GPUTAPE_STEP_CUDA=1 GPUTAPE_FS_STEPS=$STEPS GPUTAPE_FS_ROUNDS=$ROUNDS \
        GPUTAPE_FS_PRESETS=llama-3.2-1b GPUTAPE_FS_BATCHES=1,16 \
        timeout 420 gpu-bin/flight-steps --bench 2>&1; rc
      echo "== gpu tests"
      GPUTAPE_BIN=$PWD/gpu-bin/gputape GPUTAPE_REQUIRE_GPU=1 timeout 150 gpu-bin/gpu-tests --include-ignored --test-threads=1 2>&1 \
        | grep -E "^test |test result|panicked" | head -40
      ;;
    8b)
      echo "== flight_steps: llama-3-8b at batch 1 and 16; $STEPS steps x $ROUNDS rounds"
      GPUTAPE_STEP_CUDA=1 GPUTAPE_FS_STEPS=$STEPS GPUTAPE_FS_ROUNDS=$ROUNDS GPUTAPE_FS_ONLY=llama-3-8b \
        GPUTAPE_FS_PRESETS=llama-3-8b GPUTAPE_FS_BATCHES=1,16 \
        timeout 560 gpu-bin/flight-steps --bench 2>&1; rc
      ;;
  esac
} 2>&1 | tee "$OUT/gpu-flight-steps-${PART:-small}.log"
