// out[b] = the index of the largest of sequence b's logits, the lowest such index on ties (what
// a scan in index order keeps). One block of 256 threads per sequence: a strided scan per
// thread, then a tree that prefers the larger value, then the lower index.
extern "C" __global__ void argmax_batch(const float* logits, unsigned n, unsigned batch, unsigned* out) {
    __shared__ float bv[256];
    __shared__ unsigned bi[256];
    gputape_pdl_trigger();
    gputape_pdl_wait();
    unsigned b = blockIdx.x, tid = threadIdx.x;
    if (b >= batch || blockDim.x != 256) return;
    const float* l = logits + (size_t)b * n;
    const unsigned none = 0xffffffffu;
    float best = 0.0f;
    unsigned idx = none;
    for (unsigned i = tid; i < n; i += 256)
        if (idx == none || l[i] > best) { best = l[i]; idx = i; }
    bv[tid] = best;
    bi[tid] = idx;
    __syncthreads();
    for (unsigned s = 128; s > 0; s /= 2) {
        if (tid < s) {
            float ov = bv[tid + s];
            unsigned oi = bi[tid + s];
            if (oi != none && (bi[tid] == none || ov > bv[tid] || (ov == bv[tid] && oi < bi[tid]))) {
                bv[tid] = ov;
                bi[tid] = oi;
            }
        }
        __syncthreads();
    }
    if (tid == 0) out[b] = bi[0] == none ? 0 : bi[0];
}
