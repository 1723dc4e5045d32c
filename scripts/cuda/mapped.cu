// A CUDA C++ program on pinned host memory the device reads and writes where it lies (issue 53:
// every call a CUDA program makes; zero-copy), for `scripts/gpu-cuda-program.sh mapped`: `x`
// allocated with cudaHostAlloc(cudaHostAllocMapped), `y` the program's own memory registered
// with cudaHostRegister and its device address asked with cudaHostGetDevicePointer. Each of
// three steps: the host writes the inputs with plain stores, `axpy` (y = a*x + y) runs on the
// device reading and writing them in place, and after cudaDeviceSynchronize the host checks y
// with plain loads against its own. A fourth step reads `x` alone (`sum_into`, into device
// memory), read back with cudaMemcpy. No copy moves the mapped bytes. Exits 0 when every check
// holds, 1 otherwise, 2 when an API call failed.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void axpy(const float *x, float *y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void sum_into(const float *x, float *out, int n) {
    __shared__ float part[256];
    int t = threadIdx.x;
    float s = 0.f;
    for (int i = t; i < n; i += blockDim.x) s += x[i];
    part[t] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (t < k) part[t] += part[t + k];
        __syncthreads();
    }
    if (t == 0) *out = part[0];
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("mapped: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static const int N = 1 << 14;

int main() {
    float *x, *xd, *yd, *out;
    float *y = (float *)malloc(N * sizeof(float));
    static float want[N];
    if (check(cudaHostAlloc(&x, N * sizeof(float), cudaHostAllocMapped), "cudaHostAlloc") ||
        check(cudaHostRegister(y, N * sizeof(float), cudaHostRegisterMapped), "cudaHostRegister") ||
        check(cudaHostGetDevicePointer(&xd, x, 0), "device pointer of x") ||
        check(cudaHostGetDevicePointer(&yd, y, 0), "device pointer of y") ||
        check(cudaMalloc(&out, sizeof(float)), "cudaMalloc"))
        return 2;
    int wrong = 0;
    for (int step = 1; step <= 3; step++) {
        float a = (float)step + 0.5f;
        for (int i = 0; i < N; i++) {
            x[i] = (float)((i * step) % 13) - 6.f;
            if (step == 1) y[i] = (float)(i % 5);
            want[i] = a * x[i] + y[i];
        }
        axpy<<<(N + 255) / 256, 256>>>(xd, yd, a, N);
        if (check(cudaGetLastError(), "axpy") || check(cudaDeviceSynchronize(), "sync")) return 2;
        int bad = 0;
        for (int i = 0; i < N; i++) bad += y[i] != want[i];
        printf("mapped: step %d y[7] = %g (want %g), %d wrong\n", step, y[7], want[7], bad);
        wrong += bad;
    }
    double host_sum = 0;
    for (int i = 0; i < N; i++) host_sum += x[i];
    float dev_sum = 0;
    sum_into<<<1, 256>>>(xd, out, N);
    if (check(cudaGetLastError(), "sum_into") ||
        check(cudaMemcpy(&dev_sum, out, sizeof dev_sum, cudaMemcpyDeviceToHost), "read sum"))
        return 2;
    printf("mapped: sum of x on the device %g (host %g)\n", dev_sum, host_sum);
    wrong += dev_sum != (float)host_sum;
    if (check(cudaHostUnregister(y), "cudaHostUnregister") || check(cudaFreeHost(x), "free"))
        return 2;
    free(y);
    return wrong ? 1 : 0;
}
