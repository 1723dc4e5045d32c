// Greedy sampling: the index of the first largest logit, the one the CPU twin's scan finds
// (`ls[i] > ls[best]` from best = 0: a NaN at index 0 is kept, any other NaN passed over).
// Each thread keeps the first largest of its own strided logits; the candidates then meet in a
// tree (a warp butterfly, then the warps in order) that prefers the larger value and, between
// equal values, the lower index. That order is total, so every tree picks what the scan picks,
// in log n steps instead of n.
#define ARGMAX_NONE 0xffffffffu

__device__ __forceinline__ bool argmax_better(float v, unsigned i, float bv, unsigned bi) {
    if (i == ARGMAX_NONE) return false;
    if (bi == ARGMAX_NONE) return true;
    return v > bv || (!(bv > v) && i < bi);
}

extern "C" __global__ void argmax(const float* logits, unsigned n, int* out) {
    __shared__ float wv[32];
    __shared__ unsigned wi[32];
    gputape_pdl_trigger();
    gputape_pdl_wait();
    if (blockIdx.x != 0) return;
    float bv = 0.0f;
    unsigned bi = ARGMAX_NONE;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
        float v = logits[i];
        if (i != 0 && v != v) continue;
        if (argmax_better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    for (unsigned off = 16; off > 0; off /= 2) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        unsigned oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (argmax_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
    unsigned warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    if (threadIdx.x % 32 == 0) { wv[warp] = bv; wi[warp] = bi; }
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (unsigned w = 1; w < warps; w++)
        if (argmax_better(wv[w], wi[w], bv, bi)) { bv = wv[w]; bi = wi[w]; }
    // A NaN at index 0 is never beaten by the scan.
    if (n > 0 && logits[0] != logits[0]) bi = 0;
    out[0] = bi == ARGMAX_NONE ? 0 : (int)bi;
}
