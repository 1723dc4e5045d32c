// What naming each call's native site costs a CUDA C++ program (issue 50): an empty kernel
// launched in batches, timed per launch, the batches alternating between gputape's lines off
// and on (`gputape_shim_lines`, which the shim exports; run it under `gputape run --flight`
// or `-o`). Without the shim the toggle is absent and both halves are the same.
// Prints `GPUTAPE_LAUNCHES {"off_us": median, "on_us": median, "toggled": bool}`.
#include <cstdio>
#include <dlfcn.h>
#include <chrono>
#include <vector>
#include <algorithm>

__global__ void empty(int *p) {
    if (p && threadIdx.x == 1024) *p = 1;
}

__attribute__((noinline)) void launch_batch(int n) {
    for (int i = 0; i < n; i++) empty<<<1, 32>>>(nullptr);
    cudaDeviceSynchronize();
}

int main() {
    auto toggle = (void (*)(int))dlsym(RTLD_DEFAULT, "gputape_shim_lines");
    const int batch = 2000, rounds = 20;
    launch_batch(batch);  // warm up
    std::vector<double> off, on;
    for (int r = 0; r < rounds; r++) {
        for (int lines = 0; lines < 2; lines++) {
            if (toggle) toggle(lines);
            auto t0 = std::chrono::steady_clock::now();
            launch_batch(batch);
            double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / batch;
            (lines ? on : off).push_back(us);
        }
    }
    std::sort(off.begin(), off.end());
    std::sort(on.begin(), on.end());
    printf("GPUTAPE_LAUNCHES {\"off_us\": %.3f, \"on_us\": %.3f, \"toggled\": %s}\n", off[rounds / 2],
           on[rounds / 2], toggle ? "true" : "false");
    return 0;
}
