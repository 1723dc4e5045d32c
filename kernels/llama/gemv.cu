// Y[b] = W X[b] (or Y[b] += W X[b] when `accumulate`), W bf16 row-major rows x cols, X and Y
// f32, for a batch of up to MAXB vectors: the skinny matrix product of a decode step, which
// reads every weight once per step and so runs at the speed of memory. A block of 256 threads
// computes ROWS rows, the whole block spread over each row so that even a 4096-row matrix
// fills the device. Thread t reads 8 weights of each row with one 16-byte load, at columns
// 8t, 8t + 2048, ...; for each vector it adds the 8 products in column order with fused
// multiply-adds. A warp's 32 sums meet in the butterfly (xor 16, 8, 4, 2, 1), then the 8
// warps' sums are added in warp order. cols must be a multiple of 8 (the host checks), so every
// row and every activation vector starts 16-byte aligned. The CPU twin adds in this order.
template <int MAXB, int ROWS>
__device__ __forceinline__ void gemv_body(const unsigned short* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, unsigned rows, unsigned cols, unsigned batch, unsigned accumulate) {
    __shared__ float part[8][ROWS][MAXB];
    gputape_pdl_trigger();
    unsigned t = threadIdx.x, lane = t % 32, warp = t / 32;
    unsigned r0 = blockIdx.x * ROWS;
    if (r0 >= rows || blockDim.x != 256) return; // the whole block
    const uint4* wr[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        unsigned row = r0 + r < rows ? r0 + r : r0;
        wr[r] = (const uint4*)(w + (size_t)row * cols);
    }
    float acc[ROWS][MAXB];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int b = 0; b < MAXB; b++) acc[r][b] = 0.0f;
    gputape_pdl_wait();
    unsigned n8 = cols / 8;
    for (unsigned c = t; c < n8; c += 256) {
        float wf[ROWS][8];
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            uint4 q = __ldg(wr[r] + c);
            unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                wf[r][2 * k] = __uint_as_float(u[k] << 16);
                wf[r][2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
            }
        }
#pragma unroll
        for (int b = 0; b < MAXB; b++) {
            if (b < (int)batch) {
                const float4* xb = (const float4*)(x + (size_t)b * cols) + 2 * c;
                float4 x0 = __ldg(xb), x1 = __ldg(xb + 1);
                float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
                for (int r = 0; r < ROWS; r++)
#pragma unroll
                    for (int k = 0; k < 8; k++) acc[r][b] = __fmaf_rn(wf[r][k], xv[k], acc[r][b]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int b = 0; b < MAXB; b++) {
            float s = acc[r][b];
            for (unsigned off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (lane == 0) part[warp][r][b] = s;
        }
    __syncthreads();
    if (t < ROWS * MAXB) {
        unsigned r = t / MAXB, b = t % MAXB;
        if (r0 + r < rows && b < batch) {
            float s = part[0][r][b];
            for (int k = 1; k < 8; k++) s += part[k][r][b];
            float* out = y + (size_t)b * rows + r0 + r;
            *out = accumulate ? *out + s : s;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) gemv_bf16_b1(const unsigned short* w, const float* x, float* y, unsigned rows, unsigned cols, unsigned batch, unsigned accumulate) {
    gemv_body<1, 4>(w, x, y, rows, cols, batch, accumulate);
}
extern "C" __global__ void __launch_bounds__(256) gemv_bf16_b4(const unsigned short* w, const float* x, float* y, unsigned rows, unsigned cols, unsigned batch, unsigned accumulate) {
    gemv_body<4, 4>(w, x, y, rows, cols, batch, accumulate);
}
extern "C" __global__ void __launch_bounds__(256) gemv_bf16_b16(const unsigned short* w, const float* x, float* y, unsigned rows, unsigned cols, unsigned batch, unsigned accumulate) {
    // Four rows a block: each activation load serves four rows (run 44: 728 GB/s of weights
    // against 660 with two, on a 28672 x 4096 matrix).
    gemv_body<16, 4>(w, x, y, rows, cols, batch, accumulate);
}
