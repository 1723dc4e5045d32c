#!/usr/bin/env bash
# The binary as `cargo install` leaves it, on the H200 (issue 52): gputape alone in an empty
# directory (no gputape-shim/ beside it, no target/ above it, no GPUTAPE_* set), HOME pointed at
# an empty directory. `gputape run -o` records scripts/gpu-shim.py through the shim built into
# the binary (written to $HOME/.cache/gputape on first use), and `gputape replay` with no --on
# picks CUDA for the recording's compiled kernels and checks its read backs.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
# The image's Python (whose environment holds torch) by its full path: the wheel's venv goes
# first on PATH below, and a bare python3 would then be the venv's, which has no torch.
PY=$(command -v "${PYTHON:-python3}")
OUT=${OUT:-/tmp/gt-install}
rm -rf "$OUT"; mkdir -p "$OUT/bin" "$OUT/home"
cp "$B/gputape" "$OUT/bin/gputape"; chmod +x "$OUT/bin/gputape"
echo "python: $($PY --version 2>&1); torch: $($PY -c 'import torch; print(torch.__version__)' 2>&1)"
G="$OUT/bin/gputape"
env -u GPUTAPE_SHIM_DIR HOME="$OUT/home" "$G" info 2>&1 | head -12
env -u GPUTAPE_SHIM_DIR HOME="$OUT/home" "$G" run -o "$OUT/t.gtape" -- $PY scripts/gpu-shim.py "$OUT/out.pt" \
    >"$OUT/run.out" 2>"$OUT/run.err"
echo "run exit $?"
grep -E 'GPUTAPE_SHIM_RESULT' "$OUT/run.out" | cut -c1-400
grep -E '^recorded|gputape' "$OUT/run.err" | cut -c1-300 | head -5
ls -la "$OUT/home/.cache/gputape"/* 2>&1 | head -4
HOME="$OUT/home" "$G" replay "$OUT/t.gtape" >"$OUT/replay.out" 2>"$OUT/replay.err"
echo "replay (no --on) exit $?"
head -6 "$OUT/replay.out" | cut -c1-300; head -3 "$OUT/replay.err" | cut -c1-300
# The wheel (scripts/wheel.py) built from the same binary, installed into a fresh virtual
# environment: its `gputape`, first on PATH, records the image's PyTorch program (run by the
# image's Python, whose environment holds torch) and replays it.
echo "=============== the wheel, in a fresh virtual environment"
$PY scripts/wheel.py "$B/gputape" --out "$OUT/dist" || exit 2
rm -rf "$OUT/venv" "$OUT/home2"; mkdir -p "$OUT/home2"
$PY -m venv "$OUT/venv" && "$OUT/venv/bin/pip" install -q --no-index "$OUT"/dist/*.whl
echo "pip exit $?: $(ls "$OUT"/dist)"
V="$OUT/venv/bin"
env -u GPUTAPE_SHIM_DIR HOME="$OUT/home2" PATH="$V:$PATH" gputape info 2>&1 | head -8
env -u GPUTAPE_SHIM_DIR HOME="$OUT/home2" PATH="$V:$PATH" gputape run -o "$OUT/w.gtape" -- $PY scripts/gpu-shim.py "$OUT/out2.pt" \
    >"$OUT/wrun.out" 2>"$OUT/wrun.err"
echo "wheel run exit $?"; grep -E '^recorded' "$OUT/wrun.err" | cut -c1-300; tail -5 "$OUT/wrun.err" | cut -c1-300
HOME="$OUT/home2" PATH="$V:$PATH" gputape replay "$OUT/w.gtape" 2>&1 | head -4 | cut -c1-300
echo "wheel replay exit ${PIPESTATUS[0]}"
