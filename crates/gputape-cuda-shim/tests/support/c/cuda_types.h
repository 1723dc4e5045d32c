/* The driver API's types the fake driver and the test programs share, laid out as cuda.h lays
 * them out, and for the programs (not the fake driver, which defines them) the calls most of
 * them make and the PTX of the fake driver's kernel. A program declares any other call itself. */
#ifndef GPUTAPE_TEST_CUDA_TYPES_H
#define GPUTAPE_TEST_CUDA_TYPES_H
#include <stddef.h>

typedef unsigned long long CUdeviceptr;

/* CUDA_MEMCPY2D */
typedef struct {
    size_t src_x, src_y;
    unsigned src_type;
    const void *src_host;
    CUdeviceptr src_device;
    void *src_array;
    size_t src_pitch, dst_x, dst_y;
    unsigned dst_type;
    void *dst_host;
    CUdeviceptr dst_device;
    void *dst_array;
    size_t dst_pitch, width, height;
} Memcpy2D;

/* CUDA_MEMCPY3D */
typedef struct {
    size_t src_x, src_y, src_z, src_lod;
    unsigned src_type;
    const void *src_host;
    CUdeviceptr src_device;
    void *src_array, *reserved0;
    size_t src_pitch, src_height, dst_x, dst_y, dst_z, dst_lod;
    unsigned dst_type;
    void *dst_host;
    CUdeviceptr dst_device;
    void *dst_array, *reserved1;
    size_t dst_pitch, dst_height, width, height, depth;
} Memcpy3D;

/* CUlaunchAttribute (an id, padding, a 64-byte value) and CUlaunchConfig */
typedef struct { unsigned id, pad, value[16]; } LaunchAttribute;
typedef struct {
    unsigned grid[3], block[3], shmem;
    void *stream;
    LaunchAttribute *attrs;
    unsigned nattrs;
} LaunchConfig;

/* CUDA_KERNEL_NODE_PARAMS_v2 */
typedef struct {
    void *func;
    unsigned grid[3], block[3], shmem;
    void **params, **extra;
    void *kern, *ctx;
} KernelNodeParams;

/* CUDA_MEMSET_NODE_PARAMS */
typedef struct {
    CUdeviceptr dst;
    size_t pitch;
    unsigned value, element_size;
    size_t width, height;
} MemsetNodeParams;

#ifndef GPUTAPE_FAKE_DRIVER
/* What most test programs call, as they declare it (the fake driver defines them). */
int cuInit(unsigned flags);
int cuMemAlloc_v2(CUdeviceptr *p, size_t n);
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
int cuModuleLoadData(void **module, const void *image);
int cuModuleGetFunction(void **f, void *module, const char *name);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
int cuStreamCreate(void **stream, unsigned flags);
int cuStreamSynchronize(void *stream);
int cuCtxSynchronize(void);

/* The PTX of the fake driver's one kernel, `scale` (x[i] *= k for i < n). */
#define SCALE_PTX                                                                              \
    "//\n// scale\n.version 8.0\n.target sm_90\n.address_size 64\n"                          \
    ".visible .entry scale(.param .u64 x, .param .u32 n, .param .f32 k)\n"                     \
    "{ ret; }\n"
#endif

#endif
