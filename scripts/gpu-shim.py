"""A small PyTorch workload for scripts/gpu-shim.sh, run once plainly and once under
`gputape run`: a matmul (cuBLAS), elementwise ops, a reduction and `.item()` (a copy to the host
and a sync). Prints one line `GPUTAPE_SHIM_RESULT {json}`: whether CUDA is available, the
result, a hash of the output's bytes, and which libcuda files the process has mapped (the shim
and the real driver under `gputape run`, the driver alone otherwise). Saves the output tensor to
the path given as the first argument, for an exact comparison of the two runs."""

import hashlib
import json
import sys

import torch


def mapped_libcuda():
    """The libcuda files this process has mapped, as /proc/self/maps names them."""
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "libcuda" in parts[5]:
                paths.add(parts[5])
    return sorted(paths)


def main():
    out = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available()}
    if out["cuda_available"]:
        torch.manual_seed(0)
        dev = torch.device("cuda")
        a = torch.randn(1024, 1024, device=dev)
        b = torch.randn(1024, 1024, device=dev)
        c = a @ b
        d = torch.nn.functional.gelu(c) * 0.5 + 1.0
        rows = d.sum(dim=1)
        out["result"] = rows.double().sum().item()
        host = d.cpu()
        out["sha256"] = hashlib.sha256(host.numpy().tobytes()).hexdigest()
        out["device"] = torch.cuda.get_device_name(0)
        if len(sys.argv) > 1:
            torch.save(host, sys.argv[1])
    out["libcuda_mapped"] = mapped_libcuda()
    print("GPUTAPE_SHIM_RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
