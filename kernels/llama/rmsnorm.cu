// out[b] = x[b] / sqrt(mean(x[b]^2) + eps) * w, one block per sequence of T threads (a multiple
// of 32 up to 1024; one warp per row was bound by the latency of its 128 loads in a row at
// hidden 4096). Thread t sums the squares of elements t, t+T, ... in order (fused), each warp's
// sums meet in the butterfly (xor 16, 8, 4, 2, 1), and the warps' sums are added in warp
// order; the division and the square root are IEEE, as on the host.
extern "C" __global__ void __launch_bounds__(1024) rmsnorm_bf16(const float* x, const unsigned short* w, float* out, unsigned n, float eps, unsigned batch) {
    __shared__ float part[32];
    gputape_pdl_trigger();
    gputape_pdl_wait();
    unsigned b = blockIdx.x, t = threadIdx.x, lane = t % 32, warp = t / 32, T = blockDim.x;
    if (b >= batch || T % 32 != 0) return;
    const float* xb = x + (size_t)b * n;
    float ss = 0.0f;
#pragma unroll 4
    for (unsigned j = t; j < n; j += T) ss = __fmaf_rn(xb[j], xb[j], ss);
    for (unsigned off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    float total = part[0];
    for (unsigned k = 1; k < T / 32; k++) total += part[k];
    float inv = 1.0f / sqrtf(total / (float)n + eps);
#pragma unroll 4
    for (unsigned j = t; j < n; j += T) out[(size_t)b * n + j] = xb[j] * inv * bf16_to_f32(w[j]);
}
