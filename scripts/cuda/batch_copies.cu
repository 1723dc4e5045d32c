// A CUDA C++ program that copies in batches (issue 53: every call a CUDA program makes;
// cudaMemcpyBatchAsync, CUDA 12.8+), for `scripts/gpu-cuda-program.sh batch_copies`. Each of
// three steps uploads four host arrays (pinned) to four device buffers in one batch, `add4`
// sums them into `s` on the device, and a second batch reads `s` back to pinned memory and
// copies it to a second device buffer (the copies of a batch run in no set order, so none
// depends on another); a plain cudaMemcpy reads the copy back; a batch of 3D copies
// (cudaMemcpy3DBatchAsync) takes a tile of 16 rows of 64 floats, 128 floats apart, out of `s`
// into `tile`, packed, and another reads `tile` back to pinned memory. Each result is checked
// against the host's. Exits 0 when every check holds, 1 otherwise, 2 when an API call failed.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void add4(const float *a, const float *b, const float *c, const float *d, float *s,
                     int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) s[i] = a[i] + b[i] + c[i] + d[i];
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("batch_copies: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static const int N = 1 << 15;

// One batch of `count` copies on `s`, the sources read in stream order.
static cudaError_t batch(void **dsts, void **srcs, size_t *sizes, size_t count, cudaStream_t s) {
    cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t first = 0;
#if CUDART_VERSION >= 13000
    return cudaMemcpyBatchAsync(dsts, srcs, sizes, count, &attr, &first, 1, s);
#else
    size_t fail = 0;
    return cudaMemcpyBatchAsync(dsts, srcs, sizes, count, &attr, &first, 1, &fail, s);
#endif
}

// A 3D copy operand: a pointer whose rows are `row` bytes apart, its layers `rows` rows.
static cudaMemcpy3DOperand operand(void *p, size_t row, size_t rows) {
    cudaMemcpy3DOperand o;
    memset(&o, 0, sizeof o);
    o.type = cudaMemcpyOperandTypePointer;
    o.op.ptr.ptr = p;
    o.op.ptr.rowLength = row;
    o.op.ptr.layerHeight = rows;
    return o;
}

// One batch of one 3D copy on `s` of `height` rows of `width` bytes (between pointers an
// element is a byte).
static cudaError_t batch_3d(void *dst, size_t dst_row, void *src, size_t src_row, size_t width,
                            size_t height, cudaStream_t s) {
    cudaMemcpy3DBatchOp op;
    memset(&op, 0, sizeof op);
    op.src = operand(src, src_row, height);
    op.dst = operand(dst, dst_row, height);
    op.extent = make_cudaExtent(width, height, 1);
    op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
#if CUDART_VERSION >= 13000
    return cudaMemcpy3DBatchAsync(1, &op, 0, s);
#else
    size_t fail = 0;
    return cudaMemcpy3DBatchAsync(1, &op, &fail, 0, s);
#endif
}

static const int TILE_W = 64, TILE_H = 16, ROW = 128;

int main() {
    float *h[4], *back, *dev[4], *sum, *copy;
    static float again[N];
    cudaStream_t s;
    if (check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream")) return 2;
    for (int k = 0; k < 4; k++)
        if (check(cudaMallocHost(&h[k], N * sizeof(float)), "cudaMallocHost") ||
            check(cudaMalloc(&dev[k], N * sizeof(float)), "cudaMalloc"))
            return 2;
    float *tile, *tile_back;
    if (check(cudaMalloc(&tile, TILE_W * TILE_H * sizeof(float)), "cudaMalloc tile") ||
        check(cudaMallocHost(&tile_back, TILE_W * TILE_H * sizeof(float)), "cudaMallocHost tile"))
        return 2;
    if (check(cudaMallocHost(&back, N * sizeof(float)), "cudaMallocHost back") ||
        check(cudaMalloc(&sum, N * sizeof(float)), "cudaMalloc sum") ||
        check(cudaMalloc(&copy, N * sizeof(float)), "cudaMalloc copy"))
        return 2;
    int wrong = 0;
    for (int step = 1; step <= 3; step++) {
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < N; i++) h[k][i] = (float)(((i + k) * step) % 9) - 4.f;
        void *up_d[4], *up_s[4];
        size_t sizes[4];
        for (int k = 0; k < 4; k++) up_d[k] = dev[k], up_s[k] = h[k], sizes[k] = N * sizeof(float);
        if (check(batch(up_d, up_s, sizes, 4, s), "upload batch")) return 2;
        add4<<<(N + 255) / 256, 256, 0, s>>>(dev[0], dev[1], dev[2], dev[3], sum, N);
        void *dn_d[2] = {back, copy}, *dn_s[2] = {sum, sum};
        if (check(cudaGetLastError(), "add4") || check(batch(dn_d, dn_s, sizes, 2, s), "batch") ||
            check(batch_3d(tile, TILE_W * sizeof(float), sum, ROW * sizeof(float),
                           TILE_W * sizeof(float), TILE_H, s),
                  "3D batch (tile)") ||
            check(batch_3d(tile_back, TILE_W * TILE_H * sizeof(float), tile,
                           TILE_W * TILE_H * sizeof(float), TILE_W * TILE_H * sizeof(float), 1, s),
                  "3D batch (read back)") ||
            check(cudaStreamSynchronize(s), "sync") ||
            check(cudaMemcpy(again, copy, N * sizeof(float), cudaMemcpyDeviceToHost), "read"))
            return 2;
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float w = h[0][i] + h[1][i] + h[2][i] + h[3][i];
            bad += back[i] != w || again[i] != w;
        }
        for (int r = 0; r < TILE_H; r++)
            for (int c = 0; c < TILE_W; c++)
                bad += tile_back[r * TILE_W + c] != back[r * ROW + c];
        printf("batch_copies: step %d s[9] = %g (want %g), %d wrong\n", step, back[9],
               h[0][9] + h[1][9] + h[2][9] + h[3][9], bad);
        wrong += bad;
    }
    return wrong ? 1 : 0;
}
