// y = W x for a row-major W of rows x cols. Each thread owns one row and sums its columns in
// index order, exactly like the CPU twin; what the block shares is the loading: a tile of
// (blockDim.x rows x 64 columns) of W and the matching 64 entries of x are staged in shared
// memory with coalesced loads, so the serial sum reads on-chip memory instead of waiting on a
// global load per column. blockDim.x must be at most 128.
#define GEMV_CHUNK 64
#define GEMV_STRIDE (GEMV_CHUNK + 1) // one pad column: rows map to different banks
extern "C" __global__ void gemv(const float* w, const float* x, float* y, unsigned rows, unsigned cols) {
    __shared__ float tile[128 * GEMV_STRIDE];
    __shared__ float xs[GEMV_CHUNK];
    unsigned t = threadIdx.x, n = blockDim.x;
    unsigned row0 = blockIdx.x * n;
    unsigned r = row0 + t;
    float acc = 0.0f;
    for (unsigned c0 = 0; c0 < cols; c0 += GEMV_CHUNK) {
        unsigned width = cols - c0 < GEMV_CHUNK ? cols - c0 : GEMV_CHUNK;
        for (unsigned i = t; i < n * GEMV_CHUNK; i += n) {
            unsigned tr = i / GEMV_CHUNK, tc = i % GEMV_CHUNK;
            if (row0 + tr < rows && tc < width)
                tile[tr * GEMV_STRIDE + tc] = w[(size_t)(row0 + tr) * cols + c0 + tc];
        }
        for (unsigned i = t; i < width; i += n) xs[i] = x[c0 + i];
        __syncthreads();
        if (r < rows)
            for (unsigned c = 0; c < width; c++) acc += tile[t * GEMV_STRIDE + c] * xs[c];
        __syncthreads();
    }
    if (r < rows) y[r] = acc;
}
