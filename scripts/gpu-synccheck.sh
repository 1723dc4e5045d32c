#!/usr/bin/env bash
# A sample synccheck report (issue 54: the sanitizer parser tested on each tool's real output):
# scripts/cuda/divergent_sync.cu built with nvcc -lineinfo, recorded with `gputape run -o`, run
# under `compute-sanitizer --tool synccheck` (its report kept as OUT/synccheck.log), and the
# trace replayed with `replay --on cuda --sanitize synccheck`. Builds nothing of gputape's.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
OUT=${OUT:-/tmp/gt-synccheck}
rm -rf "$OUT"; mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$B"/* 2>/dev/null
export PATH="/usr/local/cuda/bin:$PATH"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
timeout 300 nvcc -O1 -lineinfo -arch=sm_90 -o "$OUT/divergent_sync" scripts/cuda/divergent_sync.cu >"$OUT/nvcc.log" 2>&1
echo "-- nvcc exit $?"; tail -3 "$OUT/nvcc.log"
[ -x "$OUT/divergent_sync" ] || exit 1
timeout 120 "$G" run -o "$OUT/ds.gtape" -- "$OUT/divergent_sync" >"$OUT/run.log" 2>&1
echo "-- run -o exit $?"; grep -E '^divergent_sync:|recorded process' "$OUT/run.log" | cut -c1-300
timeout 120 "$CS" --tool synccheck --log-file "$OUT/synccheck.log" "$OUT/divergent_sync" >"$OUT/cs.out" 2>&1
echo "-- compute-sanitizer --tool synccheck exit $?"; head -40 "$OUT/synccheck.log" | cut -c1-300
timeout 120 "$G" replay --on cuda --sanitize synccheck "$OUT/ds.gtape" >"$OUT/replay.log" 2>&1
echo "-- replay --sanitize synccheck exit $?"; grep -v WARN "$OUT/replay.log" | head -20 | cut -c1-300
