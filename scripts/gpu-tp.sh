#!/usr/bin/env bash
# Issue 32's GPU part in one call. On a machine with 2, 4 or 8 GPUs, for each TP it can:
#   1. the llama-3.2-1b bf16 step over TP GPUs (`record --hf --tp`, NCCL pinned to
#      NCCL_ALGO=Ring NCCL_PROTO=Simple), then `ranks --replay --backend cuda`: every rank's
#      readbacks against its recording (exit 0: identical);
#   2. the planted fault (examples/tp_fault.rs: rank 1 leaves out its all-reduce of step 13,
#      NCCL pairs the rest off by one, the others' last one never completes): every rank's
#      flight dump, `gputape ranks` on them (it must name rank 1 at step 13), and their replay
#      on mock ranks (a replay on NCCL of a collective nobody meets would wait forever);
#   3. what recording costs the TP step (benches/tp_steps.rs: plain, `-o`, flight, alternating),
#      1B and 8B, batch 1 and 16.
# On one GPU it runs what one GPU allows (the TP path with one rank over NCCL: cost, record,
# `ranks --replay --backend cuda`) and lists what it did not run.
# Builds nothing: gpu-bin/ (scripts/gpu-bin.sh) holds gputape, tp-steps and tp-fault. Logs
# under $OUT.
set -u
B=${GPUTAPE_BIN_DIR:-$PWD/gpu-bin}
OUT=${OUT:-/tmp/gpu-tp}
mkdir -p "$OUT"
NCCL=${GPUTAPE_NCCL_LIB:-$(python3 -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib","libnccl.so.2"))' 2>/dev/null)}
export GPUTAPE_NCCL_LIB=$NCCL NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_DEBUG=WARN
N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
STEPS=${STEPS:-200}
{
  echo "== $(date -u +%FT%TZ) $N GPU(s); NCCL ${NCCL:-not found}; NCCL_ALGO=$NCCL_ALGO NCCL_PROTO=$NCCL_PROTO"
  nvidia-smi -L
  TPS=""
  for t in 2 4 8; do [ "$N" -ge "$t" ] && TPS="$TPS $t"; done
  for TP in $TPS; do
    echo "== TP=$TP: record llama-3.2-1b steps 0..4 over $TP GPUs, replay on them"
    "$B/gputape" record --hf llama-3.2-1b --steps 0..4 --tp "$TP" --backend cuda -o "$OUT/tp$TP.gtape"
    echo "record exit $?"
    timeout 300 "$B/gputape" ranks "$OUT"/tp$TP.rank*.gtape --replay --backend cuda
    echo "ranks --replay --backend cuda exit $? (0: every rank's readbacks identical)"
    echo "== TP=$TP: planted skipped all-reduce (rank 1, step 13) under flight recorders"
    rm -rf "$OUT/fault$TP"
    GPUTAPE_STEP_CUDA=1 timeout 120 "$B/tp-fault" "$OUT/fault$TP" "$TP" 1 13
    echo "tp-fault exit $? (0: every rank dumped, the dumps name rank 1 at step 13)"
    timeout 120 "$B/gputape" ranks "$OUT"/fault$TP/rank*/*.gtape --replay
    echo "ranks (mock replay of the real dumps) exit $? (1: the parting found)"
    echo "== TP=$TP: cost per step"
    GPUTAPE_STEP_CUDA=1 GPUTAPE_TP=$TP GPUTAPE_FS_STEPS=$STEPS GPUTAPE_FS_PRESETS=${PRESETS:-llama-3.2-1b,llama-3-8b} \
      GPUTAPE_FS_BATCHES=1,16 timeout 400 "$B/tp-steps" --bench 2>&1 | grep -v '^  '
  done
  if [ -z "$TPS" ]; then
    echo "== one GPU: the TP path with one rank over NCCL"
    rm -rf "$OUT/tp1"
    GPUTAPE_STEP_CUDA=1 GPUTAPE_TP=1 GPUTAPE_FS_STEPS=$STEPS GPUTAPE_FS_PRESETS=${PRESETS:-llama-3.2-1b,llama-3-8b} \
      GPUTAPE_FS_BATCHES=1,16 GPUTAPE_FS_DIR="$OUT/tp1" timeout 400 "$B/tp-steps" --bench 2>&1 | grep -v '^  '
    echo "tp-steps exit ${PIPESTATUS[0]}"
    T="$OUT/tp1/llama-3.2-1b-b1/tp-rank0.gtape"
    ls -l "$T"
    timeout 300 "$B/gputape" ranks "$T" --replay --backend cuda
    echo "ranks --replay --backend cuda (one rank, NCCL) exit $?"
    rm -rf "$OUT/tp1"
    echo "NOT RUN (one GPU): TP over 2/4/8 GPUs recorded and replayed; the planted skipped all-reduce over NCCL; cost per step over several GPUs"
  fi
} 2>&1 | tee "$OUT/gpu-tp.log"
