/* A program built as `nvcc --default-stream per-thread` builds one: every stream-taking call is
 * its _ptsz/_ptds form, and stream 0 (NULL) is the calling thread's own default stream. Two
 * threads, one after the other, each upload, scale and read back a buffer of their own, and
 * the main thread uses the legacy stream (CU_STREAM_LEGACY, 1) once. Each thread reads its
 * upload back before the kernel too, a result no kernel feeds. It makes its context as the
 * runtime does (cuDevicePrimaryCtxRetain). Linked with -lcuda. */
#include "cuda_types.h"
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>

int cuDeviceGet(int *dev, int ordinal);
int cuDevicePrimaryCtxRetain(void **ctx, int dev);
int cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, void *stream);
int cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n);
int cuLaunchKernelEx_ptsz(const LaunchConfig *c, void *f, void **params, void **extra);
int cuStreamSynchronize_ptsz(void *stream);

static const char ptx[] = SCALE_PTX;
static void *f;
static CUdeviceptr bufs[2];

static void *work(void *arg) {
    int t = (int)(size_t)arg, n = 8, bad = 0;
    float host[8], back[8], k = (float)(t + 2);
    for (int i = 0; i < 8; i++) host[i] = (float)(i + 10 * t);
    bad |= cuMemAlloc_v2(&bufs[t], sizeof host);
    bad |= cuMemcpyHtoDAsync_v2_ptsz(bufs[t], host, sizeof host, NULL);
    bad |= cuStreamSynchronize_ptsz(NULL);
    bad |= cuMemcpyDtoH_v2_ptds(back, bufs[t], sizeof back); /* no kernel: any replay checks it */
    bad |= back[3] != host[3];
    LaunchConfig c = {{1, 1, 1}, {8, 1, 1}, 0, NULL, NULL, 0};
    void *p[] = {&bufs[t], &n, &k};
    bad |= cuLaunchKernelEx_ptsz(&c, f, p, NULL);
    bad |= cuStreamSynchronize_ptsz(NULL);
    bad |= cuMemcpyDtoH_v2_ptds(back, bufs[t], sizeof back);
    printf("thread %d: back[3] = %g, errors %d\n", t, back[3], bad);
    return (void *)(size_t)bad;
}

int main(void) {
    void *m, *r0, *r1, *ctx;
    float back[8];
    int dev, bad = cuInit(0);
    bad |= cuDeviceGet(&dev, 0);
    bad |= cuDevicePrimaryCtxRetain(&ctx, dev);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    pthread_t a, b;
    pthread_create(&a, NULL, work, (void *)0);
    pthread_join(a, &r0);
    pthread_create(&b, NULL, work, (void *)1);
    pthread_join(b, &r1);
    bad |= (int)(size_t)r0 | (int)(size_t)r1;
    bad |= cuStreamSynchronize((void *)1);
    bad |= cuMemcpyDtoH_v2(back, bufs[0], sizeof back);
    printf("main: back[3] = %g, errors %d\n", back[3], bad);
    return bad;
}
