"""A transformers Llama-shaped decode for gputape's driver-level recorder (scripts/gpu-driver-record.sh):
a LlamaForCausalLM built from a config with random weights (seeded; nothing downloaded), greedy
generation of 4 new tokens from an 8-token prompt, twice to warm up and then GPUTAPE_DECODE_REPS
times (default 20) timed. Prints one line `GPUTAPE_DECODE {json}`: the tokens, a hash of the
logits' bytes (of the last generate), the timed generates' wall times (mean, median, slowest, in
ms) and the allocator setting (PYTORCH_CUDA_ALLOC_CONF).

GPUTAPE_DECODE_TOGGLE=1 under `gputape run --flight` or `-o`: the timed generates alternate
between gputape's recording paused and running (gputape_shim_pause, exported by the shim), and
the line also holds `paused_ms` and `recording_ms`: the recorder's cost inside one process,
where a process's own speed, which varies more between processes than the recorder costs,
is the same for both. `paused_minflt` and `recording_minflt` are the median page faults the
generating thread took per generate (the recorder's fresh memory shows there). With
GPUTAPE_SHIM_SELFTIME=1 too, `recording_self_ms` and `recording_records` are the median time the
recorder's own code took per recording generate, and its records (gputape_shim_selftime).
GPUTAPE_DECODE_TOGGLE=lines: the generates alternate between the recording's Python lines off
and on (gputape_shim_lines), `lines_off_ms` and `lines_on_ms`: what reading the program's frames
at each call costs, inside one process."""

import hashlib
import json
import os
import resource
import statistics
import time

import ctypes

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def shim_toggle():
    """(switch(off), (name off, name on)) from the libcuda.so.1 this process loaded, per
    GPUTAPE_DECODE_TOGGLE (1: recording paused / running; lines: lines off / on), or None."""
    mode = os.environ.get("GPUTAPE_DECODE_TOGGLE")
    name = {"1": "gputape_shim_pause", "lines": "gputape_shim_lines"}.get(mode)
    if name is None:
        return None
    try:
        f = getattr(ctypes.CDLL("libcuda.so.1"), name)
    except (OSError, AttributeError):
        return None
    if mode == "1":
        return (lambda off: f(1 if off else 0)), ("paused", "recording")
    return (lambda off: f(0 if off else 1)), ("lines_off", "lines_on")


def shim_selftime():
    """A reader of the shim's running self-time totals (ns, records), or None."""
    if os.environ.get("GPUTAPE_SHIM_SELFTIME") != "1" or os.environ.get("GPUTAPE_DECODE_TOGGLE") != "1":
        return None
    try:
        f = ctypes.CDLL("libcuda.so.1").gputape_shim_selftime
    except (OSError, AttributeError):
        return None

    def read():
        ns, n = ctypes.c_uint64(0), ctypes.c_uint64(0)
        f(ctypes.byref(ns), ctypes.byref(n))
        return ns.value, n.value

    return read


def summary(times):
    return {
        "mean": round(statistics.mean(times), 3),
        "median": round(statistics.median(times), 3),
        "slowest": round(max(times), 3),
        "n": len(times),
    }


def main():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=2048,
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(cfg).to("cuda").eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 8), device="cuda")
    kw = dict(max_new_tokens=4, do_sample=False, return_dict_in_generate=True, output_logits=True)
    reps = int(os.environ.get("GPUTAPE_DECODE_REPS", "20"))
    toggle = shim_toggle()
    pause, (off_name, on_name) = toggle if toggle else (None, ("paused", "recording"))
    times, by_mode = [], {f"{off_name}_ms": [], f"{on_name}_ms": []}
    faults = {f"{off_name}_minflt": [], f"{on_name}_minflt": []}
    selftime = shim_selftime()
    own = {"recording_self_ms": [], "recording_records": []}
    with torch.no_grad():
        for _ in range(2):
            model.generate(ids, **kw)
        for i in range(reps):
            paused = pause is not None and i % 2 == 0
            if pause is not None:
                pause(paused)
            torch.cuda.synchronize()
            f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            s0 = selftime() if selftime else None
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            f1 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            if s0 is not None and not paused:
                s1 = selftime()
                own["recording_self_ms"].append((s1[0] - s0[0]) / 1e6)
                own["recording_records"].append(s1[1] - s0[1])
            if pause is not None:
                by_mode[f"{off_name if paused else on_name}_ms"].append(times[-1])
                faults[f"{off_name if paused else on_name}_minflt"].append(f1 - f0)
        if pause is not None:
            pause(False)
    logits = torch.stack(out.logits).float().cpu()
    print(
        "GPUTAPE_DECODE "
        + json.dumps(
            {
                "tokens": out.sequences[0].tolist(),
                "logits_sha256": hashlib.sha256(logits.numpy().tobytes()).hexdigest(),
                "generate_ms": summary(times),
                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default"),
                **{k: summary(v) for k, v in by_mode.items() if v},
                **{k: statistics.median(v) for k, v in faults.items() if v},
                **{k: round(statistics.median(v), 4) for k, v in own.items() if v},
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
