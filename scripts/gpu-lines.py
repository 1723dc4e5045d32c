"""PyTorch programs for gputape's Python lines (issue 50; scripts/gpu-lines.sh). Each calls the
GPU from a line of its own, so a replay's verdict can be checked against the line here.
Usage: gpu-lines.py MODE
  eager-assert  an out-of-range index into an embedding (device-side assert), eagerly
  graph-assert  the same embedding captured into a torch.cuda.CUDAGraph, replayed with a bad
                index copied into its static input
  backward      a small MLP's forward and backward: the backward's launches come from autograd's
                own thread, which runs no Python code
Prints `GPUTAPE_LINES {json}` with the lines the kernels were launched from."""

import json
import sys

import torch


def embed(table, idx):
    return torch.nn.functional.embedding(idx, table)  # the embedding's line


def main():
    mode = sys.argv[1]
    torch.manual_seed(0)
    table = torch.randn(16, 8, device="cuda")
    lines = {"embed": embed.__code__.co_firstlineno + 1}
    if mode == "eager-assert":
        idx = torch.tensor([1, 99, 3], device="cuda")
        print("GPUTAPE_LINES " + json.dumps(lines), flush=True)
        out = embed(table, idx)
        print(float(out.sum()))
    elif mode == "graph-assert":
        static_idx = torch.tensor([1, 2, 3], device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                embed(table, static_idx)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = embed(table, static_idx)
        g.replay()
        torch.cuda.synchronize()
        static_idx.copy_(torch.tensor([1, 99, 3]))
        print("GPUTAPE_LINES " + json.dumps(lines), flush=True)
        g.replay()  # the graph's launch
        print(float(static_out.sum()))
    elif mode == "backward":
        lin = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64)).cuda()
        x = torch.randn(8, 64, device="cuda", requires_grad=True)
        loss = lin(x).square().sum()  # the forward's line
        loss.backward()  # the backward's line (its launches run on autograd's thread)
        torch.cuda.synchronize()
        print("GPUTAPE_LINES " + json.dumps({"grad": float(x.grad.sum())}), flush=True)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
