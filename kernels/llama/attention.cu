// Decode attention over the paged bf16 KV cache, for a batch of sequences of different lengths
// (sequence b attends over positions 0..=inputs[batch + b], at most 4096) with grouped query
// heads. One block of T threads per (query head, sequence), T a power of two from 32 to 1024 and
// at least head_dim, itself a power of two (the host checks). Each of the T/32 warps scores
// positions warp, warp + T/32, ...: lane l adds
// q[j] k[j] for j = l, l+32, ... (fused), the lanes meet in the butterfly. Then the maximum
// (every thread, in position order), the softmax weights (gt_exp), and the output: the threads
// form G = T / head_dim groups, group g takes the g-th of G runs of ceil(len / G) positions
// and sums weights and weighted values over them in order, one element per thread, and the
// groups' sums are added in group order. The CPU twin does these operations in this order.
extern "C" __global__ void __launch_bounds__(1024) attention_bf16(const float* qkv, const unsigned short* k_pool, const unsigned short* v_pool, const unsigned* inputs, float* out, unsigned n_heads, unsigned n_kv, unsigned head_dim, unsigned block_size, unsigned max_blocks, unsigned batch, float scale) {
    __shared__ float sc[4096];
    __shared__ unsigned rows[4096];
    __shared__ float psum[1024], pacc[1024];
    gputape_pdl_trigger();
    unsigned h = blockIdx.x, b = blockIdx.y;
    unsigned T = blockDim.x;
    if (h >= n_heads || b >= batch || T % 32 != 0 || head_dim == 0 || head_dim > T) return;
    unsigned tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    unsigned kvh = h / (n_heads / n_kv), kv_dim = n_kv * head_dim;
    unsigned qkv_dim = (n_heads + 2 * n_kv) * head_dim;
    unsigned len = inputs[batch + b] + 1;
    if (len > 4096) len = 4096; // the host refuses longer sequences
    const unsigned* table = inputs + 2 * batch + (size_t)b * max_blocks;
    // Which cache row each position is in: from the step's inputs alone, so before the wait.
    for (unsigned t = tid; t < len; t += T) rows[t] = table[t / block_size] * block_size + t % block_size;
    __syncthreads();
    gputape_pdl_wait();
    const float* q = qkv + (size_t)b * qkv_dim + h * head_dim;
    size_t head = (size_t)kvh * head_dim;
#pragma unroll 4
    for (unsigned t = warp; t < len; t += T / 32) {
        const unsigned short* k = k_pool + (size_t)rows[t] * kv_dim + head;
        float s = 0.0f;
        for (unsigned j = lane; j < head_dim; j += 32) s = __fmaf_rn(q[j], bf16_to_f32(k[j]), s);
        for (unsigned off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) sc[t] = s * scale;
    }
    __syncthreads();
    float m = -3.402823466e38f;
    for (unsigned t = 0; t < len; t++) m = sc[t] > m ? sc[t] : m;
    __syncthreads();
    for (unsigned t = tid; t < len; t += T) sc[t] = gt_exp(sc[t] - m);
    __syncthreads();
    unsigned groups = T / head_dim, chunk = (len + groups - 1) / groups;
    unsigned g = tid / head_dim, d = tid % head_dim;
    unsigned from = g * chunk, to = from + chunk < len ? from + chunk : len;
    float sum = 0.0f, acc = 0.0f;
#pragma unroll 8
    for (unsigned t = from; t < to; t++) {
        float p = sc[t];
        sum += p;
        acc = __fmaf_rn(p, bf16_to_f32(v_pool[(size_t)rows[t] * kv_dim + head + d]), acc);
    }
    psum[tid] = sum;
    pacc[tid] = acc;
    __syncthreads();
    if (tid < head_dim) {
        float s = psum[0], a = pacc[tid];
        for (unsigned k = 1; k < groups; k++) {
            s += psum[k * head_dim];
            a += pacc[k * head_dim + tid];
        }
        out[((size_t)b * n_heads + h) * head_dim + tid] = a / s;
    }
}
