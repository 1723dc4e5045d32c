/* A launch asking for more dynamic shared memory than the default 48 KiB, which needs the
 * function's limit raised first (cuFuncSetAttribute, as CUTLASS-style code and PyTorch's
 * cuKernelSetAttribute do). Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>

int cuInit(unsigned flags);
int cuMemAlloc_v2(CUdeviceptr *p, size_t n);
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
int cuModuleLoadData(void **module, const void *image);
int cuModuleGetFunction(void **f, void *module, const char *name);
int cuFuncSetAttribute(void *f, int attribute, int value);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
int cuCtxSynchronize(void);

static const char ptx[] = "//\n// scale\n.version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry scale(.param .u64 x, .param .u32 n, .param .f32 k)\n"
                          "{ ret; }\n";

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
