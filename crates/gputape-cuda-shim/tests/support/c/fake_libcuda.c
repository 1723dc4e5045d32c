/* A fake CUDA driver for the shim's tests: a handful of entry points that answer recognisable
 * values computed from every argument, so a test sees both that a call reached it and that its
 * arguments arrived intact. Built at test time with `cc -shared -fPIC -Wl,-Bsymbolic` (the real
 * driver binds its own symbols too: with the shim preloaded, this library's references to its
 * own functions must not resolve to the shim's forwarders). */
#define _GNU_SOURCE
#define GPUTAPE_FAKE_DRIVER
#include "cuda_types.h"
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
#define API __attribute__((visibility("default")))

API CUresult cuInit(unsigned int flags) { return flags == 0 ? 0 : 1; }

API CUresult cuDriverGetVersion(int *version) {
    *version = 12345;
    return 0;
}

/* One device, its primary context current. */
API CUresult cuDeviceGet(int *dev, int ordinal) {
    *dev = ordinal;
    return ordinal == 0 ? 0 : 101; /* CUDA_ERROR_INVALID_DEVICE */
}

API CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    *ctx = (void *)0xc7c7;
    return dev == 0 ? 0 : 101;
}

API CUresult cuCtxSetCurrent(void *ctx) { return ctx == (void *)0xc7c7 || !ctx ? 0 : 201; }

/* Device memory: an arena at BASE. An allocation of n bytes starts n bytes past the cursor, so
 * the first answer is BASE + n, which the forwarding test checks. The arena is mapped shared,
 * so that a child this process forks sees the same bytes, as processes on one GPU see its one
 * memory (what a handle opened across a fork needs); each process keeps its own cursor. */
#define BASE 0xfa0000000000ull
#define ARENA (8u << 20)
static unsigned char *arena;
static size_t cursor;
__attribute__((constructor)) static void map_arena(void) {
    void *m = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) abort();
    arena = m;
}

/* Managed memory: host memory whose address is also the device's, as unified memory is. */
static unsigned char managed[1 << 16];
static size_t managed_cursor;

/* Pinned host memory the device maps (zero-copy): up to 4 regions, each reached by the device
 * at its host address, as under unified addressing. */
static struct {
    size_t base, n;
    int mapped;
} pinned[4];

static int pin(void *p, size_t n, int mapped) {
    for (int i = 0; i < 4; i++) {
        if (pinned[i].base) continue;
        pinned[i].base = (size_t)p, pinned[i].n = n, pinned[i].mapped = mapped;
        return 0;
    }
    return 2;
}
static int pinned_at(size_t p) {
    for (int i = 0; i < 4; i++)
        if (pinned[i].base && p >= pinned[i].base && p < pinned[i].base + pinned[i].n) return i;
    return -1;
}

static int in_managed(CUdeviceptr p) {
    if (p >= (size_t)managed && p < (size_t)managed + sizeof managed) return 1;
    int i = pinned_at((size_t)p);
    return i >= 0 && pinned[i].mapped;
}

/* Virtual memory: reservations handed out from VBASE, each map backed by arena bytes. A
 * physical allocation's handle is its arena offset and size (so a child forked before it, which
 * shares the arena, maps the same bytes from the same handle); a file descriptor exported for
 * one is a memfd holding the handle. */
#define VBASE 0xfb0000000000ull
static size_t vcursor;
static struct { CUdeviceptr va; size_t n, off; } maps[16];

static int map_at(CUdeviceptr p) {
    for (int i = 0; i < 16; i++)
        if (maps[i].n && p >= maps[i].va && p < maps[i].va + maps[i].n) return i;
    return -1;
}

static unsigned char *at(CUdeviceptr p) {
    if (in_managed(p)) return (unsigned char *)(size_t)p;
    int m = p >= VBASE ? map_at(p) : -1;
    return m >= 0 ? arena + maps[m].off + (p - maps[m].va) : arena + (p - BASE);
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned flags) {
    if (flags != 1 /* CU_MEM_ATTACH_GLOBAL */ || managed_cursor + bytes > sizeof managed) return 2;
    *dptr = (CUdeviceptr)(size_t)(managed + managed_cursor);
    managed_cursor = (managed_cursor + bytes + 255) & ~(size_t)255;
    return 0;
}

/* The device's name, SMs and memory, as a recording asks them once. */
API CUresult cuDeviceGetName(char *name, int len, int dev) {
    if (dev != 0 || len < 1) return 101;
    strncpy(name, "Fake GPU 9000", (size_t)len - 1);
    name[len - 1] = 0;
    return 0;
}

API CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
    if (dev != 0) return 101;
    *value = attribute == 16 /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */ ? 7 : 0;
    return 0;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
    if (dev != 0) return 101;
    *bytes = ARENA;
    return 0;
}

/* The last allocations made, for cuMemGetAddressRange. */
static struct { CUdeviceptr base; size_t n; } allocs[64];
static int nallocs;

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    size_t off = cursor + bytes;
    if (off + bytes > ARENA) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *dptr = BASE + off;
    cursor = (off + bytes + 255) & ~(size_t)255;
    allocs[nallocs % 64].base = *dptr, allocs[nallocs % 64].n = bytes;
    nallocs++;
    return 0;
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    for (int i = 0; i < 64 && i < nallocs; i++) {
        if (p >= allocs[i].base && p < allocs[i].base + allocs[i].n) {
            if (base) *base = allocs[i].base;
            if (size) *size = allocs[i].n;
            return 0;
        }
    }
    return 1;
}

/* CUipcMemHandle: the allocation's address in its first 8 bytes. This process's arena is the
 * only device memory, so an opened handle maps the same bytes at the same address. */
typedef struct { unsigned char reserved[64]; } IpcMemHandle;
API CUresult cuIpcGetMemHandle(IpcMemHandle *h, CUdeviceptr p) {
    CUdeviceptr base;
    if (!h || cuMemGetAddressRange_v2(&base, NULL, p)) return 1;
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &base, sizeof base);
    return 0;
}
API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, IpcMemHandle h, unsigned flags) {
    CUdeviceptr base;
    memcpy(&base, h.reserved, sizeof base);
    if (!p || flags != 1 /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */ ||
        cuMemGetAddressRange_v2(NULL, NULL, base))
        return 1;
    *p = base;
    return 0;
}
API CUresult cuIpcCloseMemHandle(CUdeviceptr p) { return cuMemGetAddressRange_v2(NULL, NULL, p); }
/* CUipcEventHandle: the event's handle in its first 8 bytes (a forked child shares them). */
API CUresult cuIpcGetEventHandle(IpcMemHandle *h, void *event) {
    if (!h || !event) return 1;
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &event, sizeof event);
    return 0;
}
API CUresult cuIpcOpenEventHandle(void **event, IpcMemHandle h) {
    if (!event) return 1;
    memcpy(event, h.reserved, sizeof *event);
    return *event ? 0 : 1;
}

API CUresult cuMemFree_v2(CUdeviceptr p) { return p >= BASE && p < BASE + ARENA ? 0 : 1; }

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    memcpy(at(dst), src, n);
    return 0;
}

API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    memcpy(dst, at(src), n);
    return 0;
}

API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    memmove(at(dst), at(src), n);
    return 0;
}

/* What an exported program of a real GPU's trace calls besides: copies and memsets done at
 * once, events that are always complete, pinned host memory from malloc. */
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream) {
    (void)stream;
    return cuMemcpyHtoD_v2(dst, src, n);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream) {
    (void)stream;
    return cuMemcpyDtoD_v2(dst, src, n);
}
API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
    memset(at(dst), value, n);
    return 0;
}
API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, void *stream) {
    (void)stream;
    return cuMemsetD8_v2(dst, value, n);
}
API CUresult cuEventCreate(void **event, unsigned flags) {
    static size_t next = 0xe7000;
    (void)flags;
    *event = (void *)(next++);
    return 0;
}
API CUresult cuEventDestroy_v2(void *event) { return event ? 0 : 1; }
API CUresult cuEventRecord(void *event, void *stream) {
    (void)stream;
    return event ? 0 : 1;
}
API CUresult cuEventSynchronize(void *event) { return event ? 0 : 1; }
API CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
    (void)stream, (void)flags;
    return event ? 0 : 1;
}
API CUresult cuMemAllocHost_v2(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? 0 : 2;
}
/* cuMemHostAlloc: flag 2 (CU_MEMHOSTALLOC_DEVICEMAP) maps it for the device. */
API CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    *p = malloc(n ? n : 1);
    if (!*p) return 2;
    return pin(*p, n, (flags & 2) != 0);
}
API CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
    if (!p || !n || pinned_at((size_t)p) >= 0) return 1;
    return pin(p, n, (flags & 2) != 0);
}
static CUresult unpin(void *p) {
    int i = pinned_at((size_t)p);
    if (i < 0 || pinned[i].base != (size_t)p) return 1;
    pinned[i].base = 0;
    return 0;
}
API CUresult cuMemHostUnregister(void *p) { return unpin(p); }
/* Under unified addressing the device's address of pinned memory is its host address; asking
 * it maps the region (as every pinned region is mapped on such a system). */
API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
    int i = pinned_at((size_t)p);
    if (i < 0 || flags) return 1;
    pinned[i].mapped = 1;
    *d = (CUdeviceptr)(size_t)p;
    return 0;
}
API CUresult cuMemFreeHost(void *p) {
    unpin(p);
    free(p);
    return 0;
}

/* Stream memory operations, done at once (one queue): a value written, a wait for one. */
API CUresult cuStreamWriteValue32(void *stream, CUdeviceptr addr, unsigned value, unsigned flags) {
    (void)stream, (void)flags;
    memcpy(at(addr), &value, 4);
    return 0;
}
API CUresult cuStreamWriteValue64(void *stream, CUdeviceptr addr, unsigned long long value,
                                  unsigned flags) {
    (void)stream, (void)flags;
    memcpy(at(addr), &value, 8);
    return 0;
}
API CUresult cuStreamWaitValue32(void *stream, CUdeviceptr addr, unsigned value, unsigned flags) {
    (void)stream, (void)flags;
    unsigned now;
    memcpy(&now, at(addr), 4);
    return now >= value ? 0 : 1; /* CU_STREAM_WAIT_VALUE_GEQ, already met */
}

/* A batch of stream memory operations (cuStreamBatchMemOp), each done at once as above: the
 * 48-byte parameters hold the operation, address, value and flags at 0, 8, 16 and 24. */
API CUresult cuStreamBatchMemOp_v2(void *stream, unsigned count, const unsigned char *ops,
                                   unsigned flags) {
    (void)stream;
    if (flags || (count && !ops)) return 1;
    for (unsigned i = 0; i < count; i++) {
        const unsigned char *o = ops + 48 * (size_t)i;
        unsigned op, f, now;
        CUdeviceptr a;
        unsigned long long v;
        memcpy(&op, o, 4), memcpy(&a, o + 8, 8), memcpy(&v, o + 16, 8), memcpy(&f, o + 24, 4);
        if (op == 2 || op == 5) { /* a 32- or 64-bit write: the value's low bytes first */
            memcpy(at(a), &v, op == 2 ? 4 : 8);
        } else if (op == 1) { /* a 32-bit wait, already met: greater or equal, or equal */
            memcpy(&now, at(a), 4);
            if (f == 1 ? now != (unsigned)v : now < (unsigned)v) return 1;
        } else if (op != 3 && op != 6) { /* flush and barrier order only */
            return 1;
        }
    }
    return 0;
}

/* An async copy to the host lands at the stream's sync, as on a device that is still busy:
 * whoever reads the destination before then sees the old bytes. */
static struct { void *dst; CUdeviceptr src; size_t n; } pending[16];
static int npending;

API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream) {
    (void)stream;
    if (npending == 16) return 1;
    pending[npending].dst = dst;
    pending[npending].src = src;
    pending[npending].n = n;
    npending++;
    return 0;
}

static void land_pending(void) {
    for (int i = 0; i < npending; i++) memcpy(pending[i].dst, at(pending[i].src), pending[i].n);
    npending = 0;
}

/* A kernel's fault, sticky as on a device: every sync after it reports it. */
static CUresult sticky;
/* A kernel that spins (launched with n == -1): the next sync waits for it, up to 4 s, then
 * reports CUDA_ERROR_LAUNCH_TIMEOUT, so a test that expects a hang cannot hang itself. */
static int spinning;

API CUresult cuStreamSynchronize(void *stream) {
    (void)stream;
    if (spinning) {
        for (int i = 0; i < 400; i++) usleep(10000);
        spinning = 0;
        sticky = 702;
    }
    if (sticky) return sticky;
    land_pending();
    return 0;
}

/* A host function runs once the stream's earlier work is done: the pending copies land, then
 * it is called (here, before the call that queued it returns). */
API CUresult cuLaunchHostFunc(void *stream, void (*fn)(void *), void *data) {
    (void)stream;
    if (sticky) return sticky;
    land_pending();
    fn(data);
    return 0;
}
API CUresult cuStreamAddCallback(void *stream, void (*cb)(void *, CUresult, void *), void *data,
                                 unsigned flags) {
    if (flags) return 1; /* CUDA_ERROR_INVALID_VALUE: reserved, must be 0 */
    land_pending();
    cb(stream, sticky, data);
    return 0;
}

API CUresult cuCtxSynchronize(void) { return cuStreamSynchronize(NULL); }

API CUresult cuStreamCreate(void **stream, unsigned flags) {
    static size_t next = 0x57000;
    *stream = (void *)(next++);
    return flags <= 1 ? 0 : 1;
}

API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned value, size_t n);

/* Done at once: nothing else is queued on the streams these tests use. */
API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t n, void *stream) {
    (void)stream;
    return cuMemsetD32_v2(dst, value, n);
}

API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned value, size_t n) {
    for (size_t i = 0; i < n; i++) memcpy(at(dst) + 4 * i, &value, 4);
    return 0;
}

/* One module, whatever the image, with one kernel: scale(float *x, int n, float k). */
#define MODULE ((void *)0x40000)
#define SCALE 0x5ca1eull

API CUresult cuModuleLoadData(void **module, const void *image) {
    *module = MODULE;
    return image ? 0 : 1;
}

API CUresult cuModuleGetFunction(void **f, void *module, const char *name) {
    if (module == MODULE && strcmp(name, "scale") && getenv("FAKE_CUDA_LAUNCHES_RUN")) {
        /* Any kernel of an exported program: a handle of its own, from its name. */
        size_t h = 0x70000;
        for (const char *c = name; *c; c++) h = h * 31 + (unsigned char)*c;
        *f = (void *)((h & 0xffff0) | 0x700000);
        return 0;
    }
    if (module != MODULE || strcmp(name, "scale")) return 500;
    *f = (void *)SCALE;
    return 0;
}

/* A library holding the same module: its module is LIB_MODULE, a handle of its own (the CUDA
 * runtime's way to a variable: cuLibraryLoadData, cuLibraryGetModule, cuModuleGetGlobal). */
#define LIBRARY ((void *)0x41000)
#define LIB_MODULE ((void *)0x42000)

API CUresult cuLibraryLoadData(void **library, const void *code, void *jit_options,
                               void **jit_values, unsigned n_jit, void *lib_options,
                               void **lib_values, unsigned n_lib) {
    (void)jit_options, (void)jit_values, (void)n_jit, (void)lib_options, (void)lib_values;
    (void)n_lib;
    *library = LIBRARY;
    return code ? 0 : 1;
}

API CUresult cuLibraryGetModule(void **module, void *library) {
    if (library != LIBRARY) return 400; /* CUDA_ERROR_INVALID_HANDLE */
    *module = LIB_MODULE;
    return 0;
}

/* The module's one variable, `table` (64 bytes), at the arena's last page: memory no
 * allocation holds, as a __constant__ array's. */
#define TABLE (BASE + ARENA - 4096)

API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, void *module,
                                  const char *name) {
    if ((module != MODULE && module != LIB_MODULE) || strcmp(name, "table"))
        return 500; /* CUDA_ERROR_NOT_FOUND */
    if (dptr) *dptr = TABLE;
    if (bytes) *bytes = 64;
    return 0;
}

API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, void *library,
                                const char *name) {
    if (library != LIBRARY) return 400;
    return cuModuleGetGlobal_v2(dptr, bytes, LIB_MODULE, name);
}

API CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *offset, size_t *size) {
    static const size_t off[3] = {0, 8, 12}, sz[3] = {8, 4, 4};
    if ((size_t)f != SCALE || i >= 3) return 1; /* CUDA_ERROR_INVALID_VALUE */
    *offset = off[i];
    *size = sz[i];
    return 0;
}

/* Understood by nobody: the shim logs it as opaque (a copy from a CUDA array). */
API CUresult cuMemcpyAtoH_v2(void *dst, void *array, size_t offset, size_t n) {
    (void)dst, (void)array, (void)offset, (void)n;
    return 0;
}

/* Unified addressing: the arena is device memory, anything else the host's. */
static int in_arena(CUdeviceptr p) { return (p >= BASE && p < BASE + ARENA) || map_at(p) >= 0; }

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                 unsigned long long flags) {
    if (!ptr || !size || align > 0x10000 || flags) return 1;
    (void)addr;
    *ptr = VBASE + vcursor;
    vcursor += (size + 0xffff) & ~(size_t)0xffff;
    return 0;
}
API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    return ptr >= VBASE && ptr + size <= VBASE + vcursor ? 0 : 1;
}
API CUresult cuMemCreate(unsigned long long *h, size_t size, const void *prop,
                         unsigned long long flags) {
    if (!h || !prop || flags || cursor + size > ARENA) return 2;
    *h = 1ull << 63 | (unsigned long long)cursor << 32 | size;
    cursor = (cursor + size + 255) & ~(size_t)255;
    return 0;
}
API CUresult cuMemRelease(unsigned long long h) { return h >> 63 ? 0 : 1; }
API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long h,
                      unsigned long long flags) {
    size_t off = (size_t)(h >> 32 & 0x7fffffff), n = (size_t)(h & 0xffffffff);
    if (!(h >> 63) || flags || offset + size > n) return 1;
    for (int i = 0; i < 16; i++) {
        if (maps[i].n) continue;
        maps[i].va = ptr, maps[i].n = size, maps[i].off = off + offset;
        return 0;
    }
    return 2;
}
API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    int m = map_at(ptr);
    if (m < 0 || maps[m].va != ptr || maps[m].n != size) return 1;
    maps[m].n = 0;
    return 0;
}
API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count) {
    return desc && count && map_at(ptr) >= 0 && map_at(ptr + size - 1) >= 0 ? 0 : 1;
}
API CUresult cuMemExportToShareableHandle(void *out, unsigned long long h, int type,
                                          unsigned long long flags) {
    if (type != 1 /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */ || flags || !(h >> 63)) return 1;
    int fd = memfd_create("fake-cumem", 0);
    if (fd < 0 || write(fd, &h, sizeof h) != (ssize_t)sizeof h) return 999;
    *(int *)out = fd;
    return 0;
}
API CUresult cuMemImportFromShareableHandle(unsigned long long *h, void *os, int type) {
    if (type != 1) return 1;
    return pread((int)(size_t)os, h, sizeof *h, 0) == (ssize_t)sizeof *h && *h >> 63 ? 0 : 1;
}

API CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr p) {
    if (attribute != 2 /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */ || !in_arena(p)) return 1;
    *(unsigned *)data = 2; /* CU_MEMORYTYPE_DEVICE */
    return 0;
}

/* The address of one side of a 2D/3D copy: host (1), device (2) or unified (4). */
static unsigned char *side(unsigned type, const void *host, CUdeviceptr device) {
    if (type == 1) return (unsigned char *)host;
    if (type == 2 || (type == 4 && in_arena(device))) return at(device);
    if (type == 4) return (unsigned char *)(size_t)device;
    return NULL;
}


API CUresult cuMemcpy2D_v2(const Memcpy2D *d) {
    if (!d) return 1;
    unsigned char *src = side(d->src_type, d->src_host, d->src_device);
    unsigned char *dst = side(d->dst_type, d->dst_host, d->dst_device);
    if (!src || !dst || d->src_pitch < d->width || d->dst_pitch < d->width) return 1;
    for (size_t y = 0; y < d->height; y++)
        memmove(dst + d->dst_x + (d->dst_y + y) * d->dst_pitch,
                src + d->src_x + (d->src_y + y) * d->src_pitch, d->width);
    return 0;
}

/* Done at once: nothing else is queued on the streams these tests use. */
API CUresult cuMemcpy2DAsync_v2(const Memcpy2D *d, void *stream) {
    (void)stream;
    return cuMemcpy2D_v2(d);
}


API CUresult cuMemcpy3D_v2(const Memcpy3D *d) {
    if (!d) return 1;
    unsigned char *src = side(d->src_type, d->src_host, d->src_device);
    unsigned char *dst = side(d->dst_type, d->dst_host, d->dst_device);
    if (!src || !dst || d->src_pitch < d->width || d->dst_pitch < d->width) return 1;
    for (size_t z = 0; z < d->depth; z++)
        for (size_t y = 0; y < d->height; y++)
            memmove(dst + d->dst_x + (d->dst_y + y) * d->dst_pitch +
                        (d->dst_z + z) * d->dst_pitch * d->dst_height,
                    src + d->src_x + (d->src_y + y) * d->src_pitch +
                        (d->src_z + z) * d->src_pitch * d->src_height,
                    d->width);
    return 0;
}

/* cudaMemcpyDefault: the direction is the pointers'. */
API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    memmove(in_arena(dst) ? at(dst) : (unsigned char *)(size_t)dst,
            in_arena(src) ? at(src) : (unsigned char *)(size_t)src, n);
    return 0;
}

/* CUDA 12.8's batch of generic copies (CUDA 13's `_v2` has no fail index), each run now:
 * attributes must be given, one at least, as the driver requires. */
API CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                   size_t count, void *attrs, size_t *idxs, size_t nattrs,
                                   void *stream) {
    (void)stream;
    if (!dsts || !srcs || !sizes || !attrs || !idxs || !nattrs || idxs[0] != 0) return 1;
    for (size_t i = 0; i < count; i++) cuMemcpy(dsts[i], srcs[i], sizes[i]);
    return 0;
}
/* CUmemcpy3DOperand and CUDA_MEMCPY3D_BATCH_OP: pointer operands only, copied row by row. */
typedef struct {
    int type;
    CUdeviceptr ptr;
    size_t row_length, layer_height;
    int hint[2];
} Operand3D;
typedef struct {
    Operand3D src, dst;
    size_t width, height, depth;
    int order;
    unsigned flags;
} BatchOp3D;
API CUresult cuMemcpy3DBatchAsync_v2(size_t count, BatchOp3D *ops, unsigned long long flags,
                                     void *stream) {
    (void)stream;
    if (!ops || flags) return 1;
    for (size_t i = 0; i < count; i++) {
        BatchOp3D *o = &ops[i];
        if (o->src.type != 1 || o->dst.type != 1) return 1;
        size_t sp = o->src.row_length ? o->src.row_length : o->width;
        size_t dp = o->dst.row_length ? o->dst.row_length : o->width;
        size_t sh = o->src.layer_height ? o->src.layer_height : o->height;
        size_t dh = o->dst.layer_height ? o->dst.layer_height : o->height;
        for (size_t z = 0; z < o->depth; z++)
            for (size_t y = 0; y < o->height; y++)
                cuMemcpy(o->dst.ptr + (z * dh + y) * dp, o->src.ptr + (z * sh + y) * sp, o->width);
    }
    return 0;
}
API CUresult cuMemcpy3DWithAttributesAsync(BatchOp3D *op, unsigned long long flags, void *stream) {
    return cuMemcpy3DBatchAsync_v2(1, op, flags, stream);
}
API CUresult cuMemcpyWithAttributesAsync(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                         void *attrs, void *stream) {
    (void)stream;
    return attrs ? cuMemcpy(dst, src, n) : 1;
}

API CUresult cuMemcpyPeer(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx,
                          size_t n) {
    (void)dst_ctx, (void)src_ctx;
    if (!in_arena(dst) || !in_arena(src)) return 1;
    memmove(at(dst), at(src), n);
    return 0;
}

/* Eleven arguments: six in registers, five on the stack. The answer is a sum of them all,
 * which the forwarding test checks; with FAKE_CUDA_LAUNCHES_RUN set a launch of any other
 * kernel succeeds and does nothing (a program exported from a real GPU's trace). */
static CUresult launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shmem, void *stream, void **params, void **extra) {
    if (getenv("FAKE_CUDA_LAUNCHES_RUN")) return 0;
    return (CUresult)((size_t)f + gx + 2 * gy + 3 * gz + 5 * bx + 7 * by + 11 * bz + 13 * shmem +
                      17 * (size_t)stream + 19 * (size_t)params + 23 * (size_t)extra);
}

/* Stream capture: launches of `scale` on the capturing stream are kept (by value) instead of
 * run, and each launch of the one executable graph runs them in order. */
static void *capturing;
/* The captured graph's `scale` launches (node handle 0x6d0000 + i), and its executable's own
 * copy of them, made when it is instantiated. */
typedef struct { CUdeviceptr x; int n; float k; } Scale;
static Scale captured[8], exec_captured[8];
static int ncaptured, graph_made;
#define GRAPH 0x6a0000ull
#define GRAPH_EXEC 0x6e0000ull
/* Graphs built node by node (below) are NODE_GRAPH + g, their executables NODE_EXEC + e. */
#define NODE_GRAPH 0x6b0000ull
#define NODE_EXEC 0x6f0000ull
static CUresult instantiate_built(void **exec, void *graph);

API CUresult cuStreamBeginCapture_v2(void *stream, int mode) {
    if (capturing || mode < 0 || mode > 2) return 1;
    capturing = stream;
    ncaptured = 0;
    return 0;
}

/* The capturing stream's dependencies: the node its last captured launch became. */
API CUresult cuStreamGetCaptureInfo_v3(void *stream, int *status, unsigned long long *id,
                                       void **graph, const void **deps, const void **edges,
                                       size_t *n) {
    static size_t last;
    int active = capturing && stream == capturing;
    *status = active;
    if (id) *id = 1;
    if (graph) *graph = active ? (void *)GRAPH : NULL;
    if (edges) *edges = NULL;
    last = 0x6d0000ull + (size_t)(ncaptured - 1);
    *deps = active && ncaptured ? (const void *)&last : NULL;
    *n = active && ncaptured ? 1 : 0;
    return 0;
}

/* The captured graph's nodes, in the order captured. */
API CUresult cuGraphGetNodes(void *graph, void **nodes, size_t *n) {
    if ((size_t)graph != GRAPH || !graph_made) return 1;
    if (nodes)
        for (int i = 0; i < ncaptured && i < (int)*n; i++) nodes[i] = (void *)(0x6d0000ull + i);
    *n = (size_t)ncaptured;
    return 0;
}

/* The calling thread's capture interaction mode (this fake refuses nothing by it). */
static __thread int thread_capture_mode;

API CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    if (!mode || *mode < 0 || *mode > 2) return 1;
    int previous = thread_capture_mode;
    thread_capture_mode = *mode;
    *mode = previous;
    return 0;
}

API CUresult cuStreamEndCapture(void *stream, void **graph) {
    if (!capturing || stream != capturing) return 1;
    capturing = NULL;
    graph_made = 1;
    *graph = (void *)GRAPH;
    return 0;
}

API CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    (void)flags;
    if (instantiate_built(exec, graph) == 0) return 0;
    if ((size_t)graph != GRAPH || !graph_made) return 1;
    memcpy(exec_captured, captured, sizeof captured);
    *exec = (void *)GRAPH_EXEC;
    return 0;
}

static CUresult scale(CUdeviceptr p, int n, float k);
static CUresult run_built(void *exec);

API CUresult cuGraphLaunch(void *exec, void *stream) {
    (void)stream;
    if ((size_t)exec - NODE_EXEC < 4) return run_built(exec);
    if ((size_t)exec != GRAPH_EXEC) return 1;
    for (int i = 0; i < ncaptured; i++)
        scale(exec_captured[i].x, exec_captured[i].n, exec_captured[i].k);
    return 0;
}

/* Graphs built node by node: up to 4, of up to 16 nodes each: `scale` kernel nodes, 32-bit
 * memset nodes, copy nodes (by value) and host nodes; a child graph node is its child's nodes
 * as they were, in its place. An executable is a copy of its graph as it was instantiated, each
 * launch running its nodes that are on in the order they were added. A node's handle is
 * 0x6c0000 + 16 * graph + its index, and names the same index in an executable. */
typedef struct {
    int kind; /* 0 scale, 1 memset, 2 copy, 3 host function, 4 event record, 5 event wait */
    int off;
    CUdeviceptr x;
    int n;
    float k;
    unsigned value;
    Memcpy3D copy;
    void (*fn)(void *);
    void *data;
} Node;
typedef struct {
    int used, n;
    Node nodes[16];
} Built;
static Built graphs_built[4], execs_built[4];

static Built *built_graph(void *graph) {
    size_t g = (size_t)graph - NODE_GRAPH;
    return g < 4 && graphs_built[g].used ? &graphs_built[g] : NULL;
}
static Built *built_exec(void *exec) {
    size_t e = (size_t)exec - NODE_EXEC;
    return e < 4 && execs_built[e].used ? &execs_built[e] : NULL;
}
/* Node `node` of `b` (a graph's or an executable's), by its handle's index. */
static Node *node_in(Built *b, void *node) {
    size_t i = ((size_t)node - 0x6c0000ull) & 15;
    return b && (size_t)node >= 0x6c0000ull && (int)i < b->n ? &b->nodes[i] : NULL;
}
/* The graph holding node `node`. */
static Built *graph_of(void *node) {
    return built_graph((void *)(NODE_GRAPH + ((((size_t)node - 0x6c0000ull) >> 4) & 3)));
}

static CUresult new_built(Built *all, size_t base, void **handle) {
    for (int g = 0; g < 4; g++) {
        if (all[g].used) continue;
        memset(&all[g], 0, sizeof all[g]);
        all[g].used = 1;
        *handle = (void *)(base + (size_t)g);
        return 0;
    }
    return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
}

API CUresult cuGraphCreate(void **graph, unsigned flags) {
    if (flags) return 1;
    return new_built(graphs_built, NODE_GRAPH, graph);
}

static CUresult instantiate_built(void **exec, void *graph) {
    Built *g = built_graph(graph);
    if (!g || new_built(execs_built, NODE_EXEC, exec)) return 1;
    execs_built[(size_t)*exec - NODE_EXEC] = *g;
    return 0;
}

static Node *add_node(void **node, void *graph, int kind) {
    Built *g = built_graph(graph);
    if (!g || g->n == 16) return NULL;
    Node *n = &g->nodes[g->n];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    *node = (void *)(0x6c0000ull + 16 * ((size_t)graph - NODE_GRAPH) + (size_t)g->n);
    g->n++;
    return n;
}

static int kernel_params(Node *n, const KernelNodeParams *p) {
    if (!n || !p || (size_t)p->func != SCALE) return 1;
    n->x = *(CUdeviceptr *)p->params[0];
    n->n = *(int *)p->params[1];
    n->k = *(float *)p->params[2];
    return 0;
}
static int memset_params(Node *n, const MemsetNodeParams *p) {
    if (!n || !p || p->element_size != 4 || p->height != 1) return 1;
    n->x = p->dst;
    n->n = (int)p->width;
    n->value = p->value;
    return 0;
}

API CUresult cuGraphAddKernelNode_v2(void **node, void *graph, void **deps, size_t ndeps,
                                     const KernelNodeParams *p) {
    (void)deps, (void)ndeps;
    if (!p || (size_t)p->func != SCALE) return 1;
    return kernel_params(add_node(node, graph, 0), p);
}

API CUresult cuGraphAddMemsetNode(void **node, void *graph, void **deps, size_t ndeps,
                                  const MemsetNodeParams *p, void *ctx) {
    (void)deps, (void)ndeps, (void)ctx;
    if (!p || p->element_size != 4 || p->height != 1) return 1;
    return memset_params(add_node(node, graph, 1), p);
}

API CUresult cuGraphAddMemcpyNode(void **node, void *graph, void **deps, size_t ndeps,
                                  const Memcpy3D *p, void *ctx) {
    (void)deps, (void)ndeps, (void)ctx;
    Node *n = p ? add_node(node, graph, 2) : NULL;
    if (!n) return 1;
    n->copy = *p;
    return 0;
}

/* CUDA_HOST_NODE_PARAMS */
typedef struct {
    void (*fn)(void *);
    void *data;
} HostNodeParams;

API CUresult cuGraphAddHostNode(void **node, void *graph, void **deps, size_t ndeps,
                                const HostNodeParams *p) {
    (void)deps, (void)ndeps;
    Node *n = p && p->fn ? add_node(node, graph, 3) : NULL;
    if (!n) return 1;
    n->fn = p->fn, n->data = p->data;
    return 0;
}

/* Event record (kind 4) and wait (kind 5) nodes: the fake runs work at once, in one order, so
 * each only checks its event. */
static CUresult add_event_node(void **node, void *graph, void *event, int kind) {
    Node *n = event ? add_node(node, graph, kind) : NULL;
    if (!n) return 1;
    n->data = event;
    return 0;
}
API CUresult cuGraphAddEventRecordNode(void **node, void *graph, void **deps, size_t ndeps,
                                       void *event) {
    (void)deps, (void)ndeps;
    return add_event_node(node, graph, event, 4);
}
API CUresult cuGraphAddEventWaitNode(void **node, void *graph, void **deps, size_t ndeps,
                                     void *event) {
    (void)deps, (void)ndeps;
    return add_event_node(node, graph, event, 5);
}

API CUresult cuGraphAddChildGraphNode(void **node, void *graph, void **deps, size_t ndeps,
                                      void *child) {
    (void)deps, (void)ndeps;
    Built *g = built_graph(graph), *c = built_graph(child);
    if (!g || !c || g == c || g->n + c->n > 16) return 1;
    *node = (void *)(0x6c0000ull + 16 * ((size_t)graph - NODE_GRAPH) + (size_t)g->n);
    memcpy(&g->nodes[g->n], c->nodes, (size_t)c->n * sizeof(Node));
    g->n += c->n;
    return 0;
}

/* A node removed from its graph: off for good there (an executable made before keeps it). */
API CUresult cuGraphDestroyNode(void *node) {
    Node *n = node_in(graph_of(node), node);
    if (!n) return 1;
    n->off = 1;
    return 0;
}
/* A child-graph node of an executable given another graph of as many nodes as fit where its
 * child's were (the driver requires the same topology): those nodes replaced. */
API CUresult cuGraphExecChildGraphNodeSetParams(void *exec, void *node, void *child) {
    Built *e = built_exec(exec), *c = built_graph(child);
    size_t i = ((size_t)node - 0x6c0000ull) & 15;
    if (!node_in(e, node) || !c || (int)i + c->n > e->n) return 1;
    memcpy(&e->nodes[i], c->nodes, (size_t)c->n * sizeof(Node));
    return 0;
}

API CUresult cuGraphClone(void **clone, void *original) {
    Built *o = built_graph(original);
    if (!o || new_built(graphs_built, NODE_GRAPH, clone)) return 1;
    graphs_built[(size_t)*clone - NODE_GRAPH] = *o;
    return 0;
}

/* A node of the captured graph (0x6d0000 + i): its launch's parameters. */
static Scale *captured_node(Scale *of, void *node) {
    size_t i = (size_t)node - 0x6d0000ull;
    return i < (size_t)ncaptured ? &of[i] : NULL;
}
static int scale_params(Scale *c, const KernelNodeParams *p) {
    if (!c || !p || (size_t)p->func != SCALE) return 1;
    c->x = *(CUdeviceptr *)p->params[0];
    c->n = *(int *)p->params[1];
    c->k = *(float *)p->params[2];
    return 0;
}

API CUresult cuGraphKernelNodeSetParams_v2(void *node, const KernelNodeParams *p) {
    Scale *c = captured_node(captured, node);
    if (c) return scale_params(c, p);
    Node *n = node_in(graph_of(node), node);
    return n && n->kind == 0 ? kernel_params(n, p) : 1;
}
API CUresult cuGraphExecKernelNodeSetParams_v2(void *exec, void *node,
                                               const KernelNodeParams *p) {
    if ((size_t)exec == GRAPH_EXEC) return scale_params(captured_node(exec_captured, node), p);
    Node *n = node_in(built_exec(exec), node);
    return n && n->kind == 0 ? kernel_params(n, p) : 1;
}
API CUresult cuGraphMemsetNodeSetParams(void *node, const MemsetNodeParams *p) {
    Node *n = node_in(graph_of(node), node);
    return n && n->kind == 1 ? memset_params(n, p) : 1;
}
API CUresult cuGraphExecMemsetNodeSetParams(void *exec, void *node, const MemsetNodeParams *p,
                                            void *ctx) {
    (void)ctx;
    Node *n = node_in(built_exec(exec), node);
    return n && n->kind == 1 ? memset_params(n, p) : 1;
}
API CUresult cuGraphNodeSetEnabled(void *exec, void *node, unsigned on) {
    Node *n = node_in(built_exec(exec), node);
    if (!n || n->kind == 3) return 1;
    n->off = !on;
    return 0;
}
/* Only an update between graphs of the same node kinds is taken (910,
 * CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, otherwise), as the driver requires the same topology. */
API CUresult cuGraphExecUpdate_v2(void *exec, void *graph, void *info) {
    (void)info;
    if ((size_t)exec == GRAPH_EXEC && (size_t)graph == GRAPH) {
        memcpy(exec_captured, captured, sizeof captured);
        return 0;
    }
    Built *e = built_exec(exec), *g = built_graph(graph);
    if (!e || !g) return 1;
    if (e->n != g->n) return 910;
    for (int i = 0; i < g->n; i++)
        if (e->nodes[i].kind != g->nodes[i].kind) return 910;
    *e = *g;
    return 0;
}

static CUresult run_built(void *exec) {
    Built *e = built_exec(exec);
    CUresult r = e ? 0 : 1;
    for (int i = 0; e && i < e->n && !r; i++) {
        Node *n = &e->nodes[i];
        if (n->off) continue;
        if (n->kind == 0) r = scale(n->x, n->n, n->k);
        if (n->kind == 1) r = cuMemsetD32_v2(n->x, n->value, n->n);
        if (n->kind == 2) r = cuMemcpy3D_v2(&n->copy);
        if (n->kind == 3) {
            land_pending();
            n->fn(n->data);
        }
    }
    return r;
}

API CUresult cuGraphExecDestroy(void *exec) {
    if ((size_t)exec == GRAPH_EXEC) return 0;
    Built *e = built_exec(exec);
    if (!e) return 1;
    e->used = 0;
    return 0;
}
API CUresult cuGraphDestroy(void *graph) {
    if ((size_t)graph == GRAPH) return 0;
    Built *g = built_graph(graph);
    if (!g) return 1;
    g->used = 0;
    return 0;
}

API CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shmem, void *stream, void **params,
                            void **extra) {
    if ((size_t)f == SCALE && capturing && stream == capturing) {
        if (ncaptured == 8) return 1;
        captured[ncaptured].x = *(CUdeviceptr *)params[0];
        captured[ncaptured].n = *(int *)params[1];
        captured[ncaptured].k = *(float *)params[2];
        ncaptured++;
        return 0;
    }
    if ((size_t)f == SCALE) return scale(*(CUdeviceptr *)params[0], *(int *)params[1],
                                         *(float *)params[2]);
    return launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

/* The `scale` kernel: x[i] *= k for i < n. */
static CUresult scale(CUdeviceptr p, int n, float k) {
    float *x = (float *)at(p);
    if (n == -1) {
        spinning = 1;
        return 0;
    }
    /* Past the arena's end: the device would fault (CUDA_ERROR_ILLEGAL_ADDRESS), and say so at
     * the next sync. */
    if (!in_managed(p) && (size_t)((unsigned char *)x - arena) + (size_t)n * sizeof(float) > ARENA) {
        sticky = 700;
        return 0;
    }
    for (int i = 0; i < n; i++) x[i] *= k;
    return 0;
}

/* A function's attribute (the dynamic shared memory limit, 8): accepted for `scale`. */
API CUresult cuFuncSetAttribute(void *f, int attribute, int value) {
    return (size_t)f == SCALE && attribute == 8 && value >= 0 ? 0 : 1;
}

/* A cooperative launch: `scale` runs as a plain launch of it would (one thread does it all). */
API CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                       void *stream, void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, NULL);
}

API CUresult cuLaunchKernelEx(const LaunchConfig *c, void *f, void **params, void **extra) {
    if (!c || (c->nattrs && !c->attrs)) return 1;
    return cuLaunchKernel(f, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1],
                          c->block[2], c->shmem, c->stream, params, extra);
}

API CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shmem, void *stream,
                                 void **params, void **extra) {
    return 1000000 + launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

/* The per-thread default stream forms a program built with `--default-stream per-thread` calls
 * (this device has one queue, so they do what the legacy forms do). */
API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, void *stream) {
    (void)stream;
    return cuMemcpyHtoD_v2(dst, src, n);
}
API CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) {
    return cuMemcpyDtoH_v2(dst, src, n);
}
API CUresult cuLaunchKernelEx_ptsz(const LaunchConfig *c, void *f, void **params, void **extra) {
    return cuLaunchKernelEx(c, f, params, extra);
}
API CUresult cuStreamSynchronize_ptsz(void *stream) { return cuStreamSynchronize(stream); }

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
