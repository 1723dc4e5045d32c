// A CUDA C++ program that signals between streams through memory (issue 53: every call a CUDA
// program makes; stream memory operations), for `FAULT=1 scripts/gpu-cuda-program.sh
// stream_ops`. Each of four steps: `produce` on stream p fills `buf` slowly (it spins ~2 ms
// first), then cuStreamWriteValue32 writes the step's number to `flag` on p; on stream c,
// cuStreamWaitValue32 waits for that number (equal) before `consume` doubles `buf` into `out`.
// Without the wait, `consume` would read `buf` before `produce` wrote it. The driver's stream
// memory operations are fetched through the runtime (cudaGetDriverEntryPointByVersion), as
// programs that do not link libcuda fetch them. `./stream_ops fault` plants a write far past
// `out` in step 3's `consume`. Exits 0 when every check holds, 1 otherwise, 2 when an API call
// failed.
#include <cstdio>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void produce(float *buf, int n, float base) {
    long long t0 = clock64();
    while (clock64() - t0 < 4000000) {
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] = base + (float)(i % 17);
}

__global__ void consume(const float *buf, float *out, int n, long long bad) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.f * buf[i];
    if (bad && i == 0) out[bad] = 0.f; // the planted fault
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("stream_ops: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

typedef CUresult (*WriteValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef CUresult (*WaitValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);

static const int N = 1 << 16;
static float got[N];

int main(int argc, char **argv) {
    bool fault = argc > 1 && !strcmp(argv[1], "fault");
    void *w = nullptr, *v = nullptr;
    cudaDriverEntryPointQueryResult q1, q2;
    if (check(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &w, 12000,
                                               cudaEnableDefault, &q1),
              "entry point cuStreamWriteValue32") ||
        check(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &v, 12000,
                                               cudaEnableDefault, &q2),
              "entry point cuStreamWaitValue32") ||
        !w || !v)
        return 2;
    WriteValue32 write_value = (WriteValue32)w;
    WaitValue32 wait_value = (WaitValue32)v;
    float *buf, *out;
    unsigned *flag;
    cudaStream_t p, c;
    if (check(cudaMalloc(&buf, N * sizeof(float)), "cudaMalloc buf") ||
        check(cudaMalloc(&out, N * sizeof(float)), "cudaMalloc out") ||
        check(cudaMalloc(&flag, sizeof(unsigned)), "cudaMalloc flag") ||
        check(cudaMemset(flag, 0, sizeof(unsigned)), "memset flag") ||
        check(cudaStreamCreateWithFlags(&p, cudaStreamNonBlocking), "stream p") ||
        check(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking), "stream c"))
        return 2;
    int wrong = 0;
    for (int step = 1; step <= 4; step++) {
        float base = 100.f * (float)step;
        long long bad = fault && step == 3 ? (1LL << 36) : 0;
        produce<<<(N + 255) / 256, 256, 0, p>>>(buf, N, base);
        if (check(cudaGetLastError(), "produce") ||
            write_value(p, (CUdeviceptr)flag, (cuuint32_t)step, 0) != CUDA_SUCCESS ||
            wait_value(c, (CUdeviceptr)flag, (cuuint32_t)step, CU_STREAM_WAIT_VALUE_EQ) !=
                CUDA_SUCCESS)
            return 2;
        consume<<<(N + 255) / 256, 256, 0, c>>>(buf, out, N, bad);
        if (check(cudaGetLastError(), "consume") || check(cudaStreamSynchronize(c), "sync c") ||
            check(cudaMemcpy(got, out, N * sizeof(float), cudaMemcpyDeviceToHost), "read out"))
            return 2;
        int bad_here = 0;
        for (int i = 0; i < N; i++) bad_here += got[i] != 2.f * (base + (float)(i % 17));
        printf("stream_ops: step %d out[5] = %g (want %g), %d wrong\n", step, got[5],
               2.f * (base + 5.f), bad_here);
        wrong += bad_here;
        if (check(cudaStreamSynchronize(p), "sync p")) return 2;
    }
    return wrong ? 1 : 0;
}
