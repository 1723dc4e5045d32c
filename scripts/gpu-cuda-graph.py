"""A PyTorch program that captures its step into a CUDA graph (torch.cuda.graph, as engines
capture their decode) and replays it, for gputape's driver-level recorder
(scripts/gpu-driver-record.sh): a two-layer MLP (cuBLAS matmuls, gelu, a residual add) on a
static input, warmed up on a side stream, captured, then launched 4 times with new input
copied in before each launch and the output read back after it. Prints one line
`GPUTAPE_GRAPH {json}`: the sum and a hash of each launch's output."""

import hashlib
import json

import torch


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    w1 = torch.randn(512, 1024, device=dev) * 0.05
    w2 = torch.randn(1024, 512, device=dev) * 0.05
    x = torch.zeros(8, 512, device=dev)

    def step(inp):
        return inp + torch.nn.functional.gelu(inp @ w1) @ w2

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = step(x)
    sums, hashes = [], []
    for i in range(4):
        x.copy_(torch.randn(8, 512, device=dev) * (i + 1))
        g.replay()
        host = y.cpu()
        sums.append(float(host.double().sum()))
        hashes.append(hashlib.sha256(host.numpy().tobytes()).hexdigest()[:16])
    print("GPUTAPE_GRAPH " + json.dumps({"sums": sums, "sha256": hashes}), flush=True)


if __name__ == "__main__":
    main()
