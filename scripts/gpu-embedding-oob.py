"""An out-of-range index into torch.nn.functional.embedding, for gputape's driver-level recorder
(scripts/gpu-driver-record.sh, scripts/gpu-driver-flight.sh): the kernel's device-side assert
fires, and PyTorch raises "device-side assert triggered" at the next call that waits. Exits 1
with that error, as a user's program would.

GPUTAPE_OOB_WARMUP=N (default 0) first runs N good steps (an embedding of fresh indices, a
matmul, a read back), so a flight recorder's ring has wrapped before the fault."""

import os

import torch


def main():
    torch.manual_seed(0)
    table = torch.randn(16, 8, device="cuda")
    w = torch.randn(8, 8, device="cuda")
    for step in range(int(os.environ.get("GPUTAPE_OOB_WARMUP", "0"))):
        idx = torch.tensor([step % 16, (step + 5) % 16, 3], device="cuda")
        float((torch.nn.functional.embedding(idx, table) @ w).sum())
    good = torch.nn.functional.embedding(torch.tensor([1, 2, 3], device="cuda"), table)
    print("GPUTAPE_OOB good rows sum", float(good.sum()), flush=True)
    bad = torch.nn.functional.embedding(torch.tensor([1, 2, 99], device="cuda"), table)
    torch.cuda.synchronize()
    print("GPUTAPE_OOB not reached", float(bad.sum()), flush=True)


if __name__ == "__main__":
    main()
