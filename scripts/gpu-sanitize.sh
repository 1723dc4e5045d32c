#!/usr/bin/env bash
# `replay --sanitize` on the H200 (issue 54, first part): scripts/gpu-triton-oob.py (a Triton
# kernel reading far past its input at step 3) under `gputape run --flight`; its dump minimized on
# CUDA; the minimized trace replayed with `--sanitize memcheck` (the finding, its kernel and
# source line, the fault counted as reproduced) and, for comparison and as a fixture, run under
# compute-sanitizer directly with its own log; the whole program under memcheck, timed, against
# the minimized replay under it; `minimize --sanitize memcheck` of the dump (the finding kept) and
# its result replayed under the tool. Then the embedding assert's dump (scripts/gpu-embedding-oob.py).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-sanitize}
rm -rf "$OUT"; mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$B"/* 2>/dev/null
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
echo "compute-sanitizer: ${CS:-none} $($CS --version 2>&1 | tail -1)"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

"$G" run --flight "$OUT/fl" -- $PY scripts/gpu-triton-oob.py >"$OUT/oob.out" 2>"$OUT/oob.err"
echo "program exit $?"; cat "$OUT/oob.out"; grep -E '^flight|gputape' "$OUT/oob.err" | cut -c1-300 | head -4
dump=$(ls "$OUT/fl"/*.gtape 2>/dev/null | head -1)
[ -z "$dump" ] && { echo "no dump"; exit 1; }
timeout 300 "$G" minimize --on cuda --max-attempts 40 -o "$OUT/min.gtape" "$dump" >"$OUT/min.log" 2>&1
echo "minimize exit $?"; tail -4 "$OUT/min.log" | cut -c1-300
"$G" show "$OUT/min.gtape" 2>&1 | head -12 | cut -c1-250
t0=$(date +%s%N)
timeout 300 "$G" replay --on cuda --sanitize memcheck "$OUT/min.gtape" >"$OUT/san.out" 2>"$OUT/san.err"
echo "replay --sanitize memcheck exit $? in $(ms $t0) ms"
cut -c1-400 "$OUT/san.out"; tail -3 "$OUT/san.err" | cut -c1-300
timeout 300 "$G" replay --on cuda --sanitize memcheck --json "$OUT/min.gtape" >"$OUT/san.json" 2>/dev/null
echo "--json: $(python3 -c "import json,sys; d=json.load(open('$OUT/san.json')); print(d.get('passed'), d['sanitizer']['reproduced'], d['sanitizer']['findings'][:1])" 2>&1 | cut -c1-400)"
t0=$(date +%s%N)
timeout 300 "$CS" --tool memcheck --target-processes all --log-file "$OUT/memcheck-min.log" "$G" replay --on cuda --no-isolate "$OUT/min.gtape" >/dev/null 2>&1
echo "compute-sanitizer on the minimized replay directly: exit $? in $(ms $t0) ms"
cat "$OUT/memcheck-min.log" | head -30
t0=$(date +%s%N)
timeout 300 "$CS" --tool memcheck --target-processes all --log-file "$OUT/memcheck-whole.log" $PY scripts/gpu-triton-oob.py >/dev/null 2>&1
echo "compute-sanitizer on the whole program: exit $? in $(ms $t0) ms"; head -8 "$OUT/memcheck-whole.log"
t0=$(date +%s%N); $PY scripts/gpu-triton-oob.py >/dev/null 2>&1; echo "the whole program plain: $(ms $t0) ms"

t0=$(date +%s%N)
timeout 400 "$G" minimize --on cuda --sanitize memcheck --max-attempts 40 -o "$OUT/min-san.gtape" "$dump" >"$OUT/min-san.log" 2>&1
echo "minimize --sanitize memcheck exit $? in $(ms $t0) ms"; tail -6 "$OUT/min-san.log" | cut -c1-300
timeout 300 "$G" replay --on cuda --sanitize memcheck "$OUT/min-san.gtape" >"$OUT/san2.out" 2>&1
echo "its replay --sanitize exit $?"; grep -E "REPRODUCED|finding" "$OUT/san2.out" | cut -c1-300 | head -4

"$G" run --flight "$OUT/fl2" -- $PY scripts/gpu-embedding-oob.py >"$OUT/emb.out" 2>"$OUT/emb.err"
dump=$(ls "$OUT/fl2"/*.gtape 2>/dev/null | head -1)
if [ -n "$dump" ]; then
    timeout 300 "$G" replay --on cuda --sanitize memcheck "$dump" >"$OUT/emb-san.out" 2>"$OUT/emb-san.err"
    echo "embedding assert dump, replay --sanitize memcheck exit $?"; head -30 "$OUT/emb-san.out" | cut -c1-300
fi
