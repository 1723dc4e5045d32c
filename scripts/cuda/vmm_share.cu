// Two processes sharing physical memory through the virtual memory API (issue 53: every call a
// CUDA program makes), as NCCL and allocators that share without IPC handles do, for
// `scripts/gpu-more-calls.sh`: the parent makes an allocation that may be exported as a file
// descriptor (cuMemCreate), reserves addresses for it, maps it and lets the device use it, fills
// it with a kernel, exports it (cuMemExportToShareableHandle) and sends the descriptor to its
// child (forked before either touched CUDA) over a Unix socket (SCM_RIGHTS); the child imports
// it (cuMemImportFromShareableHandle), maps it at addresses of its own, `scale` reads it into
// memory of its own, `bump` adds 100 to every element of the parent's memory, the child checks
// its own and tells the parent, which reads its mapping back and checks the child's bump (what
// only a replay of the two processes together reproduces).
// Exits 0 when both checks hold, 1 otherwise, 2 when an API call failed.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

__global__ void fill(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)(i % 29);
}

__global__ void scale(const float *x, float *y, int n, float by) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * by;
}

__global__ void bump(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 100.f;
}

static int check(CUresult e, const char *who, const char *what) {
    if (e != CUDA_SUCCESS) {
        const char *s = "?";
        cuGetErrorName(e, &s);
        printf("vmm %s: %s failed: %s\n", who, what, s);
        return 1;
    }
    return 0;
}

static int check(cudaError_t e, const char *who, const char *what) {
    if (e != cudaSuccess) {
        printf("vmm %s: %s failed: %s\n", who, what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static const int N = 1 << 16;
static float got[N];

static CUmemAllocationProp props() {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

// The allocation's size: N floats, rounded up to the driver's granularity.
static size_t rounded(const CUmemAllocationProp &p) {
    size_t g = 0;
    cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    size_t want = N * sizeof(float);
    return g ? (want + g - 1) / g * g : want;
}

// Maps allocation `h` (`size` bytes) at addresses of this process's own, readable and writable
// by device 0.
static int map_rw(CUmemGenericAllocationHandle h, size_t size, CUdeviceptr *va, const char *who) {
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return check(cuMemAddressReserve(va, size, 0, 0, 0), who, "cuMemAddressReserve") ||
           check(cuMemMap(*va, size, 0, h, 0), who, "cuMemMap") ||
           check(cuMemSetAccess(*va, size, &a, 1), who, "cuMemSetAccess");
}

static int send_fd(int sock, int fd) {
    char byte = 'f', ctl[CMSG_SPACE(sizeof fd)];
    struct iovec io = {&byte, 1};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &io, m.msg_iovlen = 1, m.msg_control = ctl, m.msg_controllen = sizeof ctl;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof fd);
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(sock, &m, 0) == 1 ? 0 : 1;
}

static int recv_fd(int sock) {
    char byte, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec io = {&byte, 1};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &io, m.msg_iovlen = 1, m.msg_control = ctl, m.msg_controllen = sizeof ctl;
    if (recvmsg(sock, &m, 0) != 1) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    int fd = -1;
    if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static int child(int sock) {
    int fd = recv_fd(sock);
    if (fd < 0) return 2;
    if (check(cudaFree(0), "child", "cudaFree(0)")) return 2;
    CUmemAllocationProp p = props();
    size_t size = rounded(p);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    float *y;
    if (
        check(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              "child", "cuMemImportFromShareableHandle") ||
        map_rw(h, size, &va, "child") || check(cuMemRelease(h), "child", "cuMemRelease") ||
        check(cudaMalloc(&y, N * sizeof(float)), "child", "cudaMalloc"))
        return 2;
    close(fd);
    float *x = (float *)va;
    scale<<<(N + 255) / 256, 256>>>(x, y, N, 3.f);
    bump<<<(N + 255) / 256, 256>>>(x, N);
    if (check(cudaGetLastError(), "child", "scale") ||
        check(cudaMemcpy(got, y, N * sizeof(float), cudaMemcpyDeviceToHost), "child", "read") ||
        check(cuMemUnmap(va, size), "child", "cuMemUnmap") ||
        check(cuMemAddressFree(va, size), "child", "cuMemAddressFree"))
        return 2;
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += got[i] != 3.f * (float)(i % 29);
    printf("vmm child: y[7] = %g (want %g), %d wrong\n", got[7], 3.f * 7.f, wrong);
    fflush(stdout);
    char done = wrong ? 1 : 0;
    if (write(sock, &done, 1) != 1) return 2;
    return wrong ? 1 : 0;
}

int main() {
    int socks[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, socks)) return 2;
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) return child(socks[1]);
    if (check(cudaFree(0), "parent", "cudaFree(0)")) return 2;
    CUmemAllocationProp p = props();
    size_t size = rounded(p);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    int fd = -1;
    if (check(cuMemCreate(&h, size, &p, 0), "parent", "cuMemCreate") || map_rw(h, size, &va, "parent"))
        return 2;
    float *x = (float *)va;
    fill<<<(N + 255) / 256, 256>>>(x, N);
    if (check(cudaGetLastError(), "parent", "fill") ||
        check(cudaDeviceSynchronize(), "parent", "sync") ||
        check(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              "parent", "cuMemExportToShareableHandle") ||
        check(cuMemRelease(h), "parent", "cuMemRelease") || send_fd(socks[0], fd))
        return 2;
    close(fd);
    char done = 2;
    if (read(socks[0], &done, 1) != 1) done = 2;
    int status = 0;
    waitpid(pid, &status, 0);
    if (check(cudaMemcpy(got, x, N * sizeof(float), cudaMemcpyDeviceToHost), "parent", "read") ||
        check(cuMemUnmap(va, size), "parent", "cuMemUnmap") ||
        check(cuMemAddressFree(va, size), "parent", "cuMemAddressFree"))
        return 2;
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += got[i] != (float)(i % 29) + 100.f;
    printf("vmm parent: child said %d, exit %d; x[7] = %g (want %g), %d wrong\n", done,
           WEXITSTATUS(status), got[7], 107.f, wrong);
    return done == 0 && WEXITSTATUS(status) == 0 && wrong == 0 ? 0 : 1;
}
