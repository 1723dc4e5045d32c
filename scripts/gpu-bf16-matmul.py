"""bf16 matrix products for gputape's driver-level recorder (scripts/gpu-driver-record.sh): on
Hopper, cuBLAS runs these with kernels that read their operands through tensor maps (TMA), which
the recorder must re-encode for where the buffers are on replay. Prints one line
`GPUTAPE_SHIM_RESULT {json}`: the sum and a hash of the last product's bytes."""

import hashlib
import json

import torch


def main():
    torch.manual_seed(0)
    out = {}
    for n in (1024, 4096):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = a @ b
        out["result"] = out.get("result", 0.0) + c.float().sum().item()
    out["sha256"] = hashlib.sha256(c.float().cpu().numpy().tobytes()).hexdigest()
    print("GPUTAPE_SHIM_RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
