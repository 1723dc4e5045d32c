"""A PyTorch program whose kernel spins far longer than a step should (torch.cuda._sleep, some
10 s on an H200), for the driver-level flight recorder's hang deadline
(scripts/gpu-driver-flight.sh, GPUTAPE_FLIGHT_HANG_S=2): the synchronize after it blocks, the
recorder dumps while it waits, and the program then finishes normally (exit 0)."""

import os

import torch


def main():
    x = torch.ones(1024, device="cuda")
    print("GPUTAPE_HANG before", float((x * 2).sum()), flush=True)
    torch.cuda._sleep(int(float(os.environ.get("GPUTAPE_HANG_CYCLES", "2e10"))))
    torch.cuda.synchronize()
    print("GPUTAPE_HANG after", flush=True)


if __name__ == "__main__":
    main()
