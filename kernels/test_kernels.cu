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

// A tensor map as a kernel takes it: 128 opaque bytes, 64-byte aligned (CUtensorMap's layout,
// declared here so the module compiles without cuda.h).
struct alignas(64) TensorMap128 { unsigned long long opaque[16]; };

// out = the rows x cols f32 matrix `map` describes, copied tile by tile through TMA: each block
// loads one box (box_cols x box_rows) into shared memory with cp.async.bulk.tensor and writes
// it out row-major. Hopper (sm_90) and newer; elsewhere it writes nothing.
extern "C" __global__ void tma_copy(const __grid_constant__ TensorMap128 map, float* out,
                                    unsigned rows, unsigned cols, unsigned box_rows,
                                    unsigned box_cols) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ alignas(128) float tile[64 * 64];
    __shared__ alignas(8) unsigned long long bar;
    unsigned x0 = blockIdx.x * box_cols, y0 = blockIdx.y * box_rows;
    unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
    unsigned tile_addr = (unsigned)__cvta_generic_to_shared(tile);
    unsigned bytes = box_rows * box_cols * 4;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_addr));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile(
            "{\n\t.reg .b64 st;\n\t"
            "mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(bar_addr),
            "r"(bytes)
            : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            " [%0], [%1, {%2, %3}], [%4];" ::"r"(tile_addr),
            "l"((unsigned long long)&map), "r"(x0), "r"(y0), "r"(bar_addr)
            : "memory");
    }
    asm volatile(
        "{\n\t.reg .pred p;\n\tWAIT_%=:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n\t"
        "@!p bra WAIT_%=;\n\t}" ::"r"(bar_addr)
        : "memory");
    for (unsigned i = threadIdx.x; i < box_rows * box_cols; i += blockDim.x) {
        unsigned r = y0 + i / box_cols, c = x0 + i % box_cols;
        if (r < rows && c < cols) out[r * cols + c] = tile[i];
    }
#endif
}
