#!/usr/bin/env bash
# Hangs on the H200 (issue 49), each program killed with SIGKILL after its dump, as a job
# scheduler kills a hung job, so what is judged is the raw dump a killed run leaves:
#   spin-deadline  scripts/gpu-spin.py (a Triton kernel spinning on a flag nobody sets) under
#                  `gputape run --flight` with GPUTAPE_FLIGHT_HANG_S=3; the raw .gtshm shown and
#                  replayed on CUDA (expect: hang REPRODUCED, the kernel named, exit 0, no
#                  process or CUDA context left);
#   spin-asked     the same, no deadline: the dump asked for with `gputape dump PID`;
#   engine-signal  the outside engine on the trait (its oe_spin never ends) dumped by SIGUSR1
#                  while its host thread waits; replayed on CUDA with the engine's own tool;
#   engine-asked   the same engine, its dump asked for with `gputape dump PID` (its own recorder's
#                  watcher takes the request);
#   pair           GPUTAPE_SPIN_PAIR=1: two processes, A spinning, B spinning on a flag A would
#                  set (CUDA IPC); A dumped by its deadline, B at A's word: both dumps shown,
#                  each with the call it was blocked in;
#   minimize       spin-deadline's raw dump minimized on CUDA, and the result replayed;
#   ctypes         scripts/gpu-self-dump.py asks for its own dump (gputape_flight_dump) and runs on;
#   agree          the whole-workload capture agreement (four workloads x five settings);
#   suite          the GPU suite (GPUTAPE_REQUIRE_GPU=1).
# SECTIONS picks some (default: all). Builds nothing: scripts/gpu-bin.sh first.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-hangs}
mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$B"/* 2>/dev/null
rows=()
row() { rows+=("$(printf '| %s | %s | %s |' "$@")"); }
SECTIONS=${SECTIONS:-spin-deadline spin-asked engine-signal engine-asked pair minimize ctypes agree suite}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }

# wait_files DIR GLOB N SECS: until DIR holds N files matching GLOB (or SECS pass).
wait_files() {
    local i
    for ((i = 0; i < $4 * 10; i++)); do
        [ "$(ls $1/$2 2>/dev/null | wc -l)" -ge "$3" ] && return 0
        sleep 0.1
    done
    return 1
}
# leftovers: processes of this script's programs and CUDA contexts still alive.
leftovers() {
    local apps
    apps=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr '\n' ' ')
    echo "compute apps: [${apps}] gputape/python left: [$(pgrep -f 'gputape|gpu-spin|outside_engine' | grep -v $$ | tr '\n' ' ')]"
}
# judge NAME DUMP [TOOL]: show and replay --on cuda the dump; a table row.
judge() {
    local name=$1 dump=$2 tool=${3:-$G}
    echo "--- show $dump"
    "$tool" show "$dump" >"$OUT/$name.show" 2>&1
    echo "show exit $?"
    grep -E '^flight dump|never returned|^dump' "$OUT/$name.show" | cut -c1-300 | head -8
    tail -12 "$OUT/$name.show" | cut -c1-300
    echo "--- replay --on cuda"
    local t0=$(date +%s%N)
    timeout 300 "$tool" replay --on cuda "$dump" >"$OUT/$name.replay" 2>"$OUT/$name.replay.err"
    local rc=$? t1=$(date +%s%N)
    cut -c1-300 "$OUT/$name.replay" | head -30
    tail -5 "$OUT/$name.replay.err" | cut -c1-300
    echo "replay exit $rc in $(( (t1 - t0) / 1000000 )) ms"
    sleep 1
    local left
    left=$(leftovers)
    echo "$left"
    row "$name" "replay exit $rc: $(grep -h -E 'REPRODUCED|not reproduced|blocked in' "$OUT/$name.replay" | head -2 | tr '\n' ' ' | cut -c1-220)" "$left"
}
# under_flight NAME ENVSPEC: the spin program under `gputape run --flight` in its own session.
under_flight() {
    rm -rf "$OUT/$1"
    env $2 setsid "$G" run --flight "$OUT/$1" -- $PY scripts/gpu-spin.py >"$OUT/$1.out" 2>"$OUT/$1.err" &
    echo $!
}
kill_group() { kill -9 -- -"$1" 2>/dev/null; wait "$1" 2>/dev/null; }

if want spin-deadline; then
    echo "=============== spin-deadline"
    pid=$(under_flight spin1 "GPUTAPE_FLIGHT_HANG_S=3")
    wait_files "$OUT/spin1" "*.gtshm" 1 180 || echo "no dump within 180 s"
    sleep 1
    kill_group "$pid"
    cat "$OUT/spin1.out"; grep -E 'gputape|flight' "$OUT/spin1.err" | cut -c1-300 | head -6
    dump=$(ls "$OUT/spin1"/*.gtshm 2>/dev/null | head -1)
    [ -n "$dump" ] && judge spin-deadline "$dump" || row spin-deadline "no dump" "-"
fi

if want spin-asked; then
    echo "=============== spin-asked"
    pid=$(under_flight spin2 "")
    for ((i = 0; i < 1800; i++)); do grep -q 'waiting' "$OUT/spin2.out" 2>/dev/null && break; sleep 0.1; done
    sleep 3
    prog=$(grep -o 'pid [0-9]*' "$OUT/spin2.out" | head -1 | cut -d' ' -f2)
    echo "asking process $prog"
    "$G" dump "$prog" --reason "the step is 3 s late" >"$OUT/spin2.dump" 2>&1
    echo "dump exit $?: $(cat "$OUT/spin2.dump")"
    kill_group "$pid"
    grep -E 'gputape|flight' "$OUT/spin2.err" | cut -c1-300 | head -6
    dump=$(ls "$OUT/spin2"/*.gtshm 2>/dev/null | head -1)
    [ -n "$dump" ] && judge spin-asked "$dump" || row spin-asked "no dump" "-"
fi

if want engine-signal; then
    echo "=============== engine-signal"
    rm -rf "$OUT/oe"
    GPUTAPE_FLIGHT="$OUT/oe" setsid "$B/outside_engine" run --backend cuda --fault hang --steps 40 --fault-step 23 \
        >"$OUT/oe.out" 2>"$OUT/oe.err" &
    pid=$!
    sleep 8
    kill -USR1 "$pid"
    wait_files "$OUT/oe" "*.gtape" 1 30 || echo "no dump within 30 s of SIGUSR1"
    sleep 1
    kill_group "$pid"
    tail -3 "$OUT/oe.err" | cut -c1-300
    dump=$(ls "$OUT/oe"/*.gtape 2>/dev/null | head -1)
    [ -n "$dump" ] && judge engine-signal "$dump" "$B/outside_engine" || row engine-signal "no dump" "-"
fi

if want engine-asked; then
    echo "=============== engine-asked"
    rm -rf "$OUT/oe2"
    GPUTAPE_FLIGHT="$OUT/oe2" setsid "$B/outside_engine" run --backend cuda --fault hang --steps 40 --fault-step 23 \
        >"$OUT/oe2.out" 2>"$OUT/oe2.err" &
    pid=$!
    sleep 8
    "$G" dump "$pid" --reason "no token for 8 s" >"$OUT/oe2.dump" 2>&1
    echo "dump exit $?: $(cat "$OUT/oe2.dump")"
    kill_group "$pid"
    dump=$(ls "$OUT/oe2"/*.gtape 2>/dev/null | head -1)
    [ -n "$dump" ] && judge engine-asked "$dump" "$B/outside_engine" || row engine-asked "no dump" "-"
fi

if want pair; then
    echo "=============== pair"
    pid=$(under_flight pair "GPUTAPE_SPIN_PAIR=1 GPUTAPE_FLIGHT_HANG_S=3")
    wait_files "$OUT/pair" "*.gtshm" 2 180 || echo "fewer than two dumps within 180 s"
    sleep 1
    kill_group "$pid"
    cat "$OUT/pair.out"; grep -E 'gputape|flight' "$OUT/pair.err" | cut -c1-300 | head -8
    for d in "$OUT/pair"/*.gtshm; do
        [ -e "$d" ] || continue
        echo "--- $d"
        "$G" show "$d" >"$d.show" 2>&1
        echo "show exit $?"
        grep -E '^flight dump|never returned' "$d.show" | cut -c1-300 | head -6
        tail -8 "$d.show" | cut -c1-300
        row "pair $(basename "$d")" "$(grep -h -o -E 'flight dump[^;]*' "$d.show" | head -1 | cut -c1-160)" "$(grep -h 'never returned' "$d.show" | head -1 | cut -c1-160)"
    done
fi

if want minimize; then
    echo "=============== minimize"
    dump=$(ls "$OUT/spin1"/*.gtshm 2>/dev/null | head -1)
    if [ -n "$dump" ]; then
        timeout 400 "$G" minimize --on cuda --max-attempts 20 -o "$OUT/spin1.min.gtape" "$dump" >"$OUT/min.log" 2>&1
        rc=$?
        tail -12 "$OUT/min.log" | cut -c1-300
        echo "minimize exit $rc"
        judge minimized "$OUT/spin1.min.gtape"
        row "minimize" "exit $rc: $(grep -h -o -E '[0-9]+ calls? -> [0-9]+[^;]*' "$OUT/min.log" | head -1 | cut -c1-120)" "$(grep -h -o 'fault kept[^.]*' "$OUT/min.log" | head -1 | cut -c1-120)"
    else
        row minimize "no spin-deadline dump" "-"
    fi
fi

if want ctypes; then
    echo "=============== ctypes"
    rm -rf "$OUT/self"
    "$G" run --flight "$OUT/self" -- $PY scripts/gpu-self-dump.py >"$OUT/self.out" 2>"$OUT/self.err"
    rc=$?
    cat "$OUT/self.out"; grep -E 'gputape|flight' "$OUT/self.err" | cut -c1-300 | head -6
    dump=$(ls "$OUT/self"/*.gtape 2>/dev/null | head -1)
    reason=-
    if [ -n "$dump" ]; then
        "$G" show "$dump" >"$OUT/self.show" 2>&1
        reason=$(grep -h -E '^flight dump' "$OUT/self.show" | head -1 | cut -c1-200)
        echo "$reason"
        timeout 300 "$G" replay --on cuda "$dump" >"$OUT/self.replay" 2>&1
        echo "replay exit $?"; head -5 "$OUT/self.replay" | cut -c1-300
    fi
    row ctypes "program exit $rc; $(grep -h -o 'GPUTAPE_SELF asked: [0-9]*' "$OUT/self.out")" "$reason"
fi

if want agree; then
    echo "=============== agree"
    GPUTAPE_OUT="$OUT" GPUTAPE_REQUIRE_GPU=1 timeout 300 "$B/gpu-tests" --include-ignored --exact \
        whole_workloads_captured_for_real_agree_with_the_offline_verdicts --nocapture >"$OUT/agree.log" 2>&1
    rc=$?
    cat "$OUT/capture_agree.md" 2>/dev/null || tail -30 "$OUT/agree.log"
    row agree "exit $rc" "$(tail -1 "$OUT/capture_agree.md" 2>/dev/null)"
fi

if want suite; then
    echo "=============== suite"
    GPUTAPE_BIN=$PWD/$G GPUTAPE_OUT="$OUT" GPUTAPE_REQUIRE_GPU=1 timeout 400 "$B/gpu-tests" --include-ignored --test-threads=1 \
        >"$OUT/suite.log" 2>&1
    rc=$?
    grep -E "^test |test result|panicked" "$OUT/suite.log" | head -60
    row suite "exit $rc" "$(grep 'test result' "$OUT/suite.log" | tail -1)"
fi

echo
echo "| case | result | left behind |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
