// Greedy sampling: the index of the first largest logit, scanned by one thread in index order
// (as the CPU twin does) over logits the block stages in shared memory, 1024 at a time.
extern "C" __global__ void argmax(const float* logits, unsigned n, int* out) {
    __shared__ float ls[1024];
    if (blockIdx.x != 0) return;
    unsigned best = 0;
    float best_v = 0.0f;
    for (unsigned i0 = 0; i0 < n; i0 += 1024) {
        unsigned width = n - i0 < 1024 ? n - i0 : 1024;
        for (unsigned i = threadIdx.x; i < width; i += blockDim.x) ls[i] = logits[i0 + i];
        __syncthreads();
        if (threadIdx.x == 0)
            for (unsigned i = 0; i < width; i++) {
                if (i0 + i == 0) best_v = ls[0];
                else if (ls[i] > best_v) { best = i0 + i; best_v = ls[i]; }
            }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (int)best;
}
