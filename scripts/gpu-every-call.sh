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
echo "=============== recorded"
"$G" run -o "$OUT/constant.gtape" -- "$OUT/constant" 2>"$OUT/constant.err"; echo "exit $?"
grep -h -o 'recorded process.*' "$OUT/constant.err"
"$G" show "$OUT/constant.gtape" | grep -E '^global|copy_h2d|copy_d2h|launch|Opaque|not understood' | cut -c1-200
echo "=============== replay --on cuda"
"$G" replay --on cuda "$OUT/constant.gtape"; echo "replay exit $?"
echo "=============== fault under --flight"
rm -rf "$OUT/flight"
"$G" run --flight "$OUT/flight" -- "$OUT/constant" fault 2>"$OUT/fault.err"; echo "exit $?"
grep -E 'flight|dump' "$OUT/fault.err" | head -4 | cut -c1-300
dump=$(ls "$OUT/flight"/*.gtape 2>/dev/null | head -1)
[ -n "$dump" ] && { "$G" replay --on cuda "$dump" 2>&1 | grep -v WARN | head -20; echo "replay exit ${PIPESTATUS[0]}"; }
