#!/usr/bin/env bash
# gputape's driver shim on the H200: unmodified programs run under `gputape run --counts`, and
# the same programs run plainly, compared. A small PyTorch script (scripts/gpu-shim.py: matmul,
# elementwise, a reduction, .item()) is the main case: does torch.cuda.is_available() hold under
# the shim, is the result the same (bytes of the output compared), which libcuda files are
# mapped, how many driver calls were counted, how many cuGetProcAddress answers could not be
# mapped to a forwarder (those calls go past the counts: the number to watch). Then gputape's own
# decode demo on cuda (the driver API through cudarc, loaded by name), tokens compared.
# Builds nothing: run scripts/gpu-bin.sh first (it puts gputape and gputape-shim/libcuda.so.1
# into gpu-bin/). Prints everything on stdout (the count tables in full) and a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-gpu-bin}
PY=${PYTHON:-python3}
W=$(mktemp -d)
chmod +x "$B/gputape" 2>/dev/null
rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s | %s | %s |' "$@")"); }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ls -l "$B/gputape" "$B/gputape-shim/libcuda.so.1"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

echo "=== plain: $PY scripts/gpu-shim.py"
$PY scripts/gpu-shim.py "$W/plain.pt" >"$W/plain.out" 2>"$W/plain.err"
pc=$?
cat "$W/plain.out"
tail -5 "$W/plain.err"

echo "=== shim: $B/gputape run --counts $W/torch.json -- $PY scripts/gpu-shim.py"
"$B/gputape" run --counts "$W/torch.json" -- $PY scripts/gpu-shim.py "$W/shim.pt" \
    >"$W/shim.out" 2>"$W/shim.err"
sc=$?
cat "$W/shim.out"
cat "$W/shim.err"

# One summary line per run, from the result lines, the saved tensors and the counts.
summary() { # label, exit, out file, counts json or "", tensor
    $PY - "$@" <<'EOF'
import json, os, sys
label, code, out, counts, tensor = sys.argv[1:6]
r = {}
for line in open(out):
    if line.startswith("GPUTAPE_SHIM_RESULT "):
        r = json.loads(line.split(" ", 1)[1])
calls = entry = tables = unmapped = "-"
if counts and os.path.exists(counts):
    c = json.load(open(counts))
    calls = sum(c["calls"].values()); entry = len(c["calls"])
    tables = sum(c["export_tables"].values())
    unmapped = sum(c["unmapped_proc_addresses"].values())
maps = ", ".join(os.path.basename(os.path.dirname(p)) + "/" + os.path.basename(p)
                 for p in r.get("libcuda_mapped", []))
print(f"| {label} | exit {code} | {r.get('cuda_available')} | {r.get('result')} "
      f"| {maps or '-'} | {calls} calls, {entry} entry points, {tables} export-table fetches, "
      f"{unmapped} unmapped answers |")
EOF
}
t1=$(summary "torch plain" $pc "$W/plain.out" "" "$W/plain.pt")
t2=$(summary "torch under gputape run" $sc "$W/shim.out" "$W/torch.json" "$W/shim.pt")
same=$($PY - "$W" <<'EOF'
import os, sys, torch
w = sys.argv[1]
p, s = f"{w}/plain.pt", f"{w}/shim.pt"
if not (os.path.exists(p) and os.path.exists(s)):
    print("no output to compare")
else:
    a, b = torch.load(p), torch.load(s)
    print("identical bytes" if torch.equal(a, b) else f"DIFFER: max |a-b| = {(a - b).abs().max().item()}")
EOF
)
echo "torch output, plain vs shim: $same"
echo "the export tables and unmapped answers, as counted:"
$PY -c 'import json,sys; c=json.load(open(sys.argv[1])); print(json.dumps({k: c[k] for k in ("export_tables","unmapped_proc_addresses","drivers","processes")}, indent=1))' "$W/torch.json" 2>&1 | head -60

echo "=== demo: $B/gputape demo --backend cuda --config tiny --steps 16, plain and under gputape run"
"$B/gputape" demo --backend cuda --config tiny --steps 16 >"$W/demo-plain.out" 2>&1
dp=$?
"$B/gputape" run --counts "$W/demo.json" -- "$B/gputape" demo --backend cuda --config tiny --steps 16 \
    >"$W/demo-shim.out" 2>"$W/demo-shim.err"
ds=$?
tail -4 "$W/demo-plain.out"
tail -4 "$W/demo-shim.out"
cat "$W/demo-shim.err"
tok() { awk '/^step/ {print $4} /^generated/ {print}' "$1" | md5sum | cut -c1-8; }
demo_calls=$($PY -c 'import json,sys; c=json.load(open(sys.argv[1])); print(sum(c["calls"].values()), "calls,", c["calls"].get("cuLaunchKernel", 0), "cuLaunchKernel,", sum(c["unmapped_proc_addresses"].values()), "unmapped")' "$W/demo.json" 2>&1)
if ! grep -q '^generated' "$W/demo-plain.out" || ! grep -q '^generated' "$W/demo-shim.out"; then
    dsame="no tokens to compare"
elif [ "$(tok "$W/demo-plain.out")" = "$(tok "$W/demo-shim.out")" ]; then
    dsame="same tokens"
else
    dsame="TOKENS DIFFER"
fi

echo
echo "| run | exit | cuda available | result | libcuda mapped | counted |"
echo "|---|---|---|---|---|---|"
echo "$t1"
echo "$t2"
row "torch: plain vs shim" "-" "-" "$same" "-" "-"
row "gputape demo cuda tiny, plain" "exit $dp" "-" "-" "-" "-"
row "gputape demo cuda tiny, under gputape run" "exit $ds" "-" "$dsame" "-" "$demo_calls"
printf '%s\n' "${rows[@]}"
rm -rf "$W"
