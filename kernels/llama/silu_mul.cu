// act[b][j] = silu(gate) * up, with gate and up side by side in `gu` ([batch][2 ffn]: the
// fused gate_up projection's output). The planted fault (`overrun` > 0) writes that many floats
// past the end of `act`, as an engine's off-by-n bug would.
extern "C" __global__ void silu_mul_bf16(const float* gu, float* act, unsigned ffn, unsigned batch, unsigned overrun) {
    gputape_pdl_trigger();
    gputape_pdl_wait();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x, n = ffn * batch;
    if (i >= n) {
        if (i < n + overrun) act[i] = 0.0f;
        return;
    }
    unsigned b = i / ffn, j = i % ffn;
    float g = gu[(size_t)b * 2 * ffn + j], u = gu[(size_t)b * 2 * ffn + ffn + j];
    act[i] = g / (1.0f + gt_exp(-g)) * u;
}
