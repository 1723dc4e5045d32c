#!/usr/bin/env bash
# The driver-level recorder on the H200 (issue 31, stage a): unmodified PyTorch programs recorded
# with `gputape run -o`, shown, and replayed on CUDA with their read backs checked.
#   1. scripts/gpu-shim.py (matmul through cuBLAS, elementwise, a reduction, .item(), .cpu()),
#      and scripts/gpu-bf16-matmul.py (bf16 products: cuBLAS's Hopper kernels, tensor maps);
#   2. scripts/gpu-llama-decode.py (transformers Llama, random weights, 4 new tokens), with
#      PyTorch's default allocator and with expandable_segments:True (the allocator's virtual
#      memory: reservations and maps);
#   3. scripts/gpu-cuda-graph.py (a step captured with torch.cuda.graph and launched 4 times:
#      stream capture and graph launches, stage c);
#   4. scripts/gpu-embedding-oob.py (an out-of-range embedding index: device-side assert).
# Each is also run plainly and under `gputape run` without -o, so the output and the time of the
# decode's timed generate can be compared: plain, shim only, recorded.
# Then the out-of-range embedding's trace is minimized on CUDA.
# Builds nothing: run scripts/gpu-bin.sh first. OUT (default /tmp/gt-drv) gets the traces and
# logs; everything is printed on stdout, a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-drv}
mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$G" 2>/dev/null
rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s |' "$@")"); }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$PY -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'

# What must not change under the recorder: the result and the output's hash, the tokens and the
# logits' hash, the OOB lines (not the libcuda files mapped, nor times).
result() {
    $PY - "$1" <<'PYEOF'
import json, sys
out = []
for line in open(sys.argv[1]):
    tag, _, rest = line.partition(" ")
    if tag == "GPUTAPE_GRAPH":
        out.append(rest.strip())
    elif tag in ("GPUTAPE_SHIM_RESULT", "GPUTAPE_DECODE"):
        d = json.loads(rest)
        out.append(json.dumps({k: d.get(k) for k in ("result", "sha256", "tokens", "logits_sha256")}))
    elif tag == "GPUTAPE_OOB":
        out.append(line.strip())
print(" ".join(out))
PYEOF
}

# run NAME ENVSPEC SCRIPT: plain, counted, recorded; then show and replay the recording.
run_case() {
    local name=$1 envspec=$2 script=$3
    echo
    echo "=============== $name ($envspec $script)"
    env $envspec $PY "$script" >"$OUT/$name.plain.out" 2>"$OUT/$name.plain.err"
    local pc=$?
    echo "--- plain: exit $pc"; cat "$OUT/$name.plain.out"; tail -3 "$OUT/$name.plain.err"
    env $envspec "$G" run -- $PY "$script" >"$OUT/$name.shim.out" 2>"$OUT/$name.shim.err"
    local sc=$?
    echo "--- shim only: exit $sc"; cat "$OUT/$name.shim.out"
    env $envspec "$G" run -o "$OUT/$name.gtape" --counts "$OUT/$name.counts.json" -- $PY "$script" \
        >"$OUT/$name.rec.out" 2>"$OUT/$name.rec.err"
    local rc=$?
    echo "--- recorded: exit $rc"; cat "$OUT/$name.rec.out"
    grep -E '^recorded |driver calls ->|^gputape run' "$OUT/$name.rec.err"
    echo "--- the entry points called, and how the recording took them"
    sed -n '/^ *calls  recorded/,/^$/p' "$OUT/$name.rec.err"
    tail -4 "$OUT/$name.rec.err" | grep -v '^recorded ' 
    ls -l "$OUT/$name.gtape" 2>/dev/null
    if [ -f "$OUT/$name.gtape" ]; then
        echo "--- show (kernels, modules, summary)"
        "$G" show "$OUT/$name.gtape" >"$OUT/$name.show" 2>&1
        grep -E '^kernel |^module ' "$OUT/$name.show" | cut -c1-220 | head -40
        sed -n '/^[0-9]* calls (/,$p' "$OUT/$name.show" | head -60
        echo "--- replay --on cuda"
        timeout 300 "$G" replay --on cuda "$OUT/$name.gtape" >"$OUT/$name.replay" 2>&1
        local pr=$?
        cat "$OUT/$name.replay" | cut -c1-300 | head -40
        echo "replay exit $pr"
        if [ "$pr" != 0 ] && [ "$name" != embedding-oob ]; then
            # Addresses held where the recorder cannot see them (tensor maps a library
            # encodes itself, say) are right again when buffers sit where they were recorded.
            echo "--- replay --on cuda --fixed-addresses"
            timeout 300 "$G" replay --on cuda --fixed-addresses "$OUT/$name.gtape" \
                >"$OUT/$name.replay-fixed" 2>&1
            local pf=$?
            cut -c1-300 "$OUT/$name.replay-fixed" | head -20
            echo "replay --fixed-addresses exit $pf"
            pr="$pr (--fixed-addresses: $pf, $(grep -h -E 'match the recording' "$OUT/$name.replay-fixed" | head -1 | cut -c1-120))"
        fi
    else
        local pr=-
    fi
    local same="differ"
    [ "$(result "$OUT/$name.plain.out")" = "$(result "$OUT/$name.rec.out")" ] && same="same"
    row "$name" "plain exit $pc, shim exit $sc, recorded exit $rc; output plain vs recorded: $same" \
        "$(grep -h -o 'driver calls -> .*' "$OUT/$name.rec.err" | head -1 | cut -c1-200)" \
        "replay exit $pr: $(grep -h -E 'match the recording|REPRODUCED|NOT REPRODUCED|NOTHING CHECKED|first difference|fault' "$OUT/$name.replay" 2>/dev/null | head -3 | tr '\n' ' ' | cut -c1-250)"
}

# CASES picks some (default: all).
CASES=${CASES:-torch bf16-matmul decode decode-expandable cuda-graph embedding-oob}
want() { [[ " $CASES " == *" $1 "* ]]; }
want torch && run_case torch "" scripts/gpu-shim.py
want bf16-matmul && run_case bf16-matmul "" scripts/gpu-bf16-matmul.py
want decode && run_case decode "" scripts/gpu-llama-decode.py
want decode-expandable && run_case decode-expandable "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" scripts/gpu-llama-decode.py
want cuda-graph && run_case cuda-graph "" scripts/gpu-cuda-graph.py
want embedding-oob && run_case embedding-oob "" scripts/gpu-embedding-oob.py
if want embedding-oob && [ -f "$OUT/embedding-oob.gtape" ]; then
    echo "--- minimize --on cuda embedding-oob"
    timeout 300 "$G" minimize --on cuda --max-attempts 60 -o "$OUT/embedding-oob.min.gtape" \
        "$OUT/embedding-oob.gtape" >"$OUT/embedding-oob.min" 2>&1
    mc=$?
    cut -c1-250 "$OUT/embedding-oob.min" | tail -30
    echo "minimize exit $mc"
    row "embedding-oob minimized" "minimize exit $mc" \
        "$(grep -h -o -E '[0-9]+ calls? -> [0-9]+|shrunk.*|from [0-9]+ to [0-9]+.*' "$OUT/embedding-oob.min" | head -1)" "-"
fi

echo
echo "decode's timed generate (4 new tokens, GPUTAPE_DECODE_REPS of them), ms:"
echo "| run | plain mean / median / slowest | shim only | recorded (-o) | recorded / plain (mean, median) |"
echo "|---|---|---|---|---|"
for n in decode decode-expandable; do
    $PY - "$n" "$OUT/$n.plain.out" "$OUT/$n.shim.out" "$OUT/$n.rec.out" <<'PYEOF'
import json, sys
def ms(p):
    for line in open(p):
        if line.startswith("GPUTAPE_DECODE "):
            return json.loads(line.split(" ", 1)[1])["generate_ms"]
name, *paths = sys.argv[1:]
try:
    p, s, r = (ms(x) for x in paths)
    f = lambda d: f"{d['mean']} / {d['median']} / {d['slowest']}"
    print(f"| {name} | {f(p)} | {f(s)} | {f(r)} | {r['mean']/p['mean']:.3f}x / {r['median']/p['median']:.3f}x |")
except Exception as e:
    print(f"| {name} | missing: {e} | | | |")
PYEOF
done
echo
echo "entry points called, by how a recording takes them (from --counts):"
for n in torch bf16-matmul decode decode-expandable cuda-graph embedding-oob; do
    $PY - "$n" "$OUT/$n.counts.json" <<'PYEOF'
import json, sys
name, p = sys.argv[1:]
try:
    c = json.load(open(p))
except Exception as e:
    print(f"{name}: no counts ({e})"); sys.exit()
calls = c["calls"]; rec = set(c.get("entry_points_recorded", [])); opq = set(c.get("entry_points_by_name", []))
def part(names):
    return f"{len(names)} entry points, {sum(calls[n] for n in names)} calls"
fwd = [n for n in calls if n not in rec and n not in opq]
print(f"{name}: recorded {part(rec)}; by name {part(opq)} ({', '.join(sorted(opq))}); forwarded only {part(fwd)}; "
      f"export tables {sum(c['export_tables'].values())} fetches of {len(c['export_tables'])} UUIDs; "
      f"unmapped cuGetProcAddress answers {sum(c['unmapped_proc_addresses'].values())}")
PYEOF
done

echo
echo "| program | runs | recorded | replay on the H200 |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
