/* A program that launches one kernel cooperatively twice, as cudaLaunchCooperativeKernel does
 * (cuLaunchCooperativeKernel) and as CUTLASS-style code does (cuLaunchKernelEx with the
 * cooperative attribute), and reads the result back. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>
#include <stddef.h>

int cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shmem, void *stream,
                              void **params);
int cuLaunchKernelEx(const LaunchConfig *c, void *f, void **params, void **extra);

static const char ptx[] = SCALE_PTX;

int main(void) {
    CUdeviceptr x;
    void *m, *f;
    float host[16], back[16];
    int n = 16, bad = 0;
    float k2 = 2.0f, k3 = 3.0f;
    for (int i = 0; i < 16; i++) host[i] = (float)(i * i);
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    void *p2[] = {&x, &n, &k2};
    bad |= cuLaunchCooperativeKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, p2);
    LaunchAttribute coop = {2, 0, {1}};
    LaunchConfig c = {{1, 1, 1}, {16, 1, 1}, 0, NULL, &coop, 1};
    void *p3[] = {&x, &n, &k3};
    bad |= cuLaunchKernelEx(&c, f, p3, NULL);
    bad |= cuStreamSynchronize(NULL);
    bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
    printf("cooperative: back[3] = %g, errors %d\n", back[3], bad);
    return bad;
}
