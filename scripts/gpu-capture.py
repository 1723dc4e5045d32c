"""Eager PyTorch steps that a user would try to capture into a CUDA graph (issue 50;
scripts/gpu-capture.sh). Usage: gpu-capture.py MODE ACTION
MODE: what the step does besides its matmul
  item    reads a value back with .item()
  cpu     copies a row to the host with .cpu()
  sync    calls torch.cuda.synchronize()
  tensor  builds a tensor from a Python list on the GPU (torch.tensor(list, device="cuda"))
  clean   allocates a new, larger tensor each step (the caching allocator grows)
ACTION
  eager    runs the step 4 times eagerly (what `gputape run -o` records and `analyze --capture`
           judges)
  capture  warms the step up on a side stream, then captures it with torch.cuda.graph
Prints `GPUTAPE_CAPTURE {json}`: the mode, whether the capture succeeded, the error, and the
line of the step's breaker (`breaker_line`, the line marked below for the mode)."""

import json
import sys

import torch

torch.manual_seed(0)
w = torch.randn(256, 256, device="cuda")
x = torch.randn(64, 256, device="cuda")
keep = []


def step(mode, i):
    y = torch.relu(x @ w)
    if mode == "item":
        y = y * y.sum().item()  # breaker: item
    elif mode == "cpu":
        keep.append(y[0].cpu())  # breaker: cpu
    elif mode == "sync":
        torch.cuda.synchronize()  # breaker: sync
    elif mode == "tensor":
        y = y + torch.tensor([1.0, 2.0, float(i)], device="cuda").sum()  # breaker: tensor
    elif mode == "clean":
        keep.append(torch.empty((i + 1) * (4 << 20), device="cuda").fill_(1.0))
    return y


def breaker_line(mode):
    src = open(__file__).read().splitlines()
    return next((n + 1 for n, l in enumerate(src) if l.rstrip().endswith(f"# breaker: {mode}")), None)


def main():
    mode, action = sys.argv[1], sys.argv[2]
    out = {"mode": mode, "action": action, "breaker_line": breaker_line(mode)}
    if action == "eager":
        for i in range(4):
            step(mode, i)
        torch.cuda.synchronize()
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(3):
                step(mode, i)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                step(mode, 3)
            g.replay()
            torch.cuda.synchronize()
            out.update(captured=True, error=None)
        except Exception as e:  # what the user meets
            out.update(captured=False, error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    print("GPUTAPE_CAPTURE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
