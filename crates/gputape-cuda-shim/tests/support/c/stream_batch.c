/* Stream memory operations in batches (cuStreamBatchMemOp), as communication libraries queue
 * them: on stream s a 32-bit and a 64-bit value written and a memory barrier; on stream s2 a
 * wait for the first value (equal) before s2 copies both values to `y`, and a wait for a word
 * no stream wrote; then both buffers read back. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>
#include <string.h>

/* CUstreamBatchMemOpParams: a 48-byte union; a value operation's operation, address, value and
 * flags at offsets 0, 8, 16 and 24. */
typedef struct {
    unsigned operation;
    unsigned pad0;
    CUdeviceptr address;
    unsigned long long value;
    unsigned flags;
    unsigned pad1;
    CUdeviceptr alias;
    unsigned long long pad2;
} MemOp;

int cuStreamBatchMemOp_v2(void *stream, unsigned count, MemOp *ops, unsigned flags);
int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream);

static MemOp op(unsigned operation, CUdeviceptr address, unsigned long long value,
                unsigned flags) {
    MemOp m;
    memset(&m, 0, sizeof m);
    m.operation = operation, m.address = address, m.value = value, m.flags = flags;
    return m;
}

int main(void) {
    CUdeviceptr x, y;
    void *s, *s2;
    unsigned long long back[2] = {0, 0}, copy[2] = {0, 0};
    int bad = cuInit(0);
    bad |= cuMemAlloc_v2(&x, sizeof back);
    bad |= cuMemAlloc_v2(&y, sizeof back);
    bad |= cuStreamCreate(&s, 1);
    bad |= cuStreamCreate(&s2, 1);
    /* 2: CU_STREAM_MEM_OP_WRITE_VALUE_32, 5: _WRITE_VALUE_64, 6: _BARRIER */
    MemOp writes[3] = {op(2, x, 0xcafe, 0), op(5, x + 8, 0x1122334455667788ull, 0), op(6, 0, 0, 0)};
    bad |= cuStreamBatchMemOp_v2(s, 3, writes, 0);
    /* 1: CU_STREAM_MEM_OP_WAIT_VALUE_32, flags 1: CU_STREAM_WAIT_VALUE_EQ */
    MemOp wait[1] = {op(1, x, 0xcafe, 1)};
    bad |= cuStreamBatchMemOp_v2(s2, 1, wait, 0);
    bad |= cuMemcpyDtoDAsync_v2(y, x, sizeof back, s2);
    MemOp unmet[1] = {op(1, x + 4, 0, 0)};
    bad |= cuStreamBatchMemOp_v2(s2, 1, unmet, 0);
    bad |= cuStreamSynchronize(s);
    bad |= cuStreamSynchronize(s2);
    bad |= cuMemcpyDtoH_v2(back, x, sizeof back);
    bad |= cuMemcpyDtoH_v2(copy, y, sizeof copy);
    printf("stream_batch: %llx %llx, copied %llx %llx, errors %d\n", back[0], back[1], copy[0],
           copy[1], bad);
    return bad;
}
