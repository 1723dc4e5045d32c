#!/usr/bin/env bash
# Issue 53 on the GPU, the families added after host functions: graphs changed after they were
# made (scripts/cuda/graph_update.cu, with its planted fault), pinned memory the device maps
# (scripts/cuda/mapped.cu), batch copies (scripts/cuda/batch_copies.cu), each through
# scripts/gpu-cuda-program.sh (plain, `run -o`, replay on CUDA, as graphs, on the mock; the
# fault under `--flight`, its dump replayed, minimized, exported); then, as regressions, the
# node-built graph and host-function programs, and PyTorch under `run -o`: pinned staging
# memory (`pin_memory()`, which must not be followed as mapped memory) and a step captured with
# torch.cuda.graph, each replayed on CUDA. Builds nothing of gputape's (scripts/gpu-bin.sh
# first). OUT (default /tmp/gt-more) gets each program's logs.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-more}
mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$G" "$B"/gputape-shim/* 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for p in graph_update mapped batch_copies graph_nodes host_func; do
    echo "################ $p"
    fault=0
    case $p in graph_update | graph_nodes) fault=1 ;; esac
    FAULT=$fault OUT="$OUT/$p" timeout 500 scripts/gpu-cuda-program.sh "$p" 2>&1 | cut -c1-400
done
echo "################ PyTorch: pinned staging memory"
cat >"$OUT/pinned.py" <<'PY'
import torch
x = torch.arange(1 << 16, dtype=torch.float32).pin_memory()
y = x.to("cuda", non_blocking=True) * 2
back = torch.empty_like(x).pin_memory()
back.copy_(y, non_blocking=True)
torch.cuda.synchronize()
print("pinned: back[5] =", back[5].item(), "sum", float(back.sum()))
PY
timeout 120 "$G" run -o "$OUT/pinned.gtape" -- "$PY" "$OUT/pinned.py" >"$OUT/pinned.log" 2>&1
echo "run -o exit $?"; grep -E '^pinned:|recorded process' "$OUT/pinned.log" | cut -c1-600
timeout 120 "$G" replay --on cuda "$OUT/pinned.gtape" 2>&1 | grep -v WARN | head -4
echo "################ PyTorch: torch.cuda.graph"
timeout 200 "$G" run -o "$OUT/graph.gtape" -- "$PY" scripts/gpu-cuda-graph.py >"$OUT/graph.log" 2>&1
echo "run -o exit $?"; grep -E 'recorded process' "$OUT/graph.log" | cut -c1-600; tail -3 "$OUT/graph.log" | cut -c1-300
timeout 200 "$G" replay --on cuda "$OUT/graph.gtape" 2>&1 | grep -v WARN | head -4
