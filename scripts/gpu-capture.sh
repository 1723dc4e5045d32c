#!/usr/bin/env bash
# Capture verdicts for eager PyTorch programs (issue 50), on the H200: for each step of
# scripts/gpu-capture.py (item, cpu, sync, tensor, clean), the eager program recorded with
# `gputape run -o` and judged by `analyze --capture` (does the step capture, and if not, which
# call and line breaks it first), then the step captured for real with torch.cuda.graph; the
# agreement N/5, the breaker's line against the one the script marks, and `report`'s leak rows.
# FIXTURES set: the item step's trace cut to share (`trim --drop-images`) there. Builds nothing
# (scripts/gpu-bin.sh first). OUT gets traces and logs; a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-capture}
mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$G" 2>/dev/null
export GPUTAPE_REQUIRE_GPU=1
rows=()
agree=0
for mode in item cpu sync tensor clean; do
    echo; echo "=============== $mode"
    "$G" run -o "$OUT/$mode.gtape" -- $PY scripts/gpu-capture.py "$mode" eager >"$OUT/$mode.eager.out" 2>"$OUT/$mode.eager.err"
    echo "eager exit $?: $(grep -h -o 'recorded process.*' "$OUT/$mode.eager.err" | cut -c1-200)"
    "$G" analyze --capture "$OUT/$mode.gtape" >"$OUT/$mode.analyze" 2>&1
    cut -c1-400 "$OUT/$mode.analyze" | head -14
    $PY scripts/gpu-capture.py "$mode" capture >"$OUT/$mode.capture.out" 2>"$OUT/$mode.capture.err"
    real=$(grep -h GPUTAPE_CAPTURE "$OUT/$mode.capture.out" | cut -d' ' -f2-)
    echo "real capture: $real"
    predicted=captures
    grep -q "first to break it" "$OUT/$mode.analyze" && predicted=breaks
    actual=$(echo "$real" | $PY -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); print("captures" if d.get("captured") else "breaks")')
    want=$(echo "$real" | $PY -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); print(d.get("breaker_line") or "-")')
    first=$(grep -h -o 'first to break it: #[0-9]* [a-z_0-9]* at [^ ]*' "$OUT/$mode.analyze" | head -1)
    line_ok="-"
    if [ "$want" != "-" ]; then
        echo "$first" | grep -q "gpu-capture.py:$want:" && line_ok="line $want named" || line_ok="line $want NOT named"
    fi
    [ "$predicted" = "$actual" ] && agree=$((agree + 1))
    # What the user would win: the step replayed as graphs (an eager program's step moved to
    # a stream of the replay's) against the eager replay and the recorded run.
    timeout 300 "$G" replay --as-graph --loop 20 --on cuda "$OUT/$mode.gtape" >"$OUT/$mode.asgraph" 2>&1
    echo "replay --as-graph exit $?:"; grep -h -E 'eager program|graph\(s\)|match the recording|whole step|captured calls' "$OUT/$mode.asgraph" | cut -c1-300
    "$G" analyze --leaks "$OUT/$mode.gtape" >"$OUT/$mode.leaks" 2>&1
    leaks=$(grep -c '^leak ' "$OUT/$mode.leaks"); held=$(grep -h -o '^[0-9]* buffer(s) live at the end and no leak' "$OUT/$mode.leaks")
    rows+=("| $mode | $predicted | $actual | $line_ok | ${first:-none} | $(echo "$real" | $PY -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); print((d.get("error") or "-")[:120])') | $leaks leak(s); ${held:-0 held} |")
done
if [ -n "${FIXTURES:-}" ]; then
    mkdir -p "$FIXTURES"
    "$G" trim "$OUT/item.gtape" --range 0.. --drop-images -o "$FIXTURES/h200_py_capture_item.gtape"
fi
echo
echo "agreement: $agree/5"
echo "| step | analyze --capture | torch.cuda.graph | breaker's line | first breaker | the capture's error | leaks |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
