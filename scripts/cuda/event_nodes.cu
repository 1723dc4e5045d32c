// A CUDA C++ program whose graph, built node by node, joins other streams through event nodes
// (issue 53: every call a CUDA program makes), for `FAULT=1 scripts/gpu-cuda-program.sh
// event_nodes`. Each of three steps: stream s uploads `x` and records `ready`; the graph (on
// stream g) waits for `ready` (an event wait node), runs `shift` (x[i] += step, a kernel
// node) and records `done` (an event record node); stream s waits for `done` and copies `x`
// into `y`, which is read back and checked. Without the event nodes, `shift` could run before
// the upload, or the copy before `shift`. `./event_nodes fault` builds the graph with `shift`
// writing far past `x` and runs it in step 2. Exits 0 when every check holds, 1 otherwise, 2
// when an API call failed.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void shift(float *x, int n, float by, long long bad) {
    long long t0 = clock64();
    while (clock64() - t0 < 2000000) {
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += by;
    if (bad && i == 0) x[bad] = 0.f; // the planted fault
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("event_nodes: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static const int N = 1 << 16;
static float host[N], got[N];

int main(int argc, char **argv) {
    bool fault = argc > 1 && !strcmp(argv[1], "fault");
    float *x, *y;
    cudaStream_t s, g;
    cudaEvent_t ready, done;
    if (check(cudaMalloc(&x, N * sizeof(float)), "cudaMalloc x") ||
        check(cudaMalloc(&y, N * sizeof(float)), "cudaMalloc y") ||
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream s") ||
        check(cudaStreamCreateWithFlags(&g, cudaStreamNonBlocking), "stream g") ||
        check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "event ready") ||
        check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event done"))
        return 2;
    int wrong = 0;
    for (int step = 1; step <= 3; step++) {
        // Each step's graph: wait for `ready`, shift by the step, record `done`.
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaGraphNode_t wait, k, rec;
        int n = N;
        float by = (float)step;
        long long bad = fault && step == 2 ? (1LL << 36) : 0;
        void *args[] = {&x, &n, &by, &bad};
        cudaKernelNodeParams kp = {};
        kp.func = (void *)shift;
        kp.gridDim = dim3((N + 255) / 256);
        kp.blockDim = dim3(256);
        kp.kernelParams = args;
        if (check(cudaGraphCreate(&graph, 0), "cudaGraphCreate") ||
            check(cudaGraphAddEventWaitNode(&wait, graph, nullptr, 0, ready), "wait node") ||
            check(cudaGraphAddKernelNode(&k, graph, &wait, 1, &kp), "kernel node") ||
            check(cudaGraphAddEventRecordNode(&rec, graph, &k, 1, done), "record node") ||
            check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate"))
            return 2;
        for (int i = 0; i < N; i++) host[i] = (float)(i % 23) + 10.f * (float)step;
        if (check(cudaMemcpyAsync(x, host, N * sizeof(float), cudaMemcpyHostToDevice, s),
                  "upload x") ||
            check(cudaEventRecord(ready, s), "record ready") ||
            check(cudaGraphLaunch(exec, g), "cudaGraphLaunch") ||
            check(cudaStreamWaitEvent(s, done, 0), "wait done") ||
            check(cudaMemcpyAsync(y, x, N * sizeof(float), cudaMemcpyDeviceToDevice, s),
                  "copy y") ||
            check(cudaStreamSynchronize(s), "sync s") ||
            check(cudaMemcpy(got, y, N * sizeof(float), cudaMemcpyDeviceToHost), "read y") ||
            check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy") ||
            check(cudaGraphDestroy(graph), "cudaGraphDestroy"))
            return 2;
        int bad_here = 0;
        for (int i = 0; i < N; i++) bad_here += got[i] != host[i] + by;
        printf("event_nodes: step %d y[5] = %g (want %g), %d wrong\n", step, got[5], host[5] + by,
               bad_here);
        wrong += bad_here;
    }
    return wrong ? 1 : 0;
}
