#!/usr/bin/env bash
# The driver-level recorder on the H200 (issue 31, stage a): unmodified PyTorch programs recorded
# with `gputape run -o`, shown, and replayed on CUDA with their read backs checked.
#   1. scripts/gpu-shim.py (matmul through cuBLAS, elementwise, a reduction, .item(), .cpu());
#   2. scripts/gpu-llama-decode.py (transformers Llama, random weights, 4 new tokens), with
#      PyTorch's default allocator and with expandable_segments:True (the allocator's virtual
#      memory: stage b, so expected to fall short here; the table says how);
#   3. scripts/gpu-embedding-oob.py (an out-of-range embedding index: device-side assert).
# Each is also run plainly and under `gputape run` without -o, so the output and the time of the
# decode's timed generate can be compared: plain, shim only, recorded.
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

result() { grep -h -E '^GPUTAPE_(SHIM_RESULT|DECODE|OOB)' "$1" | tr '\n' ' ' | cut -c1-400; }

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
    env $envspec "$G" run -o "$OUT/$name.gtape" -- $PY "$script" \
        >"$OUT/$name.rec.out" 2>"$OUT/$name.rec.err"
    local rc=$?
    echo "--- recorded: exit $rc"; cat "$OUT/$name.rec.out"
    grep -E '^recorded |driver calls ->|^gputape run' "$OUT/$name.rec.err"
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
    else
        local pr=-
    fi
    local same="differ"
    [ "$(result "$OUT/$name.plain.out")" = "$(result "$OUT/$name.rec.out")" ] && same="same"
    row "$name" "plain exit $pc, shim exit $sc, recorded exit $rc; output plain vs recorded: $same" \
        "$(grep -h -o 'driver calls -> .*' "$OUT/$name.rec.err" | head -1 | cut -c1-200)" \
        "replay exit $pr: $(grep -h -E 'match the recording|REPRODUCED|NOT REPRODUCED|NOTHING CHECKED|first difference|fault' "$OUT/$name.replay" 2>/dev/null | head -3 | tr '\n' ' ' | cut -c1-250)"
}

run_case torch "" scripts/gpu-shim.py
run_case decode "" scripts/gpu-llama-decode.py
run_case decode-expandable "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" scripts/gpu-llama-decode.py
run_case embedding-oob "" scripts/gpu-embedding-oob.py

echo
echo "decode's timed generate (4 tokens), ms: plain / shim only / recorded"
for n in decode decode-expandable; do
    ms() { grep -h -o '"generate_ms": [0-9.]*' "$1" | cut -d' ' -f2; }
    echo "$n: $(ms "$OUT/$n.plain.out") / $(ms "$OUT/$n.shim.out") / $(ms "$OUT/$n.rec.out")"
done

echo
echo "| program | runs | recorded | replay on the H200 |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
