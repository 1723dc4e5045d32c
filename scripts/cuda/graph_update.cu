// A CUDA C++ program that changes graphs after making them, as engines that build their own
// graphs do (issue 53: every call a CUDA program makes), for
// `FAULT=1 scripts/gpu-cuda-program.sh graph_update`. Graph G: a memset node zeroing `z`, a
// kernel node `affine` (y = k*x + c) after it, a host node `tally` after that. Then, `x`
// uploaded anew before each launch and every result checked against the host's:
//   1. e made from G and launched;
//   2. e's kernel node given new parameters (cudaGraphExecKernelNodeSetParams: k, c and its
//      output buffer y2), e launched;
//   3. G's kernel node given new parameters (cudaGraphKernelNodeSetParams): e, launched, keeps
//      its own;
//   4. e2 made from G (the new parameters), launched;
//   5. e2's kernel node turned off (cudaGraphNodeSetEnabled), e2 launched: y keeps step 4's;
//   6. graph H captured from a stream (the same three kinds, other parameters) given to e
//      (cudaGraphExecUpdate), e launched;
//   7. eh made from H, its kernel node (as cudaGraphGetNodes lists it) given new parameters,
//      eh launched;
//   8. e's kernel node (G's, which the update paired with H's) given new parameters, e
//      launched;
//   9. graph P: G as a child graph node, then a kernel node doubling y; made and launched.
// `./graph_update fault` gives e's kernel node, in step 2, an output offset far past y2.
// Exits 0 when every check holds, 1 otherwise, 2 when an API call failed.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void affine(float *y, const float *x, float k, float c, int n, long long bad) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = k * x[i] + c;
    if (bad && i == 0) y[bad] = 1.f; // the planted fault
}

__global__ void twice(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= 2.f;
}

static int tally_runs;
static void CUDART_CB tally(void *) { tally_runs++; }

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("graph_update: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static const int N = 1 << 16;
static float host_x[N], got[N];
static float *x, *y, *y2, *z;
static int n = N;
static long long no_fault = 0;

// Kernel node parameters for affine(out, x, k, c, n, bad), held where the driver reads them.
struct Affine {
    float *out;
    float k, c;
    long long bad;
    void *args[6];
    cudaKernelNodeParams p;
    Affine(float *o, float k_, float c_, long long b) : out(o), k(k_), c(c_), bad(b) {
        args[0] = &out, args[1] = &x, args[2] = &k, args[3] = &c, args[4] = &n, args[5] = &bad;
        memset(&p, 0, sizeof p);
        p.func = (void *)affine;
        p.gridDim = dim3((N + 255) / 256);
        p.blockDim = dim3(256);
        p.kernelParams = args;
    }
};

// Uploads a new x for step `step`, launches `e`, waits, and checks `out` against k*x + c
// (times `times`); `keep`: out should still hold `kept` (the kernel did not run).
static int launch(int step, cudaGraphExec_t e, float *out, float k, float c, float times,
                  int tally_want, const float *kept = nullptr) {
    for (int i = 0; i < N; i++) host_x[i] = (float)((i * (step + 1)) % 11) - 5.f;
    if (check(cudaMemcpy(x, host_x, N * sizeof(float), cudaMemcpyHostToDevice), "upload x") ||
        check(cudaGraphLaunch(e, 0), "cudaGraphLaunch") ||
        check(cudaStreamSynchronize(0), "cudaStreamSynchronize") ||
        check(cudaMemcpy(got, out, N * sizeof(float), cudaMemcpyDeviceToHost), "read back"))
        return -1;
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        float want = kept ? kept[i] : (k * host_x[i] + c) * times;
        wrong += got[i] != want;
    }
    float want5 = kept ? kept[5] : (k * host_x[5] + c) * times;
    printf("graph_update: step %d y[5] = %g (want %g), host node runs %d (want %d), %d wrong\n",
           step, got[5], want5, tally_runs, tally_want, wrong);
    return wrong + (tally_runs != tally_want);
}

int main(int argc, char **argv) {
    bool fault = argc > 1 && !strcmp(argv[1], "fault");
    if (check(cudaMalloc(&x, N * sizeof(float)), "cudaMalloc x") ||
        check(cudaMalloc(&y, N * sizeof(float)), "cudaMalloc y") ||
        check(cudaMalloc(&y2, N * sizeof(float)), "cudaMalloc y2") ||
        check(cudaMalloc(&z, N * sizeof(float)), "cudaMalloc z"))
        return 2;
    cudaGraph_t g, h, p;
    cudaGraphExec_t e, e2, ep;
    cudaGraphNode_t zero, kern, host, child, dbl;
    if (check(cudaGraphCreate(&g, 0), "cudaGraphCreate")) return 2;
    cudaMemsetParams ms = {};
    ms.dst = z;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    Affine a1(y, 2.f, 1.f, no_fault);
    cudaHostNodeParams hp = {tally, nullptr};
    if (check(cudaGraphAddMemsetNode(&zero, g, nullptr, 0, &ms), "memset node") ||
        check(cudaGraphAddKernelNode(&kern, g, &zero, 1, &a1.p), "kernel node") ||
        check(cudaGraphAddHostNode(&host, g, &kern, 1, &hp), "host node") ||
        check(cudaGraphInstantiate(&e, g, 0), "instantiate e"))
        return 2;
    int wrong = 0, w;
#define STEP(call)                                                                             \
    if ((w = (call)) < 0) return 2;                                                            \
    wrong += w;
    STEP(launch(1, e, y, 2.f, 1.f, 1.f, 1));

    Affine a2(y2, 3.f, -1.f, fault ? (1LL << 36) : no_fault);
    if (check(cudaGraphExecKernelNodeSetParams(e, kern, &a2.p), "exec kernel node params"))
        return 2;
    STEP(launch(2, e, y2, 3.f, -1.f, 1.f, 2));

    Affine a3(y, 5.f, 0.f, no_fault);
    if (check(cudaGraphKernelNodeSetParams(kern, &a3.p), "graph kernel node params")) return 2;
    STEP(launch(3, e, y2, 3.f, -1.f, 1.f, 3));

    if (check(cudaGraphInstantiate(&e2, g, 0), "instantiate e2")) return 2;
    STEP(launch(4, e2, y, 5.f, 0.f, 1.f, 4));
    static float step4[N];
    memcpy(step4, got, sizeof step4);

    if (check(cudaGraphNodeSetEnabled(e2, kern, 0), "node set enabled")) return 2;
    STEP(launch(5, e2, y, 0.f, 0.f, 1.f, 5, step4));

    cudaStream_t s;
    if (check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream") ||
        check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture") ||
        check(cudaMemsetAsync(z, 0, N * sizeof(float), s), "memset") ||
        check(cudaLaunchKernel((void *)affine, dim3((N + 255) / 256), dim3(256),
                               Affine(y, 7.f, 2.f, no_fault).args, 0, s),
              "captured affine") ||
        check(cudaLaunchHostFunc(s, tally, nullptr), "captured host function") ||
        check(cudaStreamEndCapture(s, &h), "end capture"))
        return 2;
    cudaGraphExecUpdateResultInfo info;
    cudaError_t up = cudaGraphExecUpdate(e, h, &info);
    if (up != cudaSuccess) {
        // Not the same topology for the driver: made again instead, as engines fall back.
        printf("graph_update: update refused (%s, result %d): instantiating H\n",
               cudaGetErrorString(up), (int)info.result);
        cudaGetLastError();
        if (check(cudaGraphExecDestroy(e), "destroy e") ||
            check(cudaGraphInstantiate(&e, h, 0), "instantiate H"))
            return 2;
    }
    STEP(launch(6, e, y, 7.f, 2.f, 1.f, 6));

    // A captured graph's node given new parameters in an executable made from it (the node
    // as cudaGraphGetNodes lists it), then e's kernel node (G's, paired with H's by the
    // update) given new parameters too.
    cudaGraphExec_t eh;
    cudaGraphNode_t hn[8], hk = nullptr;
    size_t nh = 8;
    if (check(cudaGraphInstantiate(&eh, h, 0), "instantiate H") ||
        check(cudaGraphGetNodes(h, hn, &nh), "nodes of H"))
        return 2;
    for (size_t i = 0; i < nh; i++) {
        cudaGraphNodeType t;
        if (check(cudaGraphNodeGetType(hn[i], &t), "node type")) return 2;
        if (t == cudaGraphNodeTypeKernel) hk = hn[i];
    }
    Affine a7(y, 9.f, 1.f, no_fault);
    if (!hk || check(cudaGraphExecKernelNodeSetParams(eh, hk, &a7.p), "captured node params"))
        return 2;
    STEP(launch(7, eh, y, 9.f, 1.f, 1.f, 7));
    Affine a8(y, 11.f, 0.f, no_fault);
    if (up == cudaSuccess &&
        check(cudaGraphExecKernelNodeSetParams(e, kern, &a8.p), "updated exec node params"))
        return 2;
    if (up == cudaSuccess) {
        STEP(launch(8, e, y, 11.f, 0.f, 1.f, 8));
    } else {
        STEP(launch(8, e, y, 7.f, 2.f, 1.f, 8));
    }

    void *twice_args[] = {&y, &n};
    cudaKernelNodeParams tp = {};
    tp.func = (void *)twice;
    tp.gridDim = dim3((N + 255) / 256);
    tp.blockDim = dim3(256);
    tp.kernelParams = twice_args;
    if (check(cudaGraphCreate(&p, 0), "cudaGraphCreate P") ||
        check(cudaGraphAddChildGraphNode(&child, p, nullptr, 0, g), "child graph node") ||
        check(cudaGraphAddKernelNode(&dbl, p, &child, 1, &tp), "twice node") ||
        check(cudaGraphInstantiate(&ep, p, 0), "instantiate P"))
        return 2;
    STEP(launch(9, ep, y, 5.f, 0.f, 2.f, 9));

    if (check(cudaGraphExecDestroy(e), "destroy") || check(cudaGraphExecDestroy(e2), "destroy") ||
        check(cudaGraphExecDestroy(eh), "destroy") ||
        check(cudaGraphExecDestroy(ep), "destroy") || check(cudaGraphDestroy(g), "destroy") ||
        check(cudaGraphDestroy(h), "destroy") || check(cudaGraphDestroy(p), "destroy"))
        return 2;
    printf("graph_update: %d wrong in all\n", wrong);
    return wrong ? 1 : 0;
}
