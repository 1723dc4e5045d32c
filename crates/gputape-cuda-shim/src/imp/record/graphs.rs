//! Stream capture and the graphs it makes: captures begun and ended, instantiated, launched
//! and destroyed. Nodes added by hand are `nodes.rs`'s.

use gputape_shimlog::Rec;

use super::{R, real_at, stream_of};
use crate::imp::{log, managed};

/// `cuStreamBeginCapture_v2` (`V2`: with a `CUstreamCaptureMode`) and CUDA 10.0's
/// `cuStreamBeginCapture(CUstream)`, which captures in global mode (0). Both pass two
/// arguments on: the old form ignores the second (SysV x86-64: registers, caller cleans up),
/// and a `_v2` reached under the old name still gets its mode.
pub(super) unsafe extern "C" fn begin_capture<const I: usize, const V2: bool>(
    s: u64,
    mode: u32,
) -> R {
    // SAFETY: entry point I is a cuStreamBeginCapture form: (CUstream[, CUstreamCaptureMode]),
    // integer-class arguments passed on as they came.
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u32) -> R>(I)(s, mode) };
    if r == 0 {
        managed::capturing(true);
    }
    let mode = if V2 { mode } else { 0 };
    log::write(
        r,
        Rec::CaptureBegin {
            stream: stream_of::<I>(s),
            mode,
        },
    );
    r
}

/// `cuThreadExchangeStreamCaptureMode`: (CUstreamCaptureMode* mode), the mode asked for in,
/// the thread's previous one out.
pub(super) unsafe extern "C" fn exchange_capture_mode<const I: usize>(mode: *mut u32) -> R {
    // SAFETY: the program passes the mode it asks for through `mode` (null is the driver's
    // to refuse).
    let asked = (!mode.is_null()).then(|| unsafe { *mode });
    // SAFETY: entry point I is cuThreadExchangeStreamCaptureMode: (CUstreamCaptureMode*).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u32) -> R>(I)(mode) };
    if let (0, Some(mode)) = (r, asked) {
        log::write(r, Rec::CaptureMode { mode });
    }
    r
}

pub(super) unsafe extern "C" fn end_capture<const I: usize>(s: u64, graph: *mut u64) -> R {
    // SAFETY: entry point I is cuStreamEndCapture(_ptsz): (CUstream, CUgraph*).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, *mut u64) -> R>(I)(s, graph) };
    // The capture is over when it ended, or ended invalidated (901).
    if r == 0 || r == 901 {
        managed::capturing(false);
    }
    // SAFETY: on success the driver wrote the graph through the caller's pointer.
    let g = if r == 0 && !graph.is_null() {
        unsafe { *graph }
    } else {
        0
    };
    log::write(
        r,
        Rec::CaptureEnd {
            stream: stream_of::<I>(s),
            graph: g,
        },
    );
    r
}

/// Every `cuGraphInstantiate*`: each takes the executable graph's out-pointer and the graph
/// first, and the rest (flags, an error node and log buffer, or a parameter struct) differ.
/// The hook passes on five integer-class arguments whatever the form: the SysV x86-64 ABI puts
/// the first six in registers and the caller cleans up, so a form with fewer ignores the rest.
pub(super) unsafe extern "C" fn graph_instantiate<const I: usize>(
    exec: *mut u64,
    graph: u64,
    a: u64,
    b: u64,
    c: u64,
) -> R {
    // SAFETY: entry point I is one of the cuGraphInstantiate forms, whose arguments are all
    // integer-class and at most five (above); they are passed on as they came.
    let r = unsafe {
        real_at::<unsafe extern "C" fn(*mut u64, u64, u64, u64, u64) -> R>(I)(exec, graph, a, b, c)
    };
    if r == 0 && !exec.is_null() {
        // SAFETY: on success the driver wrote the executable graph through the pointer.
        let exec = unsafe { *exec };
        log::write(r, Rec::GraphInstantiate { exec, graph });
    }
    r
}

pub(super) unsafe extern "C" fn graph_launch<const I: usize>(exec: u64, s: u64) -> R {
    managed::before_work(Some(stream_of::<I>(s)));
    // SAFETY: entry point I is cuGraphLaunch(_ptsz): (CUgraphExec, CUstream).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64, u64) -> R>(I)(exec, s) };
    log::write(
        r,
        Rec::GraphLaunch {
            exec,
            stream: stream_of::<I>(s),
        },
    );
    r
}

/// `cuGraphUpload`: where a graph's resources are made changes nothing a replay does.
pub(super) unsafe extern "C" fn graph_upload<const I: usize>(exec: u64, s: u64) -> R {
    // SAFETY: entry point I is cuGraphUpload(_ptsz): (CUgraphExec, CUstream).
    unsafe { real_at::<unsafe extern "C" fn(u64, u64) -> R>(I)(exec, s) }
}

pub(super) unsafe extern "C" fn graph_exec_destroy<const I: usize>(exec: u64) -> R {
    // SAFETY: entry point I is cuGraphExecDestroy: (CUgraphExec).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(exec) };
    log::write(r, Rec::GraphExecDestroy { exec });
    r
}

pub(super) unsafe extern "C" fn graph_destroy<const I: usize>(graph: u64) -> R {
    // SAFETY: entry point I is cuGraphDestroy: (CUgraph).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(graph) };
    log::write(r, Rec::GraphDestroy { graph });
    r
}
