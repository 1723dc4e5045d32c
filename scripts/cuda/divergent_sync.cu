// A barrier only some threads of a block reach (`__syncthreads()` inside a branch on the
// thread's index): undefined behaviour that compute-sanitizer's synccheck reports, for
// scripts/gpu-synccheck.sh (the parser's sample report of that tool). Exits 0; its output is
// not checked (the barrier's result is what the bug makes undefined).
#include <cstdio>
#include <cuda_runtime.h>

__global__ void half_barrier(float *x) {
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x];
    if (threadIdx.x < 16) __syncthreads(); // the bug: the other threads never arrive
    x[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

int main() {
    float *x;
    if (cudaMalloc(&x, 64 * sizeof(float)) != cudaSuccess) return 2;
    cudaMemset(x, 0, 64 * sizeof(float));
    half_barrier<<<1, 64>>>(x);
    cudaError_t e = cudaDeviceSynchronize();
    std::printf("divergent_sync: %s\n", cudaGetErrorString(e));
    cudaFree(x);
    return 0;
}
