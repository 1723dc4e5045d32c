/* A program that copies in batches, as CUDA 12.8+ programs may (cudaMemcpyBatchAsync, whose
 * copies run in no set order, so no copy in a batch depends on another): a first batch uploads
 * two host arrays to `x` and `y`, a second reads `x` back to the host and copies `y` to `z` on
 * the device, and a copy with attributes (cudaMemcpyWithAttributesAsync) reads `z` back; then a
 * batch of 3D copies (cudaMemcpy3DBatchAsync) uploads 4 rows of 8 bytes, taken 16 bytes apart
 * from `a`, packed into `w`, and a 3D copy with attributes (cudaMemcpy3DWithAttributesAsync)
 * reads `w` back. After the stream's sync each read back's
 * checksum is printed. Linked with -lcuda, like records.c. */
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
/* CUmemcpy3DOperand (a pointer: its address, row length and layer height in elements, a
 * location hint) and CUDA_MEMCPY3D_BATCH_OP. */
typedef struct {
    int type;
    CUdeviceptr ptr;
    size_t row_length, layer_height;
    int hint_type, hint_id;
} Operand;
typedef struct {
    Operand src, dst;
    size_t width, height, depth;
    int src_access_order;
    unsigned flags;
} BatchOp3D;
int cuMemcpy3DBatchAsync_v2(size_t count, BatchOp3D *ops, unsigned long long flags, void *stream);
int cuMemcpy3DWithAttributesAsync(BatchOp3D *op, unsigned long long flags, void *stream);
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
    CUdeviceptr w;
    unsigned char rows[32], back_w[32];
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 8; i++) rows[r * 8 + i] = a[r * 16 + i];
    bad |= cuMemAlloc_v2(&w, 32);
    BatchOp3D up = {{1, (CUdeviceptr)(size_t)a, 16, 0, 0, 0}, {1, w, 0, 0, 0, 0}, 8, 4, 1, 1, 0};
    bad |= cuMemcpy3DBatchAsync_v2(1, &up, 0, s);
    BatchOp3D dn = {{1, w, 0, 0, 0, 0}, {1, (CUdeviceptr)(size_t)back_w, 0, 0, 0, 0}, 32, 1, 1, 1, 0};
    bad |= cuMemcpy3DWithAttributesAsync(&dn, 0, s);
    bad |= cuStreamSynchronize(s);
    printf("x %08x (want %08x), z %08x (want %08x), w %08x (want %08x), errors %d\n",
           sum(back_x, 64), sum(a, 64), sum(back_z, 64), sum(b, 64), sum(back_w, 32), sum(rows, 32),
           bad);
    return bad;
}
