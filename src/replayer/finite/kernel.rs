//! The kernel `replay --check-finite` scans with: one module, CUDA C for the GPU and a CPU twin
//! for the mock, loaded through the trait like any engine's module.
//!
//! A scan reads a range of f32, f16 or bf16 elements and leaves, in its own result slot, the
//! first index and the count of NaN, +Inf and -Inf. It runs on the stream of the launch it
//! checks, right after it, so it sees exactly what that launch left; results stay on the device
//! until the check reads a batch of slots back, so checking costs no host sync per launch.

use crate::backend::{
    DevicePtr, ElemType, HostBody, HostCtx, HostFault, KernelDesc, ModuleDesc, ParamAccess,
    ParamInfo,
};
use std::sync::Arc;

/// The module's name; nothing a trace records is called this.
pub const MODULE: &str = "gputape_finite";
/// The scan kernel's name.
pub const KERNEL: &str = "gputape_finite_scan";
/// Threads per block of a scan.
pub const BLOCK: u32 = 256;
/// Classes a scan counts, in slot order.
pub const CLASSES: usize = 3;

/// Bit patterns classified by the element's exponent field: all ones with a zero fraction is
/// an infinity, with any other fraction a NaN. Vector loads (16 bytes) where the range is
/// aligned, element loads otherwise; per-thread minimum and count, a warp reduction, one
/// atomic per warp.
const SOURCE: &str = r#"
__device__ __forceinline__ int gt_class(unsigned int bits, unsigned int elem) {
    unsigned int a, inf, neg;
    if (elem == 0) { a = bits & 0x7fffffffu; inf = 0x7f800000u; neg = bits >> 31; }
    else if (elem == 1) { a = bits & 0x7fffu; inf = 0x7c00u; neg = (bits >> 15) & 1u; }
    else { a = bits & 0x7fffu; inf = 0x7f80u; neg = (bits >> 15) & 1u; }
    if (a < inf) return -1;
    if (a > inf) return 0;
    return neg ? 2 : 1;
}
__device__ __forceinline__ void gt_note(int c, unsigned long long i, unsigned long long* first, unsigned long long* cnt) {
    if (c >= 0) { if (i < first[c]) first[c] = i; cnt[c] += 1ull; }
}
__device__ __forceinline__ void gt_word(unsigned int w, unsigned long long word, unsigned int elem,
                                        unsigned long long n, unsigned long long* first, unsigned long long* cnt) {
    if (elem == 0) { if (word < n) gt_note(gt_class(w, 0u), word, first, cnt); return; }
    unsigned long long i = word * 2ull;
    if (i < n) gt_note(gt_class(w & 0xffffu, elem), i, first, cnt);
    if (i + 1ull < n) gt_note(gt_class(w >> 16, elem), i + 1ull, first, cnt);
}
extern "C" __global__ void gputape_finite_scan(const unsigned char* p, unsigned long long n, unsigned int elem,
                                               unsigned long long* firsts, unsigned long long* counts) {
    unsigned long long first[3] = {~0ull, ~0ull, ~0ull};
    unsigned long long cnt[3] = {0ull, 0ull, 0ull};
    unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long esize = elem == 0 ? 4ull : 2ull;
    unsigned long long bytes = n * esize;
    if (((unsigned long long)p & 15ull) == 0ull) {
        unsigned long long vecs = bytes / 16ull;
        const uint4* v = (const uint4*)p;
        for (unsigned long long i = tid; i < vecs; i += stride) {
            uint4 q = v[i];
            gt_word(q.x, i * 4ull, elem, n, first, cnt);
            gt_word(q.y, i * 4ull + 1ull, elem, n, first, cnt);
            gt_word(q.z, i * 4ull + 2ull, elem, n, first, cnt);
            gt_word(q.w, i * 4ull + 3ull, elem, n, first, cnt);
        }
        for (unsigned long long i = vecs * 16ull / esize + tid; i < n; i += stride) {
            unsigned int b = elem == 0 ? ((const unsigned int*)p)[i] : ((const unsigned short*)p)[i];
            gt_note(gt_class(b, elem), i, first, cnt);
        }
    } else {
        for (unsigned long long i = tid; i < n; i += stride) {
            unsigned int b = elem == 0 ? ((const unsigned int*)p)[i] : ((const unsigned short*)p)[i];
            gt_note(gt_class(b, elem), i, first, cnt);
        }
    }
    for (int c = 0; c < 3; c++) {
        for (int off = 16; off > 0; off >>= 1) {
            unsigned long long f = __shfl_down_sync(0xffffffffu, first[c], off);
            unsigned long long k = __shfl_down_sync(0xffffffffu, cnt[c], off);
            if (f < first[c]) first[c] = f;
            cnt[c] += k;
        }
        if ((threadIdx.x & 31u) == 0u && cnt[c] != 0ull) {
            atomicMin(&firsts[c], first[c]);
            atomicAdd(&counts[c], cnt[c]);
        }
    }
}
"#;

/// The element code the kernel takes.
pub fn elem_code(e: ElemType) -> u32 {
    match e {
        ElemType::F32 => 0,
        ElemType::F16 => 1,
        ElemType::Bf16 => 2,
    }
}

/// The class of one element's bits (`None`: finite; 0 NaN, 1 +Inf, 2 -Inf): the CPU twin's
/// and the recorded readbacks' test, the kernel's `gt_class`.
pub fn class_of(bits: u32, e: ElemType) -> Option<usize> {
    let (a, inf, neg) = match e {
        ElemType::F32 => (bits & 0x7fff_ffff, 0x7f80_0000, bits >> 31),
        ElemType::F16 => (bits & 0x7fff, 0x7c00, (bits >> 15) & 1),
        ElemType::Bf16 => (bits & 0x7fff, 0x7f80, (bits >> 15) & 1),
    };
    match a.cmp(&inf) {
        std::cmp::Ordering::Less => None,
        std::cmp::Ordering::Greater => Some(0),
        std::cmp::Ordering::Equal => Some(1 + neg as usize),
    }
}

/// First index and count per class over little-endian `bytes` of `e` elements.
pub fn scan_bytes(bytes: &[u8], e: ElemType) -> ([u64; CLASSES], [u64; CLASSES]) {
    let mut first = [u64::MAX; CLASSES];
    let mut count = [0u64; CLASSES];
    let mut note = |i: usize, bits: u32| {
        if let Some(c) = class_of(bits, e) {
            first[c] = first[c].min(i as u64);
            count[c] += 1;
        }
    };
    match e {
        ElemType::F32 => bytes
            .chunks_exact(4)
            .enumerate()
            .for_each(|(i, w)| note(i, u32::from_le_bytes([w[0], w[1], w[2], w[3]]))),
        ElemType::F16 | ElemType::Bf16 => bytes
            .chunks_exact(2)
            .enumerate()
            .for_each(|(i, w)| note(i, u16::from_le_bytes([w[0], w[1]]) as u32)),
    }
    (first, count)
}

fn le_words(v: &[u64; CLASSES]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn twin(c: &mut dyn HostCtx) -> Result<(), HostFault> {
    let (p, n, elem) = (c.ptr(0)?, c.u64(1)?, c.u32(2)?);
    let (firsts, counts) = (c.ptr(3)?, c.ptr(4)?);
    let e = match elem {
        0 => ElemType::F32,
        1 => ElemType::F16,
        2 => ElemType::Bf16,
        other => return Err(c.bad_args(format!("element code {other}"))),
    };
    let len = n
        .checked_mul(e.size())
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| c.bad_args(format!("{n} elements overflow")))?;
    let (first, count) = scan_bytes(c.read(p, len)?, e);
    c.write(firsts, &le_words(&first))?;
    c.write(counts, &le_words(&count))
}

/// The module, with its CPU twin.
pub fn module() -> ModuleDesc {
    use ParamAccess::{Read, ReadWrite, Value};
    let body: HostBody = Arc::new(twin);
    ModuleDesc {
        name: MODULE.into(),
        source: Some(SOURCE.into()),
        kernels: vec![KernelDesc::new(
            KERNEL,
            ParamInfo::packed(&[
                (8, Read),
                (8, Value),
                (4, Value),
                (8, ReadWrite),
                (8, ReadWrite),
            ]),
            Some(body),
        )],
    }
}

/// A scan's pointer into the results buffer: slot `i`'s firsts, then its counts.
pub fn slot_ptrs(results: DevicePtr, slots: usize, i: usize) -> (DevicePtr, DevicePtr) {
    let per = CLASSES * 8;
    (
        results.offset(i * per),
        results.offset(slots * per + i * per),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every class boundary of each type, as the kernel's `gt_class` draws it.
    #[test]
    fn classes_of_each_type() {
        let f = |v: f32| v.to_bits();
        assert_eq!(class_of(f(1.0), ElemType::F32), None);
        assert_eq!(class_of(f(f32::MAX), ElemType::F32), None);
        assert_eq!(class_of(f(f32::NAN), ElemType::F32), Some(0));
        assert_eq!(class_of(0xffc0_0001, ElemType::F32), Some(0));
        assert_eq!(class_of(f(f32::INFINITY), ElemType::F32), Some(1));
        assert_eq!(class_of(f(f32::NEG_INFINITY), ElemType::F32), Some(2));
        assert_eq!(class_of(0x7f80, ElemType::Bf16), Some(1));
        assert_eq!(class_of(0xff80, ElemType::Bf16), Some(2));
        assert_eq!(class_of(0x7fc0, ElemType::Bf16), Some(0));
        assert_eq!(class_of(0x7f7f, ElemType::Bf16), None);
        assert_eq!(class_of(0x7c00, ElemType::F16), Some(1));
        assert_eq!(class_of(0x7e00, ElemType::F16), Some(0));
        assert_eq!(class_of(0x7bff, ElemType::F16), None);
        let mut b = Vec::new();
        for v in [1.0f32, f32::NAN, 2.0, f32::NEG_INFINITY, f32::NAN] {
            b.extend(v.to_le_bytes());
        }
        let (first, count) = scan_bytes(&b, ElemType::F32);
        assert_eq!(first, [1, u64::MAX, 3]);
        assert_eq!(count, [2, 0, 1]);
    }
}
