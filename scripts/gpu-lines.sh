#!/usr/bin/env bash
# The user's Python line on every recorded call (issue 50), on the H200 with PyTorch:
#   1. faults: scripts/gpu-lines.py eager-assert and graph-assert, scripts/gpu-triton-oob.py,
#      each under `gputape run --flight`, the dump replayed with `replay --on cuda`: the verdict
#      names the kernel and the program's line (the capture line for the graph's node);
#   2. backward: scripts/gpu-lines.py backward under `-o`: the launches from autograd's thread
#      say they have no Python frame, the forward's carry their lines;
#   3. decode: scripts/gpu-llama-decode.py under `-o`: how many calls carry a line, the sites;
#   4. cost: the decode under --flight and -o, its timed generates alternating between lines
#      off and on inside one process (GPUTAPE_DECODE_TOGGLE=lines), INPROC processes each.
#   5. fixtures: the fault dumps cut to share (`trim --drop-images`) into FIXTURES.
# SECTIONS (default "faults backward decode cost") picks some. Builds nothing (scripts/gpu-bin.sh
# first). OUT gets dumps, traces and logs; a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-lines}
mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$G" 2>/dev/null
export GPUTAPE_REQUIRE_GPU=1
rows=()
row() { rows+=("$(printf '| %s | %s | %s |' "$@")"); }
$PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
SECTIONS=${SECTIONS:-faults backward decode cost}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }

# fault NAME SCRIPT ARGS...: under --flight, the dump replayed on CUDA.
fault() {
    local name=$1; shift
    echo; echo "=============== $name: gputape run --flight $OUT/$name -- $*"
    rm -rf "$OUT/$name"
    "$G" run --flight "$OUT/$name" -- $PY "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    echo "exit $?"; grep -h GPUTAPE_LINES "$OUT/$name.out"
    grep -E 'flight:|dump' "$OUT/$name.err" | cut -c1-300 | head -4
    local dump; dump=$(ls "$OUT/$name"/*.gtape 2>/dev/null | head -1)
    [ -z "$dump" ] && { row "$name" "no dump" "-"; return; }
    "$G" show --stacks "$dump" >"$OUT/$name.show" 2>&1
    echo "--- the dump's last calls, with their stacks"; grep -B1 -A6 -E ' ERR|never returned' "$OUT/$name.show" | cut -c1-220 | head -30
    echo "--- replay --on cuda"
    timeout 300 "$G" replay --on cuda "$dump" >"$OUT/$name.replay" 2>&1
    local rc=$?
    cut -c1-300 "$OUT/$name.replay" | head -30; echo "replay exit $rc"
    row "$name" "replay exit $rc" "$(grep -h -E 'REPRODUCED|fault at|raised' "$OUT/$name.replay" | head -2 | tr '\n' ' ' | cut -c1-260); lines named: $(grep -h -o -E '(gpu-lines|gpu-triton-oob)\.py:[0-9]+:[0-9]+ in [A-Za-z_.<>]+' "$OUT/$name.replay" | sort -u | tr '\n' ' ')"
}

if want faults; then
    fault eager-assert scripts/gpu-lines.py eager-assert
    fault graph-assert scripts/gpu-lines.py graph-assert
    fault triton-oob scripts/gpu-triton-oob.py
fi

# fixtures: the fault dumps, cut to share (module images left out: NVIDIA's kernels are not
# ours to ship), into $FIXTURES for traces/.
if want fixtures; then
    mkdir -p "${FIXTURES:=$OUT/fixtures}"
    for name in eager-assert graph-assert triton-oob; do
        dump=$(ls "$OUT/$name"/*.gtape 2>/dev/null | head -1)
        [ -z "$dump" ] && continue
        "$G" trim "$dump" --range 0.. --drop-images -o "$FIXTURES/h200_py_${name//-/_}.gtape"
    done
    ls -l "$FIXTURES"
fi

if want backward; then
    echo; echo "=============== backward: gputape run -o $OUT/backward.gtape"
    "$G" run -o "$OUT/backward.gtape" -- $PY scripts/gpu-lines.py backward >"$OUT/backward.out" 2>"$OUT/backward.err"
    echo "exit $?"; cat "$OUT/backward.out"
    "$G" show --stacks --kind launch "$OUT/backward.gtape" >"$OUT/backward.show" 2>&1
    head -60 "$OUT/backward.show" | cut -c1-220
    nopy=$(grep -c '@ <no Python frame>' "$OUT/backward.show"); withpy=$(grep -c '@ .*gpu-lines.py:' "$OUT/backward.show")
    row backward "launches: $withpy from gpu-lines.py, $nopy with no Python frame" "$(grep -h -o -E 't[0-9]+ launch [^<]*' "$OUT/backward.show" | awk '{print $1}' | sort | uniq -c | tr '\n' ' ')"
fi

if want decode; then
    echo; echo "=============== decode: gputape run -o $OUT/decode.gtape"
    "$G" run -o "$OUT/decode.gtape" -- $PY scripts/gpu-llama-decode.py >"$OUT/decode.out" 2>"$OUT/decode.err"
    echo "exit $?"; grep -h -o 'recorded process.*' "$OUT/decode.err" | cut -c1-300
    "$G" show --json "$OUT/decode.gtape" >"$OUT/decode.json" 2>/dev/null
    $PY - "$OUT/decode.json" <<'PYEOF'
import collections, json, sys
calls = json.load(open(sys.argv[1]))["calls"]
sites = collections.Counter(c["site"] for c in calls)
lined = sum(n for s, n in sites.items() if not s.startswith("<"))
print(f"{len(calls)} calls: {lined} with a Python line, {len(calls) - lined} without "
      f"({', '.join(f'{s} x{n}' for s, n in sites.items() if s.startswith('<'))})")
print("most frequent sites:")
for s, n in sites.most_common(12):
    print(f"  {n:6}  {s}")
launch = next((c for c in calls if c["kind"] == "launch" and c.get("stack")), None)
if launch:
    print("a launch's stack:", launch["call"][:100])
    for i, f in enumerate(launch["stack"]["frames"]):
        mark = ">" if i == launch["stack"]["user"] else " "
        print(f"  {mark} {f['file']}:{f['line']}:{f['col']} in {f['function']}")
PYEOF
    "$G" show --summary "$OUT/decode.gtape" | sed -n '/allocations by site/,/launches by kernel/p' | head -12 | cut -c1-200
fi

if want cost; then
    echo; echo "=============== cost: lines off / on alternating inside one process"
    for r in $(seq 1 "${INPROC:-3}"); do
        for mode in flight recorded; do
            case $mode in
                flight) cmd=("$G" run --flight "$OUT/flight-cost" -- $PY scripts/gpu-llama-decode.py) ;;
                recorded) cmd=("$G" run -o "$OUT/cost.gtape" -- $PY scripts/gpu-llama-decode.py) ;;
            esac
            GPUTAPE_DECODE_REPS=${REPS:-60} GPUTAPE_DECODE_TOGGLE=lines "${cmd[@]}" >"$OUT/cost-$mode.$r.out" 2>"$OUT/cost-$mode.$r.err"
            echo "round $r $mode exit $?: $(grep -h -o '"lines_off_ms": {[^}]*}, "lines_on_ms": {[^}]*}' "$OUT/cost-$mode.$r.out")"
            rm -f "$OUT/cost.gtape"
        done
    done
    $PY - "$OUT" "${INPROC:-3}" <<'PYEOF'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
print("\n| mode | process | lines off median / mean, ms | lines on median / mean, ms | on / off (median, mean) |")
print("|---|---|---|---|---|")
for mode in ("flight", "recorded"):
    for r in range(1, n + 1):
        for line in open(f"{out}/cost-{mode}.{r}.out"):
            if line.startswith("GPUTAPE_DECODE "):
                d = json.loads(line.split(" ", 1)[1])
                a, b = d.get("lines_off_ms"), d.get("lines_on_ms")
                if a and b:
                    print(f"| {mode} | {r} | {a['median']:.3f} / {a['mean']:.3f} | {b['median']:.3f} / {b['mean']:.3f} | "
                          f"{b['median']/a['median']:.3f}x, {b['mean']/a['mean']:.3f}x |")
PYEOF
fi

echo
echo "| case | result | detail |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
