#!/usr/bin/env bash
# Build here and put stripped copies of what scripts/gpu-run.sh runs into gpu-bin/ (git-ignored;
# unstripped, the binaries exceed the device tool's 64 MiB carry limit). Binaries are found by
# cargo's own build messages: tests/recorder.rs and benches/recorder.rs both make a
# target/release/deps/recorder-<hash>, so picking by name or time can take the wrong one.
set -euo pipefail
cd "$(dirname "$0")/.."
# Cargo's target directory: CARGO_TARGET_DIR when set (a build beside another), else target/.
T=${CARGO_TARGET_DIR:-target}
exe() { grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep -E "/$1(-[0-9a-f]+)?$" | tail -1; }
cargo build --release --bins --tests
cargo build --release --example outside_engine --example tp_fault
# The CUDA driver shim (`gputape run`): `--lib` makes cargo put it in the release directory itself.
cargo build --release -p gputape-cuda-shim --lib
tests=$(cargo build --release --tests --message-format=json 2>/dev/null | exe gpu)
benches=$(cargo bench --no-run --message-format=json 2>/dev/null)
mkdir -p gpu-bin
rm -rf gpu-bin/*
mkdir -p gpu-bin/gputape-shim
strip -o gpu-bin/gputape "$T"/release/gputape
# Where `gputape run` looks first: gputape-shim/libcuda.so.1 beside the binary (a plain file,
# which the device tool carries; run makes its own libcuda.so links).
strip -o gpu-bin/gputape-shim/libcuda.so.1 "$T"/release/libgputape_cuda_shim.so
strip -o gpu-bin/outside_engine "$T"/release/examples/outside_engine
strip -o gpu-bin/tp-fault "$T"/release/examples/tp_fault
strip -o gpu-bin/gpu-tests "$tests"
strip -o gpu-bin/recorder-bench "$(echo "$benches" | exe recorder)"
strip -o gpu-bin/replay-bench "$(echo "$benches" | exe replay)"
strip -o gpu-bin/scale-bench "$(echo "$benches" | exe scale)"
strip -o gpu-bin/step-bench "$(echo "$benches" | exe step)"
strip -o gpu-bin/flight-steps "$(echo "$benches" | exe flight_steps)"
strip -o gpu-bin/tp-steps "$(echo "$benches" | exe tp_steps)"
ls -l gpu-bin gpu-bin/gputape-shim
