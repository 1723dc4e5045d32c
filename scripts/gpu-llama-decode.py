"""A transformers Llama-shaped decode for gputape's driver-level recorder (scripts/gpu-driver-record.sh):
a LlamaForCausalLM built from a config with random weights (seeded; nothing downloaded), greedy
generation of 4 new tokens from an 8-token prompt, twice to warm up and then GPUTAPE_DECODE_REPS
times (default 20) timed. Prints one line `GPUTAPE_DECODE {json}`: the tokens, a hash of the
logits' bytes (of the last generate), the timed generates' wall times (mean, median, slowest, in
ms) and the allocator setting (PYTORCH_CUDA_ALLOC_CONF)."""

import hashlib
import json
import os
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


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
    times = []
    with torch.no_grad():
        for _ in range(2):
            model.generate(ids, **kw)
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    logits = torch.stack(out.logits).float().cpu()
    print(
        "GPUTAPE_DECODE "
        + json.dumps(
            {
                "tokens": out.sequences[0].tolist(),
                "logits_sha256": hashlib.sha256(logits.numpy().tobytes()).hexdigest(),
                "generate_ms": {
                    "mean": round(statistics.mean(times), 3),
                    "median": round(statistics.median(times), 3),
                    "slowest": round(max(times), 3),
                    "n": reps,
                },
                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default"),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
