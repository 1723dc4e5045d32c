//! Which graph node each captured call became. A program may give new parameters to a captured
//! graph's nodes later (`cuGraphExecKernelNodeSetParams` on a node `cuGraphGetNodes` listed,
//! or `cuGraphKernelNodeSetParams` before an update): to follow that, the log must say which
//! node each captured call is. After a call that queues work on a stream while a capture is
//! open, the stream's capture dependencies (`cuStreamGetCaptureInfo_v3`) are exactly the node
//! the call just added; it is logged (`CapturedNode`) after the call's own record. One more
//! driver call per captured call, and none outside a capture.

use core::ffi::c_void;
use std::sync::OnceLock;

use gputape_shimlog::Rec;

use super::log;
use super::record::R;
use super::table::{index, real};

/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
const ACTIVE: u32 = 1;

/// `cuStreamGetCaptureInfo_v3`: (CUstream, CUstreamCaptureStatus*, cuuint64_t* id, CUgraph*,
/// const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count).
type CaptureInfo = unsafe extern "C" fn(
    u64,
    *mut u32,
    *mut u64,
    *mut u64,
    *mut *const u64,
    *mut *const c_void,
    *mut usize,
) -> R;

/// The driver's `cuStreamGetCaptureInfo_v3`, where it has one.
fn capture_info() -> Option<CaptureInfo> {
    static F: OnceLock<Option<usize>> = OnceLock::new();
    let i = (*F.get_or_init(|| index("cuStreamGetCaptureInfo_v3")))?;
    let p = real(i);
    // SAFETY: entry point `i` is cuStreamGetCaptureInfo_v3, whose signature `CaptureInfo` is;
    // a null pointer (the driver lacks it) is not turned into a function.
    (!p.is_null()).then(|| unsafe { core::mem::transmute::<*mut (), CaptureInfo>(p) })
}

/// After a call that queued work on `stream` (as logged) and returned `r`: while a capture is
/// open, logs the node the call became when the stream is capturing.
pub(super) fn after_work(r: R, stream: u64) {
    // The legacy stream never captures (and is not to be asked while another stream does).
    if r != 0 || stream <= 1 || !super::managed::capture_open() || !log::active() {
        return;
    }
    let Some(info) = capture_info() else {
        return;
    };
    let (mut status, mut id, mut graph, mut n) = (0u32, 0u64, 0u64, 0usize);
    let mut deps: *const u64 = core::ptr::null();
    let mut edges: *const c_void = core::ptr::null();
    // SAFETY: every out-pointer is a local of the type the driver writes; `stream` is the
    // program's stream handle, valid for the call just made on it.
    let r = unsafe {
        info(
            stream,
            &mut status,
            &mut id,
            &mut graph,
            &mut deps,
            &mut edges,
            &mut n,
        )
    };
    if r != 0 || status != ACTIVE || n != 1 || deps.is_null() {
        return;
    }
    // SAFETY: the driver wrote `deps` pointing at `n` (here 1) node handles, valid until the
    // stream's next capture call.
    let node = unsafe { *deps };
    log::write(0, Rec::CapturedNode { node });
}
