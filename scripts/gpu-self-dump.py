"""A PyTorch program that notices something wrong itself (here: it just decides to) and asks
gputape's driver shim for its flight dump through ctypes, then runs on (scripts/gpu-hangs.sh,
section ctypes). Without the shim (no gputape_flight_dump) it says so and exits 0."""

import ctypes

import torch


def main():
    x = torch.randn(4096, device="cuda")
    y = (x * 2).sum()
    torch.cuda.synchronize()
    lib = ctypes.CDLL("libcuda.so.1")
    ask = getattr(lib, "gputape_flight_dump", None)
    if ask is None:
        print("GPUTAPE_SELF no shim", flush=True)
        return
    ask.argtypes = [ctypes.c_char_p]
    rc = ask(b"logits look wrong at step 3")
    print(f"GPUTAPE_SELF asked: {rc}, y = {float(y):.3f}", flush=True)
    print(f"GPUTAPE_SELF after {float((x + 1).sum()):.3f}", flush=True)


if __name__ == "__main__":
    main()
