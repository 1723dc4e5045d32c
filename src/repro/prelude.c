#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The CUDA driver API, declared here so that the program needs no CUDA headers. */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream, *CUevent, *CUmodule, *CUfunction, *CUgraph, *CUgraphExec, *CUcontext;
#ifdef __cplusplus
extern "C" {
#endif
CUresult cuInit(unsigned flags);
CUresult cuDeviceGet(int *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, int dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoadData(CUmodule *m, const void *image);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *bytes, CUmodule m, const char *name);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned flags);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemAllocHost_v2(void **p, size_t bytes);
CUresult cuMemFreeHost(void *p);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n);
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                        void **extra);
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                   CUstream s, void **params);
CUresult cuStreamCreate(CUstream *s, unsigned flags);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec e, CUstream s);
CUresult cuGraphExecDestroy(CUgraphExec e);
CUresult cuGraphDestroy(CUgraph g);
CUresult cuEventCreate(CUevent *e, unsigned flags);
CUresult cuEventRecord(CUevent e, CUstream s);
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags);
CUresult cuEventSynchronize(CUevent e);
CUresult cuEventDestroy_v2(CUevent e);
#ifdef __cplusplus
}
#endif

#define ANY_ERROR (-1)
static const char *data_dir = "data";
static int first_off = -1, first_fault = -1, fault_code = 0, fault_as_recorded = 0;

/* The bytes of data file NAME, which holds N bytes (8-byte aligned: a module image). */
static void *load(const char *name, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", data_dir, name);
    FILE *f = fopen(path, "rb");
    void *p = malloc(n + 8);
    if (!f || !p || fread(p, 1, n, f) != n) {
        fprintf(stderr, "repro: cannot read %zu bytes of %s\n", n, path);
        exit(2);
    }
    fclose(f);
    memset((char *)p + n, 0, 8);
    return p;
}

/* Call SEQ returned R; the recording saw WANT (ANY_ERROR: a failure without a code). */
static void status(int seq, const char *what, CUresult r, int want) {
    int same = want == ANY_ERROR ? r != 0 : r == want;
    if (want != 0 && first_fault < 0) {
        first_fault = seq;
        fault_code = want;
        fault_as_recorded = same;
    }
    if (!same) {
        printf("call #%d %s returned %d, recorded %d\n", seq, what, r, want);
        if (first_off < 0) first_off = seq;
    }
}

/* Call SEQ read back N bytes at GOT; the recording read data file NAME. */
static void bytes(int seq, const void *got, const char *name, size_t n) {
    unsigned char *want = (unsigned char *)load(name, n);
    const unsigned char *g = (const unsigned char *)got;
    for (size_t i = 0; i < n; i++)
        if (g[i] != want[i]) {
            printf("call #%d read back byte %zu as 0x%02x, recorded 0x%02x\n", seq, i, g[i],
                   want[i]);
            if (first_off < 0) first_off = seq;
            break;
        }
    free(want);
}

/* The status of the final wait for the device: an error there that no recorded fault
 * explains is the repro's own finding. */
static void finish(CUresult r) {
    if (r && first_fault < 0) {
        printf("repro: waiting for the device at the end returned %d\n", r);
        if (first_off < 0) first_off = -2;
    }
}

static int verdict(void) {
    if (first_fault >= 0)
        printf("repro: the recorded fault (status %d at call #%d) %s\n", fault_code, first_fault,
               fault_as_recorded ? "REPRODUCED" : "NOT reproduced");
    if (first_off >= 0)
        printf("repro: first call not as recorded: #%d\n", first_off);
    else if (first_off == -1)
        printf("repro: every call as recorded\n");
    return first_fault >= 0 ? !fault_as_recorded : first_off != -1;
}
