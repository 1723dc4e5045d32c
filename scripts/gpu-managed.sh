#!/usr/bin/env bash
# Managed memory on the GPU: scripts/cuda/managed.cu (cudaMallocManaged buffers the host fills
# and reads with plain stores and loads, a kernel between, three steps), built with nvcc, then
#   1. run plain, and recorded with `gputape run -o` (the host's writes and the device's
#      results in the trace),
#   2. shown,
#   3. replayed with `replay --on cuda` (the device's results compared) and on the mock.
# Builds nothing of gputape's (scripts/gpu-bin.sh first). OUT gets traces and logs.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
OUT=${OUT:-/tmp/gt-managed}
rm -rf "$OUT"; mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$B"/* 2>/dev/null
export PATH="/usr/local/cuda/bin:$PATH"
export GPUTAPE_REQUIRE_GPU=1
step() { # LABEL SECS LOG CMD...: CMD under timeout, output into LOG; sets rc
    local label=$1 secs=$2 log=$3; shift 3
    local t0=$(date +%s%N)
    timeout "$secs" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    echo "-- $label: exit $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}
timeout 300 nvcc -O2 -lineinfo -arch=sm_90 -o "$OUT/managed" scripts/cuda/managed.cu \
    >"$OUT/nvcc.log" 2>&1
echo "-- nvcc exit $?"; tail -3 "$OUT/nvcc.log"
[ -x "$OUT/managed" ] || exit 1

echo "=============== 1. plain, then recorded"
step "plain" 60 "$OUT/plain.log" "$OUT/managed"; cat "$OUT/plain.log"
step "run -o mg.gtape" 120 "$OUT/run.log" "$G" run -o "$OUT/mg.gtape" -- "$OUT/managed"
grep -E '^managed:|recorded|managed memory|not understood' "$OUT/run.log" | cut -c1-400

echo "=============== 2. show"
timeout 60 "$G" show "$OUT/mg.gtape" >"$OUT/show.log" 2>&1
grep -E '^adopted|<<<|Synchronize|synchronize|copy' "$OUT/show.log" | head -24 | cut -c1-250
timeout 60 "$G" show --json "$OUT/mg.gtape" >"$OUT/show.json" 2>&1
python3 - "$OUT/show.json" <<'PY'
import json, sys, collections
v = json.load(open(sys.argv[1]))
by = collections.Counter((c["thread"], c["kind"], c.get("stream")) for c in v["calls"])
for (th, kind, st), n in sorted(by.items(), key=str):
    print(f"thread {th} {kind:<22} stream {st}: {n}")
PY

echo "=============== 3. replay"
step "replay --on cuda" 120 "$OUT/replay.log" "$G" replay --on cuda "$OUT/mg.gtape"
head -12 "$OUT/replay.log" | cut -c1-300
step "replay --on mock" 120 "$OUT/mock.log" "$G" replay --on mock "$OUT/mg.gtape"
head -6 "$OUT/mock.log" | cut -c1-300
