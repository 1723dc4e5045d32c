// A CUDA C++ program that hands its results to its host side through host functions (issue 53:
// every call a CUDA program makes), for `FAULT=1 scripts/gpu-cuda-program.sh host_func`. Each of
// three steps uploads an input, `scale` multiplies it on the device, the product comes back
// asynchronously into pinned memory, a host function queued after that copy
// (cudaLaunchHostFunc) sums it on the host, and a stream callback (cudaStreamAddCallback) counts
// the step; then `shift` adds one on the device, read back with cudaMemcpy. A fourth and fifth
// step launch a CUDA graph captured once from the same work, the host function a host node of
// it. Each step prints the host function's sum and the read back beside the host's own.
// `./host_func fault` plants a write far past the output in step 3's `shift`, the kernel after a
// host function. Exits 0 when every sum is right, 1 otherwise, 2 when an API call failed.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void scale(const float *x, float *y, int n, float by) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * by;
}

__global__ void shift(float *y, int n, long long bad) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1.f;
    if (bad && i == 0) y[bad] = 0.f; // the planted fault
}

struct Sum {
    const float *from; // pinned: where the async copy landed
    int n;
    double total;
};

// Runs on a driver thread once the copy before it on the stream is done.
static void sum_on_host(void *p) {
    Sum *s = (Sum *)p;
    double t = 0;
    for (int i = 0; i < s->n; i++) t += s->from[i];
    s->total = t;
}

static int steps_done;
static void count_step(cudaStream_t, cudaError_t status, void *) {
    if (status == cudaSuccess) steps_done++;
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("host_func: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    bool fault = argc > 1 && !strcmp(argv[1], "fault");
    const int n = 1 << 16, threads = 256, blocks = (n + threads - 1) / threads;
    float *h, *back, *x, *y;
    cudaStream_t s;
    if (check(cudaMallocHost(&h, n * sizeof(float)), "cudaMallocHost h") ||
        check(cudaMallocHost(&back, n * sizeof(float)), "cudaMallocHost back") ||
        check(cudaMalloc(&x, n * sizeof(float)), "cudaMalloc x") ||
        check(cudaMalloc(&y, n * sizeof(float)), "cudaMalloc y") ||
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"))
        return 2;
    Sum sum = {back, n, 0};
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    int wrong = 0;
    for (int step = 1; step <= 5; step++) {
        double want = 0, want_last = 0;
        for (int i = 0; i < n; i++) {
            h[i] = (float)((i * step) % 7) * 0.5f;
            want += h[i] * 2.f * step;
        }
        want_last = h[n - 1] * 2.f * step + 1.f;
        long long bad = (fault && step == 3) ? (1LL << 36) : 0;
        float by = 2.f * step, last = 0;
        if (check(cudaMemcpyAsync(x, h, n * sizeof(float), cudaMemcpyHostToDevice, s), "upload"))
            return 2;
        if (step <= 3) {
            scale<<<blocks, threads, 0, s>>>(x, y, n, by);
            if (check(cudaMemcpyAsync(back, y, n * sizeof(float), cudaMemcpyDeviceToHost, s),
                      "read back") ||
                check(cudaLaunchHostFunc(s, sum_on_host, &sum), "cudaLaunchHostFunc") ||
                check(cudaStreamAddCallback(s, count_step, nullptr, 0), "cudaStreamAddCallback"))
                return 2;
        } else {
            // The graph's scale factor is its capture's (step 4's): step 5 reruns step 4's.
            if (!exec) {
                if (check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
                          "cudaStreamBeginCapture"))
                    return 2;
                scale<<<blocks, threads, 0, s>>>(x, y, n, by);
                if (check(cudaMemcpyAsync(back, y, n * sizeof(float), cudaMemcpyDeviceToHost, s),
                          "captured read back") ||
                    check(cudaLaunchHostFunc(s, sum_on_host, &sum), "captured host function") ||
                    check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture") ||
                    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate"))
                    return 2;
            }
            if (check(cudaGraphLaunch(exec, s), "cudaGraphLaunch")) return 2;
            steps_done++;
            want = 0;
            for (int i = 0; i < n; i++) want += h[i] * 8.f;
            want_last = h[n - 1] * 8.f + 1.f;
        }
        shift<<<blocks, threads, 0, s>>>(y, n, bad);
        if (check(cudaMemcpyAsync(&last, y + n - 1, sizeof(float), cudaMemcpyDeviceToHost, s),
                  "last") ||
            check(cudaStreamSynchronize(s), "cudaStreamSynchronize"))
            return 2;
        bool ok = sum.total == want && last == (float)want_last && steps_done == step;
        wrong += !ok;
        printf("step %d: host function's sum %.1f (want %.1f), last %.1f (want %.1f), steps %d %s\n",
               step, sum.total, want, last, want_last, steps_done, ok ? "ok" : "WRONG");
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    return wrong ? 1 : 0;
}
