// Wrong numbers in a plain CUDA C++ program (issue 51), for scripts/gpu-nan.sh: three kernels
// of its own (compiled by nvcc, not extern "C", so their mangled names carry their parameter
// types) over one allocation holding three tensors, as a caching allocator would: x = fill,
// y = sqrt(x - shift), z = 2 * y. `nan` as argument makes the shift larger than some of x, so
// sqrt_minus produces NaN and scale_k only carries it. Prints `NAN_COUNT k FIRST i`.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void fill_k(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 1.0f + (float)(i % 7);
}

__global__ void sqrt_minus(float* out, const float* in, float shift, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = sqrtf(in[i] - shift);
}

__global__ void scale_k(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}

int main(int argc, char** argv) {
    bool plant = argc > 1 && strcmp(argv[1], "nan") == 0;
    const int n = 1 << 16;
    float* seg = nullptr;
    if (cudaMalloc(&seg, 3 * n * sizeof(float)) != cudaSuccess) return 2;
    float *x = seg, *y = seg + n, *z = seg + 2 * n;
    int threads = 256, blocks = (n + threads - 1) / threads;
    fill_k<<<blocks, threads>>>(x, n);
    sqrt_minus<<<blocks, threads>>>(y, x, plant ? 3.5f : 0.5f, n);
    scale_k<<<blocks, threads>>>(z, y, 2.0f, n);
    static float host[1 << 16];
    if (cudaMemcpy(host, z, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
    int count = 0, first = -1;
    for (int i = 0; i < n; i++) {
        if (std::isnan(host[i])) {
            if (first < 0) first = i;
            count++;
        }
    }
    printf("NAN_COUNT %d FIRST %d\n", count, first);
    cudaFree(seg);
    return 0;
}
