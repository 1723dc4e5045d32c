"""Wrong numbers in PyTorch programs, for `gputape replay --check-finite` and `--against`
(issue 51; scripts/gpu-nan.sh runs them). MODE:

  decode    a transformers Llama (bf16, random weights from a seed, nothing downloaded) whose
            first MLP up-projection gets one +inf planted by the program (`w[5, 7] = inf`),
            then one forward step: the logits come out NaN. A clean forward runs first and
            prints its last position's first 8 logits (`logits8`), for `inspect`.
  graph     a small bf16 MLP step captured into a torch.cuda.CUDAGraph; an inf planted into
            its input buffer, then the graph replayed: its output comes out NaN.
  compile   a torch.compile'd function (Inductor, Triton) computing log(x) * y for an x with
            one negative element: the NaN is produced inside the Triton kernel.
  indexadd  a float32 index_add_ with many collisions (atomics: the sum's order varies), three
            times into fresh zeros: PyTorch itself may print different sums.
  clean     a deterministic step (bf16 matmul, relu, sum): nothing to find.

Prints `GPUTAPE_NAN {json}`: what PyTorch saw (whether the output holds NaN/Inf, the line that
planted the value, the sums of indexadd's runs)."""

import json
import math
import sys

import torch

MODE = sys.argv[1] if len(sys.argv) > 1 else "clean"
torch.manual_seed(0)
dev = "cuda"
out = {"mode": MODE}


def mlp(d):
    return torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d), torch.nn.LayerNorm(d)
    )


if MODE == "decode":
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
    )
    model = LlamaForCausalLM(cfg).to(dev, torch.bfloat16).eval()
    ids = torch.randint(0, 512, (1, 8), device=dev)
    with torch.no_grad():
        # A clean forward first: its last logits, as PyTorch reads them back, are what
        # `gputape inspect` must show of the tensor the last GEMM wrote.
        ref = model(ids).logits
        out["logits8"] = ref[0, -1, :8].tolist()
        out["logits_dtype"] = str(ref.dtype)
        w = model.model.layers[0].mlp.up_proj.weight
        w[5, 7] = float("inf")  # PLANT
        logits = model(ids).logits
    out["nan"] = bool(torch.isnan(logits).any())
    out["inf"] = bool(torch.isinf(logits).any())
elif MODE == "graph":
    net = mlp(256).to(dev, torch.bfloat16).eval()
    static_x = torch.randn(16, 256, device=dev, dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            net(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        static_y = net(static_x)
    g.replay()
    clean = bool(torch.isfinite(static_y).all())
    static_x[3, 9] = float("inf")  # PLANT
    g.replay()
    torch.cuda.synchronize()
    out["clean_first"] = clean
    out["nan"] = bool(torch.isnan(static_y).any())
    out["inf"] = bool(torch.isinf(static_y).any())
elif MODE == "compile":
    @torch.compile
    def f(x, y):
        return torch.log(x) * y + 1.0

    x = torch.rand(4096, device=dev) + 0.5
    y = torch.randn(4096, device=dev)
    f(x, y)
    x[1234] = -1.0  # PLANT
    r = f(x, y)
    torch.cuda.synchronize()
    out["nan"] = bool(torch.isnan(r).any())
    out["first_nan"] = int(torch.isnan(r).nonzero()[0, 0])
elif MODE == "indexadd":
    src = torch.randn(1 << 20, device=dev)
    idx = torch.randint(0, 16, (1 << 20,), device=dev)
    sums = []
    for _ in range(3):
        acc = torch.zeros(16, device=dev)
        acc.index_add_(0, idx, src)
        sums.append(acc.double().cpu().tolist())
    out["runs_differ"] = any(s != sums[0] for s in sums[1:])
    out["max_spread"] = max(max(abs(a - b) for a, b in zip(s, sums[0])) for s in sums)
elif MODE == "clean":
    a = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
    b = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
    r = torch.relu(a @ b).float().sum()
    out["sum"] = float(r)
    out["finite"] = math.isfinite(out["sum"])
else:
    sys.exit(f"unknown mode {MODE}")
torch.cuda.synchronize()
print("GPUTAPE_NAN " + json.dumps(out), flush=True)
