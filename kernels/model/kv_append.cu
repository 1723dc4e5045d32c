// Append this token's K and V to the paged cache: position inputs[1], block table inputs[2..].
// The slot comes from the step's inputs alone, so it is found before the wait for the kernels
// that wrote K and V.
extern "C" __global__ void kv_append(const float* k, const float* v, float* k_pool, float* v_pool, const int* inputs, unsigned kv_dim, unsigned block_size) {
    gputape_pdl_trigger();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= kv_dim) return;
    unsigned pos = (unsigned)inputs[1];
    unsigned block = (unsigned)inputs[2 + pos / block_size];
    size_t slot = ((size_t)block * block_size + pos % block_size) * kv_dim;
    gputape_pdl_wait();
    k_pool[slot + i] = k[i];
    v_pool[slot + i] = v[i];
}
