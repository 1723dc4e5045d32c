// Attention of one new token over positions 0..=inputs[1] (at most 1024), reading K/V through
// the block table. One warp per query head (head_dim <= 32); grouped-query heads share a KV
// head. The arithmetic is the CPU twin's, in its order: each score is q.k summed over the head
// dimension in index order (one position per lane, all positions' loads in flight together);
// the maximum, the softmax sum and each output's weighted sum of V then run over positions in
// order (the maximum and the sum by every lane over shared memory, one output per lane).
extern "C" __global__ void paged_attention(const float* q, const float* k_pool, const float* v_pool, const int* inputs, float* out, unsigned n_heads, unsigned n_kv_heads, unsigned head_dim, unsigned block_size, float scale) {
    __shared__ float sc[1024];
    __shared__ size_t base[1024];
    gputape_pdl_trigger();
    unsigned h = blockIdx.x, lane = threadIdx.x;
    if (h >= n_heads) return;
    unsigned kvh = h / (n_heads / n_kv_heads);
    unsigned kv_dim = n_kv_heads * head_dim;
    unsigned len = (unsigned)inputs[1] + 1;
    // Where each position's K and V start: from the step's inputs alone, so before the wait for
    // the kernels that wrote Q and this token's K and V.
    for (unsigned t = lane; t < len; t += blockDim.x)
        base[t] = ((size_t)inputs[2 + t / block_size] * block_size + t % block_size) * kv_dim + kvh * head_dim;
    __syncthreads();
    gputape_pdl_wait();
    const float* qh = q + h * head_dim;
    for (unsigned t = lane; t < len; t += blockDim.x) {
        float s = 0.0f;
        for (unsigned j = 0; j < head_dim; j++) s += qh[j] * k_pool[base[t] + j];
        sc[t] = s * scale;
    }
    __syncthreads();
    float m = -3.402823466e38f;
    for (unsigned t = 0; t < len; t++) m = sc[t] > m ? sc[t] : m;
    __syncthreads();
    for (unsigned t = lane; t < len; t += blockDim.x) sc[t] = expf(sc[t] - m);
    __syncthreads();
    if (lane >= head_dim) return;
    float sum = 0.0f, acc = 0.0f;
    for (unsigned t = 0; t < len; t++) {
        float p = sc[t];
        sum += p;
        acc += p * v_pool[base[t] + lane];
    }
    out[h * head_dim + lane] = acc / sum;
}
