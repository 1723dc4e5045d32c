"""A Triton kernel that reads far past its input (no mask, an offset from a bad index), for
scripts/gpu-sanitize.sh: an illegal address the flight recorder dumps, minimizes and replays
under compute-sanitizer. Prints 'GPUTAPE_OOB step N' per good step."""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def gather_scaled(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i = tl.load(idx_ptr + offs, mask=mask, other=0)
    v = tl.load(x_ptr + i)
    tl.store(out_ptr + offs, v * 2.0, mask=mask)


def main():
    n = 512
    x = torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")
    bad = int(os.environ.get("GPUTAPE_OOB_STEP", "3"))
    for step in range(6):
        idx = torch.randint(0, n, (n,), device="cuda", dtype=torch.int64)
        if step == bad:
            idx[7] = 1 << 40
        gather_scaled[(triton.cdiv(n, 128),)](x, idx, out, n, BLOCK=128)
        print(f"GPUTAPE_OOB step {step} {float(out.sum()):.3f}", flush=True)


if __name__ == "__main__":
    main()
