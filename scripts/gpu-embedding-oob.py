"""An out-of-range index into torch.nn.functional.embedding, for gputape's driver-level recorder
(scripts/gpu-driver-record.sh): the kernel's device-side assert fires, and PyTorch raises
"device-side assert triggered" at the next call that waits. Exits 1 with that error, as a
user's program would."""

import torch


def main():
    torch.manual_seed(0)
    table = torch.randn(16, 8, device="cuda")
    good = torch.nn.functional.embedding(torch.tensor([1, 2, 3], device="cuda"), table)
    print("GPUTAPE_OOB good rows sum", float(good.sum()), flush=True)
    bad = torch.nn.functional.embedding(torch.tensor([1, 2, 99], device="cuda"), table)
    torch.cuda.synchronize()
    print("GPUTAPE_OOB not reached", float(bad.sum()), flush=True)


if __name__ == "__main__":
    main()
