//! Allocations and frees: device, managed, pinned host, stream-ordered, and virtual address
//! ranges with their maps. Each is logged with the address the driver gave, which the copies
//! and launches that follow name the memory by.

use gputape_shimlog::Rec;

use super::{R, real_at, shareable};
use crate::imp::{log, managed};

pub(super) unsafe extern "C" fn mem_alloc<const I: usize>(dptr: *mut u64, bytes: usize) -> R {
    // SAFETY: entry point I is cuMemAlloc(_v2): (CUdeviceptr*, size_t).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, usize) -> R>(I)(dptr, bytes) };
    log_alloc(r, dptr, bytes as u64, false)
}

pub(super) unsafe extern "C" fn mem_alloc_managed<const I: usize>(
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

pub(super) unsafe extern "C" fn mem_alloc_pitch<const I: usize>(
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

pub(super) unsafe extern "C" fn mem_free<const I: usize>(ptr: u64) -> R {
    // SAFETY: entry point I is cuMemFree(_v2): (CUdeviceptr).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(ptr) };
    log::write(r, Rec::Free { ptr });
    if r == 0 {
        managed::freed(ptr);
    }
    r
}

pub(super) unsafe extern "C" fn host_alloc<const I: usize>(pp: *mut u64, bytes: usize) -> R {
    // SAFETY: entry point I is cuMemAllocHost(_v2): (void**, size_t).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, usize) -> R>(I)(pp, bytes) };
    let ptr = if r == 0 { read_out(pp) } else { 0 };
    let bytes = bytes as u64;
    log::write(r, Rec::HostAlloc { ptr, bytes });
    pinned(r, ptr, bytes, false);
    r
}

/// `CU_MEMHOSTALLOC_DEVICEMAP`, `CU_MEMHOSTREGISTER_DEVICEMAP` (the same bit): the program
/// means the device to read and write the region where it lies.
const DEVICEMAP: u32 = 0x02;

pub(super) unsafe extern "C" fn host_alloc_flags<const I: usize>(
    pp: *mut u64,
    bytes: usize,
    flags: u32,
) -> R {
    // SAFETY: entry point I is cuMemHostAlloc: (void**, size_t, unsigned).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(*mut u64, usize, u32) -> R>(I)(pp, bytes, flags) };
    let ptr = if r == 0 { read_out(pp) } else { 0 };
    let bytes = bytes as u64;
    log::write(r, Rec::HostAlloc { ptr, bytes });
    pinned(r, ptr, bytes, flags & DEVICEMAP != 0);
    r
}

pub(super) unsafe extern "C" fn host_free<const I: usize>(p: u64) -> R {
    // SAFETY: entry point I is cuMemFreeHost: (void*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(p) };
    log::write(r, Rec::HostFree { ptr: p });
    unpinned(r, p);
    r
}

/// `cuMemHostRegister(_v2)`: (void*, size_t, unsigned flags): the program's own memory pinned.
pub(super) unsafe extern "C" fn host_register<const I: usize>(
    p: u64,
    bytes: usize,
    flags: u32,
) -> R {
    // SAFETY: entry point I is a cuMemHostRegister form: (void*, size_t, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, usize, u32) -> R>(I)(p, bytes, flags) };
    pinned(r, p, bytes as u64, flags & DEVICEMAP != 0);
    r
}

/// `cuMemHostUnregister`: (void*).
pub(super) unsafe extern "C" fn host_unregister<const I: usize>(p: u64) -> R {
    // SAFETY: entry point I is cuMemHostUnregister: (void*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(p) };
    unpinned(r, p);
    r
}

/// `cuMemHostGetDevicePointer_v2`: (CUdeviceptr*, void*, unsigned): the program asks the
/// device's address of pinned memory, to hand it to kernels (zero-copy): the region holding
/// it is mapped from here.
pub(super) unsafe extern "C" fn host_device_pointer<const I: usize>(
    dptr: *mut u64,
    p: u64,
    flags: u32,
) -> R {
    // SAFETY: entry point I is cuMemHostGetDevicePointer_v2: (CUdeviceptr*, void*, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u64, u32) -> R>(I)(dptr, p, flags) };
    // Under unified addressing the device's address is the host's; a region reached at
    // another address (no unified addressing) is not followed.
    if r == 0 && read_out(dptr) == p {
        let mut regions = pinned_regions();
        let found = regions.range_mut(..=p).next_back();
        if let Some((&base, (bytes, mapped))) = found.filter(|(b, (n, _))| p - *b < *n)
            && !*mapped
        {
            *mapped = true;
            let bytes = *bytes;
            drop(regions);
            mapped_from_here(base, bytes);
        }
    }
    r
}

/// Pinned host regions alive: base -> (bytes, whether the device maps it).
type Pinned = std::collections::BTreeMap<u64, (u64, bool)>;

fn pinned_regions() -> std::sync::MutexGuard<'static, Pinned> {
    static REGIONS: std::sync::Mutex<Pinned> = std::sync::Mutex::new(Pinned::new());
    REGIONS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pinned region made with status `r` (`mapped`: with the device-map flag).
fn pinned(r: R, ptr: u64, bytes: u64, mapped: bool) {
    if r != 0 || ptr == 0 || bytes == 0 {
        return;
    }
    pinned_regions().insert(ptr, (bytes, mapped));
    if mapped {
        mapped_from_here(ptr, bytes);
    }
}

/// The region at `ptr` freed or unregistered with status `r`.
fn unpinned(r: R, ptr: u64) {
    if r != 0 {
        return;
    }
    if let Some((_, true)) = pinned_regions().remove(&ptr) {
        log::write(0, Rec::HostUnmapped { ptr });
        managed::freed(ptr);
    }
}

/// The device reads and writes the region at `ptr` where it lies from here: logged, and
/// followed as managed memory is.
fn mapped_from_here(ptr: u64, bytes: u64) {
    log::write(0, Rec::HostMapped { ptr, bytes });
    managed::allocated(ptr, bytes);
}

/// `cuMemAllocAsync` (STREAM_ARG false: no pool) and `cuMemAllocFromPoolAsync`: stream-ordered
/// allocations, logged as allocations (a replay makes them at once).
pub(super) unsafe extern "C" fn mem_alloc_async<const I: usize>(
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

pub(super) unsafe extern "C" fn mem_alloc_pool_async<const I: usize>(
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

pub(super) unsafe extern "C" fn mem_free_async<const I: usize>(ptr: u64, stream: u64) -> R {
    // SAFETY: entry point I is cuMemFreeAsync(_ptsz): (CUdeviceptr, CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64) -> R>(I)(ptr, stream) };
    log::write(r, Rec::Free { ptr });
    r
}

/// `cuMemAddressReserve`: (CUdeviceptr*, size_t size, size_t alignment, CUdeviceptr addr,
/// unsigned long long flags).
pub(super) unsafe extern "C" fn address_reserve<const I: usize>(
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
pub(super) unsafe extern "C" fn address_range<const I: usize, const UNMAP: bool>(
    ptr: u64,
    size: usize,
) -> R {
    // SAFETY: entry point I is cuMemAddressFree or cuMemUnmap: (CUdeviceptr, size_t).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, usize) -> R>(I)(ptr, size) };
    let size = size as u64;
    if r == 0 {
        if UNMAP {
            shareable::unmapped(ptr, size);
        }
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
pub(super) unsafe extern "C" fn mem_map<const I: usize>(
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
        let size = size as u64;
        shareable::mapped(ptr, size, handle);
        let offset = offset as u64;
        log::write(
            r,
            Rec::MapHandle {
                ptr,
                size,
                offset,
                handle,
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
pub(super) fn read_out(p: *mut u64) -> u64 {
    if p.is_null() {
        0
    } else {
        // SAFETY: non-null, and the driver just wrote it (the caller checked success).
        unsafe { *p }
    }
}
