/* A program that uses the driver the way an engine does, for the call log: allocations, an
 * upload, a module with a kernel launched on a stream of its own, a memset, a device copy, an
 * async read back settled by a stream sync, a call the shim does not understand, frees.
 * Linked with -lcuda, like linked.c. */
#include <stdio.h>
#include <stddef.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned flags);
int cuMemAlloc_v2(CUdeviceptr *p, size_t n);
int cuMemFree_v2(CUdeviceptr p);
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
int cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n);
int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream);
int cuMemsetD32_v2(CUdeviceptr dst, unsigned value, size_t n);
int cuModuleLoadData(void **module, const void *image);
int cuModuleGetFunction(void **f, void *module, const char *name);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
int cuStreamCreate(void **stream, unsigned flags);
int cuStreamSynchronize(void *stream);
int cuMemcpyAtoH_v2(void *dst, void *array, size_t offset, size_t n);

static const char ptx[] = "//\n// scale\n.version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry scale(.param .u64 x, .param .u32 n, .param .f32 k)\n"
                          "{ ret; }\n";

int main(void) {
    CUdeviceptr x, y;
    void *m, *f, *s;
    float host[16], out[16];
    int n = 16, bad = 0;
    float k = 3.0f;
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuMemAlloc_v2(&y, 32);
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    bad |= cuStreamCreate(&s, 1);
    void *params[] = {&x, &n, &k};
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, params, NULL);
    bad |= cuMemsetD32_v2(y, 0x01020304u, 8);
    bad |= cuMemcpyDtoD_v2(y, x + 8, 8);
    bad |= cuMemcpyDtoHAsync_v2(out, x, sizeof out, s);
    bad |= cuMemcpyAtoH_v2(NULL, NULL, 0, 0);
    bad |= cuStreamSynchronize(s);
    bad |= cuMemFree_v2(y);
    bad |= cuMemFree_v2(x);
    printf("records: out[5] = %g, errors %d\n", out[5], bad);
    return bad;
}
