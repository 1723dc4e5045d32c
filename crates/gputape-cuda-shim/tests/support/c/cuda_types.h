/* The driver API's types the fake driver and the test programs share, laid out as cuda.h lays
 * them out (each program declares the functions it calls itself). */
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

#endif
