//! Every blob id a frame carries, to be renamed in place.
//!
//! A flight recorder names the bytes it keeps by a quick provisional id (`BlobId::quick`),
//! since a cryptographic hash of every step's readback on the engine's thread cost a short
//! step more than its whole budget; a dump renames them to the ids a trace is checked by.
//! The match over frames is exhaustive, so a new frame that carries a blob is a compile error
//! here until it is listed; a call's blobs are its `Call::operands_mut`.

use super::call::*;
use super::frame::Frame;
use super::operands::OperandMut;

/// `f` on each blob id `frame` names (a `Blob` or `Chunked` frame's own id included).
pub fn each_blob_mut(frame: &mut Frame, f: &mut dyn FnMut(&mut BlobId)) {
    match frame {
        Frame::Blob { id, .. } | Frame::Stored { id, .. } => f(id),
        Frame::Initial { data, .. } | Frame::D2HResult { data, .. } => f(data),
        Frame::ModuleImage { image, .. } => f(image),
        Frame::Restart(r) => r.initial.iter_mut().for_each(|i| f(&mut i.data)),
        Frame::SyncHashes { hashes, .. } => hashes.iter_mut().for_each(|(_, h)| f(h)),
        Frame::Chunked { id, parts, .. } => {
            f(id);
            parts.iter_mut().for_each(&mut *f);
        }
        Frame::Begin(b) => b.call.operands_mut(&mut |o| {
            if let OperandMut::Blob(d) = o {
                f(d);
            }
        }),
        Frame::End(e) => {
            if let Ok(Value::Bytes(d)) = &mut e.ret {
                f(d);
            }
        }
        Frame::Header(_)
        | Frame::Site { .. }
        | Frame::Module(_)
        | Frame::Kernel { .. }
        | Frame::Adopt(_)
        | Frame::Finding(_)
        | Frame::Stop
        | Frame::Address { .. }
        | Frame::Provenance(_)
        | Frame::BlobStore { .. }
        | Frame::Dumped(_)
        | Frame::KernelElems { .. }
        | Frame::Clock { .. }
        | Frame::Stack { .. }
        | Frame::Global { .. }
        | Frame::KernelCluster { .. }
        | Frame::KernelCooperative { .. }
        | Frame::Shared { .. } => {}
    }
}
