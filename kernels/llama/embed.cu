// x[b] = embedding row of sequence b's token (inputs[b]), widened to f32. One thread per
// element of the batch's hidden states; a token at or past `vocab` gives NaN, not a wild read.
extern "C" __global__ void embed_bf16(const unsigned short* table, const unsigned* inputs, float* x, unsigned hidden, unsigned batch, unsigned vocab) {
    gputape_pdl_trigger();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= hidden * batch) return;
    unsigned b = i / hidden, j = i % hidden;
    unsigned tok = inputs[b];
    gputape_pdl_wait();
    x[i] = tok < vocab ? bf16_to_f32(table[(size_t)tok * hidden + j]) : __int_as_float(0x7fc00000);
}
