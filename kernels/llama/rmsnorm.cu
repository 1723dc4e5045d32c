// out[b] = x[b] / sqrt(mean(x[b]^2) + eps) * w, one block of 256 threads per sequence (one warp
// per row was bound by the latency of its 128 loads in a row at hidden 4096). Thread t sums the
// squares of elements t, t+256, ... in order (fused), each warp's sums meet in the butterfly
// (xor 16, 8, 4, 2, 1), and the 8 warps' sums are added in warp order; the division and the
// square root are IEEE, as on the host.
extern "C" __global__ void __launch_bounds__(256) rmsnorm_bf16(const float* x, const unsigned short* w, float* out, unsigned n, float eps, unsigned batch) {
    __shared__ float part[8];
    gputape_pdl_trigger();
    gputape_pdl_wait();
    unsigned b = blockIdx.x, t = threadIdx.x, lane = t % 32, warp = t / 32;
    if (b >= batch || blockDim.x != 256) return;
    const float* xb = x + (size_t)b * n;
    float ss = 0.0f;
#pragma unroll 4
    for (unsigned j = t; j < n; j += 256) ss = __fmaf_rn(xb[j], xb[j], ss);
    for (unsigned off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    float total = part[0];
    for (int k = 1; k < 8; k++) total += part[k];
    float inv = 1.0f / sqrtf(total / (float)n + eps);
#pragma unroll 4
    for (unsigned j = t; j < n; j += 256) out[(size_t)b * n + j] = xb[j] * inv * bf16_to_f32(w[j]);
}
