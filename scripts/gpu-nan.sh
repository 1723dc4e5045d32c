#!/usr/bin/env bash
# Wrong numbers in PyTorch programs (issue 51), on the H200: scripts/gpu-nan.py's programs
# recorded by `gputape run -o`, then
#   decode, graph, compile: `replay --on cuda --check-finite` (and `--inf`): the first launch
#     that produced the value, its type and how it was known; compile also with a --dtype rule
#     for its Triton kernels (their names say no type);
#   indexadd, clean: `replay --on cuda --against cuda`: the first launch whose output differs
#     between two replays from identical inputs, or none;
#   the cost: a plain replay against --check-finite of the decode, each 3 times.
# Builds nothing (scripts/gpu-bin.sh first). OUT gets traces and logs; a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-nan}
mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$G" 2>/dev/null
export GPUTAPE_REQUIRE_GPU=1
rows=()
row() { rows+=("$(printf '| %s | %s | %s |' "$@")"); }
first() { grep -h -E "$1" "$2" | head -${3:-1} | tr '\n' ' ' | cut -c1-300; }

for mode in decode graph compile indexadd clean; do
    echo; echo "=============== $mode"
    "$G" run -o "$OUT/$mode.gtape" -- $PY scripts/gpu-nan.py "$mode" >"$OUT/$mode.out" 2>"$OUT/$mode.err"
    echo "exit $?: $(grep -h GPUTAPE_NAN "$OUT/$mode.out")"
    grep -h -o 'recorded process.*' "$OUT/$mode.err" | cut -c1-200
    "$G" show "$OUT/$mode.gtape" >"$OUT/$mode.show" 2>&1
    echo "kernels: $(grep -c '^kernel ' "$OUT/$mode.show"), typed by name: $(grep -c ' elements: ' "$OUT/$mode.show")"
    grep ' elements: ' "$OUT/$mode.show" | sort | uniq -c | sort -rn | head -5
done

for mode in decode graph compile; do
    for inf in "" "--inf"; do
        echo; echo "=============== $mode: replay --on cuda --check-finite $inf"
        timeout 300 "$G" replay --on cuda --check-finite $inf "$OUT/$mode.gtape" >"$OUT/$mode.finite$inf" 2>&1
        rc=$?
        cut -c1-400 "$OUT/$mode.finite$inf" | head -24; echo "exit $rc"
        row "$mode --check-finite $inf" "exit $rc" "$(first 'first non-finite|into parameter|produced|held' "$OUT/$mode.finite$inf" 4)"
    done
done
echo; echo "=============== compile with a rule for its Triton kernels"
timeout 300 "$G" replay --on cuda --check-finite --dtype 'triton_*=f32' "$OUT/compile.gtape" >"$OUT/compile.rule" 2>&1
rc=$?; cut -c1-400 "$OUT/compile.rule" | head -20; echo "exit $rc"
row "compile --dtype 'triton_*=f32'" "exit $rc" "$(first 'first non-finite|into parameter' "$OUT/compile.rule" 2)"

for mode in indexadd clean; do
    echo; echo "=============== $mode: replay --on cuda --against cuda"
    timeout 300 "$G" replay --on cuda --against cuda "$OUT/$mode.gtape" >"$OUT/$mode.against" 2>&1
    rc=$?
    cut -c1-400 "$OUT/$mode.against" | head -24; echo "exit $rc"
    row "$mode --against cuda" "exit $rc" "$(first 'DIFFERENT|no difference|first|differ' "$OUT/$mode.against" 3)"
done

echo; echo "=============== cost on the decode: plain replay and --check-finite, alternating"
for i in 1 2 3; do
    s=$(date +%s.%N); "$G" replay --on cuda "$OUT/decode.gtape" >"$OUT/cost.plain.$i" 2>&1; e=$(date +%s.%N)
    echo "plain $i: wall $(echo "$e - $s" | bc) s; $(grep -h 'eager replay' "$OUT/cost.plain.$i")"
    s=$(date +%s.%N); "$G" replay --on cuda --check-finite "$OUT/decode.gtape" >"$OUT/cost.finite.$i" 2>&1; e=$(date +%s.%N)
    echo "finite $i: wall $(echo "$e - $s" | bc) s; $(grep -h -o 'launches replayed.*' "$OUT/cost.finite.$i")"
done

echo
echo "| check | result | what it said |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
