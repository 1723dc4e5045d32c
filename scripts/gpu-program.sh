#!/usr/bin/env bash
# Standalone repro programs (issue 54), on the GPU: `gputape export --program` of
#   - scripts/gpu-triton-oob.py's flight dump (a Triton kernel reading far out of bounds),
#     minimized on CUDA first, as a bug report would be;
#   - scripts/cuda/constant.cu's fault (a __constant__ shift sends a write 1 GiB past its
#     output) under --flight, and its clean run recorded with -o (module variables);
#   - scripts/cuda/copies.cu recorded with -o (2D/3D/default-kind copies);
# each built with the system compiler against the machine's libcuda alone and run: the fault
# REPRODUCED, or every call and read back as recorded. Builds nothing of gputape's
# (scripts/gpu-bin.sh first). OUT gets traces, programs and logs; a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-program}
rm -rf "$OUT"; mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$G" 2>/dev/null
export GPUTAPE_REQUIRE_GPU=1
libcuda=$(ldconfig -p | grep -o '/[^ ]*libcuda\.so\.1$' | head -1)
[ -z "$libcuda" ] && libcuda=$(ls /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 2>/dev/null | head -1)
echo "libcuda: $libcuda"
rows=()
program() { # NAME TRACE: export, build, run
    local name=$1 trace=$2 dir="$OUT/$1.repro"
    "$G" export --program "$dir" "$trace" >"$OUT/$name.export" 2>&1
    tail -2 "$OUT/$name.export" | cut -c1-300
    [ -f "$dir/repro.c" ] || { rows+=("| $name | export refused | $(tail -1 "$OUT/$name.export" 2>/dev/null) |"); return; }
    cc -O1 -o "$dir/repro" "$dir/repro.c" -L"$(dirname "$libcuda")" -l:libcuda.so.1 2>"$dir/cc.err"
    echo "cc exit $? ($(wc -l <"$dir/repro.c") lines, $(du -sh "$dir/data" | cut -f1) of data)"
    local t0=$(date +%s%N)
    timeout 120 "$dir/repro" >"$dir/run.out" 2>&1
    local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    tail -4 "$dir/run.out" | cut -c1-300
    echo "repro exit $rc in $ms ms"
    rows+=("| $name | exit $rc, $ms ms, $(wc -l <"$dir/repro.c") lines | $(grep -h '^repro:' "$dir/run.out" | tr '\n' ' ' | cut -c1-200) |")
}

echo "=============== Triton out-of-bounds read: flight dump, minimized, exported"
"$G" run --flight "$OUT/fl" -- $PY scripts/gpu-triton-oob.py >"$OUT/oob.out" 2>"$OUT/oob.err"
echo "program exit $?"
dump=$(ls "$OUT"/fl/*.gtape 2>/dev/null | head -1)
if [ -n "$dump" ]; then
    timeout 200 "$G" minimize --on cuda --max-attempts 40 -o "$OUT/oob-min.gtape" "$dump" >"$OUT/min.log" 2>&1
    echo "minimize exit $?"; tail -2 "$OUT/min.log" | cut -c1-300
    program oob-dump "$dump"
    [ -f "$OUT/oob-min.gtape" ] && program oob-min "$OUT/oob-min.gtape"
fi

echo "=============== __constant__ (module variables), recorded and faulting"
nvcc -O2 -arch=sm_90 -o "$OUT/constant" scripts/cuda/constant.cu || exit 2
"$G" run -o "$OUT/constant.gtape" -- "$OUT/constant" 2>"$OUT/constant.err"; echo "exit $?"
grep -h -o 'recorded process.*' "$OUT/constant.err" | cut -c1-300
"$G" show "$OUT/constant.gtape" | grep -E '^global|copy_h2d' | cut -c1-140
"$G" replay --on cuda "$OUT/constant.gtape" 2>&1 | grep -v WARN | head -4
echo "constant replay exit ${PIPESTATUS[0]}"
program constant "$OUT/constant.gtape"
"$G" run --flight "$OUT/cfl" -- "$OUT/constant" fault >/dev/null 2>"$OUT/cfault.err"; echo "fault run exit $?"
cdump=$(ls "$OUT"/cfl/*.gtape 2>/dev/null | head -1)
if [ -n "$cdump" ]; then
    "$G" replay --on cuda "$cdump" 2>&1 | grep -E 'REPRODUCED|reproduced|DIVERGENCE' | head -3 | cut -c1-300
    program constant-fault "$cdump"
fi

echo "=============== copies of every shape"
nvcc -O2 -arch=sm_90 -o "$OUT/copies" scripts/cuda/copies.cu || exit 2
"$G" run -o "$OUT/copies.gtape" -- "$OUT/copies" >/dev/null 2>"$OUT/copies.err"; echo "exit $?"
program copies "$OUT/copies.gtape"

echo
echo "| trace | repro program | what it said |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
