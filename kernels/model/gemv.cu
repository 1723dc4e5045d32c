// y = W x for a row-major W of rows x cols; one thread per row, columns summed in order.
extern "C" __global__ void gemv(const float* w, const float* x, float* y, unsigned rows, unsigned cols) {
    unsigned r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = w + (size_t)r * cols;
    float acc = 0.0f;
    for (unsigned c = 0; c < cols; c++) acc += row[c] * x[c];
    y[r] = acc;
}
