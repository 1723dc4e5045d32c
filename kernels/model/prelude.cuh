// Prepended to every model kernel's source (src/model/kernels.rs).
//
// Programmatic dependent launch (sm_90 and later). A kernel launched with programmatic stream
// serialization may start while the kernel before it in the stream is still running, so it
// must not read what that kernel writes (activations, the KV cache) before
// `gputape_pdl_wait()`, which returns once the kernels before it have finished and their
// writes are visible. What was written before the step's first kernel started (the weights,
// the step's uploaded inputs) may be read before the wait: that is the work a kernel overlaps
// with its predecessor. `gputape_pdl_trigger()` lets the next kernel start launching. For a
// kernel launched the ordinary way both do nothing. The CUDA backend launches a kernel this way
// only when asked (`CudaConfig::pdl`) and only when the kernel's PTX contains the wait.
__device__ __forceinline__ void gputape_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void gputape_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
