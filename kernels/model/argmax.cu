// Greedy sampling: the index of the first largest logit, by one thread in index order.
extern "C" __global__ void argmax(const float* logits, unsigned n, int* out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    unsigned best = 0;
    for (unsigned i = 1; i < n; i++) if (logits[i] > logits[best]) best = i;
    out[0] = (int)best;
}
