// out[b] = x[b] / sqrt(mean(x[b]^2) + eps) * w, one warp per sequence. Lane l sums the squares
// of elements l, l+32, ... in order (fused), the lanes' sums meet in the butterfly (xor 16, 8,
// 4, 2, 1); the division and square root are IEEE, as on the host.
extern "C" __global__ void rmsnorm_bf16(const float* x, const unsigned short* w, float* out, unsigned n, float eps, unsigned batch) {
    gputape_pdl_trigger();
    gputape_pdl_wait();
    unsigned b = blockIdx.x, lane = threadIdx.x;
    if (b >= batch || lane >= 32) return;
    const float* xb = x + (size_t)b * n;
    float ss = 0.0f;
    for (unsigned j = lane; j < n; j += 32) ss = __fmaf_rn(xb[j], xb[j], ss);
    for (unsigned off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (unsigned j = lane; j < n; j += 32) out[(size_t)b * n + j] = xb[j] * inv * bf16_to_f32(w[j]);
}
