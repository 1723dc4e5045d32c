"""A Triton kernel spinning on a flag nobody sets (a hang: the step never ends), for
scripts/gpu-hangs.sh. With GPUTAPE_SPIN_PAIR=1 two processes: A spins on a flag nobody sets,
then would set B's flag; B (given A's flag buffer through CUDA IPC) spins until A sets it. Both
block in torch.cuda.synchronize: A in its own kernel, B waiting for A. Each prints its pid and
'GPUTAPE_SPIN waiting' before it blocks."""

import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def spin_on_flag(flag_ptr, out_ptr):
    v = tl.load(flag_ptr, volatile=True)
    while v == 0:
        v = tl.load(flag_ptr, volatile=True)
    tl.store(out_ptr, v + 1)


@triton.jit
def set_flag(flag_ptr):
    tl.store(flag_ptr, 1)


def warm(x):
    return float((x * 2).sum())


def wait_on(flag, who):
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    print(f"GPUTAPE_SPIN {who} pid {os.getpid()} waiting", flush=True)
    spin_on_flag[(1,)](flag, out)
    torch.cuda.synchronize()
    return out


def single():
    x = torch.ones(4096, device="cuda")
    print("GPUTAPE_SPIN before", warm(x), flush=True)
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    wait_on(flag, "single")
    print("GPUTAPE_SPIN after (never)", flush=True)


def peer(flag_b, ready):
    x = torch.ones(4096, device="cuda")
    warm(x)
    ready.set()
    wait_on(flag_b, "B")


def pair():
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    flag_a = torch.zeros(1, dtype=torch.int32, device="cuda")
    flag_b = torch.zeros(1, dtype=torch.int32, device="cuda")
    ready = ctx.Event()
    p = ctx.Process(target=peer, args=(flag_b, ready))
    p.start()
    ready.wait()
    warm(torch.ones(4096, device="cuda"))
    wait_on(flag_a, "A")
    set_flag[(1,)](flag_b)
    p.join()


if __name__ == "__main__":
    pair() if os.environ.get("GPUTAPE_SPIN_PAIR") == "1" else single()
    sys.exit(0)
