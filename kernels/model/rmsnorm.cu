// RMSNorm of one vector. The sum of squares is taken by one thread, in index order, so the
// result is bit-identical to the CPU twin's (the mock) when FMA contraction is off. The block
// stages the vector in shared memory with coalesced loads, 1024 elements at a time, so that
// thread's serial sum does not wait on a global load per element.
extern "C" __global__ void rmsnorm(const float* x, const float* w, float* out, unsigned n, float eps) {
    __shared__ float xs[1024];
    __shared__ float inv;
    float ss = 0.0f;
    for (unsigned i0 = 0; i0 < n; i0 += 1024) {
        unsigned width = n - i0 < 1024 ? n - i0 : 1024;
        for (unsigned i = threadIdx.x; i < width; i += blockDim.x) xs[i] = x[i0 + i];
        __syncthreads();
        if (threadIdx.x == 0)
            for (unsigned i = 0; i < width; i++) ss += xs[i] * xs[i];
        __syncthreads();
    }
    if (threadIdx.x == 0) inv = 1.0f / sqrtf(ss / (float)n + eps);
    __syncthreads();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = x[i] * inv * w[i];
}
