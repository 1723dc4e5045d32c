/* A program that launches with cuLaunchKernelEx attributes, as CUTLASS- and FlashInfer-style
 * code does: a launch on stream s1 with a priority, programmatic stream serialization and a
 * launch completion event, then stream s2 waits for that event and launches after it; the
 * result is read back. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>
#include <stddef.h>

int cuLaunchKernelEx(const LaunchConfig *c, void *f, void **params, void **extra);
int cuEventCreate(void **event, unsigned flags);
int cuStreamWaitEvent(void *stream, void *event, unsigned flags);

static const char ptx[] = SCALE_PTX;

int main(void) {
    CUdeviceptr x;
    void *m, *f, *s1, *s2, *done;
    float host[16], back[16];
    int n = 16, bad = 0;
    float k2 = 2.0f, k3 = 3.0f;
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    bad |= cuStreamCreate(&s1, 1);
    bad |= cuStreamCreate(&s2, 1);
    bad |= cuEventCreate(&done, 0);
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    /* CU_LAUNCH_ATTRIBUTE_PRIORITY (8), _PROGRAMMATIC_STREAM_SERIALIZATION (6),
     * _LAUNCH_COMPLETION_EVENT (12: the event in the value's first 8 bytes). */
    LaunchAttribute attrs[3] = {{8, 0, {1}}, {6, 0, {1}}, {12, 0, {0}}};
    size_t ev = (size_t)done;
    attrs[2].value[0] = (unsigned)ev, attrs[2].value[1] = (unsigned)(ev >> 32);
    LaunchConfig c = {{1, 1, 1}, {16, 1, 1}, 0, s1, attrs, 3};
    void *p2[] = {&x, &n, &k2};
    bad |= cuLaunchKernelEx(&c, f, p2, NULL);
    bad |= cuStreamWaitEvent(s2, done, 0);
    void *p3[] = {&x, &n, &k3};
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s2, p3, NULL);
    bad |= cuStreamSynchronize(s2);
    bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
    printf("attributes: back[3] = %g, errors %d\n", back[3], bad);
    return bad;
}
