// Attention of one new token over positions 0..=inputs[1], reading K/V through the block table.
// One block per query head, one thread per output dimension; grouped-query heads share a KV
// head. Every reduction runs in position order in each thread, matching the CPU twin.
extern "C" __global__ void paged_attention(const float* q, const float* k_pool, const float* v_pool, const int* inputs, float* out, unsigned n_heads, unsigned n_kv_heads, unsigned head_dim, unsigned block_size, float scale) {
    unsigned h = blockIdx.x, d = threadIdx.x;
    if (h >= n_heads || d >= head_dim) return;
    unsigned kvh = h / (n_heads / n_kv_heads);
    unsigned kv_dim = n_kv_heads * head_dim;
    unsigned len = (unsigned)inputs[1] + 1;
    const float* qh = q + h * head_dim;
    float m = -3.402823466e38f;
    for (unsigned t = 0; t < len; t++) {
        size_t base = ((size_t)inputs[2 + t / block_size] * block_size + t % block_size) * kv_dim + kvh * head_dim;
        float s = 0.0f;
        for (unsigned j = 0; j < head_dim; j++) s += qh[j] * k_pool[base + j];
        s *= scale;
        m = s > m ? s : m;
    }
    float sum = 0.0f, acc = 0.0f;
    for (unsigned t = 0; t < len; t++) {
        size_t base = ((size_t)inputs[2 + t / block_size] * block_size + t % block_size) * kv_dim + kvh * head_dim;
        float s = 0.0f;
        for (unsigned j = 0; j < head_dim; j++) s += qh[j] * k_pool[base + j];
        float p = expf(s * scale - m);
        sum += p;
        acc += p * v_pool[base + d];
    }
    out[h * head_dim + d] = acc / sum;
}
