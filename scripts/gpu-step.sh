#!/usr/bin/env bash
# The bf16 batched step on the GPU machine: the CUDA-vs-twins test, then benches/step.rs for
# the 1B and 8B shapes at batch 1 and 16 (traces and the blob store on the machine's disk, not
# $OUT). Builds nothing (see scripts/gpu-bin.sh). STEP_PRESETS / STEP_BATCHES narrow it.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
chmod +x gpu-bin/* 2>/dev/null
DIR=${GPUTAPE_STEP_DIR:-/tmp}
{
  echo "== disk and memory"; df -h "$DIR" | tail -1; free -g | head -2; nproc
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  echo "== GPU suite (the bf16 kernels against their CPU twins among it)"
  GPUTAPE_BIN=gpu-bin/gputape GPUTAPE_REQUIRE_GPU=1 timeout 300 gpu-bin/gpu-tests --include-ignored --test-threads 1 ${SUITE_FILTER:-} 2>&1 | grep -E "^test |test result|panicked|FAILED|left|right" | tail -40
  echo "== record --hf llama-3-8b --batch 16 on CUDA into a blob store, then replay it on CUDA"
  rm -rf "$DIR/cli-blobs" "$DIR/cli-8b.gtape"
  /usr/bin/time -f "%e s, %M KB peak RSS" gpu-bin/gputape --blobs "$DIR/cli-blobs" record --backend cuda \
    --hf llama-3-8b --batch 16 --steps 3..5 -o "$DIR/cli-8b.gtape"; echo "exit $?"
  ls -l "$DIR/cli-8b.gtape"; du -sh "$DIR/cli-blobs"
  /usr/bin/time -f "%e s, %M KB peak RSS" gpu-bin/gputape --blobs "$DIR/cli-blobs" show --summary "$DIR/cli-8b.gtape" | head -8
  /usr/bin/time -f "%e s, %M KB peak RSS" gpu-bin/gputape --blobs "$DIR/cli-blobs" replay --on cuda --loop 3 "$DIR/cli-8b.gtape"; echo "exit $?"
  rm -rf "$DIR/cli-blobs" "$DIR/cli-8b.gtape"
  echo "== step bench"
  GPUTAPE_STEP_CUDA=1 GPUTAPE_STEP_DIR=$DIR \
    GPUTAPE_STEP_PRESETS=${STEP_PRESETS:-llama-3.2-1b,llama-3-8b} \
    GPUTAPE_STEP_BATCHES=${STEP_BATCHES:-1,16} \
    /usr/bin/time -v gpu-bin/step-bench 2>&1 \
    | grep -vE "^\s+(Average|Exit|Socket|Signals|Swaps|File system|Page size|Voluntary|Involuntary|Minor|Major|Percent)"
} 2>&1 | tee "$OUT/gpu-step.log"
