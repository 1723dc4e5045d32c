/* A program that shares device memory through an IPC handle, as serving frameworks do between
 * processes: `x` filled and its handle taken (cuIpcGetMemHandle); the handle opened
 * (cuIpcOpenMemHandle_v2: on a real device the other process does this; the fake driver maps
 * its one arena), a memset on part of the opened mapping, the mapping read back and closed.
 * Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>

typedef struct { unsigned char reserved[64]; } IpcMemHandle;
int cuIpcGetMemHandle(IpcMemHandle *h, CUdeviceptr p);
int cuIpcOpenMemHandle_v2(CUdeviceptr *p, IpcMemHandle h, unsigned flags);
int cuIpcCloseMemHandle(CUdeviceptr p);
int cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n);

int main(void) {
    CUdeviceptr x, opened;
    IpcMemHandle h;
    unsigned char host[64], back[64];
    int bad = cuInit(0);
    for (int i = 0; i < 64; i++) host[i] = (unsigned char)(i + 1);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    bad |= cuIpcGetMemHandle(&h, x);
    bad |= cuIpcOpenMemHandle_v2(&opened, h, 1);
    bad |= cuMemsetD8_v2(opened + 32, 0xee, 32);
    bad |= cuMemcpyDtoH_v2(back, opened, sizeof back);
    bad |= cuIpcCloseMemHandle(opened);
    printf("ipc: back[3] = %d, back[40] = %d, errors %d\n", back[3], back[40], bad);
    return bad;
}
