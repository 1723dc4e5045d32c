//! The recording hooks (`gputape run -o`): with the call log wanted (`log::wanted`), the entry
//! points below get a hook of their real signature in `DISPATCH`, which calls the driver's
//! function and then logs the call with its result. Hooks are generic over the entry point's
//! index, so one hook serves every variant of a call (`_v2`, `_ptsz`, `_ptds`) and calls that
//! same variant's driver function.
//!
//! Every other entry point that changes what the device holds or runs (`changes_device`) is
//! logged by name, as opaque, through `opaque_entry`, before it is forwarded: a replay says
//! exactly what it could not do. Queries (attributes, versions, occupancy) are not logged.
//!
//! What the hooks keep between calls: the bytes of an async device-to-host copy are read at
//! the first successful host sync that must have completed it (its stream's, the context's,
//! an event recorded after it on its stream), and logged then as `D2HBytes`; parameter
//! layouts are asked of the driver once per function.

use core::ffi::{CStr, c_char, c_int, c_void};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use gputape_shimlog::{On, Rec};

use super::copies::{
    copy_2d, copy_2d_async, copy_3d, copy_3d_async, copy_any, copy_any_async, copy_peer,
    copy_peer_async,
};
use super::flight::{self, Blocked};
use super::log;
use super::managed;
use super::nodes::{add_kernel_node, add_memcpy_node, add_memset_node, add_node, add_node_v2};
use super::table::{NAMES, entry, per_thread, real};

pub(super) type R = c_int;

/// The driver's function of entry point `I`, as the signature `F`.
///
/// # Safety
/// `F` is the C signature of entry point `I` (a stub that ignores its arguments also fits).
pub(super) unsafe fn real_at<F: Copy>(i: usize) -> F {
    let p = real(i);
    debug_assert_eq!(size_of::<F>(), size_of::<*mut ()>());
    // SAFETY: `F` is a function pointer type of entry point `i`'s signature (the contract);
    // `p` is the driver's function for it, or a stub.
    unsafe { core::mem::transmute_copy::<*mut (), F>(&p) }
}

/// `cuDriverGetVersion`, for the log's header (0 when it fails).
pub fn driver_version() -> i32 {
    type F = unsafe extern "C" fn(*mut c_int) -> R;
    let mut v: c_int = 0;
    // SAFETY: cuDriverGetVersion's signature; a valid out-pointer.
    let r = unsafe { real_at::<F>(entry("cuDriverGetVersion"))(&mut v) };
    if r == 0 { v } else { 0 }
}

/// What the hooks remember between calls.
#[derive(Default)]
pub(super) struct Pending {
    /// Async device-to-host copies not yet read: (log index, host destination, bytes, stream).
    pub(super) copies: Vec<(u64, usize, usize, u64)>,
    /// Each event's last record: (its stream, the log index of that record).
    events: HashMap<u64, (u64, u64)>,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

pub(super) fn with_pending<T>(f: impl FnOnce(&mut Pending) -> T) -> T {
    let mut g = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Pending::default))
}

/// Which async copies a successful sync has completed.
enum Done {
    /// Everything (a context sync).
    All,
    /// Those on this stream.
    Stream(u64),
    /// Those on `stream` logged before `before`.
    Before { stream: u64, before: u64 },
}

/// Reads and logs the bytes of the async copies `done` completed (a blocking sync then writes
/// the log out; a query leaves that to the next sync).
fn settle(done: Done) {
    let ready: Vec<(u64, usize, usize, u64)> = with_pending(|p| {
        let (now, later) = p.copies.drain(..).partition(|&(i, _, _, s)| match done {
            Done::All => true,
            Done::Stream(st) => same_stream(s, st),
            Done::Before { stream, before } => same_stream(s, stream) && i < before,
        });
        p.copies = later;
        now
    });
    for (copy, dst, len, _) in ready {
        // SAFETY: the program handed the driver `len` writable bytes at `dst` for this copy,
        // which the sync just completed; the program has not had them back to free yet.
        let data = unsafe { core::slice::from_raw_parts(dst as *const u8, len) };
        log::write(0, Rec::D2HBytes { copy, data });
    }
}

/// The legacy stream (0 and `CU_STREAM_LEGACY`, 1) and the per-thread one (2) are told apart
/// from created streams only; a sync of any of them settles copies on any of them.
fn same_stream(a: u64, b: u64) -> bool {
    a == b || (a <= 2 && b <= 2)
}

// ---- memory ----

unsafe extern "C" fn mem_alloc<const I: usize>(dptr: *mut u64, bytes: usize) -> R {
    // SAFETY: entry point I is cuMemAlloc(_v2): (CUdeviceptr*, size_t).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, usize) -> R>(I)(dptr, bytes) };
    log_alloc(r, dptr, bytes as u64, false)
}

unsafe extern "C" fn mem_alloc_managed<const I: usize>(
    dptr: *mut u64,
    bytes: usize,
    flags: u32,
) -> R {
    // SAFETY: entry point I is cuMemAllocManaged: (CUdeviceptr*, size_t, unsigned).
    let r = unsafe {
        real_at::<unsafe extern "C" fn(*mut u64, usize, u32) -> R>(I)(dptr, bytes, flags)
    };
    log_alloc(r, dptr, bytes as u64, true)
}

unsafe extern "C" fn mem_alloc_pitch<const I: usize>(
    dptr: *mut u64,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: u32,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, u32) -> R;
    // SAFETY: entry point I is cuMemAllocPitch(_v2), whose signature F is.
    let r = unsafe { real_at::<F>(I)(dptr, pitch, width, height, elem) };
    let bytes = if r == 0 && !pitch.is_null() {
        // SAFETY: the driver succeeded, so it wrote the pitch through this pointer.
        (unsafe { *pitch }) as u64 * height as u64
    } else {
        0
    };
    log_alloc(r, dptr, bytes, false)
}

unsafe extern "C" fn mem_free<const I: usize>(ptr: u64) -> R {
    // SAFETY: entry point I is cuMemFree(_v2): (CUdeviceptr).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(ptr) };
    log::write(r, Rec::Free { ptr });
    if r == 0 {
        managed::freed(ptr);
    }
    r
}

unsafe extern "C" fn host_alloc<const I: usize>(pp: *mut u64, bytes: usize) -> R {
    // SAFETY: entry point I is cuMemAllocHost(_v2): (void**, size_t).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, usize) -> R>(I)(pp, bytes) };
    let ptr = if r == 0 { read_out(pp) } else { 0 };
    let bytes = bytes as u64;
    log::write(r, Rec::HostAlloc { ptr, bytes });
    r
}

unsafe extern "C" fn host_alloc_flags<const I: usize>(pp: *mut u64, bytes: usize, flags: u32) -> R {
    // SAFETY: entry point I is cuMemHostAlloc: (void**, size_t, unsigned).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(*mut u64, usize, u32) -> R>(I)(pp, bytes, flags) };
    let ptr = if r == 0 { read_out(pp) } else { 0 };
    let bytes = bytes as u64;
    log::write(r, Rec::HostAlloc { ptr, bytes });
    r
}

unsafe extern "C" fn host_free<const I: usize>(p: u64) -> R {
    // SAFETY: entry point I is cuMemFreeHost: (void*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(p) };
    log::write(r, Rec::HostFree { ptr: p });
    r
}

/// `cuMemAllocAsync` (STREAM_ARG false: no pool) and `cuMemAllocFromPoolAsync`: stream-ordered
/// allocations, logged as allocations (a replay makes them at once).
unsafe extern "C" fn mem_alloc_async<const I: usize>(
    dptr: *mut u64,
    bytes: usize,
    stream: u64,
) -> R {
    // SAFETY: entry point I is cuMemAllocAsync(_ptsz): (CUdeviceptr*, size_t, CUstream).
    let r = unsafe {
        real_at::<unsafe extern "C" fn(*mut u64, usize, u64) -> R>(I)(dptr, bytes, stream)
    };
    log_alloc(r, dptr, bytes as u64, false)
}

unsafe extern "C" fn mem_alloc_pool_async<const I: usize>(
    dptr: *mut u64,
    bytes: usize,
    pool: u64,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, usize, u64, u64) -> R;
    // SAFETY: entry point I is cuMemAllocFromPoolAsync(_ptsz), whose signature F is.
    let r = unsafe { real_at::<F>(I)(dptr, bytes, pool, stream) };
    log_alloc(r, dptr, bytes as u64, false)
}

unsafe extern "C" fn mem_free_async<const I: usize>(ptr: u64, stream: u64) -> R {
    // SAFETY: entry point I is cuMemFreeAsync(_ptsz): (CUdeviceptr, CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64) -> R>(I)(ptr, stream) };
    log::write(r, Rec::Free { ptr });
    r
}

/// `cuMemAddressReserve`: (CUdeviceptr*, size_t size, size_t alignment, CUdeviceptr addr,
/// unsigned long long flags).
unsafe extern "C" fn address_reserve<const I: usize>(
    ptr: *mut u64,
    size: usize,
    align: usize,
    addr: u64,
    flags: u64,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> R;
    // SAFETY: entry point I is cuMemAddressReserve, whose signature F is.
    let r = unsafe { real_at::<F>(I)(ptr, size, align, addr, flags) };
    if r == 0 {
        let ptr = read_out(ptr);
        log::write(
            r,
            Rec::Reserve {
                ptr,
                size: size as u64,
            },
        );
    }
    r
}

/// `cuMemAddressFree` (UNMAP false) and `cuMemUnmap` (UNMAP true): (CUdeviceptr, size_t).
unsafe extern "C" fn address_range<const I: usize, const UNMAP: bool>(ptr: u64, size: usize) -> R {
    // SAFETY: entry point I is cuMemAddressFree or cuMemUnmap: (CUdeviceptr, size_t).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, usize) -> R>(I)(ptr, size) };
    let size = size as u64;
    if r == 0 {
        log::write(
            r,
            if UNMAP {
                Rec::Unmap { ptr, size }
            } else {
                Rec::Unreserve { ptr, size }
            },
        );
    }
    r
}

/// `cuMemMap`: (CUdeviceptr, size_t, size_t offset, CUmemGenericAllocationHandle, flags).
unsafe extern "C" fn mem_map<const I: usize>(
    ptr: u64,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> R {
    type F = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> R;
    // SAFETY: entry point I is cuMemMap, whose signature F is.
    let r = unsafe { real_at::<F>(I)(ptr, size, offset, handle, flags) };
    if r == 0 {
        log::write(
            r,
            Rec::Map {
                ptr,
                size: size as u64,
            },
        );
    }
    r
}

/// Logs an allocation whose address the driver wrote through `out` (on success); returns `r`.
fn log_alloc(r: R, out: *mut u64, bytes: u64, managed: bool) -> R {
    let ptr = if r == 0 { read_out(out) } else { 0 };
    log::write(
        r,
        Rec::Alloc {
            ptr,
            bytes,
            managed,
        },
    );
    if managed && r == 0 {
        managed::allocated(ptr, bytes);
    }
    r
}

/// An out-parameter the driver wrote on success (0 for a null pointer).
fn read_out(p: *mut u64) -> u64 {
    if p.is_null() {
        0
    } else {
        // SAFETY: non-null, and the driver just wrote it (the caller checked success).
        unsafe { *p }
    }
}

// ---- copies and memsets ----

/// `CU_STREAM_PER_THREAD`: what a stream of 0 through a `_ptsz`/`_ptds` entry point is logged
/// as, so the converter tells the calling thread's per-thread default stream from the legacy
/// stream (the driver takes either spelling as the same stream).
const PER_THREAD_STREAM: u64 = 2;

/// Where a blocking copy or memset of entry point `I` runs, the host waiting: the legacy
/// stream, or through a `_ptds` form the calling thread's per-thread default stream.
pub(super) const fn blocking<const I: usize>() -> On {
    On {
        stream: if per_thread(I) { PER_THREAD_STREAM } else { 0 },
        sync: true,
    }
}

/// The stream a call of entry point `I` names by `s`, as logged: 0 through a `_ptsz`/`_ptds`
/// form is the calling thread's per-thread default stream. What the driver gets is unchanged.
#[inline]
pub(super) fn stream_of<const I: usize>(s: u64) -> u64 {
    if s == 0 && const { per_thread(I) } {
        PER_THREAD_STREAM
    } else {
        s
    }
}

/// Where an asynchronous copy or memset of entry point `I` on stream `s` runs.
pub(super) fn async_on<const I: usize>(s: u64) -> On {
    On {
        stream: stream_of::<I>(s),
        sync: false,
    }
}

/// `n` bytes at `src` (empty for a null pointer).
///
/// # Safety
/// `src` is null or valid for `n` bytes of reads.
unsafe fn host_bytes<'a>(src: *const c_void, n: usize) -> &'a [u8] {
    if src.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: the contract.
        unsafe { core::slice::from_raw_parts(src.cast::<u8>(), n) }
    }
}

unsafe extern "C" fn h2d<const I: usize>(dst: u64, src: *const c_void, n: usize) -> R {
    type F = unsafe extern "C" fn(u64, *const c_void, usize) -> R;
    managed::before_work(None);
    // SAFETY: entry point I is cuMemcpyHtoD(_v2[_ptds]), whose signature F is.
    let r = unsafe { real_at::<F>(I)(dst, src, n) };
    let on = blocking::<I>();
    // SAFETY: the program passed `n` readable bytes at `src` to the driver.
    let data = unsafe { host_bytes(src, n) };
    log::write(r, Rec::CopyH2D { dst, on, data });
    r
}

unsafe extern "C" fn h2d_async<const I: usize>(
    dst: u64,
    src: *const c_void,
    n: usize,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(u64, *const c_void, usize, u64) -> R;
    managed::before_work(Some(stream_of::<I>(stream)));
    // SAFETY: entry point I is cuMemcpyHtoDAsync(_v2[_ptsz]), whose signature F is.
    let r = unsafe { real_at::<F>(I)(dst, src, n, stream) };
    let on = async_on::<I>(stream);
    // SAFETY: as in h2d; the bytes are taken as they are when the call is made.
    let data = unsafe { host_bytes(src, n) };
    log::write(r, Rec::CopyH2D { dst, on, data });
    r
}

unsafe extern "C" fn d2h<const I: usize>(dst: *mut c_void, src: u64, n: usize) -> R {
    type F = unsafe extern "C" fn(*mut c_void, u64, usize) -> R;
    managed::before_work(None);
    let queued = managed::before_sync();
    let r = {
        let _w = flight::waiting(Blocked::D2H {
            src,
            dst: dst as u64,
            len: n as u64,
            on: blocking::<I>(),
        });
        // SAFETY: entry point I is cuMemcpyDtoH(_v2[_ptds]), whose signature F is.
        unsafe { real_at::<F>(I)(dst, src, n) }
    };
    // SAFETY: the driver wrote `n` bytes at `dst` (on success; else they are not logged).
    let data = if r == 0 {
        unsafe { host_bytes(dst, n) }
    } else {
        &[]
    };
    let on = blocking::<I>();
    log::write(
        r,
        Rec::CopyD2H {
            src,
            dst_host: dst as u64,
            len: n as u64,
            on,
            data,
        },
    );
    // A blocking read of the legacy stream waited for its work: with all the work there, the
    // device is idle now (a program reading results with `cudaMemcpy`).
    if on.stream <= 1 {
        managed::after_sync(r, queued, true);
    }
    r
}

unsafe extern "C" fn d2h_async<const I: usize>(
    dst: *mut c_void,
    src: u64,
    n: usize,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(*mut c_void, u64, usize, u64) -> R;
    managed::before_work(Some(stream_of::<I>(stream)));
    // SAFETY: entry point I is cuMemcpyDtoHAsync(_v2[_ptsz]), whose signature F is.
    let r = unsafe { real_at::<F>(I)(dst, src, n, stream) };
    let on = async_on::<I>(stream);
    let rec = Rec::CopyD2H {
        src,
        dst_host: dst as u64,
        len: n as u64,
        on,
        data: &[],
    };
    if let Some(i) = log::write(r, rec)
        && r == 0
        && !dst.is_null()
        && n > 0
    {
        with_pending(|p| p.copies.push((i, dst as usize, n, on.stream)));
    }
    r
}

unsafe extern "C" fn d2d<const I: usize>(dst: u64, src: u64, n: usize) -> R {
    managed::before_work(None);
    // SAFETY: entry point I is cuMemcpyDtoD(_v2[_ptds]): (CUdeviceptr, CUdeviceptr, size_t).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64, usize) -> R>(I)(dst, src, n) };
    let on = blocking::<I>();
    log::write(
        r,
        Rec::CopyD2D {
            src,
            dst,
            len: n as u64,
            on,
        },
    );
    r
}

unsafe extern "C" fn d2d_async<const I: usize>(dst: u64, src: u64, n: usize, stream: u64) -> R {
    type F = unsafe extern "C" fn(u64, u64, usize, u64) -> R;
    managed::before_work(Some(stream_of::<I>(stream)));
    // SAFETY: entry point I is cuMemcpyDtoDAsync(_v2[_ptsz]), whose signature F is.
    let r = unsafe { real_at::<F>(I)(dst, src, n, stream) };
    let on = async_on::<I>(stream);
    log::write(
        r,
        Rec::CopyD2D {
            src,
            dst,
            len: n as u64,
            on,
        },
    );
    r
}

/// `cuStreamWriteValue32` (and its `_v2`, `_ptsz` forms): (CUstream, CUdeviceptr, cuuint32_t,
/// unsigned flags). A stream-ordered write of a value, logged as the upload of its bytes on that
/// stream it amounts to (the flags only relax the memory ordering; a replay keeps the stricter
/// one).
unsafe extern "C" fn write_value32<const I: usize>(s: u64, addr: u64, v: u32, flags: u32) -> R {
    managed::before_work(Some(stream_of::<I>(s)));
    // SAFETY: entry point I is a cuStreamWriteValue32 form: (CUstream, CUdeviceptr, cuuint32_t,
    // unsigned).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(u64, u64, u32, u32) -> R>(I)(s, addr, v, flags) };
    log_write_value::<I>(r, s, addr, &v.to_le_bytes());
    r
}

/// `cuStreamWriteValue64` (and its `_v2`, `_ptsz` forms): `cuStreamWriteValue32`'s, 8 bytes.
unsafe extern "C" fn write_value64<const I: usize>(s: u64, addr: u64, v: u64, flags: u32) -> R {
    managed::before_work(Some(stream_of::<I>(s)));
    // SAFETY: entry point I is a cuStreamWriteValue64 form: (CUstream, CUdeviceptr, cuuint64_t,
    // unsigned).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(u64, u64, u64, u32) -> R>(I)(s, addr, v, flags) };
    log_write_value::<I>(r, s, addr, &v.to_le_bytes());
    r
}

fn log_write_value<const I: usize>(r: R, s: u64, dst: u64, data: &[u8]) {
    let on = async_on::<I>(s);
    log::write(r, Rec::CopyH2D { dst, on, data });
}

/// A memset of `ELEM`-byte elements. The value is declared `u32` whatever the element: the C
/// `unsigned char`/`unsigned short` arrives in the same register, its upper bits unspecified,
/// and is masked here; the driver gets the register as the caller left it.
unsafe extern "C" fn memset<const I: usize, const ELEM: u8>(dst: u64, value: u32, n: usize) -> R {
    managed::before_work(None);
    // SAFETY: entry point I is cuMemsetD8/D16/D32(_v2[_ptds]): (CUdeviceptr, value, size_t).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u32, usize) -> R>(I)(dst, value, n) };
    let on = blocking::<I>();
    log::write(r, memset_rec::<ELEM>(dst, value, n, on));
    r
}

unsafe extern "C" fn memset_async<const I: usize, const ELEM: u8>(
    dst: u64,
    value: u32,
    n: usize,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(u64, u32, usize, u64) -> R;
    managed::before_work(Some(stream_of::<I>(stream)));
    // SAFETY: entry point I is cuMemsetD8/D16/D32Async([_ptsz]), whose signature F is.
    let r = unsafe { real_at::<F>(I)(dst, value, n, stream) };
    let on = async_on::<I>(stream);
    log::write(r, memset_rec::<ELEM>(dst, value, n, on));
    r
}

fn memset_rec<const ELEM: u8>(dst: u64, value: u32, n: usize, on: On) -> Rec<'static> {
    let value = match ELEM {
        1 => value & 0xff,
        2 => value & 0xffff,
        _ => value,
    };
    Rec::Memset {
        dst,
        value,
        elem: ELEM,
        count: n as u64,
        on,
    }
}

// ---- modules, libraries, functions ----

/// The image a module load was given, whole: a fatbin (or the runtime's wrapper around one),
/// an ELF cubin, or NUL-terminated PTX. The driver takes no size; each format says its own.
/// `None` for something else (logged with an empty image: a replay says it cannot load it).
///
/// # Safety
/// `p` is what the driver just accepted as an image.
unsafe fn image<'a>(p: *const c_void) -> &'a [u8] {
    // SAFETY: the contract; `image_len` reads only headers each format guarantees.
    match unsafe { image_len(p.cast::<u8>()) } {
        // SAFETY: the driver read this image; `len` is what its own headers span.
        Some((start, len)) => unsafe { core::slice::from_raw_parts(start, len) },
        None => &[],
    }
}

/// Largest image believed (a size past it is a misread header, not an image).
const IMAGE_MAX: u64 = 4 << 30;

unsafe fn image_len(p: *const u8) -> Option<(*const u8, usize)> {
    if p.is_null() {
        return None;
    }
    // SAFETY (every read below): `p` is an image the driver accepted; each read is within the
    // header its format begins with, or within the extent that header gives.
    let u32_at = |q: *const u8, off: usize| unsafe { q.add(off).cast::<u32>().read_unaligned() };
    let u16_at = |q: *const u8, off: usize| unsafe { q.add(off).cast::<u16>().read_unaligned() };
    let u64_at = |q: *const u8, off: usize| unsafe { q.add(off).cast::<u64>().read_unaligned() };
    let magic = u32_at(p, 0);
    // The runtime's wrapper: { magic, version, const void *fatbin, ... }.
    if magic == 0x466243b1 {
        let inner = u64_at(p, 8) as *const u8;
        // SAFETY: the wrapper's data pointer is the fatbin it wraps.
        return unsafe { image_len(inner) };
    }
    // A fatbin: { magic, u16 version, u16 header size, u64 size after the header }.
    if magic == 0xBA55ED50 {
        let total = u16_at(p, 6) as u64 + u64_at(p, 8);
        return (total <= IMAGE_MAX).then_some((p, total as usize));
    }
    // An ELF64 cubin: as far as its section and program header tables and its sections reach.
    if magic == u32::from_le_bytes(*b"\x7fELF") {
        // SAFETY: e_ident is 16 bytes.
        if unsafe { *p.add(4) } != 2 {
            return None;
        }
        let (phoff, shoff) = (u64_at(p, 0x20), u64_at(p, 0x28));
        let (phent, phnum) = (u16_at(p, 0x36) as u64, u16_at(p, 0x38) as u64);
        let (shent, shnum) = (u16_at(p, 0x3A) as u64, u16_at(p, 0x3C) as u64);
        let mut end = (phoff + phent * phnum).max(shoff + shent * shnum).max(64);
        if end > IMAGE_MAX || shent < 0x28 {
            return None;
        }
        for k in 0..shnum {
            // SAFETY: inside the section header table, which is inside the image.
            let sh = unsafe { p.add((shoff + k * shent) as usize) };
            let (ty, off, size) = (u32_at(sh, 4), u64_at(sh, 0x18), u64_at(sh, 0x20));
            // SHT_NOBITS takes no bytes of the file.
            if ty != 8 {
                end = end.max(off.saturating_add(size));
            }
        }
        return (end <= IMAGE_MAX).then_some((p, end as usize));
    }
    // PTX: text up to and with its NUL.
    // SAFETY: anything else the driver accepted is NUL-terminated text.
    let text = unsafe { CStr::from_ptr(p.cast::<c_char>()) };
    let n = text.to_bytes_with_nul().len();
    (n > 1 && (n as u64) <= IMAGE_MAX).then_some((p, n))
}

fn log_load(r: R, out: *mut u64, library: bool, image: &[u8]) {
    let handle = if r == 0 { read_out(out) } else { 0 };
    log::write(
        r,
        Rec::ModuleLoad {
            handle,
            library,
            image,
        },
    );
}

unsafe extern "C" fn module_load_data<const I: usize>(m: *mut u64, img: *const c_void) -> R {
    // SAFETY: entry point I is cuModuleLoadData or cuModuleLoadFatBinary: (CUmodule*, void*).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, *const c_void) -> R>(I)(m, img) };
    // SAFETY: the driver accepted `img` as an image (only read on success).
    let bytes = if r == 0 { unsafe { image(img) } } else { &[] };
    log_load(r, m, false, bytes);
    r
}

unsafe extern "C" fn module_load_data_ex<const I: usize>(
    m: *mut u64,
    img: *const c_void,
    n: u32,
    opts: *mut c_void,
    vals: *mut *mut c_void,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, *const c_void, u32, *mut c_void, *mut *mut c_void) -> R;
    // SAFETY: entry point I is cuModuleLoadDataEx, whose signature F is.
    let r = unsafe { real_at::<F>(I)(m, img, n, opts, vals) };
    // SAFETY: as in module_load_data.
    let bytes = if r == 0 { unsafe { image(img) } } else { &[] };
    log_load(r, m, false, bytes);
    r
}

unsafe extern "C" fn module_load_file<const I: usize>(m: *mut u64, path: *const c_char) -> R {
    // SAFETY: entry point I is cuModuleLoad: (CUmodule*, const char*).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, *const c_char) -> R>(I)(m, path) };
    // SAFETY: the driver read `path` as a NUL-terminated file name.
    let file = if r == 0 {
        unsafe { read_file(path) }
    } else {
        Vec::new()
    };
    log_load(r, m, false, &file);
    r
}

/// The file a module or library was loaded from (empty when it cannot be read again).
///
/// # Safety
/// `path` is null or NUL-terminated.
unsafe fn read_file(path: *const c_char) -> Vec<u8> {
    if path.is_null() {
        return Vec::new();
    }
    // SAFETY: the contract.
    let p = unsafe { CStr::from_ptr(path) };
    let p = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(p.to_bytes());
    std::fs::read(p).unwrap_or_default()
}

type LibLoad = unsafe extern "C" fn(
    *mut u64,
    *const c_void,
    *mut c_void,
    *mut *mut c_void,
    u32,
    *mut c_void,
    *mut *mut c_void,
    u32,
) -> R;

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn library_load_data<const I: usize>(
    lib: *mut u64,
    code: *const c_void,
    jo: *mut c_void,
    jv: *mut *mut c_void,
    njo: u32,
    lo: *mut c_void,
    lv: *mut *mut c_void,
    nlo: u32,
) -> R {
    // SAFETY: entry point I is cuLibraryLoadData, whose signature LibLoad is.
    let r = unsafe { real_at::<LibLoad>(I)(lib, code, jo, jv, njo, lo, lv, nlo) };
    // SAFETY: as in module_load_data.
    let bytes = if r == 0 { unsafe { image(code) } } else { &[] };
    log_load(r, lib, true, bytes);
    r
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn library_load_file<const I: usize>(
    lib: *mut u64,
    path: *const c_void,
    jo: *mut c_void,
    jv: *mut *mut c_void,
    njo: u32,
    lo: *mut c_void,
    lv: *mut *mut c_void,
    nlo: u32,
) -> R {
    // SAFETY: entry point I is cuLibraryLoadFromFile, of LibLoad's shape (a path for the code).
    let r = unsafe { real_at::<LibLoad>(I)(lib, path, jo, jv, njo, lo, lv, nlo) };
    // SAFETY: the driver read `path` as a NUL-terminated file name.
    let file = if r == 0 {
        unsafe { read_file(path.cast::<c_char>()) }
    } else {
        Vec::new()
    };
    log_load(r, lib, true, &file);
    r
}

unsafe extern "C" fn module_unload<const I: usize, const LIB: bool>(h: u64) -> R {
    // SAFETY: entry point I is cuModuleUnload or cuLibraryUnload: (handle).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(h) };
    log::write(
        r,
        Rec::ModuleUnload {
            handle: h,
            library: LIB,
        },
    );
    r
}

/// `cuModuleGetFunction` (LIB false) and `cuLibraryGetKernel` (LIB true).
unsafe extern "C" fn get_function<const I: usize, const LIB: bool>(
    out: *mut u64,
    owner: u64,
    name: *const c_char,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, u64, *const c_char) -> R;
    // SAFETY: entry point I is cuModuleGetFunction or cuLibraryGetKernel, of signature F.
    let r = unsafe { real_at::<F>(I)(out, owner, name) };
    let handle = if r == 0 { read_out(out) } else { 0 };
    let name = if name.is_null() {
        &[][..]
    } else {
        // SAFETY: the driver read `name` as a NUL-terminated symbol.
        unsafe { CStr::from_ptr(name) }.to_bytes()
    };
    log::write(
        r,
        Rec::Function {
            owner,
            library: LIB,
            handle,
            name,
        },
    );
    r
}

/// `cuModuleGetGlobal_v2` (LIB false) and `cuLibraryGetGlobal` (LIB true): where a module
/// variable lies, and its size (either out pointer may be null).
unsafe extern "C" fn get_global<const I: usize, const LIB: bool>(
    ptr: *mut u64,
    bytes: *mut usize,
    owner: u64,
    name: *const c_char,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, *mut usize, u64, *const c_char) -> R;
    // SAFETY: entry point I is cuModuleGetGlobal_v2 or cuLibraryGetGlobal, of signature F.
    let r = unsafe { real_at::<F>(I)(ptr, bytes, owner, name) };
    if r != 0 || name.is_null() || (ptr.is_null() && bytes.is_null()) {
        return r;
    }
    // The CUDA runtime asks for the address alone (its size out-parameter null): the other
    // answer is asked of the driver again, into the shim's own variables, as a replay needs
    // both to place the variable.
    let (mut at, mut n) = (0u64, 0usize);
    let (p, b) = (
        if ptr.is_null() { &raw mut at } else { ptr },
        if bytes.is_null() { &raw mut n } else { bytes },
    );
    if (ptr.is_null() || bytes.is_null())
        // SAFETY: as above; both out-pointers valid, `name` the one the driver just read.
        && unsafe { real_at::<F>(I)(p, b, owner, name) } != 0
    {
        return r;
    }
    // SAFETY: `p` and `b` point at what the driver wrote (it returned success); the driver
    // read `name` as a NUL-terminated symbol.
    let (at, n, name) = unsafe { (*p, *b as u64, CStr::from_ptr(name).to_bytes()) };
    log::write(
        r,
        Rec::Global {
            owner,
            library: LIB,
            name,
            ptr: at,
            bytes: n,
        },
    );
    r
}

/// `cuLibraryGetModule`: the module behind a library, which the CUDA runtime asks variables'
/// addresses of.
unsafe extern "C" fn library_get_module<const I: usize>(out: *mut u64, library: u64) -> R {
    // SAFETY: entry point I is cuLibraryGetModule: (CUmodule*, CUlibrary).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u64) -> R>(I)(out, library) };
    if r == 0 {
        let module = read_out(out);
        log::write(r, Rec::LibraryModule { library, module });
    }
    r
}

unsafe extern "C" fn kernel_get_function<const I: usize>(out: *mut u64, kernel: u64) -> R {
    // SAFETY: entry point I is cuKernelGetFunction: (CUfunction*, CUkernel).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u64) -> R>(I)(out, kernel) };
    let func = if r == 0 { read_out(out) } else { 0 };
    log::write(r, Rec::KernelFunction { kernel, func });
    r
}

// ---- launches (the record itself: `launch.rs`) ----

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn launch<const I: usize>(
    f: u64,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    smem: u32,
    stream: u64,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> R {
    type F = unsafe extern "C" fn(
        u64,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        u64,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> R;
    managed::before_work(Some(stream_of::<I>(stream)));
    // SAFETY: entry point I is cuLaunchKernel(_ptsz), whose signature F is.
    let r = unsafe { real_at::<F>(I)(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra) };
    let dims =
        super::launch::LaunchDims::plain([gx, gy, gz], [bx, by, bz], smem, stream_of::<I>(stream));
    super::launch::log(r, f, dims, params, extra);
    r
}

/// `cuLaunchCooperativeKernel(_ptsz)`: `cuLaunchKernel`'s arguments less `extra`. Its launch
/// is logged as any other, after a `Cooperative` record that marks it.
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn launch_cooperative<const I: usize>(
    f: u64,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    smem: u32,
    stream: u64,
    params: *mut *mut c_void,
) -> R {
    type F =
        unsafe extern "C" fn(u64, u32, u32, u32, u32, u32, u32, u32, u64, *mut *mut c_void) -> R;
    managed::before_work(Some(stream_of::<I>(stream)));
    // SAFETY: entry point I is cuLaunchCooperativeKernel(_ptsz), whose signature F is.
    let r = unsafe { real_at::<F>(I)(f, gx, gy, gz, bx, by, bz, smem, stream, params) };
    let dims =
        super::launch::LaunchDims::plain([gx, gy, gz], [bx, by, bz], smem, stream_of::<I>(stream));
    log::write(r, Rec::Cooperative { func: f });
    super::launch::log(r, f, dims, params, core::ptr::null_mut());
    r
}

/// `CUlaunchConfig`, as `cuLaunchKernelEx` takes it.
#[repr(C)]
struct LaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    stream: u64,
    attrs: *const LaunchAttribute,
    num_attrs: u32,
}

/// `CUlaunchAttribute`: an id, padding to 8, and a 64-byte union of values.
#[repr(C)]
struct LaunchAttribute {
    id: u32,
    pad: u32,
    value: [u32; 16],
}

/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`: the value is the cluster's x, y, z.
const ATTR_CLUSTER_DIMENSION: u32 = 4;

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`: the value's first word is non-zero for a cooperative
/// launch.
const ATTR_COOPERATIVE: u32 = 2;

/// The attributes of a launch configuration (none when it has none).
///
/// # Safety
/// `c` is a configuration the driver just read, its `attrs` valid for `num_attrs` entries.
unsafe fn attrs_of(c: &LaunchConfig) -> &[LaunchAttribute] {
    if c.attrs.is_null() {
        return &[];
    }
    // SAFETY: the contract.
    unsafe { core::slice::from_raw_parts(c.attrs, c.num_attrs as usize) }
}

/// The cluster a launch's attributes ask for (zeros: none).
fn cluster_in(attrs: &[LaunchAttribute]) -> [u32; 3] {
    attrs
        .iter()
        .find(|a| a.id == ATTR_CLUSTER_DIMENSION)
        .map_or([0; 3], |a| [a.value[0], a.value[1], a.value[2]])
}

unsafe extern "C" fn launch_ex<const I: usize>(
    cfg: *const LaunchConfig,
    f: u64,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> R {
    type F =
        unsafe extern "C" fn(*const LaunchConfig, u64, *mut *mut c_void, *mut *mut c_void) -> R;
    // The stream as logged (read once: the driver does not change the config).
    // SAFETY: a non-null config is the caller's, valid for the call.
    let stream = if cfg.is_null() {
        0
    } else {
        stream_of::<I>(unsafe { (*cfg).stream })
    };
    managed::before_work(Some(stream));
    // SAFETY: entry point I is cuLaunchKernelEx(_ptsz), whose signature F is.
    let r = unsafe { real_at::<F>(I)(cfg, f, params, extra) };
    if !cfg.is_null() {
        // SAFETY: the driver read the config through this pointer.
        let c = unsafe { &*cfg };
        // SAFETY: the driver read the attributes through this configuration.
        let attrs = unsafe { attrs_of(c) };
        let dims = super::launch::LaunchDims {
            grid: c.grid,
            block: c.block,
            shared_mem: c.shared_mem,
            stream,
            cluster: cluster_in(attrs),
        };
        if attrs
            .iter()
            .any(|a| a.id == ATTR_COOPERATIVE && a.value[0] != 0)
        {
            log::write(r, Rec::Cooperative { func: f });
        }
        super::launch::log(r, f, dims, params, extra);
    }
    r
}

// ---- tensor maps ----

/// `cuTensorMapEncodeTiled`: (CUtensorMap*, dtype, rank, void *globalAddress,
/// const cuuint64_t *globalDim, const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
/// const cuuint32_t *elementStrides, interleave, swizzle, l2Promotion, oobFill).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tensor_map_tiled<const I: usize>(
    map: *mut u8,
    dtype: u32,
    rank: u32,
    base: u64,
    dims: *const u64,
    strides: *const u64,
    box_dims: *const u32,
    element_strides: *const u32,
    interleave: u32,
    swizzle: u32,
    l2: u32,
    oob: u32,
) -> R {
    type F = unsafe extern "C" fn(
        *mut u8,
        u32,
        u32,
        u64,
        *const u64,
        *const u64,
        *const u32,
        *const u32,
        u32,
        u32,
        u32,
        u32,
    ) -> R;
    // SAFETY: entry point I is cuTensorMapEncodeTiled, whose signature F is.
    let r = unsafe {
        real_at::<F>(I)(
            map,
            dtype,
            rank,
            base,
            dims,
            strides,
            box_dims,
            element_strides,
            interleave,
            swizzle,
            l2,
            oob,
        )
    };
    // What the driver accepted has `rank` (1 to 5) entries per list and strides for rank - 1.
    if r == 0 && !map.is_null() && (1..=5).contains(&rank) {
        let n = rank as usize;
        // SAFETY (each list): the driver read this many entries of it, just now.
        let list64 = |p: *const u64, k: usize| {
            if p.is_null() {
                Vec::new()
            } else {
                unsafe { core::slice::from_raw_parts(p, k) }.to_vec()
            }
        };
        let list32 = |p: *const u32, k: usize| {
            if p.is_null() {
                Vec::new()
            } else {
                unsafe { core::slice::from_raw_parts(p, k) }.to_vec()
            }
        };
        log::write(
            r,
            Rec::TensorMap {
                // SAFETY: a CUtensorMap is 128 bytes, which the driver just wrote.
                map: unsafe { core::slice::from_raw_parts(map, 128) },
                dtype,
                base,
                dims: list64(dims, n),
                strides: list64(strides, n - 1),
                box_dims: list32(box_dims, n),
                element_strides: list32(element_strides, n),
                modes: [interleave, swizzle, l2, oob],
            },
        );
    }
    r
}

// ---- contexts ----

/// Devices whose `Device` record is written: a bit per ordinal below 64.
static DEVICES_NOTED: AtomicU64 = AtomicU64::new(0);

/// Writes the `Device` record of device `dev` the first time a context is made on it: its
/// name, SMs and memory, asked of the driver then (three calls, once a device).
fn note_device(dev: c_int) {
    let Some(bit) = u32::try_from(dev).ok().and_then(|d| 1u64.checked_shl(d)) else {
        return;
    };
    if DEVICES_NOTED.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
        return;
    }
    let mut name = [0u8; 256];
    type Name = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> R;
    // SAFETY: cuDeviceGetName: (char*, int, CUdevice), with the buffer's true length.
    let r = unsafe {
        real_at::<Name>(entry("cuDeviceGetName"))(
            name.as_mut_ptr().cast(),
            name.len() as c_int,
            dev,
        )
    };
    if r != 0 {
        return;
    }
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let mut sms: c_int = 0;
    type Attr = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> R;
    // SAFETY: cuDeviceGetAttribute: (int*, CUdevice_attribute, CUdevice);
    // 16 is CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT. A failure leaves 0 (unknown).
    let _ = unsafe { real_at::<Attr>(entry("cuDeviceGetAttribute"))(&mut sms, 16, dev) };
    let mut bytes: usize = 0;
    type Mem = unsafe extern "C" fn(*mut usize, c_int) -> R;
    // SAFETY: cuDeviceTotalMem_v2: (size_t*, CUdevice). A failure leaves 0 (unknown).
    let _ = unsafe { real_at::<Mem>(entry("cuDeviceTotalMem_v2"))(&mut bytes, dev) };
    log::write(
        0,
        Rec::Device {
            ordinal: dev as u32,
            sm_count: sms.max(0) as u32,
            total_memory: bytes as u64,
            name: &name[..len],
        },
    );
}

unsafe extern "C" fn primary_ctx_retain<const I: usize>(ctx: *mut u64, dev: c_int) -> R {
    // SAFETY: entry point I is cuDevicePrimaryCtxRetain: (CUcontext*, CUdevice).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, c_int) -> R>(I)(ctx, dev) };
    if r == 0 {
        note_device(dev);
    }
    r
}

unsafe extern "C" fn ctx_create<const I: usize>(ctx: *mut u64, flags: u32, dev: c_int) -> R {
    // SAFETY: entry point I is cuCtxCreate_v2: (CUcontext*, unsigned, CUdevice).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(*mut u64, u32, c_int) -> R>(I)(ctx, flags, dev) };
    if r == 0 {
        note_device(dev);
    }
    r
}

// ---- streams, events, syncs ----

unsafe extern "C" fn stream_create<const I: usize>(s: *mut u64, flags: u32) -> R {
    // SAFETY: entry point I is cuStreamCreate: (CUstream*, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u32) -> R>(I)(s, flags) };
    let stream = if r == 0 { read_out(s) } else { 0 };
    log::write(r, Rec::StreamCreate { stream, flags });
    r
}

unsafe extern "C" fn stream_create_prio<const I: usize>(s: *mut u64, flags: u32, prio: c_int) -> R {
    // SAFETY: entry point I is cuStreamCreateWithPriority: (CUstream*, unsigned, int).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(*mut u64, u32, c_int) -> R>(I)(s, flags, prio) };
    let stream = if r == 0 { read_out(s) } else { 0 };
    log::write(r, Rec::StreamCreate { stream, flags });
    r
}

unsafe extern "C" fn stream_destroy<const I: usize>(s: u64) -> R {
    // SAFETY: entry point I is cuStreamDestroy(_v2): (CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(s) };
    log::write(r, Rec::StreamDestroy { stream: s });
    r
}

unsafe extern "C" fn event_create<const I: usize>(e: *mut u64, flags: u32) -> R {
    // SAFETY: entry point I is cuEventCreate: (CUevent*, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u32) -> R>(I)(e, flags) };
    let event = if r == 0 { read_out(e) } else { 0 };
    log::write(r, Rec::EventCreate { event, flags });
    r
}

unsafe extern "C" fn event_destroy<const I: usize>(e: u64) -> R {
    // SAFETY: entry point I is cuEventDestroy(_v2): (CUevent).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(e) };
    log::write(r, Rec::EventDestroy { event: e });
    with_pending(|p| p.events.remove(&e));
    r
}

fn log_event_record(r: R, event: u64, stream: u64) {
    if let Some(i) = log::write(r, Rec::EventRecord { event, stream })
        && r == 0
    {
        with_pending(|p| p.events.insert(event, (stream, i)));
    }
}

unsafe extern "C" fn event_record<const I: usize>(e: u64, s: u64) -> R {
    // SAFETY: entry point I is cuEventRecord(_ptsz): (CUevent, CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64) -> R>(I)(e, s) };
    log_event_record(r, e, stream_of::<I>(s));
    r
}

unsafe extern "C" fn event_record_flags<const I: usize>(e: u64, s: u64, flags: u32) -> R {
    // SAFETY: entry point I is cuEventRecordWithFlags(_ptsz): (CUevent, CUstream, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64, u32) -> R>(I)(e, s, flags) };
    log_event_record(r, e, stream_of::<I>(s));
    r
}

unsafe extern "C" fn stream_wait_event<const I: usize>(s: u64, e: u64, flags: u32) -> R {
    // SAFETY: entry point I is cuStreamWaitEvent(_ptsz): (CUstream, CUevent, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64, u32) -> R>(I)(s, e, flags) };
    log::write(
        r,
        Rec::StreamWaitEvent {
            stream: stream_of::<I>(s),
            event: e,
        },
    );
    r
}

/// What an event's completion completes: copies on its stream logged before its record.
fn event_done(e: u64) -> Option<Done> {
    with_pending(|p| p.events.get(&e).copied())
        .map(|(stream, before)| Done::Before { stream, before })
}

unsafe extern "C" fn event_sync<const I: usize>(e: u64) -> R {
    let _w = flight::waiting(Blocked::Event(e));
    // SAFETY: entry point I is cuEventSynchronize: (CUevent).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(e) };
    drop(_w);
    log::write(r, Rec::EventSync { event: e });
    if r == 0
        && let Some(d) = event_done(e)
    {
        settle(d);
    }
    log::flush();
    r
}

unsafe extern "C" fn event_query<const I: usize>(e: u64) -> R {
    // SAFETY: entry point I is cuEventQuery: (CUevent).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(e) };
    // A query that finds the event done is a sync the program may rely on; one that finds
    // it pending (or fails) changes nothing and is not logged.
    if r == 0
        && let Some(d) = event_done(e)
    {
        log::write(r, Rec::EventSync { event: e });
        settle(d);
    }
    r
}

unsafe extern "C" fn stream_sync<const I: usize>(s: u64) -> R {
    let _w = flight::waiting(Blocked::Stream(stream_of::<I>(s)));
    let queued = managed::before_sync();
    // SAFETY: entry point I is cuStreamSynchronize(_ptsz): (CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(s) };
    drop(_w);
    let s = stream_of::<I>(s);
    log::write(r, Rec::StreamSync { stream: s });
    if s <= 1 {
        managed::after_sync(r, queued, true);
    }
    if r == 0 {
        settle(Done::Stream(s));
    }
    log::flush();
    r
}

unsafe extern "C" fn stream_query<const I: usize>(s: u64) -> R {
    // SAFETY: entry point I is cuStreamQuery(_ptsz): (CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(s) };
    let s = stream_of::<I>(s);
    let pending = r == 0 && with_pending(|p| p.copies.iter().any(|c| same_stream(c.3, s)));
    if pending {
        log::write(r, Rec::StreamSync { stream: s });
        settle(Done::Stream(s));
    }
    r
}

unsafe extern "C" fn ctx_sync<const I: usize>() -> R {
    let _w = flight::waiting(Blocked::Ctx);
    let queued = managed::before_sync();
    // SAFETY: entry point I is cuCtxSynchronize: ().
    let r = unsafe { real_at::<unsafe extern "C" fn() -> R>(I)() };
    drop(_w);
    log::write(r, Rec::CtxSync {});
    managed::after_sync(r, queued, false);
    if r == 0 {
        settle(Done::All);
    }
    log::flush();
    r
}

/// `cuCtxSynchronize_v2` (CUDA 12.9's, naming the context; the CUDA 13 runtime's
/// `cudaDeviceSynchronize` calls it): the same sync, recorded the same way.
unsafe extern "C" fn ctx_sync_v2<const I: usize>(ctx: u64) -> R {
    let _w = flight::waiting(Blocked::Ctx);
    let queued = managed::before_sync();
    // SAFETY: entry point I is cuCtxSynchronize_v2: (CUcontext).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(ctx) };
    drop(_w);
    log::write(r, Rec::CtxSync {});
    managed::after_sync(r, queued, false);
    if r == 0 {
        settle(Done::All);
    }
    log::flush();
    r
}

// ---- stream capture and graphs ----

/// `cuStreamBeginCapture_v2` (`V2`: with a `CUstreamCaptureMode`) and CUDA 10.0's
/// `cuStreamBeginCapture(CUstream)`, which captures in global mode (0). Both pass two
/// arguments on: the old form ignores the second (SysV x86-64: registers, caller cleans up),
/// and a `_v2` reached under the old name still gets its mode.
unsafe extern "C" fn begin_capture<const I: usize, const V2: bool>(s: u64, mode: u32) -> R {
    // SAFETY: entry point I is a cuStreamBeginCapture form: (CUstream[, CUstreamCaptureMode]),
    // integer-class arguments passed on as they came.
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u32) -> R>(I)(s, mode) };
    if r == 0 {
        managed::capturing(true);
    }
    let mode = if V2 { mode } else { 0 };
    log::write(
        r,
        Rec::CaptureBegin {
            stream: stream_of::<I>(s),
            mode,
        },
    );
    r
}

/// `cuThreadExchangeStreamCaptureMode`: (CUstreamCaptureMode* mode), the mode asked for in,
/// the thread's previous one out.
unsafe extern "C" fn exchange_capture_mode<const I: usize>(mode: *mut u32) -> R {
    // SAFETY: the program passes the mode it asks for through `mode` (null is the driver's
    // to refuse).
    let asked = (!mode.is_null()).then(|| unsafe { *mode });
    // SAFETY: entry point I is cuThreadExchangeStreamCaptureMode: (CUstreamCaptureMode*).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u32) -> R>(I)(mode) };
    if let (0, Some(mode)) = (r, asked) {
        log::write(r, Rec::CaptureMode { mode });
    }
    r
}

unsafe extern "C" fn end_capture<const I: usize>(s: u64, graph: *mut u64) -> R {
    // SAFETY: entry point I is cuStreamEndCapture(_ptsz): (CUstream, CUgraph*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, *mut u64) -> R>(I)(s, graph) };
    // The capture is over when it ended, or ended invalidated (901).
    if r == 0 || r == 901 {
        managed::capturing(false);
    }
    // SAFETY: on success the driver wrote the graph through the caller's pointer.
    let g = if r == 0 && !graph.is_null() {
        unsafe { *graph }
    } else {
        0
    };
    log::write(
        r,
        Rec::CaptureEnd {
            stream: stream_of::<I>(s),
            graph: g,
        },
    );
    r
}

/// Every `cuGraphInstantiate*`: each takes the executable graph's out-pointer and the graph
/// first, and the rest (flags, an error node and log buffer, or a parameter struct) differ.
/// The hook passes on five integer-class arguments whatever the form: the SysV x86-64 ABI puts
/// the first six in registers and the caller cleans up, so a form with fewer ignores the rest.
unsafe extern "C" fn graph_instantiate<const I: usize>(
    exec: *mut u64,
    graph: u64,
    a: u64,
    b: u64,
    c: u64,
) -> R {
    // SAFETY: entry point I is one of the cuGraphInstantiate forms, whose arguments are all
    // integer-class and at most five (above); they are passed on as they came.
    let r = unsafe {
        real_at::<unsafe extern "C" fn(*mut u64, u64, u64, u64, u64) -> R>(I)(exec, graph, a, b, c)
    };
    if r == 0 && !exec.is_null() {
        // SAFETY: on success the driver wrote the executable graph through the pointer.
        let exec = unsafe { *exec };
        log::write(r, Rec::GraphInstantiate { exec, graph });
    }
    r
}

unsafe extern "C" fn graph_launch<const I: usize>(exec: u64, s: u64) -> R {
    managed::before_work(Some(stream_of::<I>(s)));
    // SAFETY: entry point I is cuGraphLaunch(_ptsz): (CUgraphExec, CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64) -> R>(I)(exec, s) };
    log::write(
        r,
        Rec::GraphLaunch {
            exec,
            stream: stream_of::<I>(s),
        },
    );
    r
}

/// `cuGraphUpload`: where a graph's resources are made changes nothing a replay does.
unsafe extern "C" fn graph_upload<const I: usize>(exec: u64, s: u64) -> R {
    // SAFETY: entry point I is cuGraphUpload(_ptsz): (CUgraphExec, CUstream).
    unsafe { real_at::<unsafe extern "C" fn(u64, u64) -> R>(I)(exec, s) }
}

unsafe extern "C" fn graph_exec_destroy<const I: usize>(exec: u64) -> R {
    // SAFETY: entry point I is cuGraphExecDestroy: (CUgraphExec).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(exec) };
    log::write(r, Rec::GraphExecDestroy { exec });
    r
}

unsafe extern "C" fn graph_destroy<const I: usize>(graph: u64) -> R {
    // SAFETY: entry point I is cuGraphDestroy: (CUgraph).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(graph) };
    log::write(r, Rec::GraphDestroy { graph });
    r
}

// ---- opaque calls ----

/// Logs entry point `i` by name, as opaque; `opaque_entry` calls it before forwarding.
pub extern "C" fn note_opaque(i: usize) {
    if let Some(name) = NAMES.get(i) {
        log::write(
            gputape_shimlog::STATUS_UNKNOWN,
            Rec::Opaque {
                name: name.as_bytes(),
            },
        );
    }
}

// ---- the table ----

pub use gputape_shimlog::entry::Kind;

/// How entry point `i`'s calls are treated when recording.
pub fn kind_of(i: usize) -> Kind {
    NAMES
        .get(i)
        .map_or(Kind::Forwarded, |n| gputape_shimlog::entry::kind(n))
}

/// The recording hook of entry point `i`, when the call log is wanted: a hook of its own for
/// the calls understood, `opaque` for the other calls that change the device.
pub fn hook_for(i: usize, opaque: *mut ()) -> Option<*mut ()> {
    if !log::wanted() {
        return None;
    }
    match kind_of(i) {
        Kind::Recorded => own_hook(i),
        Kind::Opaque => Some(opaque),
        Kind::Forwarded => None,
    }
}

macro_rules! hooks {
    ($($name:literal => $f:ident $(<$($g:literal),*>)?,)*) => {
        /// The entry points with a hook below, in its order: `gputape_shimlog::entry::RECORDED`
        /// must name the same ones (the test `hooked_entry_points_are_the_recorded_ones`).
        #[cfg(test)]
        const HOOKED: &[&str] = &[$($name),*];

        /// The hook of its own entry point `i` has, if the recording understands it.
        fn own_hook(i: usize) -> Option<*mut ()> {
            $(
                if i == const { entry($name) } {
                    return Some($f::<{ entry($name) } $($(, $g)*)?> as *mut ());
                }
            )*
            None
        }
    };
}

hooks! {
    "cuMemAlloc_v2" => mem_alloc,
    "cuMemAllocManaged" => mem_alloc_managed,
    "cuMemAllocPitch_v2" => mem_alloc_pitch,
    "cuMemFree_v2" => mem_free,
    "cuMemAllocAsync" => mem_alloc_async,
    "cuMemAllocAsync_ptsz" => mem_alloc_async,
    "cuMemAllocFromPoolAsync" => mem_alloc_pool_async,
    "cuMemAllocFromPoolAsync_ptsz" => mem_alloc_pool_async,
    "cuMemFreeAsync" => mem_free_async,
    "cuMemFreeAsync_ptsz" => mem_free_async,
    "cuMemAddressReserve" => address_reserve,
    "cuMemAddressFree" => address_range<false>,
    "cuMemMap" => mem_map,
    "cuMemUnmap" => address_range<true>,
    "cuMemAllocHost_v2" => host_alloc,
    "cuMemHostAlloc" => host_alloc_flags,
    "cuMemFreeHost" => host_free,
    "cuMemcpyHtoD_v2" => h2d,
    "cuMemcpyHtoD_v2_ptds" => h2d,
    "cuMemcpyHtoDAsync_v2" => h2d_async,
    "cuMemcpyHtoDAsync_v2_ptsz" => h2d_async,
    "cuMemcpyDtoH_v2" => d2h,
    "cuMemcpyDtoH_v2_ptds" => d2h,
    "cuMemcpyDtoHAsync_v2" => d2h_async,
    "cuMemcpyDtoHAsync_v2_ptsz" => d2h_async,
    "cuMemcpyDtoD_v2" => d2d,
    "cuMemcpyDtoD_v2_ptds" => d2d,
    "cuMemcpyDtoDAsync_v2" => d2d_async,
    "cuMemcpyDtoDAsync_v2_ptsz" => d2d_async,
    "cuMemcpy2D_v2" => copy_2d,
    "cuMemcpy2D_v2_ptds" => copy_2d,
    "cuMemcpy2DUnaligned_v2" => copy_2d,
    "cuMemcpy2DUnaligned_v2_ptds" => copy_2d,
    "cuMemcpy2DAsync_v2" => copy_2d_async,
    "cuMemcpy2DAsync_v2_ptsz" => copy_2d_async,
    "cuMemcpy3D_v2" => copy_3d,
    "cuMemcpy3D_v2_ptds" => copy_3d,
    "cuMemcpy3DAsync_v2" => copy_3d_async,
    "cuMemcpy3DAsync_v2_ptsz" => copy_3d_async,
    "cuMemcpy" => copy_any,
    "cuMemcpy_ptds" => copy_any,
    "cuMemcpyAsync" => copy_any_async,
    "cuMemcpyAsync_ptsz" => copy_any_async,
    "cuMemcpyPeer" => copy_peer,
    "cuMemcpyPeer_ptds" => copy_peer,
    "cuMemcpyPeerAsync" => copy_peer_async,
    "cuMemcpyPeerAsync_ptsz" => copy_peer_async,
    "cuMemsetD8_v2" => memset<1>,
    "cuMemsetD8_v2_ptds" => memset<1>,
    "cuMemsetD16_v2" => memset<2>,
    "cuMemsetD16_v2_ptds" => memset<2>,
    "cuMemsetD32_v2" => memset<4>,
    "cuMemsetD32_v2_ptds" => memset<4>,
    "cuMemsetD8Async" => memset_async<1>,
    "cuMemsetD8Async_ptsz" => memset_async<1>,
    "cuMemsetD16Async" => memset_async<2>,
    "cuMemsetD16Async_ptsz" => memset_async<2>,
    "cuMemsetD32Async" => memset_async<4>,
    "cuMemsetD32Async_ptsz" => memset_async<4>,
    "cuModuleLoadData" => module_load_data,
    "cuModuleLoadFatBinary" => module_load_data,
    "cuModuleLoadDataEx" => module_load_data_ex,
    "cuModuleLoad" => module_load_file,
    "cuLibraryLoadData" => library_load_data,
    "cuLibraryLoadFromFile" => library_load_file,
    "cuModuleUnload" => module_unload<false>,
    "cuLibraryUnload" => module_unload<true>,
    "cuModuleGetFunction" => get_function<false>,
    "cuLibraryGetKernel" => get_function<true>,
    "cuKernelGetFunction" => kernel_get_function,
    "cuModuleGetGlobal_v2" => get_global<false>,
    "cuLibraryGetGlobal" => get_global<true>,
    "cuLibraryGetModule" => library_get_module,
    "cuLaunchKernel" => launch,
    "cuLaunchKernel_ptsz" => launch,
    "cuLaunchKernelEx" => launch_ex,
    "cuLaunchKernelEx_ptsz" => launch_ex,
    "cuLaunchCooperativeKernel" => launch_cooperative,
    "cuLaunchCooperativeKernel_ptsz" => launch_cooperative,
    "cuTensorMapEncodeTiled" => tensor_map_tiled,
    "cuDevicePrimaryCtxRetain" => primary_ctx_retain,
    "cuCtxCreate_v2" => ctx_create,
    "cuStreamCreate" => stream_create,
    "cuStreamCreateWithPriority" => stream_create_prio,
    "cuStreamDestroy_v2" => stream_destroy,
    "cuEventCreate" => event_create,
    "cuEventDestroy_v2" => event_destroy,
    "cuEventRecord" => event_record,
    "cuEventRecord_ptsz" => event_record,
    "cuEventRecordWithFlags" => event_record_flags,
    "cuEventRecordWithFlags_ptsz" => event_record_flags,
    "cuStreamWaitEvent" => stream_wait_event,
    "cuStreamWaitEvent_ptsz" => stream_wait_event,
    "cuEventSynchronize" => event_sync,
    "cuEventQuery" => event_query,
    "cuStreamSynchronize" => stream_sync,
    "cuStreamSynchronize_ptsz" => stream_sync,
    "cuStreamQuery" => stream_query,
    "cuStreamQuery_ptsz" => stream_query,
    "cuCtxSynchronize" => ctx_sync,
    "cuCtxSynchronize_v2" => ctx_sync_v2,
    "cuStreamBeginCapture" => begin_capture<false>,
    "cuStreamBeginCapture_ptsz" => begin_capture<false>,
    "cuStreamBeginCapture_v2" => begin_capture<true>,
    "cuStreamBeginCapture_v2_ptsz" => begin_capture<true>,
    "cuThreadExchangeStreamCaptureMode" => exchange_capture_mode,
    "cuStreamWriteValue32" => write_value32,
    "cuStreamWriteValue32_ptsz" => write_value32,
    "cuStreamWriteValue32_v2" => write_value32,
    "cuStreamWriteValue32_v2_ptsz" => write_value32,
    "cuStreamWriteValue64" => write_value64,
    "cuStreamWriteValue64_ptsz" => write_value64,
    "cuStreamWriteValue64_v2" => write_value64,
    "cuStreamWriteValue64_v2_ptsz" => write_value64,
    "cuStreamEndCapture" => end_capture,
    "cuStreamEndCapture_ptsz" => end_capture,
    "cuGraphInstantiate" => graph_instantiate,
    "cuGraphInstantiate_v2" => graph_instantiate,
    "cuGraphInstantiateWithFlags" => graph_instantiate,
    "cuGraphInstantiateWithParams" => graph_instantiate,
    "cuGraphInstantiateWithParams_ptsz" => graph_instantiate,
    "cuGraphLaunch" => graph_launch,
    "cuGraphLaunch_ptsz" => graph_launch,
    "cuGraphUpload" => graph_upload,
    "cuGraphUpload_ptsz" => graph_upload,
    "cuGraphAddKernelNode" => add_kernel_node<false>,
    "cuGraphAddKernelNode_v2" => add_kernel_node<true>,
    "cuGraphAddMemsetNode" => add_memset_node,
    "cuGraphAddMemcpyNode" => add_memcpy_node,
    "cuGraphAddNode" => add_node,
    "cuGraphAddNode_v2" => add_node_v2,
    "cuGraphExecDestroy" => graph_exec_destroy,
    "cuGraphDestroy" => graph_destroy,
}

#[cfg(test)]
mod tests {
    /// The shim's hooks and the table gputape documents (`gputape_shimlog::entry`) name the
    /// same entry points: a hook added without its line there (or the other way) fails here.
    #[test]
    fn hooked_entry_points_are_the_recorded_ones() {
        let mut hooked = super::HOOKED.to_vec();
        hooked.sort();
        let mut recorded = gputape_shimlog::entry::RECORDED.to_vec();
        recorded.sort();
        assert_eq!(hooked, recorded);
    }
}
