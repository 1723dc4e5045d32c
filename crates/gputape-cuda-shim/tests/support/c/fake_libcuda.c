/* A fake CUDA driver for the shim's tests: a handful of entry points that answer recognisable
 * values computed from every argument, so a test sees both that a call reached it and that its
 * arguments arrived intact. Built at test time with `cc -shared -fPIC -Wl,-Bsymbolic` (the real
 * driver binds its own symbols too: with the shim preloaded, this library's references to its
 * own functions must not resolve to the shim's forwarders). */
#include <stddef.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define API __attribute__((visibility("default")))

API CUresult cuInit(unsigned int flags) { return flags == 0 ? 0 : 1; }

API CUresult cuDriverGetVersion(int *version) {
    *version = 12345;
    return 0;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    *dptr = 0xfa0000000000ull + bytes;
    return 0;
}

/* Eleven arguments: six in registers, five on the stack. */
static CUresult launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shmem, void *stream, void **params, void **extra) {
    return (CUresult)((size_t)f + gx + 2 * gy + 3 * gz + 5 * bx + 7 * by + 11 * bz + 13 * shmem +
                      17 * (size_t)stream + 19 * (size_t)params + 23 * (size_t)extra);
}

API CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shmem, void *stream, void **params,
                            void **extra) {
    return launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

API CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shmem, void *stream,
                                 void **params, void **extra) {
    return 1000000 + launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

/* A float argument (xmm0). */
API CUresult cuTexRefSetMipmapLevelBias(void *tex, float bias) {
    return (CUresult)((size_t)tex + (size_t)(bias * 100.0f));
}

static const int export_table[4] = {7, 7, 7, 7};

API CUresult cuGetExportTable(const void **table, const unsigned char *uuid) {
    *table = export_table;
    (void)uuid;
    return 0;
}

/* Not exported at all: cuGetProcAddress hands it out anyway. */
static CUresult internal_only(void) { return 4242; }

/* Exported, but not in the shim's list (a driver newer than the list). */
API CUresult cuNewerThanTheList(void) { return 4343; }

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                 unsigned long long flags, int *status);

static void *lookup(const char *symbol, unsigned long long flags) {
    if (!strcmp(symbol, "cuInit")) return (void *)cuInit;
    if (!strcmp(symbol, "cuDriverGetVersion")) return (void *)cuDriverGetVersion;
    if (!strcmp(symbol, "cuMemAlloc")) return (void *)cuMemAlloc_v2;
    /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2 */
    if (!strcmp(symbol, "cuLaunchKernel"))
        return (flags & 2) ? (void *)cuLaunchKernel_ptsz : (void *)cuLaunchKernel;
    if (!strcmp(symbol, "cuGetProcAddress")) return (void *)cuGetProcAddress_v2;
    if (!strcmp(symbol, "cuGetExportTable")) return (void *)cuGetExportTable;
    if (!strcmp(symbol, "cuInternalOnly")) return (void *)internal_only;
    if (!strcmp(symbol, "cuNewerThanTheList")) return (void *)cuNewerThanTheList;
    return NULL;
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                 unsigned long long flags, int *status) {
    (void)version;
    void *p = lookup(symbol, flags);
    *pfn = p;
    if (status) *status = p ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND */
    return p ? 0 : 500;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                              unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
