// Greedy sampling (n <= 4096): the index of the first largest logit. The warp loads the logits
// into shared memory together; lane 0 then scans them in index order, as the CPU twin does.
extern "C" __global__ void argmax(const float* logits, unsigned n, int* out) {
    __shared__ float ls[4096];
    if (blockIdx.x != 0) return;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) ls[i] = logits[i];
    __syncthreads();
    if (threadIdx.x != 0) return;
    unsigned best = 0;
    for (unsigned i = 1; i < n; i++) if (ls[i] > ls[best]) best = i;
    out[0] = (int)best;
}
