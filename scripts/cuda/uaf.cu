// A CUDA C++ program that uses freed memory (issue 54: from a dump to a bug report), for
// scripts/gpu-bugreport.sh: a kernel copies `a` (scaled) into `out` and the checksum is read
// back; then `a` is freed and the same kernel launched again with the freed pointer. The driver
// may well say nothing (freed memory can stay mapped); compute-sanitizer --tool memcheck names
// an "Invalid __global__ read" in scale_copy. Build with -lineinfo for source lines.
// Exits 0 unless an API call failed.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void scale_copy(const float *a, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] * 3.0f;
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("uaf: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static double checksum(const float *h, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += h[i] * (double)(i % 97 + 1);
    return sum;
}

int main() {
    const int n = 1 << 18; // 1 MiB of floats
    static float h[1 << 18];
    for (int i = 0; i < n; i++) h[i] = (float)(i % 1000) * 0.25f;
    float *a, *out;
    if (check(cudaMalloc(&a, n * sizeof(float)), "cudaMalloc a") ||
        check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc out") ||
        check(cudaMemcpy(a, h, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy a"))
        return 2;
    scale_copy<<<(n + 255) / 256, 256>>>(a, out, n);
    if (check(cudaGetLastError(), "launch 1") ||
        check(cudaMemcpy(h, out, n * sizeof(float), cudaMemcpyDeviceToHost), "read back 1"))
        return 1;
    printf("uaf: launch 1 (a live) checksum %.3f\n", checksum(h, n));
    if (check(cudaFree(a), "cudaFree a")) return 1;
    printf("uaf: a freed; launching scale_copy on it again\n");
    scale_copy<<<(n + 255) / 256, 256>>>(a, out, n); // use after free
    if (check(cudaGetLastError(), "launch 2")) return 1;
    cudaError_t e = cudaDeviceSynchronize();
    printf("uaf: launch 2 (a freed) synchronize: %s\n", cudaGetErrorString(e));
    if (check(e, "cudaDeviceSynchronize") ||
        check(cudaMemcpy(h, out, n * sizeof(float), cudaMemcpyDeviceToHost), "read back 2"))
        return 1;
    printf("uaf: launch 2 checksum %.3f\n", checksum(h, n));
    if (check(cudaFree(out), "cudaFree out")) return 1;
    return 0;
}
