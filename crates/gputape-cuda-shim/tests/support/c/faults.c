/* An engine-shaped loop for the flight recorder: weights uploaded once, then STEPS steps of
 * an upload, a launch and an async read back settled by a stream sync; at step FAULT the
 * launch is given a length that runs off the end of device memory, and that step's sync
 * reports the fault (CUDA_ERROR_ILLEGAL_ADDRESS), which ends the program with status 1; with
 * a third argument `hang` that launch spins instead, and the sync waits.
 * With FAULTS_PAUSE=FROM:TO in the environment, steps FROM to TO-1 run with gputape's recording
 * paused (gputape_shim_pause, which only the shim exports). With FAULTS_ASK=STEP the program asks
 * for its own flight dump after that step (gputape_flight_dump, also the shim's only).
 * Usage: faults STEPS FAULT [hang] (FAULT past STEPS: no fault). Linked with -lcuda. */
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned flags);
int cuMemAlloc_v2(CUdeviceptr *p, size_t n);
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream);
int cuModuleLoadData(void **module, const void *image);
int cuModuleGetFunction(void **f, void *module, const char *name);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
int cuStreamCreate(void **stream, unsigned flags);
int cuStreamSynchronize(void *stream);
extern void gputape_shim_pause(int paused) __attribute__((weak));
extern int gputape_flight_dump(const char *reason) __attribute__((weak));

static const char ptx[] = "//\n// scale\n.version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry scale(.param .u64 x, .param .u32 n, .param .f32 k)\n"
                          "{ ret; }\n";

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 10, fault = argc > 2 ? atoi(argv[2]) : 1 << 30;
    int hang = argc > 3 && !strcmp(argv[3], "hang");
    int pause_from = -1, pause_to = -1;
    const char *pause = getenv("FAULTS_PAUSE");
    const char *ask = getenv("FAULTS_ASK");
    int ask_at = ask ? atoi(ask) : -1;
    if (pause && sscanf(pause, "%d:%d", &pause_from, &pause_to) != 2) pause_from = pause_to = -1;
    CUdeviceptr w, x;
    void *m, *f, *s;
    float weights[64], in[16], out[16];
    float k = 1.0f;
    for (int i = 0; i < 64; i++) weights[i] = (float)i;
    if (cuInit(0) || cuMemAlloc_v2(&w, sizeof weights) || cuMemAlloc_v2(&x, sizeof in) ||
        cuMemcpyHtoD_v2(w, weights, sizeof weights) || cuModuleLoadData(&m, ptx) ||
        cuModuleGetFunction(&f, m, "scale") || cuStreamCreate(&s, 1)) {
        fprintf(stderr, "faults: setup failed\n");
        return 2;
    }
    for (int step = 0; step < steps; step++) {
        if (gputape_shim_pause && (step == pause_from || step == pause_to))
            gputape_shim_pause(step == pause_from);
        int n = step != fault ? 16 : hang ? -1 : 1 << 30;
        for (int i = 0; i < 16; i++) in[i] = (float)(step + i);
        void *params[] = {&x, &n, &k};
        int r = cuMemcpyHtoD_v2(x, in, sizeof in);
        r = r ? r : cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, s, params, NULL);
        r = r ? r : cuMemcpyDtoHAsync_v2(out, x, sizeof out, s);
        r = r ? r : cuStreamSynchronize(s);
        if (r) {
            printf("faults: step %d failed with %d\n", step, r);
            return 1;
        }
        if (step == ask_at && gputape_flight_dump)
            printf("faults: asked for a dump at step %d: %d\n", step,
                   gputape_flight_dump("the program saw something wrong"));
    }
    printf("faults: %d steps, out[3] = %g\n", steps, out[3]);
    return 0;
}
