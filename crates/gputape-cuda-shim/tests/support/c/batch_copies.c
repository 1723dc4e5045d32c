/* A program that copies in batches, as CUDA 12.8+ programs may (cudaMemcpyBatchAsync, whose
 * copies run in no set order, so no copy in a batch depends on another): a first batch uploads
 * two host arrays to `x` and `y`, a second reads `x` back to the host and copies `y` to `z` on
 * the device, and a copy with attributes (cudaMemcpyWithAttributesAsync) reads `z` back. After
 * the stream's sync each read back's checksum is printed. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>
#include <stddef.h>

/* CUmemcpyAttributes: the source's access order, its and the destination's location hints
 * (a type and an id each), flags. */
typedef struct {
    int src_access_order;
    int src_type, src_id, dst_type, dst_id;
    unsigned flags;
} MemcpyAttributes;

int cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                          MemcpyAttributes *attrs, size_t *idxs, size_t nattrs, void *stream);
int cuMemcpyWithAttributesAsync(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                MemcpyAttributes *attrs, void *stream);

static unsigned sum(const unsigned char *p, size_t n) {
    unsigned s = 0;
    for (size_t i = 0; i < n; i++) s = s * 31 + p[i];
    return s;
}

int main(void) {
    CUdeviceptr x, y, z;
    void *s;
    unsigned char a[64], b[64], back_x[64], back_z[64];
    int bad = 0;
    for (int i = 0; i < 64; i++) a[i] = (unsigned char)(i * 3 + 1), b[i] = (unsigned char)(200 - i);
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, 64);
    bad |= cuMemAlloc_v2(&y, 64);
    bad |= cuMemAlloc_v2(&z, 64);
    bad |= cuStreamCreate(&s, 1);
    MemcpyAttributes attr = {1, 0, 0, 0, 0, 0}; /* the source read in stream order */
    size_t first = 0, sizes[2] = {64, 64};
    CUdeviceptr up_dst[2] = {x, y}, up_src[2] = {(CUdeviceptr)(size_t)a, (CUdeviceptr)(size_t)b};
    bad |= cuMemcpyBatchAsync_v2(up_dst, up_src, sizes, 2, &attr, &first, 1, s);
    CUdeviceptr dn_dst[2] = {(CUdeviceptr)(size_t)back_x, z}, dn_src[2] = {x, y};
    bad |= cuMemcpyBatchAsync_v2(dn_dst, dn_src, sizes, 2, &attr, &first, 1, s);
    bad |= cuMemcpyWithAttributesAsync((CUdeviceptr)(size_t)back_z, z, 64, &attr, s);
    bad |= cuStreamSynchronize(s);
    printf("x %08x (want %08x), z %08x (want %08x), errors %d\n", sum(back_x, 64), sum(a, 64),
           sum(back_z, 64), sum(b, 64), bad);
    return bad;
}
