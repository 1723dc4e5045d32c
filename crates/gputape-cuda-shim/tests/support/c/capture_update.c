/* A program that gives a captured graph's nodes new parameters, as engines that capture once
 * and patch do: two `scale` launches (by 2, then 3) captured on a stream and instantiated as
 * e, then, after a launch each: e's second node given 5 (cuGraphExecKernelNodeSetParams on a
 * node cuGraphGetNodes listed), the graph's first node given 7 (cuGraphKernelNodeSetParams: e
 * keeps its own), and e updated to the graph (cuGraphExecUpdate_v2). Prints x[3] after each
 * launch. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>
#include <stddef.h>

int cuStreamBeginCapture_v2(void *stream, int mode);
int cuStreamEndCapture(void *stream, void **graph);
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
int cuGraphLaunch(void *exec, void *stream);
int cuGraphGetNodes(void *graph, void **nodes, size_t *n);
int cuGraphKernelNodeSetParams_v2(void *node, const KernelNodeParams *p);
int cuGraphExecKernelNodeSetParams_v2(void *exec, void *node, const KernelNodeParams *p);
int cuGraphExecUpdate_v2(void *exec, void *graph, void *info);

static const char ptx[] = SCALE_PTX;

int main(void) {
    CUdeviceptr x;
    void *m, *f, *s, *g, *e, *nodes[2];
    size_t count = 2;
    float host[16], back[16];
    int n = 16, bad = 0;
    float two = 2.0f, three = 3.0f, five = 5.0f, seven = 7.0f;
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    bad |= cuStreamCreate(&s, 1);
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    void *p2[] = {&x, &n, &two}, *p3[] = {&x, &n, &three};
    bad |= cuStreamBeginCapture_v2(s, 0);
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, p2, NULL);
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, p3, NULL);
    bad |= cuStreamEndCapture(s, &g);
    bad |= cuGraphInstantiateWithFlags(&e, g, 0);
    bad |= cuGraphGetNodes(g, nodes, &count);
    for (int step = 1; step <= 4; step++) {
        void *p5[] = {&x, &n, &five}, *p7[] = {&x, &n, &seven};
        KernelNodeParams k5 = {f, {1, 1, 1}, {16, 1, 1}, 0, p5, NULL, NULL, NULL};
        KernelNodeParams k7 = {f, {1, 1, 1}, {16, 1, 1}, 0, p7, NULL, NULL, NULL};
        if (step == 2) bad |= cuGraphExecKernelNodeSetParams_v2(e, nodes[1], &k5);
        if (step == 3) bad |= cuGraphKernelNodeSetParams_v2(nodes[0], &k7);
        if (step == 4) bad |= cuGraphExecUpdate_v2(e, g, NULL);
        bad |= cuGraphLaunch(e, s);
        bad |= cuStreamSynchronize(s);
        bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
        printf("step %d: x[3] = %g, errors %d\n", step, back[3], bad);
    }
    return bad;
}
