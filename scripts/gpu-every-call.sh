#!/usr/bin/env bash
# Every call a CUDA program makes (issue 53), on the H200, the families built so far:
#   module globals: scripts/cuda/constant.cu (a __constant__ table filled by cudaMemcpyToSymbol,
#   read by a kernel) compiled by nvcc, run plain, recorded by `gputape run -o` and replayed with
#   `replay --on cuda` (every read back compared); then with `fault` (the table's shift sends the
#   kernel's write 1 GiB past its output) under `gputape run --flight`, the dump replayed.
# Builds nothing of gputape's (scripts/gpu-bin.sh first). OUT gets binaries, traces, logs.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
OUT=${OUT:-/tmp/gt-every-call}
mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$G" 2>/dev/null
export GPUTAPE_REQUIRE_GPU=1
nvcc --version | tail -1
nvcc -O2 -arch=sm_90 -o "$OUT/constant" scripts/cuda/constant.cu || exit 2
echo "=============== plain"; "$OUT/constant"
echo "=============== what the runtime calls to reach a __constant__ (counts, static and shared cudart)"
"$G" run --counts "$OUT/constant.counts.json" -- "$OUT/constant" >/dev/null 2>"$OUT/constant.counts.err"; echo "exit $?"
cat "$OUT/constant.counts.json" | head -c 6000; echo
nvcc -O2 -arch=sm_90 -cudart shared -o "$OUT/constant-shared" scripts/cuda/constant.cu && {
    "$G" run --counts "$OUT/constant-shared.counts.json" -- "$OUT/constant-shared" 2>&1 | tail -3
    cat "$OUT/constant-shared.counts.json" | head -c 6000; echo
    "$G" run -o "$OUT/constant-shared.gtape" -- "$OUT/constant-shared" 2>&1 | grep -o 'recorded process.*'
    "$G" replay --on cuda "$OUT/constant-shared.gtape" 2>&1 | tail -4; echo "shared-cudart replay exit ${PIPESTATUS[0]}"
}
echo "=============== recorded"
"$G" run -o "$OUT/constant.gtape" -- "$OUT/constant" 2>"$OUT/constant.err"; echo "exit $?"
grep -h -o 'recorded process.*' "$OUT/constant.err"
"$G" show "$OUT/constant.gtape" | grep -E '^global|copy_h2d|copy_d2h|launch|Opaque|not understood' | cut -c1-200
echo "--- where each call was made (native sites: module+offset)"
"$G" show --stacks "$OUT/constant.gtape" | grep -E '^#|^      ' | sed -E 's/^(#[0-9]+ +t[0-9]+ [a-z_0-9]+).*@ /\1 @ /' | head -24
echo "=============== replay --on cuda"
"$G" replay --on cuda "$OUT/constant.gtape"; echo "replay exit $?"
echo "=============== fault under --flight"
rm -rf "$OUT/flight"
"$G" run --flight "$OUT/flight" -- "$OUT/constant" fault 2>"$OUT/fault.err"; echo "exit $?"
grep -E 'flight|dump' "$OUT/fault.err" | head -4 | cut -c1-300
dump=$(ls "$OUT/flight"/*.gtape 2>/dev/null | head -1)
[ -n "$dump" ] && { "$G" replay --on cuda "$dump" 2>&1 | grep -v WARN | head -20; echo "replay exit ${PIPESTATUS[0]}"; }
echo "=============== copies of every shape: scripts/cuda/copies.cu (cudaMemcpy2D/3D, pitched, default kind)"
nvcc -O2 -arch=sm_90 -o "$OUT/copies" scripts/cuda/copies.cu && {
    echo "plain:"; "$OUT/copies"
    "$G" run -o "$OUT/copies.gtape" -- "$OUT/copies" 2>"$OUT/copies.err"; echo "recorded exit $?"
    grep -h -o 'recorded process.*' "$OUT/copies.err" | cut -c1-400
    "$G" show "$OUT/copies.gtape" | grep -E '^#' | cut -c1-110 | head -30
    "$G" replay --on cuda "$OUT/copies.gtape" 2>&1 | tail -5; echo "copies replay exit ${PIPESTATUS[0]}"
}
echo "=============== native sites' cost: scripts/cuda/launches.cu, lines off/on alternating in one process"
nvcc -O2 -arch=sm_90 -o "$OUT/launches" scripts/cuda/launches.cu || exit 2
echo "plain: $("$OUT/launches")"
for mode in --flight -o; do
    for i in 1 2 3; do
        rm -rf "$OUT/lf"; arg="$OUT/lf"; [ "$mode" = -o ] && arg="$OUT/launches.gtape"
        echo "$mode $i: $("$G" run $mode "$arg" -- "$OUT/launches" 2>/dev/null | grep GPUTAPE_LAUNCHES)"
    done
done
"$G" show "$OUT/launches.gtape" | grep -m2 -o '@ .*launch_batch.*\|@ .*launches+0x[0-9a-f]*.*' | head -2
