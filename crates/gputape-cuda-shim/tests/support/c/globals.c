/* A program that fills a module variable (a __constant__ table, as cudaMemcpyToSymbol does: the
 * symbol's address asked of the library alone, as the CUDA runtime asks it, its size asked of
 * the library's module, then a copy to it), launches a kernel, and reads the table back.
 * Linked with -lcuda, like records.c. */
#include <stdio.h>
#include <stddef.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned flags);
int cuMemAlloc_v2(CUdeviceptr *p, size_t n);
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
int cuModuleLoadData(void **module, const void *image);
int cuModuleGetFunction(void **f, void *module, const char *name);
int cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *bytes, void *module, const char *name);
int cuLibraryLoadData(void **library, const void *code, void *jit_options, void **jit_values,
                      unsigned n_jit, void *lib_options, void **lib_values, unsigned n_lib);
int cuLibraryGetModule(void **module, void *library);
int cuLibraryGetGlobal(CUdeviceptr *p, size_t *bytes, void *library, const char *name);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
int cuStreamSynchronize(void *stream);

static const char ptx[] = "//\n// scale\n.version 8.0\n.target sm_90\n.address_size 64\n"
                          ".const .align 4 .b8 table[64];\n"
                          ".visible .entry scale(.param .u64 x, .param .u32 n, .param .f32 k)\n"
                          "{ ret; }\n";

int main(void) {
    CUdeviceptr x, table;
    size_t bytes = 0;
    void *m, *f, *lib, *lm;
    float host[16], back[16];
    int n = 16, bad = 0;
    float k = 2.0f;
    for (int i = 0; i < 16; i++) host[i] = (float)(i * i);
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof host);
    bad |= cuModuleLoadData(&m, ptx);
    bad |= cuModuleGetFunction(&f, m, "scale");
    bad |= cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0);
    bad |= cuLibraryGetModule(&lm, lib);
    bad |= cuLibraryGetGlobal(&table, NULL, lib, "table");
    bad |= cuModuleGetGlobal_v2(NULL, &bytes, lm, "table");
    bad |= cuMemcpyHtoD_v2(table, host, bytes);
    void *params[] = {&x, &n, &k};
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, params, NULL);
    bad |= cuStreamSynchronize(NULL);
    bad |= cuMemcpyDtoH_v2(back, table, sizeof back);
    printf("globals: table %zu bytes, back[3] = %g, errors %d\n", bytes, back[3], bad);
    return bad;
}
