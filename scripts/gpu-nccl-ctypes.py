"""NCCL with one rank, called through ctypes from the same libnccl.so.2 that gputape loads
(GPUTAPE_NCCL_LIB), on PyTorch's memory and stream: does a one-rank all-reduce work with this
library at all? Splits a fault in gputape's NCCL layer (src/cuda/nccl.rs) from one in the
library or its setup. Prints one line per step and `GPUTAPE_NCCL_CTYPES ok|failed`."""

import ctypes
import os

import torch


class UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 bytes, passed by value (a ctypes array would be passed as a pointer)."""

    _fields_ = [("internal", ctypes.c_char * 128)]


def main():
    lib = ctypes.CDLL(os.environ["GPUTAPE_NCCL_LIB"], mode=ctypes.RTLD_GLOBAL)
    uid = UniqueId()
    r = lib.ncclGetUniqueId(ctypes.byref(uid))
    print("ncclGetUniqueId", r)
    comm = ctypes.c_void_p()
    torch.cuda.init()
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    y = torch.zeros_like(x)
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId,
                                     ctypes.c_int]
    r = lib.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)
    print("ncclCommInitRank", r, hex(comm.value or 0))
    lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    s = torch.cuda.current_stream().cuda_stream
    r = lib.ncclAllReduce(x.data_ptr(), y.data_ptr(), 1024, 7, 0, comm, s)
    torch.cuda.synchronize()
    ok = r == 0 and torch.equal(x, y)
    print("ncclAllReduce", r, "equal", torch.equal(x, y))
    print("GPUTAPE_NCCL_CTYPES", "ok" if ok else "failed", flush=True)


if __name__ == "__main__":
    main()
