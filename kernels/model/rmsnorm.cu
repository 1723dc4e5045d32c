// RMSNorm of one vector (n <= 1024). The block loads the vector into shared memory together
// (coalesced, all loads in flight at once); the first warp then takes the sum of squares the
// way gemv.cu sums a row (lane l over elements l, l+32, ... in order, then a fixed xor
// butterfly), which its CPU twin repeats with `warp_dot`, so the two agree bit for bit when FMA
// contraction is off. The weights are loaded before the wait for the kernel that wrote the
// vector.
extern "C" __global__ void rmsnorm(const float* x, const float* w, float* out, unsigned n, float eps) {
    __shared__ float xs[1024];
    __shared__ float ws[1024];
    __shared__ float inv;
    gputape_pdl_trigger();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) ws[i] = w[i];
    gputape_pdl_wait();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) xs[i] = x[i];
    __syncthreads();
    if (threadIdx.x < 32) {
        float ss = 0.0f;
        for (unsigned i = threadIdx.x; i < n; i += 32) ss += xs[i] * xs[i];
        for (unsigned off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
        if (threadIdx.x == 0) inv = 1.0f / sqrtf(ss / (float)n + eps);
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = xs[i] * inv * ws[i];
}
