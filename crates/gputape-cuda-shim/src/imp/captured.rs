//! Which graph node each captured call became. A program may give new parameters to a captured
//! graph's nodes later (`cuGraphExecKernelNodeSetParams` on a node `cuGraphGetNodes` listed,
//! or `cuGraphKernelNodeSetParams` before an update): to follow that, the log must say which
//! node each captured call is. After a call that queues work on a stream while a capture is
//! open, the stream's capture dependencies (`cuStreamGetCaptureInfo_v3`) are exactly the node
//! the call just added; it is logged (`CapturedNode`) after the call's own record. One more
//! driver call per captured call, and none outside a capture.

use core::ffi::c_void;

use gputape_shimlog::Rec;

use super::log;
use super::record::{R, real_at};
use super::table::entry;

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

/// After a call that queued work on `stream` (as logged) and returned `r`: while a capture is
/// open, logs the node the call became when the stream is capturing.
pub(super) fn after_work(r: R, stream: u64) {
    // The legacy stream never captures (and is not to be asked while another stream does).
    if r != 0 || stream <= 1 || !super::managed::capture_open() || !log::active() {
        return;
    }
    let (mut status, mut id, mut graph, mut n) = (0u32, 0u64, 0u64, 0usize);
    let mut deps: *const u64 = core::ptr::null();
    let mut edges: *const c_void = core::ptr::null();
    // SAFETY: entry point `cuStreamGetCaptureInfo_v3`'s signature is `CaptureInfo` (a driver
    // without it has a stub there, which fails); every out-pointer is a local of the type the
    // driver writes; `stream` is the program's stream handle, valid for the call just made on it.
    let r = unsafe {
        real_at::<CaptureInfo>(entry("cuStreamGetCaptureInfo_v3"))(
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
