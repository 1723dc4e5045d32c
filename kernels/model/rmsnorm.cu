// RMSNorm of one vector (n <= 1024), by one warp. The lanes load the vector into shared memory
// together (coalesced, all loads in flight at once); lane 0 then takes the sum of squares in
// index order from there, so the result is bit-identical to the CPU twin's when FMA
// contraction is off.
extern "C" __global__ void rmsnorm(const float* x, const float* w, float* out, unsigned n, float eps) {
    __shared__ float xs[1024];
    __shared__ float inv;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) xs[i] = x[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        float ss = 0.0f;
        for (unsigned i = 0; i < n; i++) ss += xs[i] * xs[i];
        inv = 1.0f / sqrtf(ss / (float)n + eps);
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = xs[i] * inv * w[i];
}
