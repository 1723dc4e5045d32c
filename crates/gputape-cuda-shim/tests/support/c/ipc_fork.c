/* Two processes sharing device memory and an event through IPC handles, as serving frameworks
 * do: the parent fills `x`, takes its handle and its event `done`'s, and forks; the child
 * opens both handles, reads the bytes, writes 0xee over their second half on a stream, records
 * `done` there, reads them again and closes the memory handle; the parent, once the child is
 * gone, waits for `done` on its stream and reads `x` back: the child's bytes. (The fake
 * driver's device memory is shared with the children it forks, as one GPU's memory is between
 * processes.) Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { unsigned char reserved[64]; } IpcMemHandle;
int cuIpcGetMemHandle(IpcMemHandle *h, CUdeviceptr p);
int cuIpcOpenMemHandle_v2(CUdeviceptr *p, IpcMemHandle h, unsigned flags);
int cuIpcCloseMemHandle(CUdeviceptr p);
int cuIpcGetEventHandle(IpcMemHandle *h, void *event);
int cuIpcOpenEventHandle(void **event, IpcMemHandle h);
int cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, void *stream);
int cuEventCreate(void **event, unsigned flags);
int cuEventRecord(void *event, void *stream);
int cuStreamWaitEvent(void *stream, void *event, unsigned flags);

static int child(IpcMemHandle h, IpcMemHandle eh) {
    CUdeviceptr opened;
    void *s, *done;
    unsigned char before[64], after[64];
    int bad = cuIpcOpenMemHandle_v2(&opened, h, 1);
    bad |= cuIpcOpenEventHandle(&done, eh);
    bad |= cuStreamCreate(&s, 1);
    bad |= cuMemcpyDtoH_v2(before, opened, sizeof before);
    bad |= cuMemsetD8Async(opened + 32, 0xee, 32, s);
    bad |= cuEventRecord(done, s);
    bad |= cuStreamSynchronize(s);
    bad |= cuMemcpyDtoH_v2(after, opened, sizeof after);
    bad |= cuIpcCloseMemHandle(opened);
    printf("ipc child: before[40] = %d, after[40] = %d, errors %d\n", before[40], after[40], bad);
    return bad;
}

int main(void) {
    CUdeviceptr x;
    void *s, *done;
    IpcMemHandle h, eh;
    unsigned char host[64], back[64];
    int bad = cuInit(0);
    for (int i = 0; i < 64; i++) host[i] = (unsigned char)(i + 1);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuMemcpyHtoD_v2(x, host, sizeof host);
    bad |= cuIpcGetMemHandle(&h, x);
    bad |= cuStreamCreate(&s, 1);
    bad |= cuEventCreate(&done, 0x6 /* CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS */);
    bad |= cuIpcGetEventHandle(&eh, done);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) return child(h, eh);
    int status = 0;
    waitpid(pid, &status, 0);
    bad |= cuStreamWaitEvent(s, done, 0);
    bad |= cuStreamSynchronize(s);
    bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
    bad |= cuMemFree_v2(x);
    printf("ipc parent: back[3] = %d, back[40] = %d, child exit %d, errors %d\n", back[3], back[40],
           WEXITSTATUS(status), bad);
    return bad || WEXITSTATUS(status);
}
