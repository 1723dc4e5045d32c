// Rotary embedding of each sequence's new query and key (in place in `qkv`, laid out per
// sequence as q heads, k heads, v heads), and the key and value written into the paged cache as
// bf16 at the sequence's position. Rotation pairs element p with p + head_dim/2 (the Hugging
// Face Llama convention), by the angle's cosine and sine from `rope` ([position][head_dim/2]
// pairs of f32, computed once on the host), so nothing here depends on the device's sinf/cosf.
// inputs: batch tokens, batch positions, then each sequence's block table (max_blocks each).
extern "C" __global__ void rope_append(float* qkv, unsigned short* k_pool, unsigned short* v_pool, const unsigned* inputs, const float* rope, unsigned n_heads, unsigned n_kv, unsigned head_dim, unsigned block_size, unsigned max_blocks, unsigned batch) {
    gputape_pdl_trigger();
    unsigned half = head_dim / 2, heads = n_heads + 2 * n_kv;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= batch * heads * half) return;
    unsigned b = i / (heads * half), h = (i / half) % heads, p = i % half;
    unsigned pos = inputs[batch + b];
    unsigned blk = inputs[2 * batch + b * max_blocks + pos / block_size];
    unsigned kv_dim = n_kv * head_dim;
    size_t slot = ((size_t)blk * block_size + pos % block_size) * kv_dim;
    float c = rope[((size_t)pos * half + p) * 2], s = rope[((size_t)pos * half + p) * 2 + 1];
    gputape_pdl_wait();
    float* v = qkv + (size_t)b * heads * head_dim + h * head_dim;
    float x0 = v[p], x1 = v[p + half];
    if (h < n_heads + n_kv) {
        float o0 = x0 * c - x1 * s, o1 = x1 * c + x0 * s;
        v[p] = o0;
        v[p + half] = o1;
        if (h >= n_heads) {
            unsigned short* k = k_pool + slot + (h - n_heads) * head_dim;
            k[p] = f32_to_bf16(o0);
            k[p + half] = f32_to_bf16(o1);
        }
    } else {
        unsigned short* vv = v_pool + slot + (h - n_heads - n_kv) * head_dim;
        vv[p] = f32_to_bf16(x0);
        vv[p + half] = f32_to_bf16(x1);
    }
}
