#!/usr/bin/env python3
"""Where a recorded step's own recorder time goes, from `perf script -F ip,sym` on stdin (a
profile taken with --call-graph dwarf of benches/flight_steps.rs; scripts/gpu-profile-recorder.sh
takes one on the H200 with a carried perf): of the samples inside a timed step (`Model::step`),
those whose innermost gputape frame is the recorder's (not the backend below it), by innermost
recorder frame and by entry point; then the backend's own functions, in plain steps against
flight steps (a sample is a flight step's when a recorder frame is on its stack), which is how
run 94 found the staging ring's scan in `copy_h2d_async`. Meant to compare the recorder's cost
on CUDA with the mock's floor. Profile a binary stripped with --strip-debug at most (symbols
kept; inlined frames then fold into their callers).

  perf-recorder-own.py [--under PATTERN] < script
     --under: also the stacks below the innermost frame matching PATTERN, three frames deep
"""
import collections
import sys

under = sys.argv[sys.argv.index("--under") + 1] if "--under" in sys.argv else None
inner, entry = collections.Counter(), collections.Counter()
below = {True: collections.Counter(), False: collections.Counter()}
paths = collections.Counter()
total = own = 0
for s in sys.stdin.read().split("\n\n"):
    frames = [l.strip().split(" ", 1)[-1] for l in s.strip().split("\n") if l.strip()]
    if not any("Model::step" in f for f in frames):
        continue
    total += 1
    if under:
        at = [i for i, f in enumerate(frames) if under in f]
        if at:
            i = min(at)
            paths[" <- ".join(f[:60] for f in frames[max(0, i - 3):i][::-1])] += 1
    rec = [i for i, f in enumerate(frames) if "recorder::" in f]
    flight = any("RecordingBackend" in f for f in frames)
    other = [i for i, f in enumerate(frames[: min(rec) if rec else len(frames)]) if "gputape::" in f]
    # The backend's frames only: a sample in the engine's own code has no recorder frame
    # whichever step it is in, so it cannot be told apart.
    if other and ("gputape::cuda::" in frames[min(other)] or "gputape::mock::" in frames[min(other)]):
        below[flight][frames[min(other)][:100]] += 1
    if not rec or other:
        continue
    own += 1
    inner[frames[min(rec)].replace("gputape::recorder::", "")[:110]] += 1
    entry[frames[max(rec)].replace("gputape::recorder::", "")[:100]] += 1
print(f"samples in steps {total}, in the recorder's own code {own}")
for title, c in (("innermost recorder frame", inner), ("entry point", entry)):
    print(f"-- {title}")
    for k, v in c.most_common(25):
        print(v, k)
print("-- below the recorder: samples in plain steps, in flight steps, innermost gputape frame")
keys = sorted(set(below[True]) | set(below[False]), key=lambda k: -(below[True][k] + below[False][k]))
for k in keys[:20]:
    print(f"{below[False][k]:6d} {below[True][k]:6d} {k}")
if under:
    print(f"-- below {under}")
    for k, v in paths.most_common(20):
        print(v, k)
