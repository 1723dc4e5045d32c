#!/usr/bin/env bash
# The driver-level flight recorder on the H200 (issue 31, stage c): `gputape run --flight DIR`
# on unmodified PyTorch programs.
#   1. scripts/gpu-embedding-oob.py (an out-of-range embedding index: device-side assert) under
#      --flight: the dump is replayed on CUDA (the assert reproduced, the kernel named) and
#      minimized on CUDA;
#   2. the same after 3000 good steps with a 4 MiB ring (GPUTAPE_FLIGHT_RING_MB=4): the ring
#      has wrapped, the dump holds the recent window; replayed on CUDA;
#   3. scripts/gpu-hang.py (a kernel that spins some 10 s) with GPUTAPE_FLIGHT_HANG_S=2: the
#      sync's wait dumped as a hang, and the dump replayed on CUDA (the same wait, a HANG);
#   4. the decode with --flight and no fault: nothing is written, the output is unchanged.
# SECTIONS (default "oob wrapped hang decode") picks some.
# Builds nothing: run scripts/gpu-bin.sh first. OUT (default /tmp/gt-drv-flight) gets the dumps
# and logs; everything is printed on stdout, a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-drv-flight}
mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$G" 2>/dev/null
rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s |' "$@")"); }

# flight NAME ENVSPEC SCRIPT: the script under --flight into $OUT/NAME/, each dump replayed.
flight() {
    local name=$1 envspec=$2 script=$3
    echo
    echo "=============== $name: $envspec gputape run --flight $OUT/$name -- $script"
    rm -rf "$OUT/$name"
    local t0=$(date +%s%N)
    env $envspec "$G" run --flight "$OUT/$name" -- $PY "$script" >"$OUT/$name.out" 2>"$OUT/$name.err"
    local rc=$? t1=$(date +%s%N)
    echo "--- exit $rc, $(( (t1 - t0) / 1000000 )) ms"
    cat "$OUT/$name.out"
    grep -E '^gputape-shim|^flight:|RuntimeError|AcceleratorError|device-side' "$OUT/$name.err" | cut -c1-400 | head -8
    ls -l "$OUT/$name"
    local dump verdict="no dump"
    dump=$(ls "$OUT/$name"/*.gtape 2>/dev/null | head -1)
    if [ -n "$dump" ]; then
        "$G" show "$dump" >"$OUT/$name.show" 2>&1
        grep -E '^flight dump|^kernel ' "$OUT/$name.show" | cut -c1-300 | head -12
        sed -n '/^[0-9]* calls (/,$p' "$OUT/$name.show" | head -20
        echo "--- replay --on cuda"
        timeout 300 "$G" replay --on cuda "$dump" >"$OUT/$name.replay" 2>&1
        local pr=$?
        cut -c1-300 "$OUT/$name.replay" | head -30
        echo "replay exit $pr"
        verdict="replay exit $pr: $(grep -h -E 'REPRODUCED|NOT REPRODUCED|match the recording|fault|HANG|hang' "$OUT/$name.replay" | head -3 | tr '\n' ' ' | cut -c1-300)"
    fi
    row "$name" "exit $rc" "$(grep -h -o 'driver calls -> .*' "$OUT/$name.err" | head -1 | cut -c1-260)" "$verdict"
}

SECTIONS=${SECTIONS:-oob wrapped hang decode}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
want oob && flight oob "" scripts/gpu-embedding-oob.py
dump=$(ls "$OUT/oob"/*.gtape 2>/dev/null | head -1)
if want oob && [ -n "$dump" ]; then
    echo "--- minimize --on cuda oob"
    timeout 300 "$G" minimize --on cuda --max-attempts 60 -o "$OUT/oob.min.gtape" "$dump" \
        >"$OUT/oob.min" 2>&1
    mc=$?
    cut -c1-250 "$OUT/oob.min" | tail -20
    echo "minimize exit $mc"
    row "oob minimized" "exit $mc" "$(grep -h -o -E '[0-9]+ calls? -> [0-9]+.*' "$OUT/oob.min" | head -1 | cut -c1-200)" "-"
fi
want wrapped && flight oob-wrapped "GPUTAPE_OOB_WARMUP=3000 GPUTAPE_FLIGHT_RING_MB=4" scripts/gpu-embedding-oob.py
want hang && flight hang "GPUTAPE_FLIGHT_HANG_S=2" scripts/gpu-hang.py
if want decode; then
    flight decode-no-fault "" scripts/gpu-llama-decode.py
    same=differ
    $PY scripts/gpu-llama-decode.py >"$OUT/decode-plain.out" 2>/dev/null
    a=$(grep -h -o '"tokens": [^]]*]' "$OUT/decode-plain.out"); b=$(grep -h -o '"tokens": [^]]*]' "$OUT/decode-no-fault.out")
    [ -n "$a" ] && [ "$a" = "$b" ] && same=same
    row "decode tokens plain vs --flight" "$same" "$a" "-"
fi

echo
echo "| case | exit | recorded | replay |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
