//! Copies of every shape the runtime makes besides the plain ones (`record/transfers.rs`):
//! 2D and 3D copies (`cuMemcpy2D*`, `cuMemcpy3D*`: pitched memory, `cudaMemcpy2D`,
//! `cudaMemcpy3D`), the generic `cuMemcpy`/`cuMemcpyAsync` of unified addressing
//! (`cudaMemcpyDefault`: the direction is the pointers'), `cuMemcpyPeer*`, and the batches of
//! CUDA 12.8+ (`cuMemcpyBatchAsync`, `cuMemcpy3DBatchAsync`, `cuMemcpy3DWithAttributesAsync`).
//!
//! Each is logged as the plain copies it amounts to, so the trace, every analysis, `minimize`
//! and the replay understand it with nothing new: a side that is contiguous in device memory
//! is one copy (the host side's rows packed together: the bytes copied, not the pitch's
//! padding); a pitched device side is one copy per row. Copies involving CUDA arrays, and
//! host-to-host copies, touch nothing a trace holds: they are logged by name, as opaque.

use core::ffi::c_void;

use gputape_shimlog::{On, Rec};

use super::flight::{self, Blocked};
use super::log;
use super::nodes::NodeTo;
use super::record::{R, async_on, blocking, real_at, with_pending};
use super::table::{NAMES, entry};

/// `CUmemorytype`.
const MEM_HOST: u32 = 1;
const MEM_DEVICE: u32 = 2;
const MEM_UNIFIED: u32 = 4;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`.
const ATTR_MEMORY_TYPE: u32 = 2;

/// `CUDA_MEMCPY2D` (the `_v2` layout: 64-bit sizes and addresses).
#[repr(C)]
pub struct Memcpy2D {
    src_x: usize,
    src_y: usize,
    src_type: u32,
    src_host: *const c_void,
    src_device: u64,
    src_array: *mut c_void,
    src_pitch: usize,
    dst_x: usize,
    dst_y: usize,
    dst_type: u32,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: *mut c_void,
    dst_pitch: usize,
    width: usize,
    height: usize,
}

/// `CUDA_MEMCPY3D` (`_v2`).
#[repr(C)]
pub struct Memcpy3D {
    src_x: usize,
    src_y: usize,
    src_z: usize,
    src_lod: usize,
    src_type: u32,
    src_host: *const c_void,
    src_device: u64,
    src_array: *mut c_void,
    reserved0: *mut c_void,
    src_pitch: usize,
    src_height: usize,
    dst_x: usize,
    dst_y: usize,
    dst_z: usize,
    dst_lod: usize,
    dst_type: u32,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: *mut c_void,
    reserved1: *mut c_void,
    dst_pitch: usize,
    dst_height: usize,
    width: usize,
    height: usize,
    depth: usize,
}

/// Where one side of a copy lies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mem {
    Host,
    Device,
    /// A CUDA array, or a memory type this build does not know.
    Other,
}

/// One side of a copy: its first byte (the offsets already applied), and the distance from a
/// row to the next and from a slice to the next.
#[derive(Clone, Copy)]
struct Side {
    mem: Mem,
    base: u64,
    pitch: u64,
    slice: u64,
}

/// A copy of `depth` slices of `height` rows of `width` bytes.
#[derive(Clone, Copy)]
struct Shape {
    src: Side,
    dst: Side,
    width: u64,
    height: u64,
    depth: u64,
}

impl Side {
    /// Whether the rows of `s` lie end to end here, so that the copy is one range.
    fn contiguous(&self, s: &Shape) -> bool {
        (s.height <= 1 || self.pitch == s.width)
            && (s.depth <= 1 || self.slice == s.width.saturating_mul(s.height))
    }

    /// Where row `y` of slice `z` begins.
    fn row(&self, y: u64, z: u64) -> u64 {
        self.base
            .wrapping_add(y.wrapping_mul(self.pitch))
            .wrapping_add(z.wrapping_mul(self.slice))
    }
}

/// Whether `ptr` is device memory as the driver sees it (pinned host memory is host): asked of
/// the driver for the unified forms, which leave it to the pointer.
fn is_device(ptr: u64) -> bool {
    type F = unsafe extern "C" fn(*mut c_void, u32, u64) -> R;
    let mut t: u32 = 0;
    // SAFETY: cuPointerGetAttribute's signature; the memory type is an unsigned int, written
    // through a valid pointer. It only reads the driver's own tables.
    let r = unsafe {
        real_at::<F>(entry("cuPointerGetAttribute"))(
            (&raw mut t).cast::<c_void>(),
            ATTR_MEMORY_TYPE,
            ptr,
        )
    };
    r == 0 && t == MEM_DEVICE
}

/// The side a descriptor's memory type, host pointer and device address name.
fn side(kind: u32, host: u64, device: u64, offset: u64, pitch: u64, rows: u64) -> Side {
    let (mem, base) = match kind {
        MEM_HOST => (Mem::Host, host),
        MEM_DEVICE => (Mem::Device, device),
        MEM_UNIFIED if is_device(device) => (Mem::Device, device),
        MEM_UNIFIED => (Mem::Host, device),
        _ => (Mem::Other, 0),
    };
    Side {
        mem,
        base: base.wrapping_add(offset),
        pitch,
        slice: pitch.wrapping_mul(rows),
    }
}

impl Shape {
    fn of_2d(d: &Memcpy2D) -> Shape {
        let (sp, dp) = (d.src_pitch as u64, d.dst_pitch as u64);
        let src_off = (d.src_x as u64).wrapping_add((d.src_y as u64).wrapping_mul(sp));
        let dst_off = (d.dst_x as u64).wrapping_add((d.dst_y as u64).wrapping_mul(dp));
        Shape {
            src: side(d.src_type, d.src_host as u64, d.src_device, src_off, sp, 0),
            dst: side(d.dst_type, d.dst_host as u64, d.dst_device, dst_off, dp, 0),
            width: d.width as u64,
            height: d.height as u64,
            depth: 1,
        }
    }

    fn of_3d(d: &Memcpy3D) -> Shape {
        let at = |x: usize, y: usize, z: usize, pitch: usize, rows: usize| {
            (x as u64)
                .wrapping_add((y as u64).wrapping_mul(pitch as u64))
                .wrapping_add(
                    (z as u64)
                        .wrapping_mul(pitch as u64)
                        .wrapping_mul(rows as u64),
                )
        };
        let src_off = at(d.src_x, d.src_y, d.src_z, d.src_pitch, d.src_height);
        let dst_off = at(d.dst_x, d.dst_y, d.dst_z, d.dst_pitch, d.dst_height);
        Shape {
            src: side(
                d.src_type,
                d.src_host as u64,
                d.src_device,
                src_off,
                d.src_pitch as u64,
                d.src_height as u64,
            ),
            dst: side(
                d.dst_type,
                d.dst_host as u64,
                d.dst_device,
                dst_off,
                d.dst_pitch as u64,
                d.dst_height as u64,
            ),
            width: d.width as u64,
            height: d.height as u64,
            depth: d.depth as u64,
        }
    }

    /// A plain copy of `n` bytes as a shape of one row.
    fn linear(src: Side, dst: Side, n: u64) -> Shape {
        Shape {
            src,
            dst,
            width: n,
            height: 1,
            depth: 1,
        }
    }

    fn rows(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.depth).flat_map(move |z| (0..self.height).map(move |y| (y, z)))
    }

    fn bytes(&self) -> u64 {
        self.width
            .saturating_mul(self.height)
            .saturating_mul(self.depth)
    }
}

/// The bytes of host row (`y`, `z`) of `side`.
///
/// # Safety
/// The program handed the driver this side's rows as readable host memory for the copy.
unsafe fn host_row<'a>(side: &Side, s: &Shape, y: u64, z: u64) -> &'a [u8] {
    let p = side.row(y, z) as usize as *const u8;
    if p.is_null() || s.width == 0 {
        return &[];
    }
    // SAFETY: the contract.
    unsafe { core::slice::from_raw_parts(p, s.width as usize) }
}

/// The host side's rows packed together (borrowed when they already lie end to end).
///
/// # Safety
/// As `host_row`.
unsafe fn host_rows<'a>(side: &Side, s: &Shape) -> std::borrow::Cow<'a, [u8]> {
    if side.contiguous(s) {
        let p = side.base as usize as *const u8;
        if p.is_null() || s.bytes() == 0 {
            return std::borrow::Cow::Borrowed(&[]);
        }
        // SAFETY: the contract; the rows lie end to end.
        return std::borrow::Cow::Borrowed(unsafe {
            core::slice::from_raw_parts(p, s.bytes() as usize)
        });
    }
    let mut v = Vec::with_capacity(s.bytes() as usize);
    for (y, z) in s.rows() {
        // SAFETY: the contract.
        v.extend_from_slice(unsafe { host_row(side, s, y, z) });
    }
    std::borrow::Cow::Owned(v)
}

/// Logs the copy `s` made with status `r` as the plain copies it amounts to (`name` names the
/// entry point when it is logged as opaque). `node`: the graph node whose copy this is, which
/// copies at each launch of the graph, not now: a device-to-host one has no bytes for a sync
/// to settle.
///
/// # Safety
/// The copy's host sides are the program's memory as it handed it to the driver: readable
/// for its source, written by the driver (when `r` is 0 and `on.sync`) for its destination.
unsafe fn log_copy(r: R, s: &Shape, on: On, name: &'static str, node: Option<NodeTo>) {
    // Each record a node's copy is logged as follows a marker naming its node.
    let first = std::cell::Cell::new(true);
    let write = |rec: Rec<'_>| {
        if let Some(to) = node {
            to.mark(first.replace(false));
        }
        log::write(r, rec)
    };
    // A failed copy is logged once, at its first row: it did nothing, and its status is what
    // the log must keep.
    let single = r != 0;
    match (s.src.mem, s.dst.mem) {
        (Mem::Host, Mem::Device) => {
            if s.dst.contiguous(s) || single {
                // SAFETY: the contract.
                let data = unsafe { host_rows(&s.src, s) };
                let data = if single { &[][..] } else { &data[..] };
                write(Rec::CopyH2D {
                    dst: s.dst.base,
                    on,
                    data,
                });
            } else {
                for (y, z) in s.rows() {
                    // SAFETY: the contract.
                    let data = unsafe { host_row(&s.src, s, y, z) };
                    write(Rec::CopyH2D {
                        dst: s.dst.row(y, z),
                        on,
                        data,
                    });
                }
            }
        }
        (Mem::Device, Mem::Host) => {
            let whole = (s.src.contiguous(s) && (on.sync || s.dst.contiguous(s))) || single;
            let pieces: Vec<(u64, u64, u64)> = if whole {
                vec![(s.src.base, s.dst.base, s.bytes())]
            } else {
                s.rows()
                    .map(|(y, z)| (s.src.row(y, z), s.dst.row(y, z), s.width))
                    .collect()
            };
            for (src, dst_host, len) in pieces {
                // The bytes read: now for a blocking copy, at the sync that completes it
                // (`record::settle`) for an async one.
                let data = if r == 0 && on.sync {
                    if whole {
                        // SAFETY: the contract: the driver wrote the destination's rows.
                        unsafe { host_rows(&s.dst, s) }
                    } else {
                        // SAFETY: as above, one row.
                        std::borrow::Cow::Borrowed(unsafe {
                            core::slice::from_raw_parts(
                                dst_host as usize as *const u8,
                                len as usize,
                            )
                        })
                    }
                } else {
                    std::borrow::Cow::Borrowed(&[][..])
                };
                let rec = Rec::CopyD2H {
                    src,
                    dst_host,
                    len,
                    on,
                    data: &data,
                };
                if let Some(i) = write(rec)
                    && r == 0
                    && node.is_none()
                    && !on.sync
                    && dst_host != 0
                    && len > 0
                {
                    with_pending(|p| {
                        p.copies
                            .push((i, dst_host as usize, len as usize, on.stream))
                    });
                }
            }
        }
        (Mem::Device, Mem::Device) => {
            if (s.src.contiguous(s) && s.dst.contiguous(s)) || single {
                let len = if single { s.width } else { s.bytes() };
                write(Rec::CopyD2D {
                    src: s.src.base,
                    dst: s.dst.base,
                    len,
                    on,
                });
            } else {
                for (y, z) in s.rows() {
                    write(Rec::CopyD2D {
                        src: s.src.row(y, z),
                        dst: s.dst.row(y, z),
                        len: s.width,
                        on,
                    });
                }
            }
        }
        _ => {
            write(Rec::Opaque {
                name: name.as_bytes(),
            });
        }
    }
}

/// Logs a graph node's copy, described by `d` and taken with status `r` (a failed one changed
/// nothing: not logged): each record it is logged as after a `NodeWork` marker for `to`, as if
/// queued on stream 0 (the converter gives the graph a stream of its own).
///
/// # Safety
/// `d` is null or the descriptor the driver just read; its host sides as in `log_copy`.
pub(super) unsafe fn log_node_copy(r: R, to: NodeTo, d: *const Memcpy3D) {
    // Not while paused: the marker (state) would be kept and the copy dropped.
    if d.is_null() || r != 0 || !log::active() {
        return;
    }
    // SAFETY: non-null, and read by the driver just now (the contract).
    let s = Shape::of_3d(unsafe { &*d });
    let on = On {
        stream: 0,
        sync: false,
    };
    // SAFETY: the contract.
    unsafe { log_copy(r, &s, on, "cuGraphAddMemcpyNode", Some(to)) };
}

/// The name of entry point `i`, for an opaque record.
fn name_of(i: usize) -> &'static str {
    NAMES.get(i).copied().unwrap_or("cuMemcpy")
}

/// Runs a copy of `shape` (None: the descriptor was null) through `call`, the host waiting
/// when it is `on.sync` (a hang's dump names a blocking device-to-host copy as the call it
/// was blocked in), and logs it.
///
/// # Safety
/// As `log_copy`'s.
unsafe fn copy(shape: Option<Shape>, on: On, name: &'static str, call: impl FnOnce() -> R) -> R {
    super::managed::before_work((!on.sync).then_some(on.stream));
    let r = {
        let _w = shape
            .filter(|s| on.sync && s.src.mem == Mem::Device && s.dst.mem == Mem::Host)
            .and_then(|s| {
                flight::waiting(Blocked::D2H {
                    src: s.src.base,
                    dst: s.dst.base,
                    len: s.bytes(),
                    on,
                })
            });
        call()
    };
    match shape {
        // SAFETY: the contract.
        Some(s) => unsafe { log_copy(r, &s, on, name, None) },
        None => {
            log::write(
                r,
                Rec::Opaque {
                    name: name.as_bytes(),
                },
            );
        }
    }
    r
}

/// `cuMemcpy2D_v2`, `cuMemcpy2DUnaligned_v2` and their `_ptds` forms: (const CUDA_MEMCPY2D*).
pub unsafe extern "C" fn copy_2d<const I: usize>(d: *const Memcpy2D) -> R {
    // SAFETY: non-null, the program's descriptor, which the driver reads as well.
    let shape = (!d.is_null()).then(|| Shape::of_2d(unsafe { &*d }));
    // SAFETY: entry point I takes (const CUDA_MEMCPY2D*); the descriptor's host sides are the
    // program's memory as it handed it to the driver.
    unsafe {
        copy(shape, blocking::<I>(), name_of(I), || {
            real_at::<unsafe extern "C" fn(*const Memcpy2D) -> R>(I)(d)
        })
    }
}

/// `cuMemcpy2DAsync_v2(_ptsz)`: (const CUDA_MEMCPY2D*, CUstream).
pub unsafe extern "C" fn copy_2d_async<const I: usize>(d: *const Memcpy2D, stream: u64) -> R {
    // SAFETY: as in copy_2d.
    let shape = (!d.is_null()).then(|| Shape::of_2d(unsafe { &*d }));
    // SAFETY: entry point I takes (const CUDA_MEMCPY2D*, CUstream); as in copy_2d.
    unsafe {
        copy(shape, async_on::<I>(stream), name_of(I), || {
            real_at::<unsafe extern "C" fn(*const Memcpy2D, u64) -> R>(I)(d, stream)
        })
    }
}

/// `cuMemcpy3D_v2(_ptds)`: (const CUDA_MEMCPY3D*).
pub unsafe extern "C" fn copy_3d<const I: usize>(d: *const Memcpy3D) -> R {
    // SAFETY: as in copy_2d.
    let shape = (!d.is_null()).then(|| Shape::of_3d(unsafe { &*d }));
    // SAFETY: entry point I takes (const CUDA_MEMCPY3D*); as in copy_2d.
    unsafe {
        copy(shape, blocking::<I>(), name_of(I), || {
            real_at::<unsafe extern "C" fn(*const Memcpy3D) -> R>(I)(d)
        })
    }
}

/// `cuMemcpy3DAsync_v2(_ptsz)`: (const CUDA_MEMCPY3D*, CUstream).
pub unsafe extern "C" fn copy_3d_async<const I: usize>(d: *const Memcpy3D, stream: u64) -> R {
    // SAFETY: as in copy_2d.
    let shape = (!d.is_null()).then(|| Shape::of_3d(unsafe { &*d }));
    // SAFETY: entry point I takes (const CUDA_MEMCPY3D*, CUstream); as in copy_2d.
    unsafe {
        copy(shape, async_on::<I>(stream), name_of(I), || {
            real_at::<unsafe extern "C" fn(*const Memcpy3D, u64) -> R>(I)(d, stream)
        })
    }
}

/// A side of a generic copy: device memory when the driver says so, else the host's.
fn unified(ptr: u64) -> Side {
    Side {
        mem: if is_device(ptr) {
            Mem::Device
        } else {
            Mem::Host
        },
        base: ptr,
        pitch: 0,
        slice: 0,
    }
}

/// `cuMemcpy(_ptds)`: (CUdeviceptr dst, CUdeviceptr src, size_t), either side host or device.
pub unsafe extern "C" fn copy_any<const I: usize>(dst: u64, src: u64, n: usize) -> R {
    let shape = Shape::linear(unified(src), unified(dst), n as u64);
    // SAFETY: entry point I is cuMemcpy(_ptds): (CUdeviceptr, CUdeviceptr, size_t); the
    // program handed the driver `n` bytes at each side.
    unsafe {
        copy(Some(shape), blocking::<I>(), name_of(I), || {
            real_at::<unsafe extern "C" fn(u64, u64, usize) -> R>(I)(dst, src, n)
        })
    }
}

/// `cuMemcpyAsync(_ptsz)`: (CUdeviceptr dst, CUdeviceptr src, size_t, CUstream).
pub unsafe extern "C" fn copy_any_async<const I: usize>(
    dst: u64,
    src: u64,
    n: usize,
    stream: u64,
) -> R {
    let shape = Shape::linear(unified(src), unified(dst), n as u64);
    type F = unsafe extern "C" fn(u64, u64, usize, u64) -> R;
    // SAFETY: entry point I is cuMemcpyAsync(_ptsz), whose signature F is; as in copy_any.
    unsafe {
        copy(Some(shape), async_on::<I>(stream), name_of(I), || {
            real_at::<F>(I)(dst, src, n, stream)
        })
    }
}

/// `cuMemcpyWithAttributesAsync(_ptsz)` (CUDA 13): (CUdeviceptr dst, CUdeviceptr src, size_t,
/// CUmemcpyAttributes*, CUstream): a generic copy whose attributes say only how the source may
/// be read (stream order, or during the call), nothing a replay needs.
pub unsafe extern "C" fn copy_with_attrs<const I: usize>(
    dst: u64,
    src: u64,
    n: usize,
    attrs: *mut c_void,
    stream: u64,
) -> R {
    let shape = Shape::linear(unified(src), unified(dst), n as u64);
    type F = unsafe extern "C" fn(u64, u64, usize, *mut c_void, u64) -> R;
    // SAFETY: entry point I is cuMemcpyWithAttributesAsync(_ptsz), whose signature F is; as in
    // copy_any.
    unsafe {
        copy(Some(shape), async_on::<I>(stream), name_of(I), || {
            real_at::<F>(I)(dst, src, n, attrs, stream)
        })
    }
}

/// Runs a batch of `count` copies on `stream` through `call` (entry point `I`): its status,
/// the stream as logged, and how many of its copies to log (all; or the first alone when the
/// driver refused the batch, which then did nothing).
fn run_batch<const I: usize>(
    stream: u64,
    count: usize,
    call: impl FnOnce() -> R,
) -> (R, On, usize) {
    let on = async_on::<I>(stream);
    super::managed::before_work(Some(on.stream));
    let r = call();
    (r, on, if r == 0 { count } else { count.min(1) })
}

/// A batch's copies: destinations, sources and sizes, `count` each.
type Batch = (*const u64, *const u64, *const usize, usize);

/// Runs a batch of generic copies on `stream` through `call` (entry point `I`), and logs
/// `dsts[i]` from `srcs[i]`, `sizes[i]` bytes, as the copies it is, in the order given (the
/// driver may run them in any order: a batch whose copies depend on each other is the
/// program's bug). One the driver refused is logged once, as its first copy, with the status.
///
/// # Safety
/// The three arrays are null or `count` long, as `call` hands them to the driver; the copies'
/// host sides as in `log_copy`.
unsafe fn batch<const I: usize>(
    (dsts, srcs, sizes, count): Batch,
    stream: u64,
    call: impl FnOnce() -> R,
) -> R {
    let (r, on, logged) = run_batch::<I>(stream, count, call);
    if dsts.is_null() || srcs.is_null() || sizes.is_null() {
        return r;
    }
    for i in 0..logged {
        // SAFETY: the contract: each array holds `count` entries.
        let (dst, src, n) = unsafe { (*dsts.add(i), *srcs.add(i), *sizes.add(i)) };
        let shape = Shape::linear(unified(src), unified(dst), n as u64);
        // SAFETY: the contract.
        unsafe { log_copy(r, &shape, on, name_of(I), None) };
    }
    r
}

/// `cuMemcpyBatchAsync(_ptsz)` (CUDA 12.8): (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t*
/// sizes, size_t count, CUmemcpyAttributes*, size_t* attr indices, size_t attr count, size_t*
/// fail index, CUstream).
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn copy_batch<const I: usize>(
    dsts: *const u64,
    srcs: *const u64,
    sizes: *const usize,
    count: usize,
    attrs: *mut c_void,
    idxs: *const usize,
    nattrs: usize,
    fail: *mut usize,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(
        *const u64,
        *const u64,
        *const usize,
        usize,
        *mut c_void,
        *const usize,
        usize,
        *mut usize,
        u64,
    ) -> R;
    // SAFETY: entry point I is cuMemcpyBatchAsync(_ptsz), whose signature F is; the driver
    // reads the arrays, `count` long.
    unsafe {
        batch::<I>((dsts, srcs, sizes, count), stream, || {
            real_at::<F>(I)(dsts, srcs, sizes, count, attrs, idxs, nattrs, fail, stream)
        })
    }
}

/// `cuMemcpyBatchAsync_v2(_ptsz)` (CUDA 13): `cuMemcpyBatchAsync`'s arguments less the fail
/// index.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn copy_batch_v2<const I: usize>(
    dsts: *const u64,
    srcs: *const u64,
    sizes: *const usize,
    count: usize,
    attrs: *mut c_void,
    idxs: *const usize,
    nattrs: usize,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(
        *const u64,
        *const u64,
        *const usize,
        usize,
        *mut c_void,
        *const usize,
        usize,
        u64,
    ) -> R;
    // SAFETY: entry point I is cuMemcpyBatchAsync_v2(_ptsz), whose signature F is; the driver
    // reads the arrays, `count` long.
    unsafe {
        batch::<I>((dsts, srcs, sizes, count), stream, || {
            real_at::<F>(I)(dsts, srcs, sizes, count, attrs, idxs, nattrs, stream)
        })
    }
}

/// `CU_MEMCPY_OPERAND_TYPE_POINTER`.
const OPERAND_POINTER: u32 = 1;

/// `CUmemcpy3DOperand`: a pointer (its address, row length and layer height in elements, a
/// location hint) or a CUDA array (its handle and an offset), by `kind`.
#[repr(C)]
pub struct Memcpy3DOperand {
    kind: u32,
    ptr: u64,
    row_length: usize,
    layer_height: usize,
    /// `CUmemLocation` for a pointer; the array's offset's last words for an array.
    hint: [u32; 2],
}

/// `CUDA_MEMCPY3D_BATCH_OP`.
#[repr(C)]
pub struct Memcpy3DBatchOp {
    src: Memcpy3DOperand,
    dst: Memcpy3DOperand,
    width: usize,
    height: usize,
    depth: usize,
    src_access_order: u32,
    flags: u32,
}

// The driver's layouts: 40 and 112 bytes.
const _: () = assert!(size_of::<Memcpy3DOperand>() == 40 && size_of::<Memcpy3DBatchOp>() == 112);

impl Memcpy3DOperand {
    /// The side this operand is of a copy `width` x `height`: a pointer's rows `row_length`
    /// bytes apart (elements are bytes between pointers; 0 is packed) and its layers
    /// `layer_height` rows apart; an array is no memory a trace holds.
    fn side(&self, width: u64, height: u64) -> Side {
        if self.kind != OPERAND_POINTER {
            return Side {
                mem: Mem::Other,
                base: 0,
                pitch: 0,
                slice: 0,
            };
        }
        let pitch = match self.row_length as u64 {
            0 => width,
            n => n,
        };
        let rows = match self.layer_height as u64 {
            0 => height,
            n => n,
        };
        Side {
            pitch,
            slice: pitch.wrapping_mul(rows),
            ..unified(self.ptr)
        }
    }
}

impl Shape {
    fn of_batch_op(op: &Memcpy3DBatchOp) -> Shape {
        let (width, height) = (op.width as u64, op.height as u64);
        Shape {
            src: op.src.side(width, height),
            dst: op.dst.side(width, height),
            width,
            height,
            depth: op.depth as u64,
        }
    }
}

/// Runs a batch of 3D copies on `stream` through `call` (entry point `I`) and logs each as
/// the copies it amounts to, in the order given (as `batch`); one the driver refused is logged
/// once, as its first copy, with the status.
///
/// # Safety
/// `ops` is null or `count` long, as `call` hands it to the driver; the copies' host sides as
/// in `log_copy`.
unsafe fn batch_3d<const I: usize>(
    ops: *const Memcpy3DBatchOp,
    count: usize,
    stream: u64,
    call: impl FnOnce() -> R,
) -> R {
    let (r, on, logged) = run_batch::<I>(stream, count, call);
    if ops.is_null() {
        return r;
    }
    for i in 0..logged {
        // SAFETY: the contract: `ops` holds `count` entries.
        let shape = Shape::of_batch_op(unsafe { &*ops.add(i) });
        // SAFETY: the contract.
        unsafe { log_copy(r, &shape, on, name_of(I), None) };
    }
    r
}

/// `cuMemcpy3DBatchAsync(_ptsz)` (CUDA 12.8): (size_t count, CUDA_MEMCPY3D_BATCH_OP*, size_t*
/// fail index, unsigned long long flags, CUstream).
pub unsafe extern "C" fn copy_3d_batch<const I: usize>(
    count: usize,
    ops: *const Memcpy3DBatchOp,
    fail: *mut usize,
    flags: u64,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(usize, *const Memcpy3DBatchOp, *mut usize, u64, u64) -> R;
    // SAFETY: entry point I is cuMemcpy3DBatchAsync(_ptsz), whose signature F is; the driver
    // reads `count` operations.
    unsafe {
        batch_3d::<I>(ops, count, stream, || {
            real_at::<F>(I)(count, ops, fail, flags, stream)
        })
    }
}

/// `cuMemcpy3DBatchAsync_v2(_ptsz)` (CUDA 13): `cuMemcpy3DBatchAsync`'s arguments less the fail
/// index.
pub unsafe extern "C" fn copy_3d_batch_v2<const I: usize>(
    count: usize,
    ops: *const Memcpy3DBatchOp,
    flags: u64,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(usize, *const Memcpy3DBatchOp, u64, u64) -> R;
    // SAFETY: entry point I is cuMemcpy3DBatchAsync_v2(_ptsz), whose signature F is; the driver
    // reads `count` operations.
    unsafe {
        batch_3d::<I>(ops, count, stream, || {
            real_at::<F>(I)(count, ops, flags, stream)
        })
    }
}

/// `cuMemcpy3DWithAttributesAsync(_ptsz)` (CUDA 13): one `CUDA_MEMCPY3D_BATCH_OP`, flags, a
/// stream: a batch of one.
pub unsafe extern "C" fn copy_3d_with_attrs<const I: usize>(
    op: *const Memcpy3DBatchOp,
    flags: u64,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(*const Memcpy3DBatchOp, u64, u64) -> R;
    // SAFETY: entry point I is cuMemcpy3DWithAttributesAsync(_ptsz), whose signature F is; the
    // driver reads one operation.
    unsafe { batch_3d::<I>(op, 1, stream, || real_at::<F>(I)(op, flags, stream)) }
}

fn device(base: u64) -> Side {
    Side {
        mem: Mem::Device,
        base,
        pitch: 0,
        slice: 0,
    }
}

/// `cuMemcpyPeer(_ptds)`: (CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t):
/// a device-to-device copy (a trace holds one device's memory; the contexts are not kept).
pub unsafe extern "C" fn copy_peer<const I: usize>(
    dst: u64,
    dst_ctx: u64,
    src: u64,
    src_ctx: u64,
    n: usize,
) -> R {
    type F = unsafe extern "C" fn(u64, u64, u64, u64, usize) -> R;
    let shape = Shape::linear(device(src), device(dst), n as u64);
    // SAFETY: entry point I is cuMemcpyPeer(_ptds), whose signature F is; no host side.
    unsafe {
        copy(Some(shape), blocking::<I>(), name_of(I), || {
            real_at::<F>(I)(dst, dst_ctx, src, src_ctx, n)
        })
    }
}

/// `cuMemcpyPeerAsync(_ptsz)`: `cuMemcpyPeer`'s arguments and a stream.
pub unsafe extern "C" fn copy_peer_async<const I: usize>(
    dst: u64,
    dst_ctx: u64,
    src: u64,
    src_ctx: u64,
    n: usize,
    stream: u64,
) -> R {
    type F = unsafe extern "C" fn(u64, u64, u64, u64, usize, u64) -> R;
    let shape = Shape::linear(device(src), device(dst), n as u64);
    // SAFETY: entry point I is cuMemcpyPeerAsync(_ptsz), whose signature F is; no host side.
    unsafe {
        copy(Some(shape), async_on::<I>(stream), name_of(I), || {
            real_at::<F>(I)(dst, dst_ctx, src, src_ctx, n, stream)
        })
    }
}
