/* A program that changes graphs after making them, as engines that build their own graphs
 * do: graph A (a memset node on `w`, a `scale` kernel node on `x`, a host node counting its
 * runs) is instantiated as eA and launched; then eA's memset node gets a new value and its
 * kernel node a new buffer (`cuGraphExec*NodeSetParams`), A's own memset node a third value
 * and its kernel node a new factor (`cuGraph*NodeSetParams`: later instantiations only), eB is
 * made from A and launched, its memset node turned off (`cuGraphNodeSetEnabled`), a clone C of
 * A given to eA (`cuGraphExecUpdate_v2`), and graph D (a memset node on `z`, then A as a child
 * graph) made and launched. After each launch `w`, `x`, `y` and `z` are read back and printed.
 * Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>
#include <stddef.h>
#include <string.h>

typedef struct {
    void (*fn)(void *);
    void *data;
} HostNodeParams;

int cuGraphCreate(void **graph, unsigned flags);
int cuGraphAddMemsetNode(void **node, void *graph, void **deps, size_t n,
                         const MemsetNodeParams *p, void *ctx);
int cuGraphAddKernelNode_v2(void **node, void *graph, void **deps, size_t n,
                            const KernelNodeParams *p);
int cuGraphAddHostNode(void **node, void *graph, void **deps, size_t n, const HostNodeParams *p);
int cuGraphAddChildGraphNode(void **node, void *graph, void **deps, size_t n, void *child);
int cuGraphClone(void **clone, void *original);
int cuGraphKernelNodeSetParams_v2(void *node, const KernelNodeParams *p);
int cuGraphExecKernelNodeSetParams_v2(void *exec, void *node, const KernelNodeParams *p);
int cuGraphMemsetNodeSetParams(void *node, const MemsetNodeParams *p);
int cuGraphExecMemsetNodeSetParams(void *exec, void *node, const MemsetNodeParams *p, void *ctx);
int cuGraphNodeSetEnabled(void *exec, void *node, unsigned on);
int cuGraphExecUpdate_v2(void *exec, void *graph, void *info);
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
int cuGraphLaunch(void *exec, void *stream);
int cuGraphExecDestroy(void *exec);
int cuGraphDestroy(void *graph);

static const char ptx[] = SCALE_PTX;
static int runs;
static void count(void *data) { (void)data, runs++; }

static CUdeviceptr x, y, z, w;
static int bad;

static void launch(const char *what, void *exec) {
    unsigned wv[16], zv[16];
    float xv[16], yv[16];
    bad |= cuGraphLaunch(exec, NULL);
    bad |= cuStreamSynchronize(NULL);
    bad |= cuMemcpyDtoH_v2(wv, w, sizeof wv);
    bad |= cuMemcpyDtoH_v2(xv, x, sizeof xv);
    bad |= cuMemcpyDtoH_v2(yv, y, sizeof yv);
    bad |= cuMemcpyDtoH_v2(zv, z, sizeof zv);
    printf("%s: w[3] = %#x, x[3] = %g, y[3] = %g, z[3] = %#x, host node runs %d, errors %d\n", what,
           wv[3], xv[3], yv[3], zv[3], runs, bad);
}

int main(void) {
    void *m, *f, *a, *c, *d, *ea, *eb, *ed, *nset, *nscale, *nhost, *nz, *nchild;
    float host[16];
    unsigned zero[16] = {0};
    int n = 16;
    float two = 2.0f, three = 3.0f, five = 5.0f;
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuMemAlloc_v2(&y, sizeof host);
    bad |= cuMemAlloc_v2(&z, sizeof host);
    bad |= cuMemAlloc_v2(&w, sizeof host);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    bad |= cuMemcpyHtoD_v2(y, host, sizeof host);
    bad |= cuMemcpyHtoD_v2(z, zero, sizeof zero);

    bad |= cuGraphCreate(&a, 0);
    MemsetNodeParams ms = {w, 0, 0x01010101u, 4, 16, 1};
    bad |= cuGraphAddMemsetNode(&nset, a, NULL, 0, &ms, NULL);
    void *on_x[] = {&x, &n, &two};
    KernelNodeParams kp = {f, {1, 1, 1}, {16, 1, 1}, 0, on_x, NULL, NULL, NULL};
    bad |= cuGraphAddKernelNode_v2(&nscale, a, &nset, 1, &kp);
    HostNodeParams hp = {count, NULL};
    bad |= cuGraphAddHostNode(&nhost, a, &nscale, 1, &hp);
    bad |= cuGraphInstantiateWithFlags(&ea, a, 0);
    launch("eA", ea);

    /* The executable's own nodes: eA only. */
    ms.value = 0x02020202u;
    bad |= cuGraphExecMemsetNodeSetParams(ea, nset, &ms, NULL);
    void *on_y[] = {&y, &n, &three};
    kp.params = on_y;
    bad |= cuGraphExecKernelNodeSetParams_v2(ea, nscale, &kp);
    launch("eA changed", ea);

    /* The graph's own nodes: instantiations from here. */
    ms.value = 0x03030303u;
    bad |= cuGraphMemsetNodeSetParams(nset, &ms);
    void *on_x5[] = {&x, &n, &five};
    kp.params = on_x5;
    bad |= cuGraphKernelNodeSetParams_v2(nscale, &kp);
    launch("eA again", ea);
    bad |= cuGraphInstantiateWithFlags(&eb, a, 0);
    launch("eB", eb);

    /* A node turned off in eB: w keeps what it was given. */
    bad |= cuGraphNodeSetEnabled(eb, nset, 0);
    bad |= cuMemcpyHtoD_v2(w, zero, sizeof zero);
    launch("eB without its memset", eb);

    /* eA given a clone of A as it is now. */
    bad |= cuGraphClone(&c, a);
    bad |= cuGraphExecUpdate_v2(ea, c, NULL);
    launch("eA updated", ea);

    /* A child graph. */
    bad |= cuGraphCreate(&d, 0);
    MemsetNodeParams mz = {z, 0, 0x04040404u, 4, 16, 1};
    bad |= cuGraphAddMemsetNode(&nz, d, NULL, 0, &mz, NULL);
    bad |= cuGraphAddChildGraphNode(&nchild, d, &nz, 1, a);
    bad |= cuGraphInstantiateWithFlags(&ed, d, 0);
    launch("eD", ed);

    bad |= cuGraphExecDestroy(ea);
    bad |= cuGraphExecDestroy(eb);
    bad |= cuGraphExecDestroy(ed);
    bad |= cuGraphDestroy(a);
    bad |= cuGraphDestroy(c);
    bad |= cuGraphDestroy(d);
    printf("errors %d\n", bad);
    return bad;
}
