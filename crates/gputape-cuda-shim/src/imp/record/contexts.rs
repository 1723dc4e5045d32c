//! Contexts made, primary or not: the first on each device writes its `Device` record (name,
//! SMs, memory), so a trace says what it was recorded on.

use core::ffi::{c_char, c_int};
use core::sync::atomic::{AtomicU64, Ordering};

use gputape_shimlog::Rec;

use super::{R, real_at};
use crate::imp::log;
use crate::imp::table::entry;

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

pub(super) unsafe extern "C" fn primary_ctx_retain<const I: usize>(ctx: *mut u64, dev: c_int) -> R {
    // SAFETY: entry point I is cuDevicePrimaryCtxRetain: (CUcontext*, CUdevice).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, c_int) -> R>(I)(ctx, dev) };
    if r == 0 {
        note_device(dev);
    }
    r
}

pub(super) unsafe extern "C" fn ctx_create<const I: usize>(
    ctx: *mut u64,
    flags: u32,
    dev: c_int,
) -> R {
    // SAFETY: entry point I is cuCtxCreate_v2: (CUcontext*, unsigned, CUdevice).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(*mut u64, u32, c_int) -> R>(I)(ctx, flags, dev) };
    if r == 0 {
        note_device(dev);
    }
    r
}
