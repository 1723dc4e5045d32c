"""`gputape inspect` of a tensor a compiled kernel wrote, against the values PyTorch printed
(issue 51's "any tensor at any call"; scripts/gpu-nan.sh runs it on the decode).

  python3 scripts/gpu-inspect-check.py GPUTAPE TRACE PROGRAM_OUT OUTDIR

PROGRAM_OUT holds `GPUTAPE_NAN {json}` with `logits8`, the 8 values PyTorch read back. The
read back is the trace's first device-to-host copy of 8 elements; the launch that wrote those
bytes is found in the write extents stored beside the trace (`replay --write-extents` ran
first); `inspect --at LAUNCH --writes -o OUTDIR/written.npy --json` writes each tensor that
launch wrote; numpy reads the one holding the read back's bytes and compares the 8 values."""

import glob
import json
import os
import re
import subprocess
import sys

import numpy as np

gputape, trace, program_out, outdir = sys.argv[1:5]
want = None
for line in open(program_out):
    if line.startswith("GPUTAPE_NAN "):
        want = json.loads(line[len("GPUTAPE_NAN "):])["logits8"]
if want is None:
    sys.exit("the program printed no logits8")

shown = subprocess.run([gputape, "show", trace], capture_output=True, text=True).stdout
copy = None
for line in shown.splitlines():
    m = re.match(r"#(\d+)\s+t\d+ copy_d2h(?:_async)?\(buf(\d+)\+(\d+), (\d+) bytes", line)
    if m and int(m.group(4)) in (16, 32):
        copy = tuple(int(g) for g in m.groups())
        break
if copy is None:
    sys.exit("no device-to-host copy of 8 elements in the trace")
seq, buf, off, nbytes = copy
print(f"read back: call #{seq} copies buf{buf}+{off}, {nbytes} bytes")

writes = json.load(open(trace + ".writes.json"))
writer = None
for launch in writes["launches"]:
    if launch["seq"] >= seq:
        continue
    for p in launch["pointers"]:
        if p["buf"] == buf and any(a <= off and off + nbytes <= b for a, b in p["ranges"]):
            writer = (launch["seq"], launch["kernel"])
if writer is None:
    sys.exit(f"no measured launch before #{seq} wrote buf{buf}+{off}")
print(f"written by: #{writer[0]} {writer[1][:120]}")

os.makedirs(outdir, exist_ok=True)
for old in glob.glob(os.path.join(outdir, "written*.npy")):
    os.remove(old)
res = subprocess.run(
    [gputape, "inspect", trace, "--at", str(writer[0]), "--writes", "--on", "cuda", "--json",
     "-o", os.path.join(outdir, "written.npy")],
    capture_output=True, text=True)
print(res.stderr.strip())
if res.returncode != 0:
    sys.exit(f"inspect failed: exit {res.returncode}")
summary = json.loads(res.stdout)
for b in summary["buffers"]:
    print(f"  {b['range']}: {b['elements']} {b['dtype']} (from {b['dtype_from']}); nan {b['nan']}")
for b in summary["buffers"]:
    m = re.match(r"buf(\d+)(?:\+(\d+)\.\.\+(\d+))?$", b["range"])
    if not m or int(m.group(1)) != buf:
        continue
    start = int(m.group(2) or 0)
    end = int(m.group(3)) if m.group(3) else None
    if not (start <= off and (end is None or off + nbytes <= end)):
        continue
    files = sorted(glob.glob(os.path.join(outdir, "written*.npy")))
    name = "written.npy" if len(summary["buffers"]) == 1 else None
    path = os.path.join(outdir, name) if name else next(
        f for f in files if b["range"].replace("..", "-") in f)
    arr = np.load(path)
    size = 4 if b["dtype"] == "f32" else 2
    i = (off - start) // size
    got = arr.reshape(-1)[i:i + 8].astype(np.float64).tolist()
    same = got == [float(x) for x in want]
    print(f"numpy reads {os.path.basename(path)}[{i}:{i + 8}] = {got}")
    print(f"PyTorch printed                = {want}")
    print("INSPECT MATCH" if same else "INSPECT DIFFER")
    sys.exit(0 if same else 1)
sys.exit("no tensor inspect wrote holds the read back's bytes")
