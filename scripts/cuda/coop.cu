// A CUDA C++ program whose kernel needs a cooperative launch (issue 53: every call a CUDA
// program makes), for `FAULT=1 scripts/gpu-cuda-program.sh coop`: `coop_sum` sums its input in
// two phases with a grid-wide sync between them (cooperative_groups::this_grid().sync()), which
// only a cooperative launch (cudaLaunchCooperativeKernel) makes legal: launched plainly, the
// sync is an error. Three steps, each a new input and a read back of the sum, printed with the
// host's own sum. `./coop fault` plants a write far past the output in step 3's kernel. Exits 0
// when every step's sum is right, 1 otherwise, 2 when an API call failed.
#include <cooperative_groups.h>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

__global__ void coop_sum(const float *x, float *partial, float *out, int n, long long bad) {
    cg::grid_group grid = cg::this_grid();
    __shared__ float s[256];
    float acc = 0.f;
    for (long long i = grid.thread_rank(); i < n; i += grid.size()) acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
    grid.sync();
    if (grid.thread_rank() == 0) {
        float t = 0.f;
        for (unsigned b = 0; b < gridDim.x; b++) t += partial[b];
        out[0] = t;
        if (bad) out[bad] = t; // the planted fault
    }
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("coop: %s failed: %s\n", what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    bool fault = argc > 1 && !strcmp(argv[1], "fault");
    const int n = 1 << 20, threads = 256;
    static float h[1 << 20];
    int dev = 0, sms = 0, per_sm = 0, coop = 0;
    if (check(cudaGetDevice(&dev), "cudaGetDevice") ||
        check(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev), "attribute") ||
        check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count") ||
        check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop_sum, threads, 0),
              "occupancy"))
        return 2;
    if (!coop) {
        printf("coop: this device has no cooperative launch\n");
        return 2;
    }
    int blocks = sms * (per_sm < 2 ? per_sm : 2);
    float *x, *partial, *out;
    if (check(cudaMalloc(&x, n * sizeof(float)), "cudaMalloc x") ||
        check(cudaMalloc(&partial, blocks * sizeof(float)), "cudaMalloc partial") ||
        check(cudaMalloc(&out, sizeof(float)), "cudaMalloc out"))
        return 2;
    printf("coop: %d blocks of %d threads (%d SMs)\n", blocks, threads, sms);
    int wrong = 0;
    for (int step = 1; step <= 3; step++) {
        double want = 0;
        for (int i = 0; i < n; i++) {
            h[i] = (float)((i * step) % 13) * 0.25f;
            want += h[i];
        }
        long long bad = (fault && step == 3) ? (1LL << 36) : 0;
        void *args[] = {&x, &partial, &out, (void *)&n, &bad};
        float sum = 0;
        if (check(cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice), "upload") ||
            check(cudaLaunchCooperativeKernel((void *)coop_sum, blocks, threads, args, 0, 0),
                  "cudaLaunchCooperativeKernel") ||
            check(cudaMemcpy(&sum, out, sizeof(float), cudaMemcpyDeviceToHost), "read back"))
            return 2;
        bool ok = sum == (float)want || (sum - want) * (sum - want) < 1e-6 * want * want;
        printf("coop: step %d sum %.3f (host %.3f) %s\n", step, sum, want, ok ? "ok" : "WRONG");
        wrong += !ok;
    }
    return wrong ? 1 : 0;
}
