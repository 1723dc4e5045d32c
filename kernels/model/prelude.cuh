// Prepended to every model kernel's source (src/model/kernels.rs).
//
// Programmatic dependent launch (sm_90 and later). A kernel launched with programmatic stream
// serialization may start while the kernel before it in the stream is still running; that is
// only safe if it reads nothing the earlier kernel writes before `griddepcontrol.wait`, which
// returns once the earlier kernel has finished and its writes are visible. Each model kernel
// calls this first: it lets the next kernel start launching (`launch_dependents`) and then
// waits. For a kernel launched the ordinary way both instructions do nothing. The CUDA backend
// launches a kernel this way only when asked (`CudaConfig::pdl`) and only when the kernel's
// PTX contains the wait.
__device__ __forceinline__ void gputape_grid_dependency() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
