//! A launch's record: the one record a launch-bound program makes thousands of times a second,
//! so the one whose cost the program feels (`gputape run --flight` is meant to stay on).
//!
//! Measured with the fake driver and a program that, as PyTorch does between launches, runs
//! enough code and touches enough memory of its own to push the recorder out of the nearest
//! caches (`scripts/shim-cost.sh` with THRASH_KB), a record's cost is the cache lines it
//! touches far more than its instructions: every line of code and data is a miss. So the
//! path here is short and in few places: a function's parameter layout is a `Plan` made
//! once (its pairs already encoded as the record holds them, the bytes they span, whether they
//! leave padding), found through a lock-free table of one word per slot instead of a
//! thread-local hash map, and the record is written in one piece straight where it is kept,
//! byte for byte what `gputape_shimlog::encode_launch` writes (a test holds the two equal).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};
use std::collections::HashMap;
use std::sync::Mutex;

use gputape_shimlog::LaunchHead;

use super::flight;
use super::log;
use super::table::{entry, real};

type R = c_int;

/// What a launch ran on, and how wide.
pub(super) struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: u64,
    pub cluster: [u32; 3],
}

impl LaunchDims {
    /// A launch of `cuLaunchKernel`'s kind: no cluster.
    pub fn plain(grid: [u32; 3], block: [u32; 3], shared_mem: u32, stream: u64) -> Self {
        LaunchDims {
            grid,
            block,
            shared_mem,
            stream,
            cluster: [0; 3],
        }
    }
}

/// One parameter's place: `repr(C)`, two little-endian u32s on this target, so a plan's
/// pairs are also the bytes a launch record holds for them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pair {
    offset: u32,
    size: u32,
}

// The shim is built for x86_64 only (`lib.rs`); a pair's memory is its record bytes there.
const _: () = assert!(cfg!(target_endian = "little") && size_of::<Pair>() == 8);

/// A function's parameters as the recorder lays them out, asked of the driver once.
pub(super) struct Plan {
    func: u64,
    /// Each parameter's place; `None` where the driver would not say.
    pairs: Option<Box<[Pair]>>,
    /// Bytes the parameters span through `kernelParams`: the furthest end of any.
    span: usize,
    /// Whether the parameters cover every byte of `span`, so none is padding to zero.
    dense: bool,
}

impl Plan {
    fn new(func: u64, layout: Option<Vec<(u32, u32)>>) -> Plan {
        let pairs: Option<Box<[Pair]>> = layout.map(|l| {
            l.into_iter()
                .map(|(offset, size)| Pair { offset, size })
                .collect()
        });
        let l = pairs.as_deref().unwrap_or(&[]);
        let span = l
            .iter()
            .map(|p| p.offset as usize + p.size as usize)
            .max()
            .unwrap_or(0);
        let mut by_offset = l.to_vec();
        by_offset.sort_unstable();
        let mut covered = 0usize;
        let mut dense = true;
        for p in &by_offset {
            dense &= p.offset as usize <= covered;
            covered = covered.max(p.offset as usize + p.size as usize);
        }
        Plan {
            func,
            pairs,
            span,
            dense,
        }
    }

    /// The layout's count as a record holds it (`u32::MAX`: none known).
    fn count(&self) -> u32 {
        self.pairs.as_ref().map_or(u32::MAX, |l| l.len() as u32)
    }

    /// The pairs as a record holds them.
    fn pair_bytes(&self) -> &[u8] {
        let l = self.pairs.as_deref().unwrap_or(&[]);
        // SAFETY: `Pair` is two u32s with no padding (`repr(C)`, asserted 8 bytes), so its
        // memory is initialised bytes, little-endian here as a record wants them.
        unsafe { core::slice::from_raw_parts(l.as_ptr().cast::<u8>(), size_of_val(l)) }
    }
}

/// Slots of the table that finds a function's plan: a power of two, far more than the kernels
/// a program launches, so two that share a slot are rare (they then take turns in it).
const SLOTS: usize = 4096;

/// The plans most recently used, by a hash of their function's handle. A slot holds a leaked
/// plan or null; plans are never freed, so a plan read from a slot stays valid whatever
/// another thread stores there next.
static CACHE: [AtomicPtr<Plan>; SLOTS] = [const { AtomicPtr::new(core::ptr::null_mut()) }; SLOTS];

/// Every plan made, by function: one per function for the process's life (a function that
/// keeps losing its slot is found here again, not made again).
static PLANS: Mutex<Option<HashMap<u64, &'static Plan>>> = Mutex::new(None);

fn slot_of(func: u64) -> usize {
    // Handles are addresses: the multiply spreads their middle bits into the top ones.
    (func.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}

/// `func`'s plan.
#[inline]
fn plan(func: u64) -> &'static Plan {
    let slot = &CACHE[slot_of(func)];
    // SAFETY: a slot holds null or a plan leaked by `install`, never freed.
    match unsafe { slot.load(Ordering::Acquire).as_ref() } {
        Some(p) if p.func == func => p,
        _ => install(func, slot),
    }
}

/// `func`'s plan put in its slot: the one made before, or a new one (the driver asked).
#[cold]
#[inline(never)]
fn install(func: u64, slot: &AtomicPtr<Plan>) -> &'static Plan {
    let known = PLANS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|m| m.get(&func).copied());
    let p = known.unwrap_or_else(|| {
        // Asked with no lock held: a driver that called back into a hook would find it taken.
        let made: &'static Plan = Box::leak(Box::new(Plan::new(func, ask(func))));
        *PLANS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .entry(func)
            .or_insert(made)
    });
    slot.store(core::ptr::from_ref(p).cast_mut(), Ordering::Release);
    p
}

/// `func`'s parameters as (offset, size): `cuFuncGetParamInfo`, or `cuKernelGetParamInfo` for a
/// `CUkernel` passed where a function is expected; `None` when the driver answers neither.
fn ask(func: u64) -> Option<Vec<(u32, u32)>> {
    // A `CUkernel` may be refused by the function form, or look parameterless to it.
    match ask_layout(func, entry("cuFuncGetParamInfo")) {
        Some(l) if !l.is_empty() => Some(l),
        other => ask_layout(func, entry("cuKernelGetParamInfo"))
            .filter(|k| !k.is_empty())
            .or(other),
    }
}

/// Asks `cu*GetParamInfo` (entry point `i`) for each parameter in turn until it answers
/// `CUDA_ERROR_INVALID_VALUE` (1: past the last). `None` when the first answer is another error.
fn ask_layout(func: u64, i: usize) -> Option<Vec<(u32, u32)>> {
    type F = unsafe extern "C" fn(u64, usize, *mut usize, *mut usize) -> R;
    let p = real(i);
    // SAFETY: entry point i is cuFuncGetParamInfo or cuKernelGetParamInfo, whose signature F
    // is (a stub that ignores its arguments also fits).
    let f = unsafe { core::mem::transmute_copy::<*mut (), F>(&p) };
    let mut out = Vec::new();
    for k in 0..4096usize {
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: (handle, size_t, size_t*, size_t*), the out-pointers valid.
        let r = unsafe { f(func, k, &mut off, &mut size) };
        match r {
            0 => out.push((off as u32, size as u32)),
            1 => break,
            _ if k == 0 => return None,
            _ => break,
        }
    }
    Some(out)
}

/// Where a launch's parameter bytes come from: `kernelParams` laid out by the function's
/// layout, or `extra`'s `CU_LAUNCH_PARAM_BUFFER_POINTER` (and its size), or nowhere (no
/// layout for `kernelParams`, or neither given).
enum ParamSource {
    Pointers(*mut *mut c_void),
    Buffer(*const u8, usize),
    None,
}

impl ParamSource {
    /// The source of a launch given `params` and `extra` for a function with `plan`.
    ///
    /// # Safety
    /// `extra`, when not null, is what the driver just accepted for this launch: a list of
    /// key and value pairs up to its end marker.
    #[inline]
    unsafe fn of(plan: &Plan, params: *mut *mut c_void, extra: *mut *mut c_void) -> Self {
        if !params.is_null() {
            return match plan.pairs {
                Some(_) => ParamSource::Pointers(params),
                None => ParamSource::None,
            };
        }
        if extra.is_null() {
            return ParamSource::None;
        }
        // extra: key, value pairs up to CU_LAUNCH_PARAM_END (0); BUFFER_POINTER is 1,
        // BUFFER_SIZE 2.
        let (mut buf, mut size): (*const u8, usize) = (core::ptr::null(), 0);
        for k in (0..64).step_by(2) {
            // SAFETY: the driver walked this list to its end marker.
            let key = unsafe { *extra.add(k) } as usize;
            if key == 0 {
                break;
            }
            // SAFETY: every key but the end marker is followed by its value.
            let val = unsafe { *extra.add(k + 1) };
            match key {
                1 => buf = val.cast::<u8>(),
                // SAFETY: BUFFER_SIZE's value points at a size_t.
                2 if !val.is_null() => size = unsafe { *val.cast::<usize>() },
                _ => {}
            }
        }
        if buf.is_null() {
            ParamSource::None
        } else {
            ParamSource::Buffer(buf, size)
        }
    }

    /// How many bytes the parameters take.
    #[inline]
    fn len(&self, plan: &Plan) -> usize {
        match self {
            ParamSource::Pointers(_) => plan.span,
            ParamSource::Buffer(_, n) => *n,
            ParamSource::None => 0,
        }
    }
}

/// Logs a launch the driver answered with `r`.
pub(super) fn log(
    r: R,
    func: u64,
    d: LaunchDims,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) {
    if !log::active() && !flight::is_fault(r) {
        return;
    }
    let _t = super::selftime::Guard::start(|| (gputape_shimlog::TAG_LAUNCH, "cuLaunchKernel"));
    let plan = plan(func);
    // SAFETY: the launch's own arguments, which the driver read (or refused: then `r` says so
    // and they are still the caller's valid arguments).
    let src = unsafe { ParamSource::of(plan, params, extra) };
    let h = LaunchHead {
        func,
        grid: d.grid,
        block: d.block,
        shared_mem: d.shared_mem,
        stream: d.stream,
        cluster: d.cluster,
    };
    // SAFETY: `src` names the bytes the driver read for this launch, laid out by `plan`.
    log::write_launch(r, |out, head| unsafe { encode(out, head, &h, plan, &src) });
    super::captured::after_work(r, d.stream);
}

/// Bytes of a launch record before its pairs: the common head (length, type, time, thread,
/// status, stack) and the fixed fields (function, grid, block, cluster, shared memory, stream, the
/// pairs' count).
const FIXED: usize = 25 + 60;

/// Appends the launch record `encode_launch` would: `head` (time, thread, status, stack), `h`, the
/// plan's layout and the parameter bytes `src` names, written once each into reserved memory.
///
/// # Safety
/// `src` is `ParamSource::of(plan, ..)` for a launch the driver read: `Pointers(p)`: `p[k]` is
/// null or points at parameter k's bytes as the plan sizes them; `Buffer(b, n)`: `n` bytes.
#[inline]
unsafe fn encode(
    out: &mut Vec<u8>,
    (t_ns, thread, status, stack): gputape_shimlog::Head,
    h: &LaunchHead,
    plan: &Plan,
    src: &ParamSource,
) {
    let len = src.len(plan);
    let pairs = plan.pair_bytes();
    let total = FIXED + pairs.len() + 8 + len;
    let mut f = [0u8; FIXED + 8];
    f[..4].copy_from_slice(&((total - 4) as u32).to_le_bytes());
    f[4] = gputape_shimlog::TAG_LAUNCH;
    f[5..13].copy_from_slice(&t_ns.to_le_bytes());
    f[13..17].copy_from_slice(&thread.to_le_bytes());
    f[17..21].copy_from_slice(&status.to_le_bytes());
    f[21..25].copy_from_slice(&stack.to_le_bytes());
    f[25..33].copy_from_slice(&h.func.to_le_bytes());
    for (i, v) in h.grid.iter().chain(&h.block).chain(&h.cluster).enumerate() {
        f[33 + 4 * i..37 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    f[69..73].copy_from_slice(&h.shared_mem.to_le_bytes());
    f[73..81].copy_from_slice(&h.stream.to_le_bytes());
    f[81..85].copy_from_slice(&plan.count().to_le_bytes());
    f[85..93].copy_from_slice(&(len as u64).to_le_bytes());
    out.reserve(total);
    let start = out.len();
    // SAFETY: `reserve` made room for `total` bytes after `start`; each byte of them is written
    // below before the length covers them: the fixed part, the pairs, the parameters' length,
    // then `len` parameter bytes (zeroed first where the layout leaves padding, and for a null
    // parameter pointer; a plan's pairs all end within `span`).
    unsafe {
        let base = out.as_mut_ptr().add(start);
        core::ptr::copy_nonoverlapping(f.as_ptr(), base, FIXED);
        let at = base.add(FIXED);
        core::ptr::copy_nonoverlapping(pairs.as_ptr(), at, pairs.len());
        let at = at.add(pairs.len());
        core::ptr::copy_nonoverlapping(f.as_ptr().add(FIXED), at, 8);
        let dst = at.add(8);
        match *src {
            ParamSource::Pointers(params) => {
                if !plan.dense {
                    core::ptr::write_bytes(dst, 0, len);
                }
                for (k, &Pair { offset, size: s }) in
                    plan.pairs.as_deref().unwrap_or(&[]).iter().enumerate()
                {
                    let p = (*params.add(k)).cast::<u8>();
                    let d = dst.add(offset as usize);
                    if p.is_null() {
                        core::ptr::write_bytes(d, 0, s as usize);
                        continue;
                    }
                    // Pointers and scalars (most parameters) move as one word, not through a
                    // call to memcpy.
                    match s {
                        8 => d
                            .cast::<u64>()
                            .write_unaligned(p.cast::<u64>().read_unaligned()),
                        4 => d
                            .cast::<u32>()
                            .write_unaligned(p.cast::<u32>().read_unaligned()),
                        _ => core::ptr::copy_nonoverlapping(p, d, s as usize),
                    }
                }
            }
            ParamSource::Buffer(b, n) => core::ptr::copy_nonoverlapping(b, dst, n),
            ParamSource::None => {}
        }
        out.set_len(start + total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> LaunchHead {
        LaunchHead {
            func: 0x7f00_1234_5670,
            grid: [3, 2, 1],
            block: [128, 1, 1],
            shared_mem: 4096,
            stream: 0x5555_0000,
            cluster: [2, 1, 1],
        }
    }

    /// What `gputape_shimlog::encode_launch` writes for the same launch: the reference.
    fn reference(layout: Option<&[(u32, u32)]>, params: &[u8]) -> Vec<u8> {
        let mut out = vec![9u8; 3];
        gputape_shimlog::encode_launch(
            &mut out,
            (77, 5, 0, 3),
            &head(),
            layout,
            params.len(),
            |b| b.copy_from_slice(params),
        );
        out
    }

    fn ours(plan: &Plan, src: &ParamSource) -> Vec<u8> {
        let mut out = vec![9u8; 3];
        // SAFETY: the sources below point at live bytes their plans size.
        unsafe { encode(&mut out, (77, 5, 0, 3), &head(), plan, src) };
        out
    }

    #[test]
    fn a_launch_record_is_the_one_the_log_crate_writes() {
        // (offset, size) with padding after the 4-byte one, and a 24-byte struct.
        let layout = vec![(0u32, 8u32), (8, 4), (16, 24), (40, 2)];
        let (a, b, c, d) = (
            0x1122_3344_5566_7788u64,
            0xaabb_ccddu32,
            [7u8; 24],
            [1u8, 2],
        );
        let mut ptrs: Vec<*mut c_void> = vec![
            (&raw const a).cast_mut().cast(),
            (&raw const b).cast_mut().cast(),
            c.as_ptr().cast_mut().cast(),
            d.as_ptr().cast_mut().cast(),
        ];
        let mut bytes = vec![0u8; 42];
        bytes[..8].copy_from_slice(&a.to_le_bytes());
        bytes[8..12].copy_from_slice(&b.to_le_bytes());
        bytes[16..40].copy_from_slice(&c);
        bytes[40..42].copy_from_slice(&d);
        let plan = Plan::new(1, Some(layout.clone()));
        assert!(!plan.dense);
        let src = ParamSource::Pointers(ptrs.as_mut_ptr());
        assert_eq!(ours(&plan, &src), reference(Some(&layout), &bytes));

        // A null parameter pointer leaves its bytes zero, as the reference's zeroed buffer.
        ptrs[2] = core::ptr::null_mut();
        bytes[16..40].fill(0);
        let src = ParamSource::Pointers(ptrs.as_mut_ptr());
        assert_eq!(ours(&plan, &src), reference(Some(&layout), &bytes));

        // Dense: nothing to zero.
        let dense = vec![(0u32, 8u32), (8, 4), (12, 4)];
        let (x, y, z) = (5u64, 6u32, 7u32);
        let mut ptrs: Vec<*mut c_void> = vec![
            (&raw const x).cast_mut().cast(),
            (&raw const y).cast_mut().cast(),
            (&raw const z).cast_mut().cast(),
        ];
        let plan = Plan::new(2, Some(dense.clone()));
        assert!(plan.dense);
        let mut bytes = 5u64.to_le_bytes().to_vec();
        bytes.extend(6u32.to_le_bytes());
        bytes.extend(7u32.to_le_bytes());
        let src = ParamSource::Pointers(ptrs.as_mut_ptr());
        assert_eq!(ours(&plan, &src), reference(Some(&dense), &bytes));

        // `extra`'s buffer, and no layout known.
        let buf = [3u8; 448];
        let plan = Plan::new(3, None);
        let src = ParamSource::Buffer(buf.as_ptr(), buf.len());
        assert_eq!(ours(&plan, &src), reference(None, &buf));
        assert_eq!(ours(&plan, &ParamSource::None), reference(None, &[]));
    }

    #[test]
    fn a_plan_knows_its_span_and_its_padding() {
        let p = Plan::new(1, Some(vec![(8, 8), (0, 8)]));
        assert_eq!((p.span, p.dense, p.count()), (16, true, 2));
        let p = Plan::new(1, Some(vec![(0, 4), (8, 8)]));
        assert_eq!((p.span, p.dense), (16, false));
        let p = Plan::new(1, Some(vec![]));
        assert_eq!((p.span, p.dense, p.count()), (0, true, 0));
        assert_eq!(Plan::new(1, None).count(), u32::MAX);
    }

    #[test]
    fn slots_spread_handles_that_differ_only_in_their_low_bits() {
        let slots: std::collections::HashSet<usize> = (0..256u64)
            .map(|i| slot_of(0x7f3a_0000_0000 + i * 0x40))
            .collect();
        assert!(slots.len() > 200, "{} slots for 256 handles", slots.len());
        assert!(slots.iter().all(|&s| s < SLOTS));
    }
}
