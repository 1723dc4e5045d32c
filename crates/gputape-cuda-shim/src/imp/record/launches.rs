//! Launches as the driver is given them, plain, cooperative and through `cuLaunchKernelEx`'s
//! attributes: the hooks gather the dimensions and stream; the record itself is `launch.rs`'s.

use core::ffi::c_void;

use gputape_shimlog::Rec;

use super::{R, real_at, stream_of};
use crate::imp::{log, managed};

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn launch<const I: usize>(
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
    let dims = crate::imp::launch::LaunchDims::plain(
        [gx, gy, gz],
        [bx, by, bz],
        smem,
        stream_of::<I>(stream),
    );
    crate::imp::launch::log(r, f, dims, params, extra);
    r
}

/// `cuLaunchCooperativeKernel(_ptsz)`: `cuLaunchKernel`'s arguments less `extra`. Its launch
/// is logged as any other, after a `Cooperative` record that marks it.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn launch_cooperative<const I: usize>(
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
    let dims = crate::imp::launch::LaunchDims::plain(
        [gx, gy, gz],
        [bx, by, bz],
        smem,
        stream_of::<I>(stream),
    );
    log::write(r, Rec::Cooperative { func: f });
    crate::imp::launch::log(r, f, dims, params, core::ptr::null_mut());
    r
}

/// `CUlaunchConfig`, as `cuLaunchKernelEx` takes it.
#[repr(C)]
pub(super) struct LaunchConfig {
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

pub(super) unsafe extern "C" fn launch_ex<const I: usize>(
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
        let dims = crate::imp::launch::LaunchDims {
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
        let other: Vec<u64> = attrs
            .iter()
            .filter(|a| !matches!(a.id, 0 | ATTR_CLUSTER_DIMENSION | ATTR_COOPERATIVE))
            .flat_map(|a| {
                [
                    u64::from(a.id),
                    u64::from(a.value[0]) | u64::from(a.value[1]) << 32,
                ]
            })
            .collect();
        if !other.is_empty() {
            log::write(
                r,
                Rec::LaunchAttrs {
                    func: f,
                    attrs: other,
                },
            );
        }
        crate::imp::launch::log(r, f, dims, params, extra);
    }
    r
}
