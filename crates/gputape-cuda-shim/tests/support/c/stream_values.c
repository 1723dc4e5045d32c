/* Stream memory operations, as a program signalling between streams makes them: a 32-bit and a
 * 64-bit value written on stream s (cuStreamWriteValue32/64), a wait for the first on s itself
 * (cuStreamWaitValue32, greater or equal), a wait for it on stream s2 (equal) before s2 copies
 * the values to `y`, and a wait on s2 for a word no stream wrote; then both buffers read back.
 * Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>

int cuStreamWriteValue32(void *stream, CUdeviceptr addr, unsigned value, unsigned flags);
int cuStreamWriteValue64(void *stream, CUdeviceptr addr, unsigned long long value,
                         unsigned flags);
int cuStreamWaitValue32(void *stream, CUdeviceptr addr, unsigned value, unsigned flags);
int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream);

int main(void) {
    CUdeviceptr x, y;
    void *s, *s2;
    unsigned long long back[2] = {0, 0}, copy[2] = {0, 0};
    int bad = cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof back);
    bad |= cuMemAlloc_v2(&y, sizeof back);
    bad |= cuStreamCreate(&s, 1);
    bad |= cuStreamCreate(&s2, 1);
    bad |= cuStreamWriteValue32(s, x, 0xcafeu, 0);
    bad |= cuStreamWriteValue64(s, x + 8, 0x1122334455667788ull, 0);
    bad |= cuStreamWaitValue32(s, x, 0xcafeu, 0 /* CU_STREAM_WAIT_VALUE_GEQ */);
    bad |= cuStreamWaitValue32(s2, x, 0xcafeu, 1 /* CU_STREAM_WAIT_VALUE_EQ */);
    bad |= cuMemcpyDtoDAsync_v2(y, x, sizeof back, s2);
    bad |= cuStreamWaitValue32(s2, x + 4, 0, 0);
    bad |= cuStreamSynchronize(s);
    bad |= cuStreamSynchronize(s2);
    bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
    bad |= cuMemcpyDtoH_v2(copy, y, sizeof copy);
    printf("stream_values: %llx %llx, copied %llx %llx, errors %d\n", back[0], back[1], copy[0],
           copy[1], bad);
    return bad;
}
