// A CUDA C++ program that builds a CUDA graph node by node (issue 53: every call a CUDA program
// makes), for `FAULT=1 scripts/gpu-cuda-program.sh graph_nodes`: a memset node zeroing `acc`, a
// memcpy node uploading a bias (host to device, its host bytes set once), a kernel node
// `axpy_acc` (acc += a*x + b) after both, a second kernel node `square_into` after it, and a
// memcpy node reading the result back into host memory (device to host). Instantiated once and
// launched three times, the input `x` uploaded with cudaMemcpy before each launch; each result,
// as the read-back node left it and as a cudaMemcpy reads it again, checked against the host's.
// (A host-to-device node reads its host bytes at each launch; a recording holds them as they
// were when the node was added, so this program keeps them unchanged.) `./graph_nodes fault`
// runs the third step on the graph built again with its first kernel writing far past `acc`.
// Exits 0 when every check holds, 1 otherwise, 2 when an API call failed.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void axpy_acc(float *acc, const float *x, const float *b, float a, int n,
                         long long bad) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += a * x[i] + b[i];
    if (bad && i == 0) acc[bad] = 1.f; // the planted fault
}

__global__ void square_into(float *y, const float *acc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = acc[i] * acc[i];
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("graph_nodes: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static const int N = 1 << 16;
static float host_x[N], host_b[N], host_y[N], again[N];

// The graph of one step: memset acc, upload b, acc += a*x + b, y = acc^2, read y back.
static int build(cudaGraph_t *g, float *acc, float *x, float *b, float *y, float *a, int *n,
                 long long *bad) {
    cudaGraphNode_t zero, up, k1, k2, down;
    if (check(cudaGraphCreate(g, 0), "cudaGraphCreate")) return 1;
    cudaMemsetParams ms = {};
    ms.dst = acc;
    ms.value = 0;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    if (check(cudaGraphAddMemsetNode(&zero, *g, nullptr, 0, &ms), "memset node")) return 1;
    if (check(cudaGraphAddMemcpyNode1D(&up, *g, nullptr, 0, b, host_b, N * sizeof(float),
                                       cudaMemcpyHostToDevice),
              "upload node"))
        return 1;
    cudaGraphNode_t both[] = {zero, up};
    void *args1[] = {&acc, &x, &b, a, n, bad};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)axpy_acc;
    kp.gridDim = dim3((N + 255) / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args1;
    if (check(cudaGraphAddKernelNode(&k1, *g, both, 2, &kp), "kernel node 1")) return 1;
    void *args2[] = {&y, &acc, n};
    kp.func = (void *)square_into;
    kp.kernelParams = args2;
    if (check(cudaGraphAddKernelNode(&k2, *g, &k1, 1, &kp), "kernel node 2")) return 1;
    if (check(cudaGraphAddMemcpyNode1D(&down, *g, &k2, 1, host_y, y, N * sizeof(float),
                                       cudaMemcpyDeviceToHost),
              "read-back node"))
        return 1;
    return 0;
}

int main(int argc, char **argv) {
    bool fault = argc > 1 && !strcmp(argv[1], "fault");
    float *acc, *x, *b, *y;
    if (check(cudaMalloc(&acc, N * sizeof(float)), "cudaMalloc acc") ||
        check(cudaMalloc(&x, N * sizeof(float)), "cudaMalloc x") ||
        check(cudaMalloc(&b, N * sizeof(float)), "cudaMalloc b") ||
        check(cudaMalloc(&y, N * sizeof(float)), "cudaMalloc y"))
        return 2;
    for (int i = 0; i < N; i++) host_b[i] = (float)(i % 5);
    float a = 3.f;
    int n = N;
    long long bad = 0;
    cudaGraph_t g;
    cudaGraphExec_t e;
    if (build(&g, acc, x, b, y, &a, &n, &bad) ||
        check(cudaGraphInstantiate(&e, g, 0), "instantiate"))
        return 2;
    int wrong = 0;
    for (int step = 1; step <= 3; step++) {
        if (fault && step == 3) {
            // The third step runs a graph built again, its first kernel writing far past acc.
            bad = 1LL << 36;
            if (build(&g, acc, x, b, y, &a, &n, &bad) ||
                check(cudaGraphInstantiate(&e, g, 0), "instantiate (fault)"))
                return 2;
        }
        for (int i = 0; i < N; i++) host_x[i] = (float)((i * step) % 7) - 3.f;
        if (check(cudaMemcpy(x, host_x, N * sizeof(float), cudaMemcpyHostToDevice), "upload x") ||
            check(cudaGraphLaunch(e, 0), "cudaGraphLaunch") ||
            check(cudaStreamSynchronize(0), "cudaStreamSynchronize") ||
            check(cudaMemcpy(again, y, N * sizeof(float), cudaMemcpyDeviceToHost), "read y"))
            return 2;
        int bad_here = 0;
        for (int i = 0; i < N; i++) {
            float v = a * host_x[i] + host_b[i];
            if (host_y[i] != v * v || again[i] != v * v) bad_here++;
        }
        float v5 = a * host_x[5] + host_b[5];
        printf("graph_nodes: step %d y[5] = %g (want %g), %d wrong\n", step, host_y[5], v5 * v5,
               bad_here);
        wrong += bad_here;
    }
    return wrong ? 1 : 0;
}
