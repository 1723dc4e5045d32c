#!/usr/bin/env python3
"""Where a recorded step's own recorder time goes, from `perf script -F ip,sym` on stdin (a
profile taken with --call-graph dwarf of benches/flight_steps.rs): of the samples inside a
timed step (`Model::step`), those whose innermost gputape frame is the recorder's (not the
backend below it), by innermost recorder frame and by entry point. Meant to compare the
recorder's cost on CUDA with the mock's floor (scripts/gpu-flight-final.sh measures both); the
H200 image has no perf (checked 2026-12-03), so there it needs one carried in. Profile a
binary stripped with --strip-debug at most (symbols kept; inlined frames then fold into
their callers)."""
import collections
import sys

inner, entry = collections.Counter(), collections.Counter()
below = collections.Counter()
total = own = 0
for s in sys.stdin.read().split("\n\n"):
    frames = [l.strip().split(" ", 1)[-1] for l in s.strip().split("\n") if l.strip()]
    if not any("Model::step" in f for f in frames):
        continue
    total += 1
    rec = [i for i, f in enumerate(frames) if "recorder::" in f]
    if not rec:
        continue
    other = [i for i, f in enumerate(frames[: min(rec)]) if "gputape::" in f]
    if other:
        below[frames[min(other)][:100]] += 1
        continue
    own += 1
    inner[frames[min(rec)].replace("gputape::recorder::", "")[:110]] += 1
    entry[frames[max(rec)].replace("gputape::recorder::", "")[:100]] += 1
print(f"samples in steps {total}, in the recorder's own code {own}")
for title, c in (("innermost recorder frame", inner), ("entry point", entry), ("below the recorder (backend)", below)):
    print(f"-- {title}")
    for k, v in c.most_common(25):
        print(v, k)
