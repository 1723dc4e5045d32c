// A CUDA C++ program that reads device memory nothing wrote (issue 54: from a dump to a bug
// report), for scripts/gpu-bugreport.sh: a first, clean launch of `twice` on a buffer filled
// with cudaMemcpy, then a second on `src`, allocated and never written (no copy, no memset):
// compute-sanitizer --tool initcheck reports an "Uninitialized __global__ memory read" in
// twice. No fault; the second checksum is whatever the memory held. Build with -lineinfo.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void twice(const float *src, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = src[i] * 2.0f;
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("uninit: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static double checksum(const float *h, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += h[i] * (double)(i % 61 + 1);
    return sum;
}

int main() {
    const int n = 1 << 16;
    static float h[1 << 16];
    for (int i = 0; i < n; i++) h[i] = (float)(i % 500) * 0.125f;
    float *in, *src, *out;
    if (check(cudaMalloc(&in, n * sizeof(float)), "cudaMalloc in") ||
        check(cudaMalloc(&src, n * sizeof(float)), "cudaMalloc src") ||
        check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc out") ||
        check(cudaMemcpy(in, h, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy in"))
        return 2;
    twice<<<(n + 255) / 256, 256>>>(in, out, n);
    if (check(cudaGetLastError(), "launch 1") ||
        check(cudaMemcpy(h, out, n * sizeof(float), cudaMemcpyDeviceToHost), "read back 1"))
        return 1;
    printf("uninit: launch 1 (written input) checksum %.3f\n", checksum(h, n));
    twice<<<(n + 255) / 256, 256>>>(src, out, n); // src was never written
    if (check(cudaGetLastError(), "launch 2") ||
        check(cudaMemcpy(h, out, n * sizeof(float), cudaMemcpyDeviceToHost), "read back 2"))
        return 1;
    printf("uninit: launch 2 (never-written src) checksum %.3f\n", checksum(h, n));
    if (check(cudaFree(in), "cudaFree in") || check(cudaFree(src), "cudaFree src") ||
        check(cudaFree(out), "cudaFree out"))
        return 1;
    return 0;
}
