/* A program that copies the ways CUDA C++ programs do besides the plain copies, for
 * `gputape run -o`: 2D copies between pitched and packed memory (host to device, device to
 * device, device to host, a sub-rectangle async), a 2D copy whose host side is a unified
 * address, a 3D copy there and back, the generic cuMemcpy both ways, and a peer copy. Prints
 * a checksum of each read back. Linked with -lcuda, like records.c. */
#include "cuda_types.h"
#include <stdio.h>
#include <stddef.h>
#include <string.h>

int cuMemFree_v2(CUdeviceptr p);
int cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n);
int cuMemcpyPeer(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t n);

int cuMemcpy2D_v2(const Memcpy2D *d);
int cuMemcpy2DAsync_v2(const Memcpy2D *d, void *stream);

int cuMemcpy3D_v2(const Memcpy3D *d);

enum { HOST = 1, DEVICE = 2, UNIFIED = 4 };

static unsigned sum(const unsigned char *p, size_t n) {
    unsigned s = 0;
    for (size_t i = 0; i < n; i++) s = s * 31 + p[i];
    return s;
}

int main(void) {
    CUdeviceptr img, flat, vol, a, b;
    void *s;
    unsigned char host[8][40], out[8][40], sub[3][8], box[2][3][12], back[2][3][12], lin[64];
    int bad = 0;
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 40; x++) host[y][x] = (unsigned char)(y * 24 + x + 1);
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&img, 32 * 8);  /* 8 rows of 24 bytes, pitch 32 */
    bad |= cuMemAlloc_v2(&flat, 24 * 8); /* the same rows, packed */
    bad |= cuMemAlloc_v2(&vol, 16 * 4 * 2);
    bad |= cuMemAlloc_v2(&a, 64);
    bad |= cuMemAlloc_v2(&b, 64);
    bad |= cuStreamCreate(&s, 1);

    Memcpy2D up = {0};
    up.src_type = HOST, up.src_host = host, up.src_pitch = 40;
    up.dst_type = DEVICE, up.dst_device = img, up.dst_pitch = 32;
    up.width = 24, up.height = 8;
    bad |= cuMemcpy2D_v2(&up);

    Memcpy2D pack = {0};
    pack.src_type = DEVICE, pack.src_device = img, pack.src_pitch = 32;
    pack.dst_type = DEVICE, pack.dst_device = flat, pack.dst_pitch = 24;
    pack.width = 24, pack.height = 8;
    bad |= cuMemcpy2D_v2(&pack);

    memset(out, 0, sizeof out);
    Memcpy2D down = {0};
    down.src_type = DEVICE, down.src_device = flat, down.src_pitch = 24;
    down.dst_type = HOST, down.dst_host = out, down.dst_pitch = 40;
    down.width = 24, down.height = 8;
    bad |= cuMemcpy2D_v2(&down);
    printf("copies: 2D round trip %u\n", sum(&out[0][0], sizeof out));

    Memcpy2D part = {0};
    part.src_type = DEVICE, part.src_device = img, part.src_pitch = 32;
    part.src_x = 4, part.src_y = 2;
    part.dst_type = UNIFIED, part.dst_device = (CUdeviceptr)(size_t)sub, part.dst_pitch = 8;
    part.width = 8, part.height = 3;
    bad |= cuMemcpy2DAsync_v2(&part, s);
    bad |= cuStreamSynchronize(s);
    printf("copies: 2D sub-rectangle %u\n", sum(&sub[0][0], sizeof sub));

    for (int i = 0; i < (int)sizeof box; i++) (&box[0][0][0])[i] = (unsigned char)(7 * i + 3);
    Memcpy3D in = {0};
    in.src_type = HOST, in.src_host = box, in.src_pitch = 12, in.src_height = 3;
    in.dst_type = DEVICE, in.dst_device = vol, in.dst_pitch = 16, in.dst_height = 4;
    in.width = 12, in.height = 3, in.depth = 2;
    bad |= cuMemcpy3D_v2(&in);
    Memcpy3D outv = {0};
    outv.src_type = DEVICE, outv.src_device = vol, outv.src_pitch = 16, outv.src_height = 4;
    outv.dst_type = HOST, outv.dst_host = back, outv.dst_pitch = 12, outv.dst_height = 3;
    outv.width = 12, outv.height = 3, outv.depth = 2;
    bad |= cuMemcpy3D_v2(&outv);
    printf("copies: 3D round trip %u (same: %d)\n", sum(&back[0][0][0], sizeof back),
           memcmp(box, back, sizeof box) == 0);

    for (int i = 0; i < 64; i++) lin[i] = (unsigned char)(255 - i);
    bad |= cuMemcpy(a, (CUdeviceptr)(size_t)lin, 64);
    bad |= cuMemcpyPeer(b, NULL, a, NULL, 64);
    memset(lin, 0, sizeof lin);
    bad |= cuMemcpy((CUdeviceptr)(size_t)lin, b, 64);
    printf("copies: generic and peer %u\n", sum(lin, sizeof lin));

    bad |= cuMemFree_v2(b);
    bad |= cuMemFree_v2(a);
    bad |= cuMemFree_v2(vol);
    bad |= cuMemFree_v2(flat);
    bad |= cuMemFree_v2(img);
    printf("copies: errors %d\n", bad);
    return bad;
}
