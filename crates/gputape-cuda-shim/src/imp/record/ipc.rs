//! Memory and events shared between processes (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle*`,
//! `cuIpcCloseMemHandle`, `cuIpcGetEventHandle`, `cuIpcOpenEventHandle`): the exporter's
//! allocation or event is named with its handle; the opener's mapping is logged with its
//! extent and, when recording to a file, its bytes as they were when opened (what a replay of
//! the opener alone starts from; what the exporter writes after is its own process's work, not
//! in this log), an opened event with the handle it came from.

use gputape_shimlog::Rec;

use super::{R, real_at};
use crate::imp::log;
use crate::imp::table::entry;

/// `CUipcMemHandle` and `CUipcEventHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct IpcHandle {
    reserved: [u8; 64],
}

/// `cuIpcOpenEventHandle`: (CUevent*, CUipcEventHandle by value).
pub(super) unsafe extern "C" fn ipc_open_event_handle<const I: usize>(
    event: *mut u64,
    handle: IpcHandle,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, IpcHandle) -> R;
    // SAFETY: entry point I is cuIpcOpenEventHandle, whose signature F is (the handle passed on
    // by value, as it came).
    let r = unsafe { real_at::<F>(I)(event, handle) };
    if r == 0 && !event.is_null() {
        // SAFETY: on success the driver wrote the event through the caller's pointer.
        let e = unsafe { *event };
        log::write(
            r,
            Rec::IpcEventImport {
                event: e,
                handle: &handle.reserved,
            },
        );
    }
    r
}

/// Bytes of a shared allocation read when it is opened, at most (a larger one is logged
/// without its bytes).
pub(super) const READ_LIMIT: u64 = 256 << 20;

/// `cuIpcGetMemHandle` (`EVENT` false): (CUipcMemHandle*, CUdeviceptr), and
/// `cuIpcGetEventHandle`: (CUipcEventHandle*, CUevent). The 64 bytes the driver wrote are
/// logged with the allocation or event they name.
pub(super) unsafe extern "C" fn ipc_get_handle<const I: usize, const EVENT: bool>(
    handle: *mut IpcHandle,
    of: u64,
) -> R {
    // SAFETY: entry point I is cuIpcGetMemHandle or cuIpcGetEventHandle: (a 64-byte handle*,
    // CUdeviceptr or CUevent).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut IpcHandle, u64) -> R>(I)(handle, of) };
    if r == 0 && !handle.is_null() {
        // SAFETY: on success the driver wrote the handle through the caller's pointer.
        let h = unsafe { *handle };
        let handle = &h.reserved;
        let rec = if EVENT {
            Rec::IpcEventExport { event: of, handle }
        } else {
            Rec::IpcExport { ptr: of, handle }
        };
        log::write(r, rec);
    }
    r
}

/// `cuIpcOpenMemHandle(_v2)`: (CUdeviceptr*, CUipcMemHandle by value, unsigned flags).
pub(super) unsafe extern "C" fn ipc_open_mem_handle<const I: usize>(
    ptr: *mut u64,
    handle: IpcHandle,
    flags: u32,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, IpcHandle, u32) -> R;
    // SAFETY: entry point I is a cuIpcOpenMemHandle form, whose signature F is (the handle
    // passed on by value, as it came).
    let r = unsafe { real_at::<F>(I)(ptr, handle, flags) };
    if r != 0 || ptr.is_null() || !log::active() {
        return r;
    }
    // SAFETY: on success the driver wrote the mapping's address through the caller's pointer.
    let at = unsafe { *ptr };
    let (base, bytes) = extent(at).unwrap_or((at, 0));
    let data = if log::is_flight() || bytes > READ_LIMIT {
        Vec::new()
    } else {
        read(base, bytes).unwrap_or_default()
    };
    let rec = Rec::IpcImport {
        ptr: base,
        bytes,
        handle: &handle.reserved,
        data: &data,
    };
    log::write(r, rec);
    r
}

/// `cuIpcCloseMemHandle`: (CUdeviceptr).
pub(super) unsafe extern "C" fn ipc_close_mem_handle<const I: usize>(ptr: u64) -> R {
    // SAFETY: entry point I is cuIpcCloseMemHandle: (CUdeviceptr).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(ptr) };
    log::write(r, Rec::IpcClose { ptr });
    r
}

/// The allocation holding `ptr`: its base and size (`cuMemGetAddressRange_v2`).
fn extent(ptr: u64) -> Option<(u64, u64)> {
    type F = unsafe extern "C" fn(*mut u64, *mut usize, u64) -> R;
    let (mut base, mut size) = (0u64, 0usize);
    // SAFETY: F is cuMemGetAddressRange_v2's signature: (CUdeviceptr*, size_t*, CUdeviceptr);
    // the out-pointers are locals of the types the driver writes.
    let r = unsafe { real_at::<F>(entry("cuMemGetAddressRange_v2"))(&mut base, &mut size, ptr) };
    (r == 0).then_some((base, size as u64))
}

/// `bytes` bytes of device memory at `src` (`cuMemcpyDtoH_v2`, which waits for the device).
pub(super) fn read(src: u64, bytes: u64) -> Option<Vec<u8>> {
    type F = unsafe extern "C" fn(*mut u8, u64, usize) -> R;
    let mut v = vec![0u8; bytes as usize];
    // SAFETY: F is cuMemcpyDtoH_v2's signature: (void*, CUdeviceptr, size_t); `v` holds `bytes`
    // bytes for the driver to write; `src` is the mapping the driver just made, `bytes` long.
    let r = unsafe { real_at::<F>(entry("cuMemcpyDtoH_v2"))(v.as_mut_ptr(), src, v.len()) };
    (r == 0).then_some(v)
}
