#!/usr/bin/env bash
# Wrong numbers in PyTorch programs (issue 51), on the H200: scripts/gpu-nan.py's programs
# recorded by `gputape run -o`, then
#   decode, graph, compile: `replay --on cuda --check-finite` (and `--inf`): the first launch
#     that produced the value, its type and how it was known; compile also with a --dtype rule
#     for its Triton kernels (their names say no type);
#   indexadd, clean: `replay --on cuda --against cuda`: the first launch whose output differs
#     between two replays from identical inputs, or none;
#   every mode first: `replay --on cuda --write-extents` (what each launch wrote, measured,
#     stored beside the trace for the checks after it);
#   decode: `inspect --writes` of the tensor the last GEMM wrote, read by numpy, against the
#     logits PyTorch printed (scripts/gpu-inspect-check.py);
#   the cost on the decode: plain replay, --check-finite measuring extents, --check-finite with
#     them stored, --against cuda, alternating, 3 rounds.
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

for mode in decode graph compile indexadd clean; do
    echo; echo "=============== $mode: replay --on cuda --write-extents"
    rm -f "$OUT/$mode.gtape.writes.json"
    timeout 300 "$G" replay --on cuda --write-extents "$OUT/$mode.gtape" >"$OUT/$mode.writes" 2>&1
    rc=$?
    head -1 "$OUT/$mode.writes"; grep -E "^not measured|stopped|stored" "$OUT/$mode.writes" | head -5
    echo "typed from their bytes: $(grep -c 'its bytes read as' "$OUT/$mode.writes") pointers; exit $rc"
    row "$mode --write-extents" "exit $rc" "$(head -1 "$OUT/$mode.writes" | cut -c1-200)"
done
grep -E "nvjet" -A4 "$OUT/decode.writes" | grep -E "nvjet|wrote" | head -6

for mode in decode graph compile; do
    for inf in "" "--inf"; do
        echo; echo "=============== $mode: replay --on cuda --check-finite $inf"
        timeout 300 "$G" replay --on cuda --check-finite $inf "$OUT/$mode.gtape" >"$OUT/$mode.finite$inf" 2>&1
        rc=$?
        grep -v "not checked" "$OUT/$mode.finite$inf" | cut -c1-400 | head -16
        echo "($(grep -c 'not checked' "$OUT/$mode.finite$inf") pointers not checked) exit $rc"
        row "$mode --check-finite $inf" "exit $rc" "$(first 'first non-finite|into parameter|produced|held|REPRODUCED|NOTHING|no NaN' "$OUT/$mode.finite$inf" 5)"
    done
done
echo; echo "=============== compile with a rule for its Triton kernels"
timeout 300 "$G" replay --on cuda --check-finite --dtype 'triton_*=f32' "$OUT/compile.gtape" >"$OUT/compile.rule" 2>&1
rc=$?; grep -v "not checked" "$OUT/compile.rule" | cut -c1-400 | head -12; echo "exit $rc"
row "compile --dtype 'triton_*=f32'" "exit $rc" "$(first 'first non-finite|into parameter' "$OUT/compile.rule" 2)"

for mode in indexadd clean decode; do
    echo; echo "=============== $mode: replay --on cuda --against cuda"
    timeout 300 "$G" replay --on cuda --against cuda "$OUT/$mode.gtape" >"$OUT/$mode.against" 2>&1
    rc=$?
    cut -c1-400 "$OUT/$mode.against" | head -12; echo "exit $rc"
    row "$mode --against cuda" "exit $rc" "$(first 'DIFFERENT|no difference|first|differ' "$OUT/$mode.against" 3)"
done

echo; echo "=============== decode: inspect the logits the last GEMM wrote, against PyTorch's"
$PY scripts/gpu-inspect-check.py "$G" "$OUT/decode.gtape" "$OUT/decode.out" "$OUT/inspect" >"$OUT/inspect.log" 2>&1
rc=$?; cut -c1-400 "$OUT/inspect.log"; echo "exit $rc"
row "decode inspect --writes -o .npy" "exit $rc" "$(grep -h -E 'INSPECT|written by' "$OUT/inspect.log" 2>/dev/null | head -2 | tr '\n' ' ')"

echo; echo "=============== cost on the decode, alternating (ms, wall of the whole command)"
ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
for i in 1 2 3; do
    plain=$(ms "$G" replay --on cuda "$OUT/decode.gtape")
    rm -f "$OUT/decode.gtape.writes.json"
    measuring=$(ms "$G" replay --on cuda --check-finite "$OUT/decode.gtape")
    stored=$(ms "$G" replay --on cuda --check-finite "$OUT/decode.gtape")
    against=$(ms "$G" replay --on cuda --against cuda "$OUT/decode.gtape")
    echo "round $i: plain $plain | --check-finite measuring $measuring | --check-finite stored $stored | --against cuda $against"
done
"$G" replay --on cuda --check-finite "$OUT/decode.gtape" 2>&1 | grep -h -o 'launches replayed.*'
"$G" replay --on cuda "$OUT/decode.gtape" 2>&1 | grep -h 'eager replay'

echo; echo "=============== a plain CUDA C++ program (scripts/cuda/nan.cu): its own kernels, nvcc"
export PATH="/usr/local/cuda/bin:$PATH"
timeout 300 nvcc -O2 -lineinfo -arch=sm_90 -o "$OUT/nanprog" scripts/cuda/nan.cu >"$OUT/nvcc.log" 2>&1
echo "nvcc exit $?"; tail -3 "$OUT/nvcc.log"
for arg in nan clean; do
    "$OUT/nanprog" $arg; echo "plain $arg: exit $?"
    "$G" run -o "$OUT/prog-$arg.gtape" -- "$OUT/nanprog" $arg >"$OUT/prog-$arg.out" 2>"$OUT/prog-$arg.err"
    echo "recorded $arg: exit $?: $(cat "$OUT/prog-$arg.out")"
    timeout 120 "$G" replay --on cuda --write-extents "$OUT/prog-$arg.gtape" 2>&1 | cut -c1-300 | head -14
    timeout 120 "$G" replay --on cuda --check-finite "$OUT/prog-$arg.gtape" >"$OUT/prog-$arg.finite" 2>&1
    rc=$?; cut -c1-400 "$OUT/prog-$arg.finite" | head -14; echo "check-finite exit $rc"
    row "nan.cu $arg --check-finite" "exit $rc" "$(first 'first non-finite|into parameter|produced|REPRODUCED|no NaN' "$OUT/prog-$arg.finite" 4)"
    timeout 120 "$G" replay --on cuda --against cuda "$OUT/prog-$arg.gtape" >"$OUT/prog-$arg.against" 2>&1
    rc=$?; cut -c1-300 "$OUT/prog-$arg.against" | head -6; echo "against exit $rc"
    row "nan.cu $arg --against cuda" "exit $rc" "$(first 'DIFFERENT|no difference' "$OUT/prog-$arg.against" 1)"
done

echo
echo "| check | result | what it said |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
