// A CUDA C++ program built with `nvcc --default-stream per-thread` (issue 50: per-thread
// default streams are streams of their own), for `scripts/gpu-cuda-program.sh per_thread
// --default-stream per-thread`. Two host threads at once each upload a vector, run `axpb` twice
// on their stream 0 (the thread's own default stream), synchronize it and read the result back;
// the main thread then reads thread 0's buffer again through the legacy stream
// (cudaStreamLegacy). Each result is checked against the host's. Exits 0 when every check
// holds, 1 otherwise, 2 when an API call failed.
#include <cstdio>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

__global__ void axpb(float *x, int n, float a, float b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}

static int failed = 0;
#define CK(e)                                                                                 \
    do {                                                                                      \
        cudaError_t r_ = (e);                                                                 \
        if (r_ != cudaSuccess) {                                                              \
            std::printf("per_thread: %s failed: %s\n", #e, cudaGetErrorString(r_));           \
            failed = 2;                                                                       \
        }                                                                                     \
    } while (0)

static const int N = 1 << 16;
static float *bufs[2];
static int wrong[2];

static void work(int t) {
    std::vector<float> host(N), back(N);
    for (int i = 0; i < N; i++) host[i] = float(i % 97) + t;
    CK(cudaMalloc(&bufs[t], N * sizeof(float)));
    CK(cudaMemcpyAsync(bufs[t], host.data(), N * sizeof(float), cudaMemcpyHostToDevice, 0));
    axpb<<<(N + 255) / 256, 256>>>(bufs[t], N, 2.f, float(t));
    axpb<<<(N + 255) / 256, 256>>>(bufs[t], N, 0.5f, 1.f);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(0));
    CK(cudaMemcpy(back.data(), bufs[t], N * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        float want = 0.5f * (2.f * host[i] + t) + 1.f;
        if (back[i] != want) wrong[t]++;
    }
    std::printf("per_thread: thread %d back[5] = %g (want %g), %d wrong\n", t, back[5],
                0.5f * (2.f * host[5] + t) + 1.f, wrong[t]);
}

int main() {
    CK(cudaFree(0));
    std::thread a(work, 0), b(work, 1);
    a.join();
    b.join();
    float v = 0.f;
    CK(cudaMemcpyAsync(&v, bufs[0] + 5, sizeof v, cudaMemcpyDeviceToHost, cudaStreamLegacy));
    CK(cudaStreamSynchronize(cudaStreamLegacy));
    std::printf("per_thread: legacy read of thread 0's [5] = %g\n", v);
    CK(cudaFree(bufs[0]));
    CK(cudaFree(bufs[1]));
    if (failed) return failed;
    return wrong[0] || wrong[1] || v != 0.5f * (2.f * 5.f) + 1.f ? 1 : 0;
}
