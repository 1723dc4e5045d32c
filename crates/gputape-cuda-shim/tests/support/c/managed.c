/* A program on managed memory, as cudaMallocManaged programs are written: the host fills the
 * buffer with plain stores, a memset and a kernel change it on the device, and the host reads
 * the results with plain loads after cudaDeviceSynchronize (cuCtxSynchronize), then after
 * cudaStreamSynchronize(0) (all the work was on the legacy stream), then after a blocking
 * cudaMemcpy of the results; between the steps the host changes one element. No copy moves
 * the bytes the host writes. Linked with -lcuda. */
#include "cuda_types.h"
#include <stdio.h>
#include <stddef.h>

int cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags);
int cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t n, void *stream);

static const char ptx[] = SCALE_PTX;

int main(void) {
    CUdeviceptr m;
    void *mod, *f;
    int n = 16, bad = cuInit(0);
    float k = 2.0f;
    bad |= cuModuleLoadData(&mod, ptx);
    bad |= cuModuleGetFunction(&f, mod, "scale");
    bad |= cuMemAllocManaged(&m, 16 * sizeof(float), 1);
    float *x = (float *)(size_t)m;
    for (int i = 0; i < 16; i++) x[i] = (float)i;
    /* Elements 8..11 set on the device (every byte 0x3f). */
    bad |= cuMemsetD32Async(m + 8 * sizeof(float), 0x3f3f3f3fu, 4, NULL);
    bad |= cuCtxSynchronize();
    printf("step 1: x[3] = %g, x[9] = %.4f, errors %d\n", x[3], x[9], bad);
    x[3] = 100.0f;
    void *p[] = {&m, &n, &k};
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, p, NULL);
    bad |= cuStreamSynchronize(NULL);
    printf("step 2: x[3] = %g, x[4] = %g, errors %d\n", x[3], x[4], bad);
    float back[16];
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, p, NULL);
    bad |= cuMemcpyDtoH_v2(back, m, sizeof back);
    x[4] = 1000.0f;
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, p, NULL);
    bad |= cuCtxSynchronize();
    printf("step 3: back[4] = %g, x[4] = %g, errors %d\n", back[4], x[4], bad);
    return bad;
}
