//! Streams and events made and destroyed, event records and waits, and the host syncs: a
//! successful sync is where the async device-to-host copies it completed are read (`settle`).
//! Host functions queued on a stream are here too: to the stream they are an ordering point.

use core::ffi::{c_int, c_void};

use gputape_shimlog::Rec;

use super::memory::read_out;
use super::{Done, R, real_at, same_stream, settle, stream_of, with_pending};
use crate::imp::flight::{self, Blocked};
use crate::imp::{log, managed};

pub(super) unsafe extern "C" fn stream_create<const I: usize>(s: *mut u64, flags: u32) -> R {
    // SAFETY: entry point I is cuStreamCreate: (CUstream*, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u32) -> R>(I)(s, flags) };
    let stream = if r == 0 { read_out(s) } else { 0 };
    log::write(r, Rec::StreamCreate { stream, flags });
    r
}

pub(super) unsafe extern "C" fn stream_create_prio<const I: usize>(
    s: *mut u64,
    flags: u32,
    prio: c_int,
) -> R {
    // SAFETY: entry point I is cuStreamCreateWithPriority: (CUstream*, unsigned, int).
    let r =
        unsafe { real_at::<unsafe extern "C" fn(*mut u64, u32, c_int) -> R>(I)(s, flags, prio) };
    let stream = if r == 0 { read_out(s) } else { 0 };
    log::write(r, Rec::StreamCreate { stream, flags });
    r
}

pub(super) unsafe extern "C" fn stream_destroy<const I: usize>(s: u64) -> R {
    // SAFETY: entry point I is cuStreamDestroy(_v2): (CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(s) };
    log::write(r, Rec::StreamDestroy { stream: s });
    r
}

pub(super) unsafe extern "C" fn event_create<const I: usize>(e: *mut u64, flags: u32) -> R {
    // SAFETY: entry point I is cuEventCreate: (CUevent*, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u32) -> R>(I)(e, flags) };
    let event = if r == 0 { read_out(e) } else { 0 };
    log::write(r, Rec::EventCreate { event, flags });
    r
}

pub(super) unsafe extern "C" fn event_destroy<const I: usize>(e: u64) -> R {
    // SAFETY: entry point I is cuEventDestroy(_v2): (CUevent).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(e) };
    log::write(r, Rec::EventDestroy { event: e });
    with_pending(|p| p.events.remove(&e));
    r
}

fn log_event_record(r: R, event: u64, stream: u64) {
    if let Some(i) = log::write(r, Rec::EventRecord { event, stream })
        && r == 0
    {
        with_pending(|p| p.events.insert(event, (stream, i)));
    }
}

pub(super) unsafe extern "C" fn event_record<const I: usize>(e: u64, s: u64) -> R {
    // SAFETY: entry point I is cuEventRecord(_ptsz): (CUevent, CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64) -> R>(I)(e, s) };
    log_event_record(r, e, stream_of::<I>(s));
    r
}

pub(super) unsafe extern "C" fn event_record_flags<const I: usize>(
    e: u64,
    s: u64,
    flags: u32,
) -> R {
    // SAFETY: entry point I is cuEventRecordWithFlags(_ptsz): (CUevent, CUstream, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64, u32) -> R>(I)(e, s, flags) };
    log_event_record(r, e, stream_of::<I>(s));
    r
}

pub(super) unsafe extern "C" fn stream_wait_event<const I: usize>(s: u64, e: u64, flags: u32) -> R {
    // SAFETY: entry point I is cuStreamWaitEvent(_ptsz): (CUstream, CUevent, unsigned).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64, u32) -> R>(I)(s, e, flags) };
    log::write(
        r,
        Rec::StreamWaitEvent {
            stream: stream_of::<I>(s),
            event: e,
        },
    );
    r
}

/// What an event's completion completes: copies on its stream logged before its record.
fn event_done(e: u64) -> Option<Done> {
    with_pending(|p| p.events.get(&e).copied())
        .map(|(stream, before)| Done::Before { stream, before })
}

pub(super) unsafe extern "C" fn event_sync<const I: usize>(e: u64) -> R {
    let _w = flight::waiting(Blocked::Event(e));
    // SAFETY: entry point I is cuEventSynchronize: (CUevent).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(e) };
    drop(_w);
    log::write(r, Rec::EventSync { event: e });
    if r == 0
        && let Some(d) = event_done(e)
    {
        settle(d);
    }
    log::flush();
    r
}

pub(super) unsafe extern "C" fn event_query<const I: usize>(e: u64) -> R {
    // SAFETY: entry point I is cuEventQuery: (CUevent).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(e) };
    // A query that finds the event done is a sync the program may rely on; one that finds
    // it pending (or fails) changes nothing and is not logged.
    if r == 0
        && let Some(d) = event_done(e)
    {
        log::write(r, Rec::EventSync { event: e });
        settle(d);
    }
    r
}

pub(super) unsafe extern "C" fn stream_sync<const I: usize>(s: u64) -> R {
    let _w = flight::waiting(Blocked::Stream(stream_of::<I>(s)));
    let queued = managed::before_sync();
    // SAFETY: entry point I is cuStreamSynchronize(_ptsz): (CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(s) };
    drop(_w);
    let s = stream_of::<I>(s);
    log::write(r, Rec::StreamSync { stream: s });
    if s <= 1 {
        managed::after_sync(r, queued, true);
    }
    if r == 0 {
        settle(Done::Stream(s));
    }
    log::flush();
    r
}

pub(super) unsafe extern "C" fn stream_query<const I: usize>(s: u64) -> R {
    // SAFETY: entry point I is cuStreamQuery(_ptsz): (CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(s) };
    let s = stream_of::<I>(s);
    let pending = r == 0 && with_pending(|p| p.copies.iter().any(|c| same_stream(c.3, s)));
    if pending {
        log::write(r, Rec::StreamSync { stream: s });
        settle(Done::Stream(s));
    }
    r
}

pub(super) unsafe extern "C" fn ctx_sync<const I: usize>() -> R {
    // SAFETY: entry point I is cuCtxSynchronize: ().
    ctx_sync_by(|| unsafe { real_at::<unsafe extern "C" fn() -> R>(I)() })
}

/// `cuCtxSynchronize_v2` (CUDA 12.9's, naming the context; the CUDA 13 runtime's
/// `cudaDeviceSynchronize` calls it): the same sync, recorded the same way.
pub(super) unsafe extern "C" fn ctx_sync_v2<const I: usize>(ctx: u64) -> R {
    // SAFETY: entry point I is cuCtxSynchronize_v2: (CUcontext).
    ctx_sync_by(|| unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(ctx) })
}

/// A context sync made by `sync` (either entry point): said to the flight recorder while it
/// waits, managed memory compared around it, and what it completed read once it returned.
fn ctx_sync_by(sync: impl FnOnce() -> R) -> R {
    let w = flight::waiting(Blocked::Ctx);
    let queued = managed::before_sync();
    let r = sync();
    drop(w);
    log::write(r, Rec::CtxSync {});
    managed::after_sync(r, queued, false);
    if r == 0 {
        settle(Done::All);
    }
    log::flush();
    r
}

/// `cuLaunchHostFunc(_ptsz)`: (CUstream, CUhostFn, void *userData). The function is the
/// program's own; what is logged is the stream and the function's name.
pub(super) unsafe extern "C" fn host_func<const I: usize>(
    s: u64,
    f: usize,
    data: *mut c_void,
) -> R {
    // SAFETY: entry point I is cuLaunchHostFunc(_ptsz): (CUstream, CUhostFn, void*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, usize, *mut c_void) -> R>(I)(s, f, data) };
    log_host_func::<I>(r, s, f);
    r
}

/// `cuLaunchHostFunc_v2(_ptsz)` and `cuStreamAddCallback(_ptsz)`: the same with a trailing
/// `unsigned` (the sync mode, or the callback's reserved flags), passed on as given.
pub(super) unsafe extern "C" fn host_func_flags<const I: usize>(
    s: u64,
    f: usize,
    data: *mut c_void,
    flags: u32,
) -> R {
    type F = unsafe extern "C" fn(u64, usize, *mut c_void, u32) -> R;
    // SAFETY: entry point I is cuLaunchHostFunc_v2 or cuStreamAddCallback (either `_ptsz`):
    // (CUstream, function pointer, void*, unsigned), which F is.
    let r = unsafe { real_at::<F>(I)(s, f, data, flags) };
    log_host_func::<I>(r, s, f);
    r
}

fn log_host_func<const I: usize>(r: R, s: u64, f: usize) {
    let func = function_name(f);
    let stream = stream_of::<I>(s);
    log::write(
        r,
        Rec::HostFunc {
            stream,
            func: &func,
        },
    );
}

/// How the log names host function `f`: its symbol where the loader knows one that starts at
/// it, else its module's path and the offset in it (a `static` function exports none; the
/// conversion looks it up in the file's own symbol table). Looked up once per function: a
/// program queues the same few again and again.
pub(in crate::imp) fn function_name(f: usize) -> Vec<u8> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashMap<usize, Vec<u8>>>> = OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    if let Some(n) = names.lock().ok().and_then(|m| m.get(&f).cloned()) {
        return n;
    }
    // `name` names a return address by the byte before it: one past `f` names `f` itself.
    let n = crate::imp::native::name(f.wrapping_add(1));
    let name = if !n.symbol.is_empty() && n.symbol_offset == 0 {
        n.symbol
    } else {
        let mut v = n.module;
        v.extend_from_slice(format!("+{:#x}", n.offset).as_bytes());
        v
    };
    if let Ok(mut m) = names.lock() {
        m.insert(f, name.clone());
    }
    name
}
