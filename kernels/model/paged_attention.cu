// Attention of one new token over positions 0..=inputs[1], reading K/V through the block table.
// One block per query head; grouped-query heads share a KV head. The arithmetic is the CPU
// twin's, in the same order: a score is q.k summed over the head dimension in index order and
// scaled; the maximum, the softmax sum and each output's weighted sum of V run over positions
// in order, each in one thread. The block's threads share the independent work: the dot
// products of up to 256 positions at a time (one position per thread, into shared memory) and
// the output dimensions (one per thread). blockDim.x must be at least head_dim.
#define ATT_CHUNK 256
extern "C" __global__ void paged_attention(const float* q, const float* k_pool, const float* v_pool, const int* inputs, float* out, unsigned n_heads, unsigned n_kv_heads, unsigned head_dim, unsigned block_size, float scale) {
    __shared__ float dots[ATT_CHUNK];
    __shared__ float m_shared;
    unsigned h = blockIdx.x, tid = threadIdx.x, d = threadIdx.x;
    if (h >= n_heads) return;
    unsigned kvh = h / (n_heads / n_kv_heads);
    unsigned kv_dim = n_kv_heads * head_dim;
    unsigned len = (unsigned)inputs[1] + 1;
    const float* qh = q + h * head_dim;
    // Pass 1: the largest scaled score.
    float m = -3.402823466e38f;
    for (unsigned t0 = 0; t0 < len; t0 += ATT_CHUNK) {
        unsigned width = len - t0 < ATT_CHUNK ? len - t0 : ATT_CHUNK;
        for (unsigned i = tid; i < width; i += blockDim.x) {
            unsigned t = t0 + i;
            size_t base = ((size_t)inputs[2 + t / block_size] * block_size + t % block_size) * kv_dim + kvh * head_dim;
            float s = 0.0f;
            for (unsigned j = 0; j < head_dim; j++) s += qh[j] * k_pool[base + j];
            dots[i] = s;
        }
        __syncthreads();
        if (tid == 0)
            for (unsigned i = 0; i < width; i++) {
                float s = dots[i] * scale;
                m = s > m ? s : m;
            }
        __syncthreads();
    }
    if (tid == 0) m_shared = m;
    __syncthreads();
    m = m_shared;
    // Pass 2: the softmax weights (per position, in parallel), then their sum and the weighted
    // sum of V (over positions in order, one output dimension per thread).
    float sum = 0.0f, acc = 0.0f;
    for (unsigned t0 = 0; t0 < len; t0 += ATT_CHUNK) {
        unsigned width = len - t0 < ATT_CHUNK ? len - t0 : ATT_CHUNK;
        for (unsigned i = tid; i < width; i += blockDim.x) {
            unsigned t = t0 + i;
            size_t base = ((size_t)inputs[2 + t / block_size] * block_size + t % block_size) * kv_dim + kvh * head_dim;
            float s = 0.0f;
            for (unsigned j = 0; j < head_dim; j++) s += qh[j] * k_pool[base + j];
            dots[i] = expf(s * scale - m);
        }
        __syncthreads();
        if (d < head_dim)
            for (unsigned i = 0; i < width; i++) {
                unsigned t = t0 + i;
                size_t base = ((size_t)inputs[2 + t / block_size] * block_size + t % block_size) * kv_dim + kvh * head_dim;
                float p = dots[i];
                sum += p;
                acc += p * v_pool[base + d];
            }
        __syncthreads();
    }
    if (d < head_dim) out[h * head_dim + d] = acc / sum;
}
