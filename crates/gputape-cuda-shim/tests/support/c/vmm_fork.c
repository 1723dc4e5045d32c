/* Two processes sharing physical memory through the virtual memory API, as NCCL and allocators
 * that share memory without IPC handles do: the parent makes an allocation that may be
 * exported as a file descriptor (cuMemCreate), maps it, fills it, exports it
 * (cuMemExportToShareableHandle) and sends the descriptor to its child over a socket
 * (SCM_RIGHTS: the child's number for it is another); the child imports it
 * (cuMemImportFromShareableHandle), maps it, reads it, writes 0xee over its second half and
 * tells the parent, which reads its mapping back: the child's bytes. (The fake driver's device
 * memory is shared with the children it forks, as one GPU's memory is between processes.)
 * Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef unsigned long long Handle;
int cuMemCreate(Handle *h, size_t size, const void *prop, unsigned long long flags);
int cuMemRelease(Handle h);
int cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                        unsigned long long flags);
int cuMemAddressFree(CUdeviceptr p, size_t size);
int cuMemMap(CUdeviceptr p, size_t size, size_t offset, Handle h, unsigned long long flags);
int cuMemUnmap(CUdeviceptr p, size_t size);
int cuMemSetAccess(CUdeviceptr p, size_t size, const void *desc, size_t count);
int cuMemExportToShareableHandle(void *out, Handle h, int type, unsigned long long flags);
int cuMemImportFromShareableHandle(Handle *h, void *os, int type);
int cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n);

#define SIZE 4096
#define POSIX_FD 1

/* CUmemAllocationProp and CUmemAccessDesc, as far as these calls read them. */
static const struct { int type, handle_types, loc_type, loc_id; char rest[32]; } prop = {1, POSIX_FD, 1, 0, {0}};
static const struct { int loc_type, loc_id, flags; } rw = {1, 0, 3};

static int send_fd(int sock, int fd) {
    char byte = 'f', ctl[CMSG_SPACE(sizeof fd)];
    struct iovec io = {&byte, 1};
    struct msghdr m = {0};
    m.msg_iov = &io, m.msg_iovlen = 1, m.msg_control = ctl, m.msg_controllen = sizeof ctl;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof fd);
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(sock, &m, 0) == 1 ? 0 : 1;
}

static int recv_fd(int sock) {
    char byte, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec io = {&byte, 1};
    struct msghdr m = {0};
    m.msg_iov = &io, m.msg_iovlen = 1, m.msg_control = ctl, m.msg_controllen = sizeof ctl;
    if (recvmsg(sock, &m, 0) != 1) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    int fd = -1;
    if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static int child(int sock) {
    /* A descriptor of the child's own first, so the one received gets another number. */
    int spare = dup(sock);
    int fd = recv_fd(sock);
    Handle h;
    CUdeviceptr va;
    unsigned char before[64], after[64];
    int bad = fd < 0 || spare < 0;
    bad |= cuInit(0);
    bad |= cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, POSIX_FD);
    bad |= cuMemAddressReserve(&va, SIZE, 0, 0, 0);
    bad |= cuMemMap(va, SIZE, 0, h, 0);
    bad |= cuMemRelease(h);
    bad |= cuMemSetAccess(va, SIZE, &rw, 1);
    bad |= cuMemcpyDtoH_v2(before, va, sizeof before);
    bad |= cuMemsetD8_v2(va + 32, 0xee, 32);
    bad |= cuMemcpyDtoH_v2(after, va, sizeof after);
    bad |= cuMemUnmap(va, SIZE);
    bad |= cuMemAddressFree(va, SIZE);
    close(fd);
    printf("vmm child: before[40] = %d, after[40] = %d, errors %d\n", before[40], after[40], bad);
    fflush(stdout);
    char done = 'd';
    bad |= write(sock, &done, 1) != 1;
    return bad;
}

int main(void) {
    int socks[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, socks)) return 2;
    /* The driver loaded before the fork, so that the child shares its device memory (a real
     * program would fork first: a child may not use CUDA its parent initialised). */
    int bad = cuInit(0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) return child(socks[1]);
    Handle h;
    CUdeviceptr va;
    int fd = -1;
    unsigned char host[64], back[64];
    for (int i = 0; i < 64; i++) host[i] = (unsigned char)(i + 1);
    bad |= cuMemCreate(&h, SIZE, &prop, 0);
    bad |= cuMemAddressReserve(&va, SIZE, 0, 0, 0);
    bad |= cuMemMap(va, SIZE, 0, h, 0);
    bad |= cuMemSetAccess(va, SIZE, &rw, 1);
    bad |= cuMemcpyHtoD_v2(va, host, sizeof host);
    bad |= cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0);
    bad |= cuMemRelease(h);
    bad |= send_fd(socks[0], fd);
    close(fd);
    char done = 0;
    bad |= read(socks[0], &done, 1) != 1 || done != 'd';
    int status = 0;
    waitpid(pid, &status, 0);
    bad |= cuMemcpyDtoH_v2(back, va, sizeof back);
    bad |= cuMemUnmap(va, SIZE);
    bad |= cuMemAddressFree(va, SIZE);
    printf("vmm parent: back[3] = %d, back[40] = %d, child exit %d, errors %d\n", back[3],
           back[40], WEXITSTATUS(status), bad);
    return bad || WEXITSTATUS(status);
}
