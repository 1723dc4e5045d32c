#!/usr/bin/env bash
# Graphs built node by node on the GPU (issue 53): scripts/cuda/graph_nodes.cu (memset, memcpy
# and kernel nodes added with cudaGraphAdd*Node, the graph launched three times), built with
# nvcc, then
#   1. run plain, and recorded with `gputape run -o` (which entry points the runtime used: the
#      counts table; the graph not kept by name only),
#   2. shown (the graph as a capture of its nodes), replayed with `replay --on cuda` (every
#      read back matching) and as graphs,
#   3. run with a fault planted in a kernel node under `gputape run --flight`, the dump
#      replayed (the fault reproduced and named), minimized, exported as a program, built, run.
# Builds nothing of gputape's (scripts/gpu-bin.sh first). OUT gets traces and logs.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
OUT=${OUT:-/tmp/gt-graph-nodes}
rm -rf "$OUT"; mkdir -p "$OUT"
G="$B/gputape"
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
timeout 300 nvcc -O2 -lineinfo -arch=sm_90 -o "$OUT/graph_nodes" scripts/cuda/graph_nodes.cu >"$OUT/nvcc.log" 2>&1
echo "-- nvcc exit $?"; tail -3 "$OUT/nvcc.log"
[ -x "$OUT/graph_nodes" ] || exit 1

echo "=============== 1. plain, then recorded"
step "plain" 60 "$OUT/plain.log" "$OUT/graph_nodes"; cat "$OUT/plain.log"
step "run -o gn.gtape" 120 "$OUT/run.log" "$G" run -o "$OUT/gn.gtape" -- "$OUT/graph_nodes"
grep -E '^graph_nodes:|recorded|kept by name|not understood|cuGraph' "$OUT/run.log" | cut -c1-400

echo "=============== 2. show, replay --on cuda, --as-graph"
timeout 60 "$G" show "$OUT/gn.gtape" 2>&1 | grep -E '^kernel|<<<|capture|graph' | head -16 | cut -c1-250
step "replay --on cuda" 120 "$OUT/replay.log" "$G" replay --on cuda "$OUT/gn.gtape"
head -12 "$OUT/replay.log" | cut -c1-300
step "replay --on cuda --as-graph" 120 "$OUT/graph.log" "$G" replay --on cuda --as-graph "$OUT/gn.gtape"
head -8 "$OUT/graph.log" | cut -c1-300

echo "=============== 3. a planted fault under --flight"
step "run --flight (fault)" 120 "$OUT/flight.log" "$G" run --flight "$OUT/fl" -- "$OUT/graph_nodes" fault
grep -E '^graph_nodes:|flight|gputape' "$OUT/flight.log" | head -8 | cut -c1-300
dump=$(ls "$OUT"/fl/*.gtape "$OUT"/fl/*.gtshm 2>/dev/null | head -1)
echo "dump: ${dump:-none}"
if [ -n "$dump" ]; then
    step "replay dump --on cuda" 120 "$OUT/dump-replay.log" "$G" replay --on cuda "$dump"
    grep -v WARN "$OUT/dump-replay.log" | head -12 | cut -c1-300
    step "minimize" 300 "$OUT/min.log" "$G" minimize --on cuda -o "$OUT/min.gtape" "$dump"
    tail -4 "$OUT/min.log" | cut -c1-300
    if [ -f "$OUT/min.gtape" ]; then
        timeout 60 "$G" show "$OUT/min.gtape" 2>&1 | head -12 | cut -c1-250
        step "export --program" 60 "$OUT/export.log" "$G" export --program "$OUT/repro" "$OUT/min.gtape"
        tail -2 "$OUT/export.log"
        if [ -f "$OUT/repro/repro.c" ]; then
            grep -c cuGraphLaunch "$OUT/repro/repro.c"
            timeout 120 cc -O1 -o "$OUT/repro/repro" "$OUT/repro/repro.c" -L"$(dirname "$libcuda")" -l:libcuda.so.1 >"$OUT/repro/cc.log" 2>&1
            echo "-- cc exit $?"; tail -3 "$OUT/repro/cc.log"
            [ -x "$OUT/repro/repro" ] && step "repro" 60 "$OUT/repro/run.log" "$OUT/repro/repro" && tail -4 "$OUT/repro/run.log"
        fi
    fi
fi
