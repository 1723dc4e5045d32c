// Weights from a seed, generated where they live: element i is splitmix64(seed + (i + 1) *
// golden) mapped to offset + scale * u with u uniform in [-1, 1), rounded to bf16. A grid-stride
// loop, so any grid covers any n; the CPU twin visits the same elements in index order.
extern "C" __global__ void fill_bf16(unsigned short* out, unsigned long long n, unsigned long long seed, float scale, float offset) {
    gputape_pdl_trigger();
    gputape_pdl_wait();
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned long long z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float u = (float)(unsigned)(z >> 40) / 16777216.0f;
        out[i] = f32_to_bf16((u * 2.0f - 1.0f) * scale + offset);
    }
}
