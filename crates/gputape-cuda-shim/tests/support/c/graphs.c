/* An engine that captures its step into a CUDA graph and launches the graph each step: the
 * step (two launches of `scale`) captured once in relaxed mode on a stream of its own (with an
 * allocation between them, as PyTorch's graph pool makes one mid-capture), then
 * STEPS steps of an upload, a graph launch, an async read back and a stream sync; at step
 * FAULT an eager launch runs off the end of device memory and the sync reports it.
 * Usage: graphs STEPS FAULT (FAULT past STEPS: no fault). Linked with -lcuda. */
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned flags);
int cuMemAlloc_v2(CUdeviceptr *p, size_t n);
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream);
int cuModuleLoadData(void **module, const void *image);
int cuModuleGetFunction(void **f, void *module, const char *name);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
int cuStreamCreate(void **stream, unsigned flags);
int cuStreamSynchronize(void *stream);
int cuStreamBeginCapture_v2(void *stream, int mode);
int cuStreamEndCapture(void *stream, void **graph);
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
int cuGraphLaunch(void *exec, void *stream);
int cuGraphExecDestroy(void *exec);
int cuGraphDestroy(void *graph);

static const char ptx[] = "//\n// scale\n.version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry scale(.param .u64 x, .param .u32 n, .param .f32 k)\n"
                          "{ ret; }\n";

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 3, fault = argc > 2 ? atoi(argv[2]) : 1 << 30;
    CUdeviceptr x, pool;
    void *m, *f, *s, *g, *e;
    float in[16], out[16];
    int n = 16, big = 1 << 30;
    float two = 2.0f, three = 3.0f;
    void *p2[] = {&x, &n, &two}, *p3[] = {&x, &n, &three}, *pbad[] = {&x, &big, &two};
    if (cuInit(0) || cuMemAlloc_v2(&x, sizeof in) || cuModuleLoadData(&m, ptx) ||
        cuModuleGetFunction(&f, m, "scale") || cuStreamCreate(&s, 1) ||
        cuStreamBeginCapture_v2(s, 2) ||
        cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, p2, NULL) || cuMemAlloc_v2(&pool, 256) ||
        cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, p3, NULL) || cuStreamEndCapture(s, &g) ||
        cuGraphInstantiateWithFlags(&e, g, 0)) {
        fprintf(stderr, "graphs: setup failed\n");
        return 2;
    }
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < 16; i++) in[i] = (float)(step + i);
        int r = cuMemcpyHtoD_v2(x, in, sizeof in);
        r = r ? r : cuGraphLaunch(e, s);
        if (step == fault) r = r ? r : cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, pbad, NULL);
        r = r ? r : cuMemcpyDtoHAsync_v2(out, x, sizeof out, s);
        r = r ? r : cuStreamSynchronize(s);
        if (r) {
            printf("graphs: step %d failed with %d\n", step, r);
            return 1;
        }
    }
    if (cuGraphExecDestroy(e) || cuGraphDestroy(g)) return 2;
    printf("graphs: %d steps, out[1] = %g\n", steps, out[1]);
    return 0;
}
