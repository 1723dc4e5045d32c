// A CUDA C++ program whose kernel reads a __constant__ table filled with cudaMemcpyToSymbol
// (issue 53: module globals), for scripts/gpu-every-call.sh. Prints one checksum per pass:
// the table is filled, the kernel run, the output read back, twice with different tables.
// Usage: constant [fault]: with `fault`, the second table holds an index far past the output,
// which the kernel writes through (an illegal address raised by a kernel reading the table).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__constant__ float table[16];
__constant__ int shift[1];

__global__ void lookup(const int *idx, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i + shift[0]] = table[idx[i] & 15] * 2.0f;
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("constant: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    bool fault = argc > 1 && strcmp(argv[1], "fault") == 0;
    const int n = 256;
    int hidx[n];
    for (int i = 0; i < n; i++) hidx[i] = (i * 7) % 16;
    int *idx;
    float *out;
    if (check(cudaMalloc(&idx, sizeof hidx), "cudaMalloc") ||
        check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc") ||
        check(cudaMemcpy(idx, hidx, sizeof hidx, cudaMemcpyHostToDevice), "cudaMemcpy"))
        return 2;
    for (int pass = 0; pass < 2; pass++) {
        float h[16];
        for (int i = 0; i < 16; i++) h[i] = i * (pass ? 1.5f : 0.5f);
        int s[1] = {fault && pass == 1 ? (1 << 28) : 0};
        if (check(cudaMemcpyToSymbol(table, h, sizeof h), "cudaMemcpyToSymbol") ||
            check(cudaMemcpyToSymbol(shift, s, sizeof s), "cudaMemcpyToSymbol"))
            return 2;
        lookup<<<1, n>>>(idx, out, n);
        float hout[n];
        if (check(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost), "read back"))
            return 1;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += hout[i] * (i + 1);
        printf("constant: pass %d checksum %.3f\n", pass, sum);
    }
    return 0;
}
