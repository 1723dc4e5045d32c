//! gputape's own result layer over cudarc's `sys`, the way cudarc's `driver/result.rs` sits on
//! it: one function per driver entry point that `cuda/` uses, each with its one `unsafe` block
//! and why that particular call is sound. Nothing else in gputape calls `sys::cu*`.
//!
//! One room, over 900 lines: a short function per entry point, kept together so that every
//! `unsafe` call of the driver, and the reason it is sound, is read in one place (as cudarc
//! keeps its `result` layer); the backend's concerns (`memory.rs`, `launch.rs`, `stream.rs`...)
//! call in from their own rooms.
//!
//! Out-values come back as return values; a failure is a `DeviceError` made by `check`, which
//! names the entry point as the driver exports it (`cuMemAlloc_v2`), so the text and codes are
//! the ones the backend has always reported.
//!
//! A function is safe when nothing its caller can pass makes the call unsound: ordinals, sizes
//! and flags the driver validates, out-values written to locals, Rust references. It is an
//! `unsafe fn` when soundness rests on an argument the driver cannot check, and its `# Safety`
//! section says what the caller must guarantee:
//! - a handle (context, stream, event, module, function, graph, VMM allocation) is dereferenced
//!   by the driver, so it must be live, and a call that ends it must be its last use;
//! - a device address may, under unified addressing, be host memory (a mapped pinned buffer,
//!   managed memory), so it must name memory the caller owns over the whole range;
//! - a raw host pointer with a length, read or written by an async copy after the call returns,
//!   must stay valid (and unaliased, for a write) until the stream passes that copy.
//!
//! Two things are not safety conditions: no context current on the thread (the driver answers
//! `CUDA_ERROR_INVALID_CONTEXT`), and a driver library that is absent (cudarc's lazy loader
//! panics; callers ask [`library_present`] first).
//!
//! The `GpuBackend` trait is safe and takes handles and addresses as plain `u64`s; the call sites
//! in `cuda/` rest on its contract that they came from this backend (the trait docs).

use super::error::check;
use crate::backend::{DeviceError, DevicePtr};
use cudarc::driver::sys;
use std::ffi::{c_void, CStr};

type R<T> = Result<T, DeviceError>;

/// The driver's view of a `DevicePtr`.
#[inline]
pub(super) fn dp(p: DevicePtr) -> sys::CUdeviceptr {
    p.0 as sys::CUdeviceptr
}

/// The driver's view of a stream handle (`0` is the legacy stream).
#[inline]
pub(super) fn st(s: u64) -> sys::CUstream {
    s as sys::CUstream
}

/// Whether libcuda can be loaded, asked without panicking (cudarc's lazy loader panics if it
/// is absent, so this is checked before anything else touches the driver).
#[inline]
pub(super) fn library_present() -> bool {
    pin_by_soname();
    // SAFETY: only tries to dlopen the driver library by its usual names and drops the handle;
    // no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// Loads the driver as `libcuda.so.1` and keeps it loaded, before cudarc loads it by its
/// first candidate name, `libcuda.so`. The loader maps one file once: cudarc's later load of
/// the `libcuda.so` link returns this one, so the process holds the driver under its soname.
/// cuda-gdb looks for the driver by that name: loaded as `libcuda.so`, it never attaches to
/// the GPU side (no kernel breakpoint, no device exception: `replay --debug` stopped nowhere
/// on an H100 until this). Where there is no `libcuda.so.1`, nothing changes.
fn pin_by_soname() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: dlopen of the system's driver library by its soname; the handle is kept
        // for the life of the process on purpose (as cudarc keeps its own) and no symbol of
        // it is called here.
        let _ =
            unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    });
}

// ---- initialisation, devices, contexts ----

/// `cuInit(0)`.
#[inline]
pub(super) fn init() -> R<()> {
    // SAFETY: a flags word by value; no pointers.
    check("cuInit", unsafe { sys::cuInit(0) })
}

/// `cuDeviceGet`: the device with this ordinal.
#[inline]
pub(super) fn device_get(ordinal: i32) -> R<sys::CUdevice> {
    let mut device: sys::CUdevice = 0;
    // SAFETY: the out-pointer is a local that outlives the call; a bad ordinal is
    // CUDA_ERROR_INVALID_DEVICE.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut device, ordinal)
    })?;
    Ok(device)
}

/// `cuDeviceGetAttribute`: one integer attribute of a device.
#[inline]
pub(super) fn device_get_attribute(attr: sys::CUdevice_attribute, device: sys::CUdevice) -> R<i32> {
    let mut v = 0i32;
    // SAFETY: a `CUdevice` is an ordinal the driver validates, not a pointer; the out-pointer is
    // a local that outlives the call.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, attr, device)
    })?;
    Ok(v)
}

/// `cuDevicePrimaryCtxRetain`: the device's primary context, retained once more.
#[inline]
pub(super) fn device_primary_ctx_retain(device: sys::CUdevice) -> R<sys::CUcontext> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the device is an ordinal the driver validates; the out-pointer is a local that
    // outlives the call.
    check("cuDevicePrimaryCtxRetain", unsafe {
        sys::cuDevicePrimaryCtxRetain(&mut ctx, device)
    })?;
    Ok(ctx)
}

/// `cuDevicePrimaryCtxRelease_v2`.
///
/// # Safety
/// The caller holds a retain of `device`'s primary context (from
/// [`device_primary_ctx_retain`]) and gives it up here: releasing one it does not hold could end
/// the context under another holder, whose handles would then dangle.
#[inline]
pub(super) unsafe fn device_primary_ctx_release(device: sys::CUdevice) -> R<()> {
    // SAFETY: no pointers; that the retain is the caller's to give up is its obligation.
    check("cuDevicePrimaryCtxRelease_v2", unsafe {
        sys::cuDevicePrimaryCtxRelease_v2(device)
    })
}

/// `cuCtxSetCurrent`.
///
/// # Safety
/// `ctx` is a live context: one the caller holds a retain on.
#[inline]
pub(super) unsafe fn ctx_set_current(ctx: sys::CUcontext) -> R<()> {
    // SAFETY: the driver dereferences `ctx`, which the caller guarantees is live.
    check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// `cuCtxPushCurrent_v2`.
///
/// # Safety
/// As [`ctx_set_current`]: `ctx` is live.
#[inline]
pub(super) unsafe fn ctx_push_current(ctx: sys::CUcontext) -> R<()> {
    // SAFETY: the driver dereferences `ctx`, which the caller guarantees is live.
    check("cuCtxPushCurrent_v2", unsafe {
        sys::cuCtxPushCurrent_v2(ctx)
    })
}

/// `cuCtxPopCurrent_v2`: the context that was current, now no longer.
#[inline]
pub(super) fn ctx_pop_current() -> R<sys::CUcontext> {
    let mut popped: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the out-pointer is a local that outlives the call; with nothing pushed the driver
    // returns an error.
    check("cuCtxPopCurrent_v2", unsafe {
        sys::cuCtxPopCurrent_v2(&mut popped)
    })?;
    Ok(popped)
}

// ---- memory ----

/// `cuMemGetInfo_v2`: (free, total) bytes of the current context's device.
#[inline]
pub(super) fn mem_get_info() -> R<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both out-pointers are locals that outlive the call.
    check("cuMemGetInfo_v2", unsafe {
        sys::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    Ok((free, total))
}

/// `cuMemAlloc_v2`.
#[inline]
pub(super) fn mem_alloc(bytes: usize) -> R<sys::CUdeviceptr> {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the out-pointer is a local that outlives the call; new memory aliases nothing.
    check("cuMemAlloc_v2", unsafe {
        sys::cuMemAlloc_v2(&mut p, bytes)
    })?;
    Ok(p)
}

/// `cuMemAllocManaged`.
#[inline]
pub(super) fn mem_alloc_managed(bytes: usize, flags: u32) -> R<sys::CUdeviceptr> {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the out-pointer is a local that outlives the call; the driver validates `flags`;
    // new memory aliases nothing.
    check("cuMemAllocManaged", unsafe {
        sys::cuMemAllocManaged(&mut p, bytes, flags)
    })?;
    Ok(p)
}

/// `cuMemAllocHost_v2`: page-locked host memory (not zeroed).
#[inline]
pub(super) fn mem_alloc_host(bytes: usize) -> R<*mut c_void> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: the out-pointer is a local that outlives the call; new memory aliases nothing.
    check("cuMemAllocHost_v2", unsafe {
        sys::cuMemAllocHost_v2(&mut p, bytes)
    })?;
    Ok(p)
}

/// `cuMemFree_v2`.
///
/// # Safety
/// `p` came from [`mem_alloc`] or [`mem_alloc_managed`], is not yet freed, and nothing uses it
/// afterwards (managed memory is host-visible: a later host access would be a use after free).
#[inline]
pub(super) unsafe fn mem_free(p: sys::CUdeviceptr) -> R<()> {
    // SAFETY: no pointers are written; that `p` is the caller's to free is its obligation.
    check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(p) })
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `p` came from [`mem_alloc_host`], is not yet freed, and no reference into it outlives the call.
#[inline]
pub(super) unsafe fn mem_free_host(p: *mut c_void) -> R<()> {
    // SAFETY: the caller guarantees `p` is its own pinned block and unused from here on.
    check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p) })
}

/// `cuMemHostGetDevicePointer_v2`: the device-side alias of mapped pinned host memory.
#[inline]
pub(super) fn mem_host_get_device_pointer(host: *mut c_void) -> R<sys::CUdeviceptr> {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the driver looks `host` up among its page-locked allocations and does not
    // dereference it (an unknown address is CUDA_ERROR_INVALID_VALUE); the out-pointer is a
    // local that outlives the call.
    check("cuMemHostGetDevicePointer_v2", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut p, host, 0)
    })?;
    Ok(p)
}

// ---- copies and memsets ----

/// `cuMemcpyHtoD_v2`: synchronous host to device.
///
/// # Safety
/// `[dst, dst + src.len())` is device-accessible memory the caller owns.
#[inline]
pub(super) unsafe fn memcpy_htod(dst: sys::CUdeviceptr, src: &[u8]) -> R<()> {
    // SAFETY: `src` is a live slice, and the driver has read it (copied or staged it) when the
    // call returns; `dst` over `src.len()` bytes is the caller's obligation.
    check("cuMemcpyHtoD_v2", unsafe {
        sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len())
    })
}

/// `cuMemcpyDtoH_v2`: synchronous device to host.
///
/// # Safety
/// `[src, src + dst.len())` is device-accessible memory the caller may read, not written
/// concurrently through a Rust reference.
#[inline]
pub(super) unsafe fn memcpy_dtoh(dst: &mut [u8], src: sys::CUdeviceptr) -> R<()> {
    // SAFETY: `dst` is a live, exclusively borrowed slice of `dst.len()` bytes, and a device to
    // host copy returns only once it is complete; `src` is the caller's obligation.
    check("cuMemcpyDtoH_v2", unsafe {
        sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len())
    })
}

/// `cuMemcpyDtoD_v2`.
///
/// # Safety
/// `[src, src + bytes)` and `[dst, dst + bytes)` are device-accessible memory the caller owns.
#[inline]
pub(super) unsafe fn memcpy_dtod(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
) -> R<()> {
    // SAFETY: no host pointers; both ranges are the caller's obligation.
    check("cuMemcpyDtoD_v2", unsafe {
        sys::cuMemcpyDtoD_v2(dst, src, bytes)
    })
}

/// `cuMemcpyHtoDAsync_v2`.
///
/// # Safety
/// `[dst, dst + len)` is device-accessible memory the caller owns; `src` is valid for reads of
/// `len` bytes and stays so, unchanged, until `stream` has passed this copy (for pageable
/// memory the driver copies before returning, for pinned memory it reads later); `stream` is
/// live or the legacy stream.
#[inline]
pub(super) unsafe fn memcpy_htod_async(
    dst: sys::CUdeviceptr,
    src: *const c_void,
    len: usize,
    stream: sys::CUstream,
) -> R<()> {
    // SAFETY: every pointer and handle here is covered by the caller's obligations above.
    check("cuMemcpyHtoDAsync_v2", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src, len, stream)
    })
}

/// `cuMemcpyDtoHAsync_v2`.
///
/// # Safety
/// `[src, src + len)` is device-accessible memory the caller may read; `dst` is valid for writes
/// of `len` bytes, and nothing else reads or writes it until `stream` has passed this copy;
/// `stream` is live or the legacy stream.
#[inline]
pub(super) unsafe fn memcpy_dtoh_async(
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    len: usize,
    stream: sys::CUstream,
) -> R<()> {
    // SAFETY: every pointer and handle here is covered by the caller's obligations above.
    check("cuMemcpyDtoHAsync_v2", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst, src, len, stream)
    })
}

/// `cuMemcpyDtoDAsync_v2`.
///
/// # Safety
/// As [`memcpy_dtod`], and `stream` is live or the legacy stream.
#[inline]
pub(super) unsafe fn memcpy_dtod_async(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: sys::CUstream,
) -> R<()> {
    // SAFETY: no host pointers; both ranges and the stream are the caller's obligation.
    check("cuMemcpyDtoDAsync_v2", unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream)
    })
}

/// `cuMemcpy2DAsync_v2`.
///
/// # Safety
/// Every address `p` names (host or device, with its pitch, width and height) is memory the
/// caller owns for the copy's duration (a host side until `stream` passes the copy); `stream`
/// is live or the legacy stream.
#[inline]
pub(super) unsafe fn memcpy_2d_async(p: &sys::CUDA_MEMCPY2D, stream: sys::CUstream) -> R<()> {
    // SAFETY: `p` is a reference, read during the call only; what it points at and the stream
    // are the caller's obligation.
    check("cuMemcpy2DAsync_v2", unsafe {
        sys::cuMemcpy2DAsync_v2(p, stream)
    })
}

/// `cuMemsetD8_v2`.
///
/// # Safety
/// `[dst, dst + n)` is device-accessible memory the caller owns.
#[inline]
pub(super) unsafe fn memset_d8(dst: sys::CUdeviceptr, value: u8, n: usize) -> R<()> {
    // SAFETY: no host pointers; the range is the caller's obligation.
    check("cuMemsetD8_v2", unsafe {
        sys::cuMemsetD8_v2(dst, value, n)
    })
}

/// `cuMemsetD8Async`.
///
/// # Safety
/// As [`memset_d8`], and `stream` is live or the legacy stream.
#[inline]
pub(super) unsafe fn memset_d8_async(
    dst: sys::CUdeviceptr,
    value: u8,
    n: usize,
    stream: sys::CUstream,
) -> R<()> {
    // SAFETY: no host pointers; the range and the stream are the caller's obligation.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(dst, value, n, stream)
    })
}

// ---- virtual memory management ----

/// `cuMemGetAllocationGranularity`.
///
/// # Safety
/// The one pointer in `prop`, `win32HandleMetaData`, is null or valid for the driver to read.
#[inline]
pub(super) unsafe fn mem_get_allocation_granularity(
    prop: &sys::CUmemAllocationProp,
    option: sys::CUmemAllocationGranularity_flags,
) -> R<usize> {
    let mut gran = 0usize;
    // SAFETY: `prop` is a reference read during the call (its inner pointer is the caller's
    // obligation); the out-pointer is a local that outlives the call.
    check("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(&mut gran, prop, option)
    })?;
    Ok(gran)
}

/// `cuMemAddressReserve` (flags 0): a virtual address range, at `addr` if the driver can.
#[inline]
pub(super) fn mem_address_reserve(
    size: usize,
    alignment: usize,
    addr: sys::CUdeviceptr,
) -> R<sys::CUdeviceptr> {
    let mut got: sys::CUdeviceptr = 0;
    // SAFETY: reserving only claims unused address space (`addr` is a hint, never taken from
    // anyone); the out-pointer is a local that outlives the call.
    check("cuMemAddressReserve", unsafe {
        sys::cuMemAddressReserve(&mut got, size, alignment, addr, 0)
    })?;
    Ok(got)
}

/// `cuMemAddressFree`.
///
/// # Safety
/// `[ptr, ptr + size)` is a reservation the caller made with [`mem_address_reserve`], and
/// nothing uses it afterwards.
#[inline]
pub(super) unsafe fn mem_address_free(ptr: sys::CUdeviceptr, size: usize) -> R<()> {
    // SAFETY: no host pointers; that the reservation is the caller's is its obligation.
    check("cuMemAddressFree", unsafe {
        sys::cuMemAddressFree(ptr, size)
    })
}

/// `cuMemCreate` (flags 0): physical memory, not yet mapped anywhere.
///
/// # Safety
/// As [`mem_get_allocation_granularity`]: `prop.win32HandleMetaData` is null or valid.
#[inline]
pub(super) unsafe fn mem_create(
    size: usize,
    prop: &sys::CUmemAllocationProp,
) -> R<sys::CUmemGenericAllocationHandle> {
    let mut h: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: `prop` is a reference read during the call (its inner pointer is the caller's
    // obligation); the out-pointer is a local that outlives the call.
    check("cuMemCreate", unsafe {
        sys::cuMemCreate(&mut h, size, prop, 0)
    })?;
    Ok(h)
}

/// `cuMemRelease`.
///
/// # Safety
/// `h` came from [`mem_create`] and is released once.
#[inline]
pub(super) unsafe fn mem_release(h: sys::CUmemGenericAllocationHandle) -> R<()> {
    // SAFETY: no pointers; that `h` is the caller's to release is its obligation.
    check("cuMemRelease", unsafe { sys::cuMemRelease(h) })
}

/// `cuMemMap` (offset 0, flags 0).
///
/// # Safety
/// `[ptr, ptr + size)` lies in a reservation of the caller's and is not mapped yet; `h` is a
/// live handle from [`mem_create`] of at least `size` bytes.
#[inline]
pub(super) unsafe fn mem_map(
    ptr: sys::CUdeviceptr,
    size: usize,
    h: sys::CUmemGenericAllocationHandle,
) -> R<()> {
    // SAFETY: no host pointers; the range and the handle are the caller's obligation.
    check("cuMemMap", unsafe { sys::cuMemMap(ptr, size, 0, h, 0) })
}

/// `cuMemSetAccess` with one access descriptor.
///
/// # Safety
/// `[ptr, ptr + size)` is mapped by the caller (with [`mem_map`]).
#[inline]
pub(super) unsafe fn mem_set_access(
    ptr: sys::CUdeviceptr,
    size: usize,
    access: &sys::CUmemAccessDesc,
) -> R<()> {
    // SAFETY: `access` is a reference to exactly the one descriptor the count of 1 says; the
    // range is the caller's obligation.
    check("cuMemSetAccess", unsafe {
        sys::cuMemSetAccess(ptr, size, access, 1)
    })
}

/// `cuMemUnmap`.
///
/// # Safety
/// `[ptr, ptr + size)` was mapped by the caller, and nothing uses it afterwards.
#[inline]
pub(super) unsafe fn mem_unmap(ptr: sys::CUdeviceptr, size: usize) -> R<()> {
    // SAFETY: no host pointers; the range is the caller's obligation.
    check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, size) })
}

// ---- streams and events ----

/// `cuStreamCreate`.
#[inline]
pub(super) fn stream_create(flags: u32) -> R<sys::CUstream> {
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the driver validates `flags`; the out-pointer is a local that outlives the call.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut s, flags)
    })?;
    Ok(s)
}

/// `cuStreamDestroy_v2`.
///
/// # Safety
/// `s` came from [`stream_create`], is destroyed once, and is not used afterwards.
#[inline]
pub(super) unsafe fn stream_destroy(s: sys::CUstream) -> R<()> {
    // SAFETY: the handle's liveness and last use are the caller's obligation.
    check("cuStreamDestroy_v2", unsafe { sys::cuStreamDestroy_v2(s) })
}

/// `cuStreamSynchronize`.
///
/// # Safety
/// `s` is a live stream or the legacy stream (null).
#[inline]
pub(super) unsafe fn stream_synchronize(s: sys::CUstream) -> R<()> {
    // SAFETY: the driver dereferences `s`, which the caller guarantees is live (or null).
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(s)
    })
}

/// `cuStreamWaitEvent` (flags 0).
///
/// # Safety
/// `s` is a live stream or the legacy stream; `ev` is a live event.
#[inline]
pub(super) unsafe fn stream_wait_event(s: sys::CUstream, ev: sys::CUevent) -> R<()> {
    // SAFETY: both handles are the caller's obligation; no other pointers.
    check("cuStreamWaitEvent", unsafe {
        sys::cuStreamWaitEvent(s, ev, 0)
    })
}

/// `cuStreamBeginCapture_v2`.
///
/// # Safety
/// `s` is a live stream.
#[inline]
pub(super) unsafe fn stream_begin_capture(
    s: sys::CUstream,
    mode: sys::CUstreamCaptureMode,
) -> R<()> {
    // SAFETY: the handle is the caller's obligation; `mode` is a value.
    check("cuStreamBeginCapture_v2", unsafe {
        sys::cuStreamBeginCapture_v2(s, mode)
    })
}

/// `cuStreamEndCapture`. The graph comes back beside the status, not inside it: a failed end
/// may still hand over a graph (possibly null), which the caller must destroy.
///
/// # Safety
/// `s` is a live stream.
#[inline]
pub(super) unsafe fn stream_end_capture(s: sys::CUstream) -> (sys::CUgraph, R<()>) {
    let mut g: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: the handle is the caller's obligation; the out-pointer is a local that outlives
    // the call.
    let r = check("cuStreamEndCapture", unsafe {
        sys::cuStreamEndCapture(s, &mut g)
    });
    (g, r)
}

/// `cuStreamIsCapturing`: the stream's capture status.
///
/// # Safety
/// `s` is a live stream or the legacy stream (null).
#[inline]
pub(super) unsafe fn stream_is_capturing(s: sys::CUstream) -> R<sys::CUstreamCaptureStatus> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the handle is the caller's obligation; the out-pointer is a local that outlives
    // the call.
    check("cuStreamIsCapturing", unsafe {
        sys::cuStreamIsCapturing(s, &mut status)
    })?;
    Ok(status)
}

/// `cuEventCreate`.
#[inline]
pub(super) fn event_create(flags: u32) -> R<sys::CUevent> {
    let mut e: sys::CUevent = std::ptr::null_mut();
    // SAFETY: the driver validates `flags`; the out-pointer is a local that outlives the call.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut e, flags)
    })?;
    Ok(e)
}

/// `cuEventRecord`.
///
/// # Safety
/// `ev` is a live event; `s` is a live stream or the legacy stream.
#[inline]
pub(super) unsafe fn event_record(ev: sys::CUevent, s: sys::CUstream) -> R<()> {
    // SAFETY: both handles are the caller's obligation; no other pointers.
    check("cuEventRecord", unsafe { sys::cuEventRecord(ev, s) })
}

/// `cuEventSynchronize`.
///
/// # Safety
/// `ev` is a live event.
#[inline]
pub(super) unsafe fn event_synchronize(ev: sys::CUevent) -> R<()> {
    // SAFETY: the handle is the caller's obligation; no other pointers.
    check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(ev) })
}

/// `cuEventQuery`: whether the work before the event's record has completed (`false` while
/// it has not), without waiting.
///
/// # Safety
/// `ev` is a live event.
#[inline]
pub(super) unsafe fn event_done(ev: sys::CUevent) -> R<bool> {
    // SAFETY: the handle is the caller's obligation; no other pointers.
    match unsafe { sys::cuEventQuery(ev) } {
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => check("cuEventQuery", r).map(|()| true),
    }
}

/// `cuEventDestroy_v2`.
///
/// # Safety
/// `ev` came from [`event_create`], is destroyed once, and is not used afterwards.
#[inline]
pub(super) unsafe fn event_destroy(ev: sys::CUevent) -> R<()> {
    // SAFETY: the handle's liveness and last use are the caller's obligation.
    check("cuEventDestroy_v2", unsafe { sys::cuEventDestroy_v2(ev) })
}

// ---- graphs ----

/// `cuGraphInstantiateWithFlags`.
///
/// # Safety
/// `g` is a live graph.
#[inline]
pub(super) unsafe fn graph_instantiate(g: sys::CUgraph, flags: u64) -> R<sys::CUgraphExec> {
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: the graph handle is the caller's obligation; the out-pointer is a local that
    // outlives the call.
    check("cuGraphInstantiateWithFlags", unsafe {
        sys::cuGraphInstantiateWithFlags(&mut exec, g, flags)
    })?;
    Ok(exec)
}

/// `cuGraphLaunch`.
///
/// # Safety
/// `exec` is a live executable graph; `s` is a live stream or the legacy stream. What its nodes
/// read and write was promised when they were captured.
#[inline]
pub(super) unsafe fn graph_launch(exec: sys::CUgraphExec, s: sys::CUstream) -> R<()> {
    // SAFETY: both handles are the caller's obligation; no other pointers.
    check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(exec, s) })
}

/// `cuGraphExecDestroy`.
///
/// # Safety
/// `exec` came from [`graph_instantiate`], is destroyed once, and is not used afterwards.
#[inline]
pub(super) unsafe fn graph_exec_destroy(exec: sys::CUgraphExec) -> R<()> {
    // SAFETY: the handle's liveness and last use are the caller's obligation.
    check("cuGraphExecDestroy", unsafe {
        sys::cuGraphExecDestroy(exec)
    })
}

/// `cuGraphDestroy`.
///
/// # Safety
/// `g` is a live graph (from [`stream_end_capture`]), destroyed once and not used afterwards.
#[inline]
pub(super) unsafe fn graph_destroy(g: sys::CUgraph) -> R<()> {
    // SAFETY: the handle's liveness and last use are the caller's obligation.
    check("cuGraphDestroy", unsafe { sys::cuGraphDestroy(g) })
}

// ---- modules and launches ----

/// `cuModuleLoadData` on a NUL-terminated image.
///
/// # Safety
/// `image` is PTX text (or a complete cubin or fatbin). The driver tells them apart by the first
/// bytes and reads a binary image by the lengths in its own header, not up to the NUL: text that
/// happens to begin with the ELF magic would be read past its end.
#[inline]
pub(super) unsafe fn module_load_data(image: &CStr) -> R<sys::CUmodule> {
    let mut m: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `image` is a live NUL-terminated buffer for the whole call, and that it is what
    // it claims to be is the caller's obligation; the out-pointer is a local that outlives it.
    check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut m, image.as_ptr().cast())
    })?;
    Ok(m)
}

/// `cuModuleLoadData` of a binary image (fatbin, cubin) or PTX held in 8-byte words.
///
/// # Safety
/// `image` holds a whole image whose headers name no byte past its end (or PTX text ending in
/// a NUL inside it): the driver takes no length and reads as far as they say.
pub(super) unsafe fn module_load_image(image: &[u64]) -> R<sys::CUmodule> {
    let mut m: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `image` is live for the whole call and whole (the caller's obligation); the
    // out-pointer is a local that outlives the call.
    check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut m, image.as_ptr().cast())
    })?;
    Ok(m)
}

/// `cuModuleUnload`.
///
/// # Safety
/// `m` came from [`module_load_data`], is unloaded once, and neither it nor any function looked
/// up in it is used afterwards.
#[inline]
pub(super) unsafe fn module_unload(m: sys::CUmodule) -> R<()> {
    // SAFETY: the handle's liveness and last use are the caller's obligation.
    check("cuModuleUnload", unsafe { sys::cuModuleUnload(m) })
}

/// `cuModuleGetFunction`.
///
/// # Safety
/// `m` is a loaded module.
#[inline]
pub(super) unsafe fn module_get_function(m: sys::CUmodule, name: &CStr) -> R<sys::CUfunction> {
    let mut f: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the module handle is the caller's obligation; `name` is a live NUL-terminated
    // string for the whole call; the out-pointer is a local that outlives it.
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut f, m, name.as_ptr())
    })?;
    Ok(f)
}

/// `cuModuleGetGlobal`: where a module's variable lies, and its size.
///
/// # Safety
/// `m` is a loaded module.
#[inline]
pub(super) unsafe fn module_get_global(m: sys::CUmodule, name: &CStr) -> R<(u64, usize)> {
    let (mut p, mut bytes): (sys::CUdeviceptr, usize) = (0, 0);
    // SAFETY: the module handle is the caller's obligation; `name` is a live NUL-terminated
    // string for the whole call; both out-pointers are locals that outlive it.
    check("cuModuleGetGlobal", unsafe {
        sys::cuModuleGetGlobal_v2(&mut p, &mut bytes, m, name.as_ptr())
    })?;
    Ok((p, bytes))
}

/// `cuFuncGetParamInfo`: (offset, size) of parameter `index`. Past the last parameter the driver
/// returns an error.
///
/// # Safety
/// `f` is a function of a loaded module.
#[inline]
pub(super) unsafe fn func_get_param_info(f: sys::CUfunction, index: usize) -> R<(usize, usize)> {
    let (mut off, mut size) = (0usize, 0usize);
    // SAFETY: the function handle is the caller's obligation; both out-pointers are locals
    // that outlive the call.
    check("cuFuncGetParamInfo", unsafe {
        sys::cuFuncGetParamInfo(f, index, &mut off, &mut size)
    })?;
    Ok((off, size))
}

/// `cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`: what a launch with
/// more than 48 KiB of dynamic shared memory needs first.
///
/// # Safety
/// `f` is a function of a loaded module.
#[inline]
pub(super) unsafe fn func_allow_dynamic_shared(f: sys::CUfunction, bytes: u32) -> R<()> {
    // SAFETY: the function handle is the caller's obligation; the value is a plain int.
    check("cuFuncSetAttribute", unsafe {
        sys::cuFuncSetAttribute(
            f,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    })
}

/// `cuLaunchKernel` with `kernelParams` and no `extra`.
///
/// # Safety
/// `f` is a function of a loaded module; `s` is a live stream or the legacy stream; `params`
/// has one pointer per kernel parameter, each at a value of that parameter's size (the driver
/// copies them during the call); every address the kernel then touches is memory it may.
#[inline]
pub(super) unsafe fn launch_kernel(
    f: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    s: sys::CUstream,
    params: &mut [*mut c_void],
) -> R<()> {
    // SAFETY: the handles and what `params` points at are the caller's obligation; the array
    // itself is a live slice for the whole call; `extra` is null.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            f,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared_mem,
            s,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

/// `cuLaunchKernelEx` with `kernelParams` and no `extra`.
///
/// # Safety
/// As [`launch_kernel`], with the stream the one in `config`; `config.attrs` points at
/// `config.numAttrs` live attributes.
#[inline]
pub(super) unsafe fn launch_kernel_ex(
    config: &sys::CUlaunchConfig,
    f: sys::CUfunction,
    params: &mut [*mut c_void],
) -> R<()> {
    // SAFETY: `config` is a reference read during the call, and its attribute array, the
    // handles and what `params` points at are the caller's obligation; `extra` is null.
    check("cuLaunchKernelEx", unsafe {
        sys::cuLaunchKernelEx(config, f, params.as_mut_ptr(), std::ptr::null_mut())
    })
}

/// `cuTensorMapEncodeTiled`: the 128-byte descriptor. The driver only encodes `base` into it;
/// nothing is read there.
///
/// # Safety
/// `dims`, `box_dims` and `element_strides` hold at least `rank` entries and `strides` at least
/// `rank - 1`: the driver reads that many through each pointer.
#[allow(clippy::too_many_arguments)] // the entry point's own arguments, one for one
#[inline]
pub(super) unsafe fn tensor_map_encode_tiled(
    dtype: sys::CUtensorMapDataType,
    rank: u32,
    base: *mut c_void,
    dims: &[u64],
    strides: &[u64],
    box_dims: &[u32],
    element_strides: &[u32],
    interleave: sys::CUtensorMapInterleave,
    swizzle: sys::CUtensorMapSwizzle,
    l2: sys::CUtensorMapL2promotion,
    oob: sys::CUtensorMapFloatOOBfill,
) -> R<sys::CUtensorMap> {
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: the out-pointer is a local of the descriptor's size that outlives the call; the
    // four arrays are live slices, long enough for `rank` by the caller's obligation; `base`
    // is not dereferenced.
    check("cuTensorMapEncodeTiled", unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            dtype,
            rank,
            base,
            dims.as_ptr(),
            strides.as_ptr(),
            box_dims.as_ptr(),
            element_strides.as_ptr(),
            interleave,
            swizzle,
            l2,
            oob,
        )
    })?;
    Ok(map)
}

/// The calls `cuda::probe` makes, which report cudarc's own `DriverError` (the error inside the
/// public `ProbeError::Driver`), through cudarc's result layer where it has the call.
pub(super) mod facts {
    use cudarc::driver::{result, sys};

    /// `cuInit(0)`.
    #[inline]
    pub(in crate::cuda) fn init() -> Result<(), result::DriverError> {
        result::init()
    }

    /// `cuDriverGetVersion`.
    #[inline]
    pub(in crate::cuda) fn driver_get_version() -> Result<i32, result::DriverError> {
        let mut v = 0i32;
        // SAFETY: cuDriverGetVersion writes one int through a pointer to a local that outlives
        // the call.
        unsafe { sys::cuDriverGetVersion(&mut v) }.result()?;
        Ok(v)
    }

    /// `cuDeviceGetCount`.
    #[inline]
    pub(in crate::cuda) fn device_get_count() -> Result<i32, result::DriverError> {
        result::device::get_count()
    }

    /// `cuDeviceGet`.
    #[inline]
    pub(in crate::cuda) fn device_get(ordinal: i32) -> Result<sys::CUdevice, result::DriverError> {
        result::device::get(ordinal)
    }

    /// `cuDeviceGetName`.
    #[inline]
    pub(in crate::cuda) fn device_get_name(
        dev: sys::CUdevice,
    ) -> Result<String, result::DriverError> {
        result::device::get_name(dev)
    }

    /// `cuDeviceTotalMem_v2`.
    #[inline]
    pub(in crate::cuda) fn device_total_mem(
        dev: sys::CUdevice,
    ) -> Result<usize, result::DriverError> {
        // SAFETY: a `CUdevice` is an ordinal the driver validates, not a pointer; cudarc writes
        // the answer to a local.
        unsafe { result::device::total_mem(dev) }
    }

    /// `cuDeviceGetAttribute`.
    #[inline]
    pub(in crate::cuda) fn device_get_attribute(
        dev: sys::CUdevice,
        attr: sys::CUdevice_attribute,
    ) -> Result<i32, result::DriverError> {
        // SAFETY: as `device_total_mem`: an ordinal and a plain int query into a local.
        unsafe { result::device::get_attribute(dev, attr) }
    }
}
