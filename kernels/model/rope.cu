// Rotary embedding on interleaved pairs of every query and key head, at position inputs[1].
// The angle depends on the step's inputs alone: its powf, cosf and sinf run before the wait for
// the kernels that wrote Q and K.
extern "C" __global__ void rope(float* q, float* k, const int* inputs, unsigned n_heads, unsigned n_kv_heads, unsigned head_dim, float theta) {
    gputape_pdl_trigger();
    unsigned half = head_dim / 2;
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned total = (n_heads + n_kv_heads) * half;
    if (t >= total) return;
    unsigned head = t / half, i = t % half;
    float pos = (float)inputs[1];
    float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
    float a = pos * inv_freq;
    float c = cosf(a), s = sinf(a);
    float* v = head < n_heads ? q + head * head_dim : k + (head - n_heads) * head_dim;
    gputape_pdl_wait();
    float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x0 * s + x1 * c;
}
