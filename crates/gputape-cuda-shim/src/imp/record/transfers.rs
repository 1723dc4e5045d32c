//! The plain copies (host to device, device to host, device to device), stream writes of a
//! value and memsets, with the streams they run on as logged. The other shapes of copy are in
//! `imp/copies.rs`, which takes its streams from here.

use core::ffi::c_void;

use gputape_shimlog::{On, Rec};

use super::{R, real_at, with_pending};
use crate::imp::flight::{self, Blocked};
use crate::imp::table::per_thread;
use crate::imp::{log, managed};

/// `CU_STREAM_PER_THREAD`: what a stream of 0 through a `_ptsz`/`_ptds` entry point is logged
/// as, so the converter tells the calling thread's per-thread default stream from the legacy
/// stream (the driver takes either spelling as the same stream).
const PER_THREAD_STREAM: u64 = 2;

/// Where a blocking copy or memset of entry point `I` runs, the host waiting: the legacy
/// stream, or through a `_ptds` form the calling thread's per-thread default stream.
pub(in crate::imp) const fn blocking<const I: usize>() -> On {
    On {
        stream: if per_thread(I) { PER_THREAD_STREAM } else { 0 },
        sync: true,
    }
}

/// The stream a call of entry point `I` names by `s`, as logged: 0 through a `_ptsz`/`_ptds`
/// form is the calling thread's per-thread default stream. What the driver gets is unchanged.
#[inline]
pub(in crate::imp) fn stream_of<const I: usize>(s: u64) -> u64 {
    if s == 0 && const { per_thread(I) } {
        PER_THREAD_STREAM
    } else {
        s
    }
}

/// Where an asynchronous copy or memset of entry point `I` on stream `s` runs.
pub(in crate::imp) fn async_on<const I: usize>(s: u64) -> On {
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

pub(super) unsafe extern "C" fn h2d<const I: usize>(dst: u64, src: *const c_void, n: usize) -> R {
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

pub(super) unsafe extern "C" fn h2d_async<const I: usize>(
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

pub(super) unsafe extern "C" fn d2h<const I: usize>(dst: *mut c_void, src: u64, n: usize) -> R {
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

pub(super) unsafe extern "C" fn d2h_async<const I: usize>(
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

pub(super) unsafe extern "C" fn d2d<const I: usize>(dst: u64, src: u64, n: usize) -> R {
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

pub(super) unsafe extern "C" fn d2d_async<const I: usize>(
    dst: u64,
    src: u64,
    n: usize,
    stream: u64,
) -> R {
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
pub(super) unsafe extern "C" fn write_value32<const I: usize>(
    s: u64,
    addr: u64,
    v: u32,
    flags: u32,
) -> R {
    managed::before_work(Some(stream_of::<I>(s)));
    // SAFETY: entry point I is a cuStreamWriteValue32 form: (CUstream, CUdeviceptr, cuuint32_t,
    // unsigned).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(u64, u64, u32, u32) -> R>(I)(s, addr, v, flags) };
    log_write_value::<I>(r, s, addr, &v.to_le_bytes());
    r
}

/// `cuStreamWriteValue64` (and its `_v2`, `_ptsz` forms): `cuStreamWriteValue32`'s, 8 bytes.
pub(super) unsafe extern "C" fn write_value64<const I: usize>(
    s: u64,
    addr: u64,
    v: u64,
    flags: u32,
) -> R {
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
    log::write(r, Rec::ValueWrite { dst, on, data });
}

/// `cuStreamWaitValue32` (and its `_v2`, `_ptsz` forms): (CUstream, CUdeviceptr, cuuint32_t,
/// unsigned flags).
pub(super) unsafe extern "C" fn wait_value32<const I: usize>(
    s: u64,
    addr: u64,
    v: u32,
    flags: u32,
) -> R {
    managed::before_work(Some(stream_of::<I>(s)));
    // SAFETY: entry point I is a cuStreamWaitValue32 form: (CUstream, CUdeviceptr, cuuint32_t,
    // unsigned).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(u64, u64, u32, u32) -> R>(I)(s, addr, v, flags) };
    log_wait_value::<I>(r, s, addr, u64::from(v), flags, false);
    r
}

/// `cuStreamWaitValue64` (and its `_v2`, `_ptsz` forms): `cuStreamWaitValue32`'s, 8 bytes.
pub(super) unsafe extern "C" fn wait_value64<const I: usize>(
    s: u64,
    addr: u64,
    v: u64,
    flags: u32,
) -> R {
    managed::before_work(Some(stream_of::<I>(s)));
    // SAFETY: entry point I is a cuStreamWaitValue64 form: (CUstream, CUdeviceptr, cuuint64_t,
    // unsigned).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(u64, u64, u64, u32) -> R>(I)(s, addr, v, flags) };
    log_wait_value::<I>(r, s, addr, v, flags, true);
    r
}

fn log_wait_value<const I: usize>(r: R, s: u64, addr: u64, value: u64, flags: u32, wide: bool) {
    let stream = stream_of::<I>(s);
    let rec = Rec::ValueWait {
        stream,
        addr,
        value,
        flags,
        wide,
    };
    log::write(r, rec);
}

/// The bytes of one `CUstreamBatchMemOpParams` (a union of 48).
const MEM_OP_BYTES: usize = 48;
/// The most operations one batch may hold (the driver refuses 256 or more).
const MEM_OPS_MAX: u32 = 256;

/// `cuStreamBatchMemOp` (and its `_v2`, `_ptsz` forms): (CUstream, unsigned count,
/// CUstreamBatchMemOpParams*, unsigned flags). Each value written or waited for is logged as
/// its own `cuStreamWriteValue*`/`cuStreamWaitValue*` would be, in the batch's order (the
/// driver queues them so); barriers and flushes only order memory, which a replay's plain
/// uploads already are. An operation of another kind (an atomic reduction) is kept by name.
pub(super) unsafe extern "C" fn batch_mem_op<const I: usize>(
    s: u64,
    count: u32,
    params: *const u8,
    flags: u32,
) -> R {
    managed::before_work(Some(stream_of::<I>(s)));
    // SAFETY: entry point I is a cuStreamBatchMemOp form: (CUstream, unsigned,
    // CUstreamBatchMemOpParams*, unsigned).
    let r = unsafe {
        real_at::<unsafe extern "C" fn(u64, u32, *const u8, u32) -> R>(I)(s, count, params, flags)
    };
    let by_name = || {
        log::write(
            r,
            Rec::Opaque {
                name: b"cuStreamBatchMemOp",
            },
        )
    };
    // A batch the driver refused may point anywhere: only its name is logged.
    if r != 0 || params.is_null() || count >= MEM_OPS_MAX {
        by_name();
        return r;
    }
    // Nothing to read the operations for while nothing is logged.
    if !log::active() {
        return r;
    }
    for i in 0..count as usize {
        let mut op = [0u8; MEM_OP_BYTES];
        // SAFETY: the driver accepted the batch, so `params` holds `count` parameter unions of
        // MEM_OP_BYTES each; the copy reads the i-th, unaligned-safe.
        unsafe {
            std::ptr::copy_nonoverlapping(
                params.add(i * MEM_OP_BYTES),
                op.as_mut_ptr(),
                MEM_OP_BYTES,
            )
        };
        let word = |at: usize| u64::from_le_bytes(op[at..at + 8].try_into().unwrap_or_default());
        let kind = u32::from_le_bytes([op[0], op[1], op[2], op[3]]);
        let (addr, value, op_flags) = (word(8), word(16), word(24) as u32);
        match kind {
            // CU_STREAM_MEM_OP_WAIT_VALUE_32, _64
            1 => log_wait_value::<I>(r, s, addr, value & 0xffff_ffff, op_flags, false),
            4 => log_wait_value::<I>(r, s, addr, value, op_flags, true),
            // CU_STREAM_MEM_OP_WRITE_VALUE_32, _64
            2 => log_write_value::<I>(r, s, addr, &(value as u32).to_le_bytes()),
            5 => log_write_value::<I>(r, s, addr, &value.to_le_bytes()),
            // CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES, _BARRIER
            3 | 6 => {}
            _ => {
                by_name();
            }
        }
    }
    r
}

/// A memset of `ELEM`-byte elements. The value is declared `u32` whatever the element: the C
/// `unsigned char`/`unsigned short` arrives in the same register, its upper bits unspecified,
/// and is masked here; the driver gets the register as the caller left it.
pub(super) unsafe extern "C" fn memset<const I: usize, const ELEM: u8>(
    dst: u64,
    value: u32,
    n: usize,
) -> R {
    managed::before_work(None);
    // SAFETY: entry point I is cuMemsetD8/D16/D32(_v2[_ptds]): (CUdeviceptr, value, size_t).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u32, usize) -> R>(I)(dst, value, n) };
    let on = blocking::<I>();
    log::write(r, memset_rec::<ELEM>(dst, value, n, on));
    r
}

pub(super) unsafe extern "C" fn memset_async<const I: usize, const ELEM: u8>(
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
