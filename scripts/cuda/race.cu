// A CUDA C++ program with a shared-memory race (issue 54: from a dump to a bug report), for
// scripts/gpu-bugreport.sh: each thread of a block stores its value in sh[threadIdx.x] and,
// with no __syncthreads() between, reads its neighbour's sh[threadIdx.x + 1], which that
// thread (in another warp at each warp's edge) may not have written yet: compute-sanitizer
// --tool racecheck reports a read-after-write hazard in neighbor_sum. No fault; three
// launches, a checksum each. Build with -lineinfo for source lines.
#include <cstdio>
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void neighbor_sum(const float *in, float *out, int n) {
    __shared__ float sh[BLOCK];
    int t = threadIdx.x, i = blockIdx.x * BLOCK + t;
    sh[t] = i < n ? in[i] : 0.0f;
    // __syncthreads() belongs here
    float right = sh[(t + 1) % BLOCK];
    if (i < n) out[i] = sh[t] + right;
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("race: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

int main() {
    const int n = 64 * BLOCK;
    static float h[64 * BLOCK];
    float *in, *out;
    if (check(cudaMalloc(&in, n * sizeof(float)), "cudaMalloc in") ||
        check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc out"))
        return 2;
    for (int pass = 0; pass < 3; pass++) {
        for (int i = 0; i < n; i++) h[i] = (float)((i * 13 + pass) % 101) * 0.5f;
        if (check(cudaMemcpy(in, h, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy in"))
            return 1;
        neighbor_sum<<<n / BLOCK, BLOCK>>>(in, out, n);
        if (check(cudaGetLastError(), "launch") ||
            check(cudaMemcpy(h, out, n * sizeof(float), cudaMemcpyDeviceToHost), "read back"))
            return 1;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += h[i] * (double)(i % 89 + 1);
        printf("race: launch %d checksum %.3f\n", pass, sum);
    }
    if (check(cudaFree(in), "cudaFree in") || check(cudaFree(out), "cudaFree out")) return 1;
    return 0;
}
