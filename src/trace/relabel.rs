//! Every blob id a frame carries, to be renamed in place.
//!
//! A flight recorder names the bytes it keeps by a quick provisional id (`BlobId::quick`),
//! since a cryptographic hash of every step's readback on the engine's thread cost a short
//! step more than its whole budget; a dump renames them to the ids a trace is checked by.
//! Both matches are exhaustive: a new frame or call that carries a blob is a compile error
//! here until it is listed.

use super::call::*;
use super::frame::Frame;

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
        Frame::Begin(b) => {
            if let Some(d) = call_blob_mut(&mut b.call) {
                f(d);
            }
        }
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
        | Frame::KernelCluster { .. } => {}
    }
}

/// The blob a call uploads, if it uploads one.
pub fn call_blob_mut(call: &mut Call) -> Option<&mut BlobId> {
    match call {
        Call::CopyH2D { data, .. }
        | Call::CopyH2DAsync { data, .. }
        | Call::CopyH2DAsyncRetained { data, .. } => Some(data),
        Call::Alloc { .. }
        | Call::AllocManaged { .. }
        | Call::Free { .. }
        | Call::CopyD2H { .. }
        | Call::CopyD2D { .. }
        | Call::Launch { .. }
        | Call::LaunchTyped { .. }
        | Call::Synchronize { .. }
        | Call::DefaultStream
        | Call::Kernel { .. }
        | Call::OpCache
        | Call::Memset { .. }
        | Call::MemsetAsync { .. }
        | Call::TotalMemory
        | Call::FreeMemory
        | Call::SmCount
        | Call::SweepUnreleased
        | Call::LiveBytes
        | Call::AllocReport { .. }
        | Call::CopyD2HOnStream { .. }
        | Call::StreamIsCapturing { .. }
        | Call::ScanRedzones
        | Call::PoisonRedzones { .. }
        | Call::DebugSyncKernels
        | Call::KernelRegistry
        | Call::CopyD2HAsync { .. }
        | Call::CopyD2DAsync { .. }
        | Call::CopyD2D2DAsync { .. }
        | Call::BeginCapture { .. }
        | Call::EndCapture { .. }
        | Call::LaunchGraph { .. }
        | Call::DestroyGraph { .. }
        | Call::AbortCaptureIfActive { .. }
        | Call::DeviceFreeMemory
        | Call::LiveAllocCount
        | Call::CreateStream
        | Call::BindToThread
        | Call::CreateEvent
        | Call::RecordEvent { .. }
        | Call::StreamWaitEvent { .. }
        | Call::EventSynchronize { .. }
        | Call::DestroyEvent { .. }
        | Call::HostPtrToDevice { .. }
        | Call::AllocHostPinned { .. }
        | Call::FreeHostPinned { .. }
        | Call::RedzoneHits
        | Call::StepBoundary { .. }
        | Call::EncodeTensorMap { .. }
        | Call::CommUniqueId
        | Call::CommInit { .. }
        | Call::Collective { .. }
        | Call::CommDestroy { .. }
        | Call::Opaque { .. }
        | Call::CommGroupStart
        | Call::CommGroupEnd => None,
    }
}
