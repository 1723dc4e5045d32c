/* Graphs changed node by node after they were built: a graph of two memset nodes (`x` to 0x01,
 * `y` to 0x02) loses its second (cuGraphDestroyNode) before it is instantiated and launched;
 * a graph whose one node is child graph c1 (`z` to 0x05) is instantiated and launched, then
 * its executable's child node is given c2 (`z` to 0x07: cuGraphExecChildGraphNodeSetParams)
 * and launched again. Each buffer read back after. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>

int cuGraphCreate(void **graph, unsigned flags);
int cuGraphAddMemsetNode(void **node, void *graph, void **deps, size_t n,
                         const MemsetNodeParams *p, void *ctx);
int cuGraphAddChildGraphNode(void **node, void *graph, void **deps, size_t n, void *child);
int cuGraphDestroyNode(void *node);
int cuGraphExecChildGraphNodeSetParams(void *exec, void *node, void *child);
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
int cuGraphLaunch(void *exec, void *stream);
int cuMemsetD32_v2(CUdeviceptr dst, unsigned value, size_t n);

/* A graph of one memset node setting 4 words at `dst` to `value`. */
static int one_memset(void **graph, CUdeviceptr dst, unsigned value) {
    void *node;
    MemsetNodeParams ms = {dst, 0, value, 4, 4, 1};
    return cuGraphCreate(graph, 0) | cuGraphAddMemsetNode(&node, *graph, NULL, 0, &ms, NULL);
}

int main(void) {
    CUdeviceptr x, y, z;
    void *g, *a, *b, *e1, *c1, *c2, *p, *pn, *ep;
    unsigned bx[4], by[4], z1[4], z2[4];
    int bad = cuInit(0);
    bad |= cuMemAlloc_v2(&x, 16) | cuMemAlloc_v2(&y, 16) | cuMemAlloc_v2(&z, 16);
    bad |= cuMemsetD32_v2(x, 0, 4) | cuMemsetD32_v2(y, 0, 4) | cuMemsetD32_v2(z, 0, 4);
    MemsetNodeParams mx = {x, 0, 0x01010101u, 4, 4, 1}, my = {y, 0, 0x02020202u, 4, 4, 1};
    bad |= cuGraphCreate(&g, 0);
    bad |= cuGraphAddMemsetNode(&a, g, NULL, 0, &mx, NULL);
    bad |= cuGraphAddMemsetNode(&b, g, &a, 1, &my, NULL);
    bad |= cuGraphDestroyNode(b);
    bad |= cuGraphInstantiateWithFlags(&e1, g, 0);
    bad |= cuGraphLaunch(e1, NULL);
    bad |= cuStreamSynchronize(NULL);
    bad |= cuMemcpyDtoH_v2(bx, x, 16) | cuMemcpyDtoH_v2(by, y, 16);
    bad |= one_memset(&c1, z, 0x05050505u) | one_memset(&c2, z, 0x07070707u);
    bad |= cuGraphCreate(&p, 0);
    bad |= cuGraphAddChildGraphNode(&pn, p, NULL, 0, c1);
    bad |= cuGraphInstantiateWithFlags(&ep, p, 0);
    bad |= cuGraphLaunch(ep, NULL);
    bad |= cuStreamSynchronize(NULL);
    bad |= cuMemcpyDtoH_v2(z1, z, 16);
    bad |= cuGraphExecChildGraphNodeSetParams(ep, pn, c2);
    bad |= cuGraphLaunch(ep, NULL);
    bad |= cuStreamSynchronize(NULL);
    bad |= cuMemcpyDtoH_v2(z2, z, 16);
    printf("node_changes: x %08x, y %08x, z %08x then %08x, errors %d\n", bx[0], by[0], z1[0],
           z2[0], bad);
    return bad;
}
