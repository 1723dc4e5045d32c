// Token embedding: out[i] = table[token * hidden + i]. The token is inputs[0].
extern "C" __global__ void embedding(const float* table, const int* inputs, float* out, unsigned hidden) {
    gputape_pdl_trigger();
    gputape_pdl_wait();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < hidden) out[i] = table[(unsigned)inputs[0] * hidden + i];
}
