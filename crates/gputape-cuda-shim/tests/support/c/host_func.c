/* Host functions on a stream, as a program that hands results to its host side makes them: a
 * value set on the device and copied back asynchronously, a host function that takes it once
 * the copy is done (cuLaunchHostFunc), and a stream callback after it (cuStreamAddCallback);
 * then the copy and the host function captured into a graph, which is launched once. Linked
 * with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>

int cuLaunchHostFunc(void *stream, void (*fn)(void *), void *data);
int cuStreamAddCallback(void *stream, void (*cb)(void *, int, void *), void *data,
                        unsigned flags);
int cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t n, void *stream);
int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream);
int cuStreamBeginCapture_v2(void *stream, int mode);
int cuStreamEndCapture(void *stream, void **graph);
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
int cuGraphLaunch(void *exec, void *stream);

static unsigned back, seen;
static int callbacks;

static void take(void *p) { seen = *(unsigned *)p; }
static void count(void *stream, int status, void *p) {
    (void)stream;
    if (status == 0) ++*(int *)p;
}

int main(void) {
    CUdeviceptr x;
    void *s, *g = NULL, *e = NULL;
    int bad = cuInit(0);
    bad |= cuMemAlloc_v2(&x, 4);
    bad |= cuStreamCreate(&s, 1);
    bad |= cuMemsetD32Async(x, 0x5e5e5e5eu, 1, s);
    bad |= cuMemcpyDtoHAsync_v2(&back, x, 4, s);
    bad |= cuLaunchHostFunc(s, take, &back);
    bad |= cuStreamAddCallback(s, count, &callbacks, 0);
    bad |= cuStreamSynchronize(s);
    bad |= cuStreamBeginCapture_v2(s, 1);
    bad |= cuMemcpyDtoHAsync_v2(&back, x, 4, s);
    bad |= cuLaunchHostFunc(s, take, &back);
    bad |= cuStreamEndCapture(s, &g);
    bad |= cuGraphInstantiateWithFlags(&e, g, 0);
    bad |= cuGraphLaunch(e, s);
    bad |= cuStreamSynchronize(s);
    printf("host_func: seen %x, callbacks %d, errors %d\n", seen, callbacks, bad);
    return bad;
}
