// Two processes sharing device memory through a CUDA IPC handle (issue 53: every call a CUDA
// program makes), for `scripts/gpu-more-calls.sh`: the parent allocates `x`, fills it, waits
// for the device and sends its handle (cudaIpcGetMemHandle) down a pipe; the child (forked
// before either touches CUDA) opens it (cudaIpcOpenMemHandle), `scale` reads it into memory
// of its own, `bump` adds 100 to every element of the parent's `x`, the child reads its own
// memory back and checks it, closes the handle and tells the parent, which reads `x` back and
// checks the child's bump (what only a replay of the two processes together reproduces), its
// stream first waiting for the event `bumped` the parent shared (cudaIpcGetEventHandle) and the
// child recorded after the bump.
// Exits 0 when both checks hold, 1 otherwise, 2 when an API call failed.
#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime.h>

__global__ void scale(const float *x, float *y, int n, float by) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * by;
}

__global__ void bump(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 100.f;
}

static int check(cudaError_t e, const char *who, const char *what) {
    if (e != cudaSuccess) {
        printf("ipc %s: %s failed: %s\n", who, what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static const int N = 1 << 16;
static float host[N], got[N];

static int child(int from_parent, int to_parent) {
    cudaIpcMemHandle_t h;
    cudaIpcEventHandle_t eh;
    if (read(from_parent, &h, sizeof h) != (ssize_t)sizeof h ||
        read(from_parent, &eh, sizeof eh) != (ssize_t)sizeof eh)
        return 2;
    float *x, *y;
    cudaEvent_t bumped;
    if (check(cudaIpcOpenMemHandle((void **)&x, h, cudaIpcMemLazyEnablePeerAccess), "child",
              "cudaIpcOpenMemHandle") ||
        check(cudaIpcOpenEventHandle(&bumped, eh), "child", "cudaIpcOpenEventHandle") ||
        check(cudaMalloc(&y, N * sizeof(float)), "child", "cudaMalloc"))
        return 2;
    scale<<<(N + 255) / 256, 256>>>(x, y, N, 3.f);
    bump<<<(N + 255) / 256, 256>>>(x, N);
    if (check(cudaGetLastError(), "child", "scale") ||
        check(cudaEventRecord(bumped, 0), "child", "cudaEventRecord") ||
        check(cudaMemcpy(got, y, N * sizeof(float), cudaMemcpyDeviceToHost), "child", "read") ||
        check(cudaIpcCloseMemHandle(x), "child", "cudaIpcCloseMemHandle"))
        return 2;
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += got[i] != 3.f * (float)(i % 29);
    printf("ipc child: y[7] = %g (want %g), %d wrong\n", got[7], 3.f * 7.f, wrong);
    char done = wrong ? 1 : 0;
    if (write(to_parent, &done, 1) != 1) return 2;
    return wrong ? 1 : 0;
}

int main() {
    int down[2], up[2];
    if (pipe(down) || pipe(up)) return 2;
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) return child(down[0], up[1]);
    float *x;
    for (int i = 0; i < N; i++) host[i] = (float)(i % 29);
    cudaIpcMemHandle_t h;
    if (check(cudaMalloc(&x, N * sizeof(float)), "parent", "cudaMalloc") ||
        check(cudaMemcpy(x, host, N * sizeof(float), cudaMemcpyHostToDevice), "parent", "fill") ||
        check(cudaDeviceSynchronize(), "parent", "sync") ||
        check(cudaIpcGetMemHandle(&h, x), "parent", "cudaIpcGetMemHandle"))
        return 2;
    // The child records `bumped` after its bump; the parent's stream waits for it before the
    // read (the pipe's message says the record is queued).
    cudaEvent_t bumped;
    cudaIpcEventHandle_t eh;
    cudaStream_t s;
    if (check(cudaEventCreateWithFlags(&bumped, cudaEventInterprocess | cudaEventDisableTiming),
              "parent", "cudaEventCreateWithFlags") ||
        check(cudaIpcGetEventHandle(&eh, bumped), "parent", "cudaIpcGetEventHandle") ||
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "parent", "stream"))
        return 2;
    if (write(down[1], &h, sizeof h) != (ssize_t)sizeof h ||
        write(down[1], &eh, sizeof eh) != (ssize_t)sizeof eh)
        return 2;
    char done = 2;
    if (read(up[0], &done, 1) != 1) done = 2;
    int status = 0;
    waitpid(pid, &status, 0);
    if (check(cudaStreamWaitEvent(s, bumped, 0), "parent", "cudaStreamWaitEvent") ||
        check(cudaMemcpyAsync(got, x, N * sizeof(float), cudaMemcpyDeviceToHost, s), "parent",
              "read") ||
        check(cudaStreamSynchronize(s), "parent", "sync") ||
        check(cudaFree(x), "parent", "cudaFree"))
        return 2;
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += got[i] != (float)(i % 29) + 100.f;
    printf("ipc parent: child said %d, exit %d; x[7] = %g (want %g), %d wrong\n", done,
           WEXITSTATUS(status), got[7], 107.f, wrong);
    return done == 0 && WEXITSTATUS(status) == 0 && wrong == 0 ? 0 : 1;
}
