#!/usr/bin/env bash
# Issue 53 on the GPU: every CUDA C++ program of scripts/cuda/ that exercises a call family
# (PROGRAMS, empty for none; by default graphs changed after they were made (nodes set, destroyed, given other
# child graphs), graphs with event nodes, stream memory operations (single and batched), launch
# attributes, pinned memory the device maps, batch copies (1D and 3D), graphs built node by
# node, host functions, module globals, 2D/3D copies, cooperative launches, managed memory,
# per-thread default streams), each through scripts/gpu-cuda-program.sh (plain, `run -o`,
# replay on CUDA, as graphs, on the mock; the planted fault of those that have one under
# `--flight`, its dump replayed, minimized, exported); then the table of the entry points they
# called, with how each is recorded; then two pairs of processes sharing memory (SHARING: an
# IPC handle, ipc.cu; a file descriptor of the virtual memory API, vmm_share.cu), each recorded
# and replayed alone and together; then PyTorch under `run -o`: pinned staging memory
# (`pin_memory()`, which must not be followed as mapped memory) and a step captured with
# torch.cuda.graph, each replayed on CUDA (PYTORCH=0 leaves these out). Builds nothing of gputape's (scripts/gpu-bin.sh
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
PROGRAMS=${PROGRAMS-graph_update event_nodes node_changes stream_ops launch_attrs mapped batch_copies graph_nodes host_func constant copies coop managed per_thread}
for p in $PROGRAMS; do
    echo "################ $p"
    fault=0 flags=""
    case $p in graph_update | event_nodes | graph_nodes | stream_ops | coop | constant | host_func) fault=1 ;; esac
    case $p in per_thread) flags="--default-stream per-thread" ;; esac
    # shellcheck disable=SC2086
    FAULT=$fault OUT="$OUT/$p" timeout 500 scripts/gpu-cuda-program.sh "$p" $flags 2>&1 | cut -c1-400
done
echo "################ the entry points these programs called (run -o --counts), and how each is recorded"
python3 - "$OUT" $PROGRAMS <<'PY'
import json, os, sys
out, progs = sys.argv[1], sys.argv[2:]
calls, how = {}, {}
for p in progs:
    f = os.path.join(out, p, "counts.json")
    if not os.path.exists(f):
        continue
    v = json.load(open(f))
    for name, n in v["calls"].items():
        calls.setdefault(name, {})[p] = n
    for name in v["entry_points_recorded"]:
        how[name] = "recorded"
    for name in v["entry_points_by_name"]:
        how.setdefault(name, "by name")
progs = [p for p in progs if os.path.exists(os.path.join(out, p, "counts.json"))]
print("| entry point | in a trace | " + " | ".join(progs) + " |")
print("|---|---|" + "---|" * len(progs))
rows = sorted(calls, key=lambda n: ({"recorded": 0, "by name": 1}.get(how.get(n), 2), n))
for name in rows:
    h = how.get(name, "forwarded")
    if h == "forwarded":
        continue
    cells = [str(calls[name].get(p, "")) for p in progs]
    print(f"| `{name}` | {h} | " + " | ".join(cells) + " |")
fwd = {p: sum(n for name, c in calls.items() for q, n in c.items() if q == p and how.get(name) is None) for p in progs}
print("| (forwarded only: queries, bookkeeping) | forwarded | " + " | ".join(str(fwd[p]) for p in progs) + " |")
PY
export PATH="/usr/local/cuda/bin:$PATH"
# Two processes sharing memory: through an IPC handle (ipc.cu, with an event), and through a
# file descriptor of the virtual memory API sent over a socket (vmm_share.cu).
for p in ${SHARING-ipc vmm_share}; do
    echo "################ $p: two processes sharing memory (scripts/cuda/$p.cu)"
    mkdir -p "$OUT/$p"
    timeout 300 nvcc -O2 -arch=sm_90 -o "$OUT/$p/$p" "scripts/cuda/$p.cu" -lcuda >"$OUT/$p/nvcc.log" 2>&1
    echo "nvcc exit $?"; tail -3 "$OUT/$p/nvcc.log"
    timeout 60 "$OUT/$p/$p"; echo "plain exit $?"
    timeout 120 "$G" run -o "$OUT/$p/$p.gtape" -- "$OUT/$p/$p" >"$OUT/$p/run.log" 2>&1
    echo "run -o exit $?"; grep -E '^(ipc|vmm)|recorded |replay them together' "$OUT/$p/run.log" | cut -c1-500
    for t in "$OUT/$p/$p"*.gtape; do
        echo "--- $t alone"
        timeout 60 "$G" show "$t" 2>&1 | grep -E '^#|^shared' | cut -c1-160 | head -16
        timeout 120 "$G" replay --on cuda "$t" 2>&1 | grep -v WARN | head -4
    done
    echo "--- the two together (ranks --replay --backend cuda)"
    timeout 200 "$G" ranks --replay --backend cuda "$OUT/$p/$p"*.gtape 2>&1 | grep -v WARN | head -20
    echo "ranks exit ${PIPESTATUS[0]}"
    echo "--- the two together on the mock"
    timeout 200 "$G" ranks --replay "$OUT/$p/$p"*.gtape 2>&1 | grep -v WARN | head -20
done
# PYTORCH=0 stops here.
[ "${PYTORCH:-1}" = 0 ] && exit 0
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
