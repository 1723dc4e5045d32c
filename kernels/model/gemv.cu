// y = W x for a row-major W of rows x cols, one warp per row. Lane l sums columns l, l+32,
// l+64, ... in order; the 32 partial sums are then added in a fixed butterfly (partners at
// xor 16, 8, 4, 2, 1). The CPU twin repeats exactly these additions, so the two agree bit for
// bit when FMA contraction is off, and a row's loads are coalesced across the warp.
extern "C" __global__ void gemv(const float* w, const float* x, float* y, unsigned rows, unsigned cols) {
    gputape_pdl_trigger();
    gputape_pdl_wait();
    unsigned r = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (r >= rows) return; // the whole warp: r is the same in all its lanes
    const float* row = w + (size_t)r * cols;
    float acc = 0.0f;
    for (unsigned c = lane; c < cols; c += 32) acc += row[c] * x[c];
    for (unsigned off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) y[r] = acc;
}
