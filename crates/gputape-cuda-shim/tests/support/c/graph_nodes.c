/* A program that builds a CUDA graph node by node, as cudaGraphAddKernelNode and friends do:
 * a memset node filling `w`, a `scale` kernel node on `x` depending on it, and a copy node
 * (a CUDA_MEMCPY3D, device to device) from `z` to `y` depending on the kernel, and a copy
 * node from `y` to host memory after that. The graph is instantiated once and launched twice,
 * `z` changed between the launches; after each, `w`, `y` and `x` are read back, and what the
 * last node wrote to the host is printed. `graph_nodes N` then makes N more small uploads, so
 * a flight recorder's ring wraps past the graph's making. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

int cuGraphCreate(void **graph, unsigned flags);
int cuGraphAddMemsetNode(void **node, void *graph, void **deps, size_t n,
                         const MemsetNodeParams *p, void *ctx);
int cuGraphAddKernelNode_v2(void **node, void *graph, void **deps, size_t n,
                            const KernelNodeParams *p);
int cuGraphAddMemcpyNode(void **node, void *graph, void **deps, size_t n, const Memcpy3D *p,
                         void *ctx);
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
int cuGraphLaunch(void *exec, void *stream);

static const char ptx[] = SCALE_PTX;

int main(int argc, char **argv) {
    CUdeviceptr x, y, z, w;
    void *m, *f, *g, *e, *n1, *n2, *n3, *n4;
    float host[16], back[16], seen[16] = {0};
    int n = 16, bad = 0;
    float k = 2.0f;
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuMemAlloc_v2(&y, sizeof host);
    bad |= cuMemAlloc_v2(&z, sizeof host);
    bad |= cuMemAlloc_v2(&w, sizeof host);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    bad |= cuMemcpyHtoD_v2(z, host, sizeof host);
    bad |= cuGraphCreate(&g, 0);
    MemsetNodeParams ms = {w, 0, 0x3f3f3f3fu, 4, 16, 1};
    bad |= cuGraphAddMemsetNode(&n1, g, NULL, 0, &ms, NULL);
    void *params[] = {&x, &n, &k};
    KernelNodeParams kp = {f, {1, 1, 1}, {16, 1, 1}, 0, params, NULL, NULL, NULL};
    bad |= cuGraphAddKernelNode_v2(&n2, g, &n1, 1, &kp);
    Memcpy3D c;
    memset(&c, 0, sizeof c);
    c.src_type = 2, c.src_device = z, c.src_pitch = sizeof host, c.src_height = 1;
    c.dst_type = 2, c.dst_device = y, c.dst_pitch = sizeof host, c.dst_height = 1;
    c.width = sizeof host, c.height = 1, c.depth = 1;
    bad |= cuGraphAddMemcpyNode(&n3, g, &n2, 1, &c, NULL);
    Memcpy3D h = c;
    h.src_device = y;
    h.dst_type = 1, h.dst_device = 0, h.dst_host = seen;
    bad |= cuGraphAddMemcpyNode(&n4, g, &n3, 1, &h, NULL);
    bad |= cuGraphInstantiateWithFlags(&e, g, 0);
    for (int launch = 1; launch <= 2; launch++) {
        bad |= cuGraphLaunch(e, NULL);
        bad |= cuStreamSynchronize(NULL);
        bad |= cuMemcpyDtoH_v2(back, w, sizeof back);
        printf("launch %d: w[3] = %.4f", launch, back[3]);
        bad |= cuMemcpyDtoH_v2(back, y, sizeof back);
        printf(", y[3] = %g", back[3]);
        bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
        printf(", x[3] = %g, seen[3] = %g, errors %d\n", back[3], seen[3], bad);
        for (int i = 0; i < 16; i++) host[i] += 100.0f;
        bad |= cuMemcpyHtoD_v2(z, host, sizeof host);
    }
    int more = argc > 1 ? atoi(argv[1]) : 0;
    for (int i = 0; i < more; i++) bad |= cuMemcpyHtoD_v2(z, host, sizeof host);
    return bad;
}
