#!/usr/bin/env bash
# The driver shim's cost per launch on this machine, no GPU needed: the fake driver of the
# shim's tests and crates/gputape-cuda-shim/tests/support/c/launch_cost.c, run under
# `gputape run --flight` and `gputape run -o`, REPS processes each; each prints the median ns
# per launch with the recording paused and running in the same process, and the page faults
# its thread took per launch. Builds the release binaries first (cargo), then C with cc.
# Arguments go to launch_cost: ROUNDS N PARAM_BYTES THRASH_KB. With THRASH_KB (say 256) the
# program runs code and touches memory of its own before each launch, as PyTorch does for tens
# of microseconds, and the recording's cost per launch comes near the H200's (+350 to +950 ns
# here, against +200 to +320 without; 567-750 ns on the H200 under PyTorch, run 91); under
# `valgrind --tool=cachegrind --trace-children=yes` the shim's misses per recorded launch then
# count the lines of code (about 60-80) and data a record touches.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
W=${W:-/tmp/gt-shim-cost}
cargo build --release --bin gputape -q
cargo build --release -p gputape-cuda-shim --lib -q
C=crates/gputape-cuda-shim/tests/support/c
mkdir -p "$W"
cc -shared -fPIC -O1 -Wl,-Bsymbolic -o "$W/libfakecuda.so" "$C/fake_libcuda.c"
ln -sf "$PWD/target/release/libgputape_cuda_shim.so" "$W/libcuda.so"
cc -O2 -o "$W/launch_cost" "$C/launch_cost.c" -L"$W" -lcuda
rm -f "$W/libcuda.so"
export GPUTAPE_REAL_LIBCUDA="$W/libfakecuda.so"
for r in $(seq 1 "$REPS"); do
    for mode in flight recorded; do
        case $mode in
            flight) args=(--flight "$W/flight") ;;
            recorded) args=(-o "$W/cost.gtape") ;;
        esac
        echo "$mode $r: $(target/release/gputape run "${args[@]}" -- "$W/launch_cost" "$@" 2>/dev/null | grep '^paused')"
        rm -f "$W/cost.gtape"
    done
done
