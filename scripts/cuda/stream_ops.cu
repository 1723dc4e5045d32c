// A CUDA C++ program that signals between streams through memory (issue 53: every call a CUDA
// program makes; stream memory operations), for `FAULT=1 scripts/gpu-cuda-program.sh
// stream_ops`. Each of four steps: `produce` on stream p fills `buf` slowly (it spins ~2 ms
// first), then cuStreamWriteValue32 writes the step's number to `flag` on p; on stream c,
// cuStreamWaitValue32 waits for that number (equal) before `consume` doubles `buf` into `out`.
// Steps 3 and 4 queue the write and the wait as one-operation batches (cuStreamBatchMemOp), the
// write's batch with a memory barrier after it. Without the wait, `consume` would read `buf` before `produce` wrote it. The driver's stream
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
typedef CUresult (*BatchMemOp)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned);

static const int N = 1 << 16;
static float got[N];

int main(int argc, char **argv) {
    bool fault = argc > 1 && !strcmp(argv[1], "fault");
    void *w = nullptr, *v = nullptr, *bm = nullptr;
    cudaDriverEntryPointQueryResult q1, q2, q3;
    if (check(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &w, 12000,
                                               cudaEnableDefault, &q1),
              "entry point cuStreamWriteValue32") ||
        check(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &v, 12000,
                                               cudaEnableDefault, &q2),
              "entry point cuStreamWaitValue32") ||
        check(cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", &bm, 12000,
                                               cudaEnableDefault, &q3),
              "entry point cuStreamBatchMemOp") ||
        !w || !v || !bm)
        return 2;
    WriteValue32 write_value = (WriteValue32)w;
    WaitValue32 wait_value = (WaitValue32)v;
    BatchMemOp batch = (BatchMemOp)bm;
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
        if (check(cudaGetLastError(), "produce")) return 2;
        if (step <= 2) {
            if (write_value(p, (CUdeviceptr)flag, (cuuint32_t)step, 0) != CUDA_SUCCESS ||
                wait_value(c, (CUdeviceptr)flag, (cuuint32_t)step, CU_STREAM_WAIT_VALUE_EQ) !=
                    CUDA_SUCCESS)
                return 2;
        } else {
            CUstreamBatchMemOpParams ops[2], wait[1];
            memset(ops, 0, sizeof ops);
            memset(wait, 0, sizeof wait);
            ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
            ops[0].writeValue.address = (CUdeviceptr)flag;
            ops[0].writeValue.value = (cuuint32_t)step;
            ops[1].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
            ops[1].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
            wait[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
            wait[0].waitValue.address = (CUdeviceptr)flag;
            wait[0].waitValue.value = (cuuint32_t)step;
            wait[0].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
            CUresult e1 = batch(p, 2, ops, 0), e2 = batch(c, 1, wait, 0);
            if (e1 != CUDA_SUCCESS || e2 != CUDA_SUCCESS) {
                printf("stream_ops: cuStreamBatchMemOp failed: %d %d\n", (int)e1, (int)e2);
                return 2;
            }
        }
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
