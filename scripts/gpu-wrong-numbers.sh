#!/usr/bin/env bash
# Wrong numbers on the H200: (1) the outside engine's NaN, eager and inside a graph, dumped by
# its flight recorder, and `gputape replay --on cuda` of the dump naming the kernel that wrote
# it (plus `inspect` of its output); (2) the bf16 8B-shaped step scanned with --check-finite,
# timed against a plain replay of the same trace; (3) a 1B-shaped step replayed --on cuda
# --against mock (the kernels against their CPU twins), then against CUDA with one planted
# kernel change (--substitute). Builds nothing: run scripts/gpu-bin.sh first. Everything on
# stdout, a table last. DIR holds the traces and the blob store (the machine's disk).
# SECTIONS="1 2 3 4" (the default) picks which parts run.
set -uo pipefail
B=${B:-gpu-bin}
DIR=${DIR:-/tmp/gt-wrong}
rm -rf "$DIR"; mkdir -p "$DIR"
chmod +x "$B"/* 2>/dev/null
rows=()
row() { rows+=("$(printf '| %s | %s | %s |' "$@")"); }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
SECTIONS=" ${SECTIONS:-1 2 3 4} "
on() { [[ "$SECTIONS" == *" $1 "* ]]; }

on 1 && for mode in eager graph; do
    args=(--fault nan --fault-step 23)
    [ "$mode" = graph ] && args+=(--graph-at 5)
    echo "=== 1. outside engine, NaN at step 23 ($mode): outside_engine run --backend cuda ${args[*]}"
    GPUTAPE_FLIGHT=$DIR/$mode "$B/outside_engine" run --backend cuda --steps 40 "${args[@]}"
    ec=$?
    echo "engine exit $ec"
    dump=$(ls "$DIR/$mode"/*.gtape 2>/dev/null | head -1)
    if [ -z "$dump" ]; then row "NaN ($mode)" "engine exit $ec, no dump" "-"; continue; fi
    echo "--- gputape replay DUMP --on cuda (the dump names a NaN: checked with --check-finite)"
    /usr/bin/time -f "%e s wall" "$B/gputape" replay "$dump" --on cuda | tee "$DIR/$mode-replay.log"
    rc=${PIPESTATUS[0]}
    echo "replay exit $rc"
    seq=$("$B/gputape" replay "$dump" --on cuda --check-finite --json 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["finite"]["first"]["seq"])')
    echo "--- gputape inspect DUMP --on cuda --at $seq --writes"
    "$B/gputape" inspect "$dump" --on cuda --at "${seq:-0}" --writes
    echo "--- the engine's own tool on the mock"
    "$B/outside_engine" replay "$dump" | tail -3
    verdict=$(grep -Eo -- '-> .*' "$DIR/$mode-replay.log" | tail -1)
    writer=$(grep -Eo 'NaN written by call #[0-9]+ [a-z_:]+' "$DIR/$mode-replay.log" | head -1)
    row "NaN ($mode): replay --on cuda, exit $rc" "$writer" "$verdict"
done

if on 2; then
echo "=== 2. bf16 8B-shaped step: plain replay vs --check-finite on CUDA"
"$B/gputape" --blobs "$DIR/blobs" record --backend cuda --hf llama-3-8b --step 3 -o "$DIR/8b.gtape"
echo "record exit $?"
"$B/gputape" --blobs "$DIR/blobs" replay "$DIR/8b.gtape" --on cuda --loop 5 | tee "$DIR/8b-plain.log"
for i in 1 2 3; do
    "$B/gputape" --blobs "$DIR/blobs" replay "$DIR/8b.gtape" --on cuda --check-finite | tee "$DIR/8b-finite-$i.log"
    echo "exit ${PIPESTATUS[0]}"
done
plain=$(grep -Eo 'eager replay: median [0-9.]+ ms' "$DIR/8b-plain.log" | grep -Eo '[0-9.]+ ms')
checks=$(grep -Eoh 'calls and scans [0-9.]+ ms' "$DIR"/8b-finite-*.log | grep -Eo '[0-9.]+' | tr '\n' ' ')
row "8B bf16 step --check-finite" "plain replay median $plain" "check (calls + scans), 3 runs: $checks ms"

fi
if on 3; then
echo "=== 3. bf16 1B-shaped step: --on cuda --against mock, then a planted kernel change"
"$B/gputape" --blobs "$DIR/blobs" record --backend cuda --hf llama-3.2-1b --step 3 -o "$DIR/1b.gtape"
echo "record exit $?"
"$B/gputape" --mock-memory 34359738368 --blobs "$DIR/blobs" replay "$DIR/1b.gtape" --on cuda --against mock | tee "$DIR/1b-mock.log"
rc=${PIPESTATUS[0]}
row "1B step --on cuda --against mock, exit $rc" "$(grep -Eo 'launches replayed on both, [0-9]+ compared' "$DIR/1b-mock.log")" "$(grep -Eo -- '-> .*' "$DIR/1b-mock.log")"
# The planted change: rmsnorm's 1/sqrt becomes the approximate rsqrtf.
cat kernels/model/prelude.cuh kernels/llama/common.cuh kernels/llama/rmsnorm.cu \
    | sed 's|1.0f / sqrtf(total / (float)n + eps)|rsqrtf(total / (float)n + eps)|' >"$DIR/rmsnorm-changed.cu"
grep -c rsqrtf "$DIR/rmsnorm-changed.cu"
"$B/gputape" --blobs "$DIR/blobs" replay "$DIR/1b.gtape" --on cuda --against cuda \
    --substitute "llama_rmsnorm=$DIR/rmsnorm-changed.cu" | tee "$DIR/1b-sub.log"
rc=${PIPESTATUS[0]}
row "1B step, rmsnorm changed (--substitute), exit $rc" "$(grep -Eo 'first difference: call #[0-9]+ [a-z_:0-9]+' "$DIR/1b-sub.log")" "$(grep -Eo 'the largest at element.*' "$DIR/1b-sub.log")"
"$B/gputape" --blobs "$DIR/blobs" replay "$DIR/1b.gtape" --on cuda --against cuda \
    --substitute "llama_rmsnorm=$DIR/rmsnorm-changed.cu" --tolerance rel:1e-3 | tail -2

fi
if on 4; then
echo "=== 4. replay --chaos on CUDA: a consumer stream that forgot to wait for its producer"
"$B/gputape" record --backend cuda --workload missing-event -o "$DIR/race.gtape"; echo "record exit $?"
"$B/gputape" record --backend cuda --workload two-streams -o "$DIR/ok.gtape"; echo "record exit $?"
named=0
for seed in 1 2 3 4 5; do
    "$B/gputape" replay "$DIR/race.gtape" --on cuda --chaos "$seed" | tee "$DIR/race-$seed.log"
    rc=${PIPESTATUS[0]}; echo "exit $rc"
    [ "$rc" = 1 ] && named=$((named + 1))
done
row "missing event, --chaos 1..5 on CUDA" "$named of 5 seeds named a launch" "$(grep -h -- '-> ' "$DIR"/race-*.log | sort | uniq -c | tr '\n' ';')"
"$B/gputape" replay "$DIR/race.gtape" --chaos 1 | tee "$DIR/race-mock.log"
row "missing event, --chaos 1 on the mock (CUDA's recording)" "$(grep -Eo 'cause: missing dependency.*' "$DIR/race-mock.log" | head -1 | cut -c1-90)" "$(grep -Eo -- '-> .*' "$DIR/race-mock.log")"
ok=0
for seed in 1 2 3; do
    "$B/gputape" replay "$DIR/ok.gtape" --on cuda --chaos "$seed" | tail -1
    [ "${PIPESTATUS[0]}" = 0 ] && ok=$((ok + 1))
done
row "two streams joined by an event, --chaos 1..3 on CUDA" "$ok of 3 seeds: no difference" "-"
fi

echo
echo "| what | found | verdict |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
rm -rf "$DIR"
