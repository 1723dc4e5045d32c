/* A graph built node by node with event nodes, as a program that joins a graph to its other
 * streams does: stream s fills `x` and records `ready`; the graph waits for `ready` (an event
 * wait node), sets the second half of `x` to bytes 0x3f (a memset node) and records `done` (an event
 * record node); it is launched on stream g, and stream s waits for `done` before it copies `x`
 * to `y`. Both read back. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>

int cuGraphCreate(void **graph, unsigned flags);
int cuGraphAddMemsetNode(void **node, void *graph, void **deps, size_t n,
                         const MemsetNodeParams *p, void *ctx);
int cuGraphAddEventRecordNode(void **node, void *graph, void **deps, size_t n, void *event);
int cuGraphAddEventWaitNode(void **node, void *graph, void **deps, size_t n, void *event);
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
int cuGraphLaunch(void *exec, void *stream);
int cuEventCreate(void **event, unsigned flags);
int cuEventRecord(void *event, void *stream);
int cuStreamWaitEvent(void *stream, void *event, unsigned flags);
int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream);
int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream);

int main(void) {
    CUdeviceptr x, y;
    void *s, *gs, *ready, *done, *g, *e, *n1, *n2, *n3;
    float host[16], back[16], copy[16];
    int bad = 0;
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuMemAlloc_v2(&y, sizeof host);
    bad |= cuStreamCreate(&s, 1);
    bad |= cuStreamCreate(&gs, 1);
    bad |= cuEventCreate(&ready, 0);
    bad |= cuEventCreate(&done, 0);
    bad |= cuGraphCreate(&g, 0);
    bad |= cuGraphAddEventWaitNode(&n1, g, NULL, 0, ready);
    MemsetNodeParams ms = {x + 32, 0, 0x3f3f3f3fu, 4, 8, 1};
    bad |= cuGraphAddMemsetNode(&n2, g, &n1, 1, &ms, NULL);
    bad |= cuGraphAddEventRecordNode(&n3, g, &n2, 1, done);
    bad |= cuGraphInstantiateWithFlags(&e, g, 0);
    bad |= cuMemcpyHtoDAsync_v2(x, host, sizeof host, s);
    bad |= cuEventRecord(ready, s);
    bad |= cuGraphLaunch(e, gs);
    bad |= cuStreamWaitEvent(s, done, 0);
    bad |= cuMemcpyDtoDAsync_v2(y, x, sizeof host, s);
    bad |= cuStreamSynchronize(s);
    bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
    bad |= cuMemcpyDtoH_v2(copy, y, sizeof copy);
    printf("event_nodes: x[5] = %g, x[12] = %.4f, y[12] = %.4f, errors %d\n", back[5], back[12],
           copy[12], bad);
    return bad;
}
