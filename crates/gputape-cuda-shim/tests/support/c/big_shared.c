/* A launch asking for more dynamic shared memory than the default 48 KiB, which needs the
 * function's limit raised first (cuFuncSetAttribute, as CUTLASS-style code and PyTorch's
 * cuKernelSetAttribute do). Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>

int cuFuncSetAttribute(void *f, int attribute, int value);

static const char ptx[] = SCALE_PTX;

int main(void) {
    CUdeviceptr x;
    void *m, *f;
    float host[16], back[16];
    int n = 16, bad = 0;
    float k = 5.0f;
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    bad |= cuFuncSetAttribute(f, 8 /* MAX_DYNAMIC_SHARED_SIZE_BYTES */, 96 * 1024);
    void *p[] = {&x, &n, &k};
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 96 * 1024, NULL, p, NULL);
    bad |= cuCtxSynchronize();
    bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
    printf("big_shared: back[3] = %g, errors %d\n", back[3], bad);
    return bad;
}
