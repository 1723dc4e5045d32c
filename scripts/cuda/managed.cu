// A CUDA C++ program on unified memory, as the CUDA samples write one (for
// `scripts/gpu-cuda-program.sh managed`): cudaMallocManaged buffers filled on the host with
// plain stores, a kernel run on them, results read on the host with plain loads after
// cudaDeviceSynchronize, three steps, the host changing the input between steps. No cudaMemcpy
// moves these bytes. Exits 0 when every result is right, 1 otherwise, 2 when an API call
// failed.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        std::printf("managed: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

int main() {
    const int n = 1 << 20;
    float *x, *y;
    if (check(cudaMallocManaged(&x, n * sizeof(float)), "cudaMallocManaged x") ||
        check(cudaMallocManaged(&y, n * sizeof(float)), "cudaMallocManaged y"))
        return 2;
    for (int i = 0; i < n; i++) {
        x[i] = float(i % 10);
        y[i] = 1.f;
    }
    int wrong = 0;
    for (int step = 1; step <= 3; step++) {
        saxpy<<<(n + 255) / 256, 256>>>(2.f, x, y, n);
        if (check(cudaGetLastError(), "launch") ||
            check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
            return 2;
        // y = 1 + 2 * (x_1 + ... + x_step), x changed on the host after each step.
        int bad = 0;
        for (int i = 0; i < n; i++) {
            float want = 1.f;
            for (int s = 1; s <= step; s++) want += 2.f * float((i + s - 1) % 10);
            if (y[i] != want) bad++;
        }
        std::printf("managed: step %d y[7] = %g, %d wrong\n", step, y[7], bad);
        wrong += bad;
        for (int i = 0; i < n; i++) x[i] = float((i + step) % 10);
    }
    cudaFree(x);
    cudaFree(y);
    return wrong ? 1 : 0;
}
