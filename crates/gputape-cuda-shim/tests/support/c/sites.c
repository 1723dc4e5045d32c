/* A program without Python whose calls come from three places: an allocation in main, a launch
 * in a function of its own (launch_here), and a launch made for it by a library of CUDA's
 * (libcublas_sites.so, sites_lib.c: a name the shim counts as a library a program calls
 * through). It prints where launch_here and main lie in it, module offsets, as the shim names
 * frames. Linked with -lcuda and -rdynamic (so the loader knows its symbols). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stddef.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned flags);
int cuMemAlloc_v2(CUdeviceptr *p, size_t n);
int cuModuleLoadData(void **module, const void *image);
int cuModuleGetFunction(void **f, void *module, const char *name);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
int cuStreamSynchronize(void *stream);
int sites_lib_launch(void *f, void **params);

static const char ptx[] = "//\n// scale\n.version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry scale(.param .u64 x, .param .u32 n, .param .f32 k)\n"
                          "{ ret; }\n";

__attribute__((noinline)) int launch_here(void *f, void **params) {
    int r = cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, params, NULL);
    __asm__ volatile("" ::: "memory"); /* not a tail call: the frame stays */
    return r;
}

static unsigned long offset_of(void *fn) {
    Dl_info info;
    if (!dladdr(fn, &info)) return 0;
    return (unsigned long)((char *)fn - (char *)info.dli_fbase);
}

int main(void) {
    CUdeviceptr x;
    void *m, *f;
    int n = 16, bad = 0;
    float k = 3.0f;
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, 64);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    void *params[] = {&x, &n, &k};
    bad |= launch_here(f, params);
    bad |= sites_lib_launch(f, params);
    bad |= cuStreamSynchronize(NULL);
    printf("sites: launch_here at %#lx, main at %#lx, errors %d\n", offset_of((void *)launch_here),
           offset_of((void *)main), bad);
    return bad;
}
