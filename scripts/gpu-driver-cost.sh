#!/usr/bin/env bash
# What the driver-level recorder costs a PyTorch decode on the H200: scripts/gpu-llama-decode.py
# (GPUTAPE_DECODE_REPS timed generates of 4 tokens per process) run plain, under `gputape run`
# (the shim counting and forwarding), under `gputape run --flight` (the flight recorder: records
# kept in memory, nothing written without a fault) and under `gputape run -o` (recording to
# disk), interleaved, ROUNDS
# times each: processes vary more between themselves than the recorder costs, so each mode gets
# several processes and the table compares the medians of their medians. Processes are bimodal
# (a process's median generate is about 20 ms or about 30 ms, whatever the mode: runs 81 and 83,
# pinned to CPUs or not), so these ratios resolve little; the in-process comparison after them
# does: the same process's generates alternate between the recording paused and running.
# CPUS pins every process to those CPUs (taskset). Builds nothing: run scripts/gpu-bin.sh
# first. Prints each process's numbers, then the tables.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-drv-cost}
ROUNDS=${ROUNDS:-4}
export GPUTAPE_DECODE_REPS=${GPUTAPE_DECODE_REPS:-30}
mkdir -p "$OUT"
G="$B/gputape"
PIN=()
[ -n "${CPUS:-}" ] && command -v taskset >/dev/null && PIN=(taskset -c "$CPUS")
for r in $(seq 1 "$ROUNDS"); do
    for mode in plain shim flight recorded; do
        case $mode in
            plain) cmd=($PY scripts/gpu-llama-decode.py) ;;
            shim) cmd=("$G" run -- $PY scripts/gpu-llama-decode.py) ;;
            flight) cmd=("$G" run --flight "$OUT/flight" -- $PY scripts/gpu-llama-decode.py) ;;
            recorded) cmd=("$G" run -o "$OUT/cost.gtape" -- $PY scripts/gpu-llama-decode.py) ;;
        esac
        "${PIN[@]}" "${cmd[@]}" >"$OUT/$mode.$r.out" 2>"$OUT/$mode.$r.err"
        echo "round $r $mode exit $?: $(grep -h -o '"generate_ms": {[^}]*}' "$OUT/$mode.$r.out")"
        rm -f "$OUT/cost.gtape"
    done
done
# Inside one process: the timed generates alternate between the recording paused and running
# (GPUTAPE_DECODE_TOGGLE=1), for --flight and for -o; INPROC processes each. Each process also
# says how long its threads spent in the recorder's own code (GPUTAPE_SHIM_SELFTIME=1; SELFTIME=0
# leaves that out, and what measuring it costs each record with it).
for r in $(seq 1 "${INPROC:-3}"); do
    for mode in flight recorded; do
        case $mode in
            flight) cmd=("$G" run --flight "$OUT/flight" -- $PY scripts/gpu-llama-decode.py) ;;
            recorded) cmd=("$G" run -o "$OUT/cost.gtape" -- $PY scripts/gpu-llama-decode.py) ;;
        esac
        GPUTAPE_SHIM_SELFTIME=${SELFTIME:-1} GPUTAPE_DECODE_TOGGLE=1 "${PIN[@]}" "${cmd[@]}" >"$OUT/toggle-$mode.$r.out" 2>"$OUT/toggle-$mode.$r.err"
        echo "in-process round $r $mode exit $?: $(grep -h -o '"paused_ms": {[^}]*}, "recording_ms": {[^}]*}.*' "$OUT/toggle-$mode.$r.out")"
        grep -h "recorder self time" "$OUT/toggle-$mode.$r.err"
        rm -f "$OUT/cost.gtape"
    done
done
$PY - "$OUT" "$ROUNDS" "${INPROC:-3}" <<'PYEOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def ms(mode, r):
    for line in open(f"{out}/{mode}.{r}.out"):
        if line.startswith("GPUTAPE_DECODE "):
            return json.loads(line.split(" ", 1)[1])["generate_ms"]
rows = {}
for mode in ("plain", "shim", "flight", "recorded") if rounds else ():
    got = [m for m in (ms(mode, r) for r in range(1, rounds + 1)) if m]
    rows[mode] = {
        "median": statistics.median(g["median"] for g in got),
        "mean": statistics.median(g["mean"] for g in got),
        "slowest": max(g["slowest"] for g in got),
        "n": len(got),
    }
p = rows.get("plain")
if p: print("\n| mode | processes | median of medians, ms | median of means, ms | slowest, ms | / plain (median, mean) |")
if p: print("|---|---|---|---|---|---|")
for mode, r in rows.items():
    print(f"| {mode} | {r['n']} | {r['median']:.3f} | {r['mean']:.3f} | {r['slowest']:.3f} | "
          f"{r['median']/p['median']:.3f}x, {r['mean']/p['mean']:.3f}x |")
inproc = int(sys.argv[3])
print("\nInside one process (timed generates alternating paused / recording):")
print("| mode | process | paused median / mean, ms | recording median / mean, ms | recording / paused (median, mean) | page faults per generate, paused / recording | recorder's own time per recording generate, ms (records) |")
print("|---|---|---|---|---|---|---|")
for mode in ("flight", "recorded"):
    for r in range(1, inproc + 1):
        try:
            for line in open(f"{out}/toggle-{mode}.{r}.out"):
                if line.startswith("GPUTAPE_DECODE "):
                    d = json.loads(line.split(" ", 1)[1])
            p, q = d["paused_ms"], d["recording_ms"]
            print(f"| {mode} | {r} | {p['median']:.3f} / {p['mean']:.3f} | {q['median']:.3f} / {q['mean']:.3f} | "
                  f"{q['median']/p['median']:.3f}x, {q['mean']/p['mean']:.3f}x | "
                  f"{d.get('paused_minflt', '-')} / {d.get('recording_minflt', '-')} | "
                  f"{d.get('recording_self_ms', '-')} ({d.get('recording_records', '-')}) |")
        except Exception as e:
            print(f"| {mode} | {r} | missing: {e} | | | | |")
PYEOF
