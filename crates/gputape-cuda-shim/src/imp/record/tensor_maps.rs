//! `cuTensorMapEncodeTiled`: the 128 bytes the driver wrote and everything it was given.
//! Launches pass a map by value, a global address inside it, so the record keeps what it was
//! encoded from as well as what came out.

use gputape_shimlog::Rec;

use super::{R, real_at};
use crate::imp::log;

/// `cuTensorMapEncodeTiled`: (CUtensorMap*, dtype, rank, void *globalAddress,
/// const cuuint64_t *globalDim, const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
/// const cuuint32_t *elementStrides, interleave, swizzle, l2Promotion, oobFill).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn tensor_map_tiled<const I: usize>(
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
