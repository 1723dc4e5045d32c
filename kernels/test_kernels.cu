// Kernels for gputape's own tests and workloads: small, one concern each.
// Compiled at run time with NVRTC (see src/cuda/backend.rs, CudaBackend::load_source).

extern "C" __global__ void saxpy(const float* x, float* y, unsigned n, float a) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

// saxpy written for programmatic dependent launch: nothing is read before the grid-dependency
// wait (bench-launch times it launched both ways).
extern "C" __global__ void saxpy_pdl(const float* x, float* y, unsigned n, float a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

// Does nothing but take part in programmatic dependent launch: bench-launch chains it into
// graphs to measure the per-node floor.
extern "C" __global__ void noop_pdl() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

extern "C" __global__ void fill(float* dst, unsigned n, float v) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = v;
}

// Writes `n + extra` bytes starting at `p`: a planted overrun of `extra` bytes.
extern "C" __global__ void write_past(unsigned char* p, unsigned n, unsigned extra) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n + extra) p[i] = (unsigned char)(i & 0x7f);
}

struct Pair { int a; float b; };

// Mixed argument kinds: pointer, 32-bit int, 64-bit float, 64-bit int, a by-value struct.
extern "C" __global__ void mixed(double* out, int i, double d, unsigned long long u, Pair p) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = (double)i;
        out[1] = d;
        out[2] = (double)u;
        out[3] = (double)p.a + (double)p.b;
    }
}

extern "C" __global__ void empty() {}

// out[i] = table[i][0]: reads through device addresses stored in device memory.
extern "C" __global__ void gather(const float* const* table, float* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = table[i][0];
}
