// A CUDA C++ program that launches with cudaLaunchKernelEx attributes (issue 53: every call a
// CUDA program makes), for `scripts/gpu-cuda-program.sh launch_attrs`. Each of three steps, on
// stream a: `first` fills `x`, then `second` (programmatic dependent launch: it may start
// before `first` ends and waits in cudaGridDependencySynchronize) squares it into `y` at high
// priority and records a launch completion event (it fires once every block of `second` has
// begun, so what waits for it must not read `second`'s output); stream b waits for that event
// and `third` writes its own `z`. `y` and `z` are read back and checked against the host's.
// Exits 0 when every check holds, 1 otherwise, 2 when an API call failed.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void first(float *x, int n, float base) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = base + (float)(i % 13);
    cudaTriggerProgrammaticLaunchCompletion();
}

__global__ void second(const float *x, float *y, int n) {
    cudaGridDependencySynchronize();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}

__global__ void third(float *z, int n, float base) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = base * (float)(i % 7);
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("launch_attrs: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static const int N = 1 << 16;
static float got[N];

int main() {
    float *x, *y, *z;
    cudaStream_t a, b;
    cudaEvent_t done;
    int lo, hi;
    if (check(cudaMalloc(&x, N * sizeof(float)), "cudaMalloc x") ||
        check(cudaMalloc(&y, N * sizeof(float)), "cudaMalloc y") ||
        check(cudaMalloc(&z, N * sizeof(float)), "cudaMalloc z") ||
        check(cudaDeviceGetStreamPriorityRange(&lo, &hi), "priority range") ||
        check(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "stream a") ||
        check(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "stream b") ||
        check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event"))
        return 2;
    int wrong = 0;
    for (int step = 1; step <= 3; step++) {
        float base = (float)step;
        first<<<(N + 255) / 256, 256, 0, a>>>(x, N, base);
        cudaLaunchAttribute at[3];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        at[1].id = cudaLaunchAttributePriority;
        at[1].val.priority = hi;
        at[2].id = cudaLaunchAttributeLaunchCompletionEvent;
        at[2].val.launchCompletionEvent.event = done;
        at[2].val.launchCompletionEvent.flags = 0;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((N + 255) / 256);
        cfg.blockDim = dim3(256);
        cfg.stream = a;
        cfg.attrs = at;
        cfg.numAttrs = 3;
        if (check(cudaLaunchKernelEx(&cfg, second, (const float *)x, y, N), "second") ||
            check(cudaStreamWaitEvent(b, done, 0), "wait"))
            return 2;
        third<<<(N + 255) / 256, 256, 0, b>>>(z, N, base);
        static float zs[N];
        if (check(cudaGetLastError(), "third") || check(cudaStreamSynchronize(b), "sync b") ||
            check(cudaStreamSynchronize(a), "sync a") ||
            check(cudaMemcpy(got, y, N * sizeof(float), cudaMemcpyDeviceToHost), "read y") ||
            check(cudaMemcpy(zs, z, N * sizeof(float), cudaMemcpyDeviceToHost), "read z"))
            return 2;
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float v = base + (float)(i % 13);
            bad += got[i] != v * v || zs[i] != base * (float)(i % 7);
        }
        float v5 = base + 5.f;
        printf("launch_attrs: step %d y[5] = %g (want %g), z[5] = %g, %d wrong\n", step, got[5],
               v5 * v5, zs[5], bad);
        wrong += bad;
    }
    return wrong ? 1 : 0;
}
