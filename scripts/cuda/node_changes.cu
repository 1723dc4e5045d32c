// A CUDA C++ program that changes graphs node by node after building them (issue 53: every
// call a CUDA program makes), for `scripts/gpu-cuda-program.sh node_changes`: a graph of two
// kernel nodes (`fill` x with 1, `fill` y with 2) loses its second (cudaGraphDestroyNode)
// before it is instantiated and launched; a graph whose one node is child graph c1 (`fill` z
// with 5) is instantiated and launched, then its executable's child node is given c2 (`fill`
// z with 7: cudaGraphExecChildGraphNodeSetParams) and launched again. Each buffer is read back
// and checked after. Exits 0 when every check holds, 1 otherwise, 2 when an API call failed.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(float *p, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("node_changes: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static const int N = 1 << 12;
static float got[N];

// Node `node` of `g`, after `deps`: fill(p, N, *v) (the value read when the node is added).
static int add_fill(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps,
                    size_t ndeps, float **p, int *n, float *v) {
    void *args[] = {p, n, v};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)fill;
    kp.gridDim = dim3((N + 255) / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    return check(cudaGraphAddKernelNode(node, g, deps, ndeps, &kp), "kernel node");
}

// How many of `p`'s N floats are not `want`.
static int wrong_in(const float *p, float want, const char *name) {
    if (check(cudaMemcpy(got, p, N * sizeof(float), cudaMemcpyDeviceToHost), name)) return -1;
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += got[i] != want;
    printf("node_changes: %s[5] = %g (want %g), %d wrong\n", name, got[5], want, wrong);
    return wrong;
}

int main() {
    float *x, *y, *z;
    int n = N;
    float one = 1.f, two = 2.f, five = 5.f, seven = 7.f;
    cudaGraph_t g, c1, c2, p;
    cudaGraphNode_t a, b, k1, k2, child;
    cudaGraphExec_t e1, ep;
    if (check(cudaMalloc(&x, N * sizeof(float)), "cudaMalloc") ||
        check(cudaMalloc(&y, N * sizeof(float)), "cudaMalloc") ||
        check(cudaMalloc(&z, N * sizeof(float)), "cudaMalloc") ||
        check(cudaMemset(y, 0, N * sizeof(float)), "memset y") ||
        check(cudaGraphCreate(&g, 0), "cudaGraphCreate") ||
        add_fill(&a, g, nullptr, 0, &x, &n, &one) || add_fill(&b, g, &a, 1, &y, &n, &two) ||
        check(cudaGraphDestroyNode(b), "cudaGraphDestroyNode") ||
        check(cudaGraphInstantiate(&e1, g, 0), "instantiate g") ||
        check(cudaGraphLaunch(e1, 0), "launch g") || check(cudaDeviceSynchronize(), "sync"))
        return 2;
    int wrong = wrong_in(x, 1.f, "x") + wrong_in(y, 0.f, "y");
    if (check(cudaGraphCreate(&c1, 0), "cudaGraphCreate") ||
        add_fill(&k1, c1, nullptr, 0, &z, &n, &five) ||
        check(cudaGraphCreate(&c2, 0), "cudaGraphCreate") ||
        add_fill(&k2, c2, nullptr, 0, &z, &n, &seven) ||
        check(cudaGraphCreate(&p, 0), "cudaGraphCreate") ||
        check(cudaGraphAddChildGraphNode(&child, p, nullptr, 0, c1), "child node") ||
        check(cudaGraphInstantiate(&ep, p, 0), "instantiate p") ||
        check(cudaGraphLaunch(ep, 0), "launch p") || check(cudaDeviceSynchronize(), "sync"))
        return 2;
    wrong += wrong_in(z, 5.f, "z");
    if (check(cudaGraphExecChildGraphNodeSetParams(ep, child, c2), "child node set") ||
        check(cudaGraphLaunch(ep, 0), "launch p again") || check(cudaDeviceSynchronize(), "sync"))
        return 2;
    wrong += wrong_in(z, 7.f, "z");
    return wrong ? 1 : 0;
}
