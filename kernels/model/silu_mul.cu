// SwiGLU's gate: out[i] = silu(gate[i]) * up[i]. `overrun` is the planted-fault switch: when
// non-zero the kernel also writes `overrun` elements past the end of `out` (0 otherwise).
extern "C" __global__ void silu_mul(const float* gate, const float* up, float* out, unsigned n, unsigned overrun) {
    gputape_pdl_trigger();
    gputape_pdl_wait();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    } else if (i < n + overrun) {
        out[i] = 0.0f;
    }
}
