#!/usr/bin/env bash
# One CUDA C++ program of scripts/cuda/ through gputape on the GPU (issue 53: every call a CUDA
# program makes), as a user would take it: `scripts/gpu-cuda-program.sh NAME [NVCC FLAGS...]`
# builds scripts/cuda/NAME.cu with nvcc, then
#   1. runs it plain, and recorded with `gputape run -o` (the counts table says which entry
#      points the runtime used and whether each was recorded; also as OUT/counts.json),
#   2. shows the trace (each call's stream too, `show --json`) and replays it with
#      `replay --on cuda` (every read back compared), as graphs, and on the mock,
#   3. with FAULT=1, runs `NAME fault` (a fault the program plants) under `gputape run
#      --flight`, replays the dump (the fault reproduced and named), minimizes it, exports the
#      minimized trace as a program, builds it against libcuda alone and runs it.
# The programs: coop (cooperative launches), graph_nodes (a graph built node by node),
# per_thread (--default-stream per-thread), managed (cudaMallocManaged), host_func (host
# functions and stream callbacks, eager and in a captured graph), graph_update (graphs changed
# after they were made), mapped (zero-copy pinned memory), batch_copies (cudaMemcpyBatchAsync),
# stream_ops (cuStreamWriteValue32/cuStreamWaitValue32 between streams), launch_attrs
# (cudaLaunchKernelEx: programmatic dependent launch, priority, a launch completion event).
# Builds nothing of gputape's (scripts/gpu-bin.sh first). OUT (default /tmp/gt-NAME) gets traces
# and logs.
set -uo pipefail
cd "$(dirname "$0")/.."
NAME=$1; shift
B=${B:-gpu-bin}
OUT=${OUT:-/tmp/gt-$NAME}
rm -rf "$OUT"; mkdir -p "$OUT"
G="$B/gputape"
P="$OUT/$NAME"
chmod +x "$B"/* 2>/dev/null
export PATH="/usr/local/cuda/bin:$PATH"
export GPUTAPE_REQUIRE_GPU=1
libcuda=$(ldconfig -p | grep -o '/[^ ]*libcuda\.so\.1$' | head -1)
step() { # LABEL SECS LOG CMD...: CMD under timeout, output into LOG; sets rc
    local label=$1 secs=$2 log=$3; shift 3
    local t0=$(date +%s%N)
    timeout "$secs" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    echo "-- $label: exit $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}
timeout 300 nvcc -O2 -lineinfo -arch=sm_90 "$@" -o "$P" "scripts/cuda/$NAME.cu" >"$OUT/nvcc.log" 2>&1
echo "-- nvcc $* exit $?"; tail -3 "$OUT/nvcc.log"
[ -x "$P" ] || exit 1

echo "=============== 1. plain, then recorded"
step "plain" 60 "$OUT/plain.log" "$P"; cat "$OUT/plain.log"
step "run -o $NAME.gtape" 120 "$OUT/run.log" "$G" run -o "$OUT/$NAME.gtape" --counts "$OUT/counts.json" -- "$P"
grep -v -E '^ +[0-9]+ +no ' "$OUT/run.log" | cut -c1-400

echo "=============== 2. show, replay --on cuda, --as-graph, --on mock"
timeout 60 "$G" show "$OUT/$NAME.gtape" >"$OUT/show.log" 2>&1
grep -E '^kernel|^adopted|^#' "$OUT/show.log" | head -40 | cut -c1-250
timeout 60 "$G" show --json "$OUT/$NAME.gtape" >"$OUT/show.json" 2>&1
python3 - "$OUT/show.json" <<'PY'
import json, sys, collections
v = json.load(open(sys.argv[1]))
by = collections.Counter((c["thread"], c["kind"], c.get("stream")) for c in v["calls"])
for (th, kind, st), n in sorted(by.items(), key=str):
    print(f"thread {th} {kind:<22} stream {st}: {n}")
PY
step "replay --on cuda" 120 "$OUT/replay.log" "$G" replay --on cuda "$OUT/$NAME.gtape"
head -12 "$OUT/replay.log" | cut -c1-300
step "replay --on cuda --as-graph" 120 "$OUT/graph.log" "$G" replay --on cuda --as-graph "$OUT/$NAME.gtape"
head -8 "$OUT/graph.log" | cut -c1-300
step "replay --on mock" 120 "$OUT/mock.log" "$G" replay --on mock "$OUT/$NAME.gtape"
head -6 "$OUT/mock.log" | cut -c1-300

[ "${FAULT:-0}" = 1 ] || exit 0
echo "=============== 3. a planted fault under --flight"
step "run --flight (fault)" 120 "$OUT/flight.log" "$G" run --flight "$OUT/fl" -- "$P" fault
grep -E "^$NAME:|flight|gputape" "$OUT/flight.log" | head -8 | cut -c1-300
dump=$(ls "$OUT"/fl/*.gtape "$OUT"/fl/*.gtshm 2>/dev/null | head -1)
echo "dump: ${dump:-none}"
[ -n "$dump" ] || exit 1
step "replay dump --on cuda" 120 "$OUT/dump-replay.log" "$G" replay --on cuda "$dump"
grep -v WARN "$OUT/dump-replay.log" | head -12 | cut -c1-300
step "minimize" 300 "$OUT/min.log" "$G" minimize --on cuda -o "$OUT/min.gtape" "$dump"
tail -4 "$OUT/min.log" | cut -c1-300
[ -f "$OUT/min.gtape" ] || exit 1
timeout 60 "$G" show "$OUT/min.gtape" 2>&1 | head -16 | cut -c1-250
step "export --program" 60 "$OUT/export.log" "$G" export --program "$OUT/repro" "$OUT/min.gtape"
tail -2 "$OUT/export.log"
[ -f "$OUT/repro/repro.c" ] || exit 1
timeout 120 cc -O1 -o "$OUT/repro/repro" "$OUT/repro/repro.c" -L"$(dirname "$libcuda")" -l:libcuda.so.1 >"$OUT/repro/cc.log" 2>&1
echo "-- cc exit $?"; tail -3 "$OUT/repro/cc.log"
[ -x "$OUT/repro/repro" ] && step "repro" 60 "$OUT/repro/run.log" "$OUT/repro/repro" && tail -4 "$OUT/repro/run.log"
