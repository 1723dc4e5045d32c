/* A capture during which the capturing thread allocates, as PyTorch's caching allocator does:
 * it switches the thread to relaxed capture mode (cuThreadExchangeStreamCaptureMode), makes
 * the allocation, and switches back. The captured `scale` launch then runs as a graph, and its
 * result is read back. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>

int cuStreamBeginCapture_v2(void *stream, int mode);
int cuThreadExchangeStreamCaptureMode(int *mode);
int cuStreamEndCapture(void *stream, void **graph);
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
int cuGraphLaunch(void *exec, void *stream);

static const char ptx[] = SCALE_PTX;

int main(void) {
    CUdeviceptr x, pool;
    void *m, *f, *s, *g, *e;
    float host[16], back[16];
    int n = 16, bad = 0, mode = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED */
    float k = 4.0f;
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    bad |= cuStreamCreate(&s, 1);
    bad |= cuStreamBeginCapture_v2(s, 0 /* global */);
    bad |= cuThreadExchangeStreamCaptureMode(&mode);
    bad |= cuMemAlloc_v2(&pool, 1024);
    bad |= cuThreadExchangeStreamCaptureMode(&mode);
    void *params[] = {&x, &n, &k};
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, params, NULL);
    bad |= cuStreamEndCapture(s, &g);
    bad |= cuGraphInstantiateWithFlags(&e, g, 0);
    bad |= cuGraphLaunch(e, s);
    bad |= cuStreamSynchronize(s);
    bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
    printf("capture_mode: back[3] = %g, switched back from mode %d, errors %d\n", back[3], mode, bad);
    return bad;
}
