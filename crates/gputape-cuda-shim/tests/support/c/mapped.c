/* A program on pinned host memory the device reads and writes where it lies (zero-copy), as
 * cudaHostAlloc(cudaHostAllocMapped) and cudaHostRegister + cudaHostGetDevicePointer programs
 * are written: `x` allocated mapped, `y` the program's own memory registered and its device
 * address asked. The host fills both with plain stores; a memset on the device sets part of
 * each, then a kernel scales them, twice, the host changing one element of each between; it
 * reads the results with plain loads after each cuCtxSynchronize. No copy moves the bytes.
 * Linked with -lcuda. */
#include "cuda_types.h"
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>

int cuMemHostAlloc(void **p, size_t n, unsigned flags);
int cuMemHostRegister_v2(void *p, size_t n, unsigned flags);
int cuMemHostUnregister(void *p);
int cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags);
int cuMemFreeHost(void *p);
int cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t n, void *stream);

static const char ptx[] = SCALE_PTX;

int main(void) {
    void *mod, *f, *xp;
    CUdeviceptr xd, yd;
    int n = 16, bad = cuInit(0);
    float two = 2.0f, three = 3.0f;
    float *y = malloc(16 * sizeof(float));
    bad |= cuModuleLoadData(&mod, ptx);
    bad |= cuModuleGetFunction(&f, mod, "scale");
    bad |= cuMemHostAlloc(&xp, 16 * sizeof(float), 2 /* CU_MEMHOSTALLOC_DEVICEMAP */);
    bad |= cuMemHostRegister_v2(y, 16 * sizeof(float), 0);
    bad |= cuMemHostGetDevicePointer_v2(&yd, y, 0);
    float *x = xp;
    xd = (CUdeviceptr)(size_t)xp;
    for (int i = 0; i < 16; i++) x[i] = (float)i, y[i] = 10.0f + (float)i;
    /* Step 1: elements 12..15 of each set on the device (every byte 0x3f). */
    bad |= cuMemsetD32Async(xd + 12 * sizeof(float), 0x3f3f3f3fu, 4, NULL);
    bad |= cuMemsetD32Async(yd + 12 * sizeof(float), 0x3f3f3f3fu, 4, NULL);
    bad |= cuCtxSynchronize();
    printf("step 1: x[3] = %g, x[13] = %.4f, y[3] = %g, y[13] = %.4f, errors %d\n", x[3], x[13],
           y[3], y[13], bad);
    /* Steps 2 and 3: both scaled on the device, the host changing one element of each
     * between. */
    for (int step = 2; step <= 3; step++) {
        void *px[] = {&xd, &n, &two}, *py[] = {&yd, &n, &three};
        bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, px, NULL);
        bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, py, NULL);
        bad |= cuCtxSynchronize();
        printf("step %d: x[3] = %g, y[3] = %g, errors %d\n", step, x[3], y[3], bad);
        x[3] = 100.0f, y[3] = 200.0f;
    }
    bad |= cuMemHostUnregister(y);
    bad |= cuMemFreeHost(xp);
    free(y);
    return bad;
}
