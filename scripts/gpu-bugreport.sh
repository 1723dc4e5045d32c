#!/usr/bin/env bash
# From a dump to a bug report (issue 54), on the H200: five bugs, each recorded, then
#   a. `minimize --sanitize TOOL` (the finding kept, not a driver error: three record none),
#   b. the small trace shown, c. replayed under the tool (text and --json: the finding, its
#   kernel, source line and buffer), d. the whole program run plain and under
#   compute-sanitizer directly (what the minimized replay saves), e. exported as a standalone
#   program, built against libcuda alone, run, and (for the CUDA C++ ones) run under the tool,
#   f. replayed under cuda-gdb (`replay --debug`, batch mode: stdin is no terminal),
#   g. `report --bug` (minimize, sanitizer, program and README in one command).
# The bugs: triton-oob (scripts/gpu-triton-oob.py, a Triton kernel reading far out of bounds)
# and embedding (scripts/gpu-embedding-oob.py, a device-side assert), flight dumps, memcheck;
# scripts/cuda/{uaf,race,uninit}.cu, recorded with -o: a use after free (memcheck), a
# shared-memory race (racecheck), a read of never-written memory (initcheck).
# A step whose input an earlier one did not write is skipped; the script never stops early.
# CASES="uaf race" runs only those. Builds nothing of gputape's (scripts/gpu-bin.sh first).
# OUT gets traces and logs; a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gt-bugreport}
CASES=${CASES:-triton-oob embedding uaf race uninit}
rm -rf "$OUT"; mkdir -p "$OUT"
G="$B/gputape"
chmod +x "$B"/* 2>/dev/null
export PATH="/usr/local/cuda/bin:$PATH"
export GPUTAPE_REQUIRE_GPU=1
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
libcuda=$(ldconfig -p | grep -o '/[^ ]*libcuda\.so\.1$' | head -1)
[ -z "$libcuda" ] && libcuda=$(ls /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 2>/dev/null | head -1)
echo "libcuda: ${libcuda:-none}"
echo "nvcc: $(timeout 20 nvcc --version 2>&1 | tail -1 | cut -c1-120)"
echo "compute-sanitizer: ${CS:-none} $([ -n "$CS" ] && timeout 20 "$CS" --version 2>&1 | tail -1 | cut -c1-120)"
echo "cuda-gdb: $(command -v cuda-gdb || echo none) $(command -v cuda-gdb >/dev/null && timeout 20 cuda-gdb --version 2>&1 | head -1 | cut -c1-120)"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
# step LABEL SECS LOG CMD...: CMD under timeout, stdout and stderr into LOG; sets rc and t (ms)
step() {
    local label=$1 secs=$2 log=$3; shift 3
    local t0=$(date +%s%N)
    timeout "$secs" "$@" >"$log" 2>&1 </dev/null
    rc=$? t=$(ms $t0)
    echo "-- $label: exit $rc in $t ms"
}
last() { tail -"$2" "$1" 2>/dev/null | cut -c1-300; }
# have FILE WHAT: whether FILE exists, else logs that the step is skipped
have() { [ -e "$1" ] && return 0; echo "-- skipped: no $2"; return 1; }
rows=()

bug() { # NAME TOOL KERNEL-PATTERN
    local name=$1 tool=$2 kern=$3 trace="" min="$OUT/$1.min.gtape" dir="$OUT/$1.repro"
    local prog=() c_min="-" c_san="-" c_whole="-" c_repro="-" c_dbg="-"
    echo; echo "=============== $name ($tool)"
    case $name in
    triton-oob | embedding)
        local script=scripts/gpu-triton-oob.py fl="$OUT/fl-oob"
        [ "$name" = embedding ] && script=scripts/gpu-embedding-oob.py fl="$OUT/fl-emb"
        prog=($PY "$script")
        step "run --flight $script" 300 "$OUT/$name.run.log" "$G" run --flight "$fl" -- "${prog[@]}"
        grep -E 'GPUTAPE|^flight|gputape|Error|assert' "$OUT/$name.run.log" | head -6 | cut -c1-300
        # the shim's raw dump (PID.gtshm) or a trace written from it: every verb opens both
        trace=$(ls "$fl"/*.gtape "$fl"/*.gtshm 2>/dev/null | head -1)
        ;;
    *)
        timeout 300 nvcc -O1 -lineinfo -arch=sm_90 -o "$OUT/$name" "scripts/cuda/$name.cu" >"$OUT/$name.nvcc.log" 2>&1
        echo "-- nvcc exit $?"; last "$OUT/$name.nvcc.log" 4
        have "$OUT/$name" "$name built" || { rows+=("| $name | $tool | not built | | | | |"); return; }
        prog=("$OUT/$name")
        step "run -o $name.gtape" 120 "$OUT/$name.run.log" "$G" run -o "$OUT/$name.gtape" -- "${prog[@]}"
        grep -E "^$name:|recorded process" "$OUT/$name.run.log" | head -8 | cut -c1-300
        [ -f "$OUT/$name.gtape" ] && trace="$OUT/$name.gtape"
        ;;
    esac
    echo "trace: ${trace:-none}"

    echo "--- a. minimize --sanitize $tool"
    if [ -n "$trace" ]; then
        step "minimize --sanitize $tool" 400 "$OUT/$name.min.log" \
            "$G" minimize --on cuda --sanitize "$tool" --max-attempts 40 -o "$min" "$trace"
        grep -E '^(fault kept|calls:|[0-9]+ replay)|^minimize: [^a]|rror' "$OUT/$name.min.log" | head -8 | cut -c1-300
        local calls=$(grep -o '^calls: [0-9]* -> [0-9]*' "$OUT/$name.min.log" | head -1 | sed 's/^calls: //')
        c_min="exit $rc, ${calls:-? calls}, $t ms"
    else
        echo "-- skipped: no trace"; c_min="no trace"
    fi

    echo "--- b. show"
    have "$min" "minimized trace" && timeout 60 "$G" show "$min" 2>&1 | head -20 | cut -c1-250

    echo "--- c. replay --sanitize $tool"
    if have "$min" "minimized trace"; then
        step "replay --sanitize $tool" 300 "$OUT/$name.san.log" "$G" replay --on cuda --sanitize "$tool" "$min"
        local src=$rc st=$t
        grep -v WARN "$OUT/$name.san.log" | head -30 | cut -c1-300
        local rep=no n=$(grep -o "compute-sanitizer $tool: [0-9]* finding" "$OUT/$name.san.log" | grep -o '[0-9]*' | head -1)
        grep -q REPRODUCED "$OUT/$name.san.log" && rep=REPRODUCED
        echo "REPRODUCED: $rep"
        timeout 300 "$G" replay --on cuda --sanitize "$tool" --json "$min" >"$OUT/$name.san.json" 2>/dev/null
        echo "--json (exit $?): $(python3 -c "import json,sys
d=json.load(open(sys.argv[1])); s=d.get('sanitizer') or {}; f=(s.get('findings') or [{}])[0]
print('reproduced', s.get('reproduced'), '| what', f.get('what'), '| kernel', f.get('kernel'), '| source', f.get('source'), '| buffer', f.get('buffer'))" "$OUT/$name.san.json" 2>&1 | tail -1 | cut -c1-400)"
        c_san="$rep, ${n:-?} finding(s), exit $src, $st ms"
    fi

    echo "--- d. the whole program, plain and under $tool"
    step "plain" 300 "$OUT/$name.plain.log" "${prog[@]}"
    last "$OUT/$name.plain.log" 2
    local plain=$t
    if [ -n "$CS" ]; then
        step "compute-sanitizer --tool $tool" 500 "$OUT/$name.cs-whole.out" \
            "$CS" --tool "$tool" --target-processes all --log-file "$OUT/$name.cs-whole.log" "${prog[@]}"
        grep -E 'SUMMARY|Invalid __global__|Race reported|Uninitialized|Error:' "$OUT/$name.cs-whole.log" | head -4 | cut -c1-300
        c_whole="$t ms (exit $rc) vs $plain ms"
    else
        echo "-- skipped: no compute-sanitizer"; c_whole="no tool vs $plain ms"
    fi

    echo "--- e. export --program"
    if have "$min" "minimized trace"; then
        step "export --program" 120 "$OUT/$name.export.log" "$G" export --program "$dir" "$min"
        last "$OUT/$name.export.log" 2
        if have "$dir/repro.c" "repro.c"; then
            timeout 120 cc -O1 -o "$dir/repro" "$dir/repro.c" -L"$(dirname "$libcuda")" -l:libcuda.so.1 >"$dir/cc.log" 2>&1
            echo "-- cc exit $? ($(wc -l <"$dir/repro.c") lines, $(du -sh "$dir/data" 2>/dev/null | cut -f1) of data)"
            last "$dir/cc.log" 4
            if have "$dir/repro" "repro built"; then
                step "repro" 120 "$dir/run.log" "$dir/repro"
                last "$dir/run.log" 4
                c_repro="exit $rc"
                case $name in uaf | race | uninit)
                    local pat='Invalid __global__'
                    [ "$tool" = racecheck ] && pat='Race reported'
                    [ "$tool" = initcheck ] && pat='Uninitialized'
                    if [ -n "$CS" ]; then
                        step "repro under compute-sanitizer --tool $tool" 300 "$dir/cs.out" \
                            "$CS" --tool "$tool" --log-file "$dir/cs.log" "$dir/repro"
                        local hit=$(grep -m1 "$pat" "$dir/cs.log" 2>/dev/null | cut -c1-300)
                        echo "finding: ${hit:-none}"
                        grep -E 'SUMMARY' "$dir/cs.log" | head -2 | cut -c1-300
                        [ -n "$hit" ] && c_repro="$c_repro; $pat: yes" || c_repro="$c_repro; $pat: no"
                    fi ;;
                esac
            else
                c_repro="not built"
            fi
        else
            c_repro="export refused"
        fi
    fi

    case $name in uaf)
        # Whether cuda-gdb stops in a kernel here at all: the program itself, no gputape.
        echo "--- f0. cuda-gdb on the program itself (break on launch)"
        step "cuda-gdb ./$name" 120 "$OUT/$name.gdb-direct.log" cuda-gdb -q -batch \
            -ex 'set pagination off' -ex 'set cuda break_on_launch application' -ex run \
            -ex 'info cuda kernels' -ex 'bt 4' -ex 'info cuda devices' --args "${prog[@]}"
        grep -v '^\[' "$OUT/$name.gdb-direct.log" | tail -25 | cut -c1-250 ;;
    esac
    case $name in triton-oob | embedding | uaf)
        echo "--- f. replay --debug"
        if have "$min" "minimized trace"; then
            step "replay --debug" 300 "$OUT/$name.debug.log" "$G" replay --on cuda --debug "$min"
            last "$OUT/$name.debug.log" 40
            local k=$(grep -c -i -E "$kern" "$OUT/$name.debug.log")
            echo "lines naming /$kern/: $k"
            [ "$k" -gt 0 ] && c_dbg="yes (exit $rc)" || c_dbg="no (exit $rc)"
        fi ;;
    esac

    case $name in triton-oob | race)
        echo "--- g. report --bug"
        if [ -n "$trace" ]; then
            step "report --bug" 600 "$OUT/$name.report.log" "$G" report --bug "$OUT/$name.bug" "$trace"
            last "$OUT/$name.report.log" 6
            ls -la "$OUT/$name.bug" 2>&1 | cut -c1-200
            have "$OUT/$name.bug/README.md" "README.md" && head -40 "$OUT/$name.bug/README.md" | cut -c1-300
        else
            echo "-- skipped: no trace"
        fi ;;
    esac
    rows+=("| $name | $tool | $c_min | $c_san | $c_whole | $c_repro | $c_dbg |")
}

for c in $CASES; do
    case $c in
    triton-oob) bug triton-oob memcheck 'gather_scaled' ;;
    embedding) bug embedding memcheck 'indexSelect|index_select|embedding' ;;
    uaf) bug uaf memcheck 'scale_copy' ;;
    race) bug race racecheck 'neighbor_sum' ;;
    uninit) bug uninit initcheck 'twice' ;;
    *) echo "unknown case $c" ;;
    esac
done

echo
echo "| case | tool | minimize (calls, ms) | replay --sanitize (REPRODUCED?, ms) | whole program under tool (ms) vs plain (ms) | repro program (exit; finding under tool) | --debug stopped in kernel? |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
