/* Stream memory operations, as a program signalling between streams makes them: a 32-bit and a
 * 64-bit value written on a stream (cuStreamWriteValue32/64), a wait for the first
 * (cuStreamWaitValue32), then the values read back. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>

int cuStreamWriteValue32(void *stream, CUdeviceptr addr, unsigned value, unsigned flags);
int cuStreamWriteValue64(void *stream, CUdeviceptr addr, unsigned long long value,
                         unsigned flags);
int cuStreamWaitValue32(void *stream, CUdeviceptr addr, unsigned value, unsigned flags);

int main(void) {
    CUdeviceptr x;
    void *s;
    unsigned long long back[2] = {0, 0};
    int bad = cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof back);
    bad |= cuStreamCreate(&s, 1);
    bad |= cuStreamWriteValue32(s, x, 0xcafeu, 0);
    bad |= cuStreamWriteValue64(s, x + 8, 0x1122334455667788ull, 0);
    bad |= cuStreamWaitValue32(s, x, 0xcafeu, 0);
    bad |= cuStreamSynchronize(s);
    bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
    printf("stream_values: %llx %llx, errors %d\n", back[0], back[1], bad);
    return bad;
}
