#!/usr/bin/env bash
# Gigabyte traces on the GPU machine: benches/scale.rs on CUDA at 16 GB (and 4 GB), traces on
# the machine's disk (not $OUT). Builds nothing (see scripts/gpu-bin.sh).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
chmod +x gpu-bin/* 2>/dev/null
DIR=${GPUTAPE_SCALE_DIR:-/tmp}
{
  echo "== disk and memory"; df -h "$DIR" | tail -1; free -g | head -2; nproc
  for gbs in ${SCALE_GBS:-16}; do
    echo "== scale bench, $gbs GB, cuda"
    GPUTAPE_SCALE_CUDA=1 GPUTAPE_SCALE_GB=$gbs GPUTAPE_SCALE_DIR=$DIR /usr/bin/time -v gpu-bin/scale-bench 2>&1 \
      | grep -vE "^\s+(Average|Exit|Socket|Signals|Swaps|File system|Page size|Voluntary|Involuntary|Minor|Major|Percent)"
  done
} 2>&1 | tee "$OUT/gpu-scale.log"
