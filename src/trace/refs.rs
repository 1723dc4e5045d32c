//! What a call names: its buffers, streams, events, graphs, pinned regions and blobs.
//!
//! One exhaustive match, so a new `Call` variant is a compile error here until someone says
//! what it refers to: `minimize` and `trim` keep a call only with everything it names.

use super::call::*;

/// The ids one call refers to (arguments and return value).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refs {
    /// Buffers an address argument lies in, live or freed (or, for a wild address, the
    /// nearest below it).
    pub bufs: Vec<BufferId>,
    /// Streams, the legacy one left out.
    pub streams: Vec<StreamId>,
    /// Events.
    pub events: Vec<EventId>,
    /// Graphs.
    pub graphs: Vec<GraphId>,
    /// Pinned host regions.
    pub hosts: Vec<HostId>,
    /// Blobs: the bytes a copy uploads.
    pub blobs: Vec<BlobId>,
}

impl Refs {
    fn dev(&mut self, a: &DevAddr) {
        match a {
            DevAddr::Buf { buf, .. } | DevAddr::Freed { buf, .. } => self.bufs.push(*buf),
            DevAddr::Unknown {
                near: Some((buf, _)),
            } => self.bufs.push(*buf),
            DevAddr::Unknown { near: None } | DevAddr::Null => {}
        }
    }

    fn stream(&mut self, s: &StreamRef) {
        if let StreamRef::Id(id) = s {
            self.streams.push(*id);
        }
    }

    fn host(&mut self, h: &HostAddr) {
        if let HostAddr::Pinned { host, .. } = h {
            self.hosts.push(*host);
        }
    }
}

/// The ids `call` takes as arguments. What it creates (its return value) is not among them.
pub fn refs(call: &Call) -> Refs {
    let mut r = Refs::default();
    match call {
        Call::Free { ptr } => r.dev(ptr),
        Call::CopyH2D { dst, data, .. } => {
            r.dev(dst);
            r.blobs.push(*data);
        }
        Call::CopyD2H { src, .. } => r.dev(src),
        Call::CopyD2D { src, dst, .. } => {
            r.dev(src);
            r.dev(dst);
        }
        Call::Launch { stream, args, .. } | Call::LaunchTyped { stream, args, .. } => {
            r.stream(stream);
            for d in args.iter().filter_map(Arg::device_addr) {
                r.dev(d);
            }
        }
        Call::Synchronize { stream }
        | Call::StreamIsCapturing { stream }
        | Call::BeginCapture { stream }
        | Call::EndCapture { stream }
        | Call::AbortCaptureIfActive { stream } => r.stream(stream),
        Call::Memset { dst, .. } => r.dev(dst),
        Call::MemsetAsync { dst, stream, .. } => {
            r.dev(dst);
            r.stream(stream);
        }
        Call::CopyD2HOnStream { src, stream, .. } => {
            r.dev(src);
            r.stream(stream);
        }
        Call::CopyH2DAsync {
            dst, data, stream, ..
        } => {
            r.dev(dst);
            r.blobs.push(*data);
            r.stream(stream);
        }
        Call::CopyH2DAsyncRetained {
            dst,
            data,
            stream,
            src,
            ..
        } => {
            r.dev(dst);
            r.blobs.push(*data);
            r.stream(stream);
            r.host(src);
        }
        Call::CopyD2HAsync {
            src, stream, dst, ..
        } => {
            r.dev(src);
            r.stream(stream);
            r.host(dst);
        }
        Call::CopyD2DAsync {
            src, dst, stream, ..
        }
        | Call::CopyD2D2DAsync {
            src, dst, stream, ..
        } => {
            r.dev(src);
            r.dev(dst);
            r.stream(stream);
        }
        Call::LaunchGraph { graph, stream } => {
            r.graphs.push(*graph);
            r.stream(stream);
        }
        Call::DestroyGraph { graph } => r.graphs.push(*graph),
        Call::RecordEvent { event, stream } | Call::StreamWaitEvent { stream, event } => {
            r.events.push(*event);
            r.stream(stream);
        }
        Call::EventSynchronize { event } | Call::DestroyEvent { event } => r.events.push(*event),
        Call::HostPtrToDevice { host } | Call::FreeHostPinned { host, .. } => r.host(host),
        Call::Alloc { .. }
        | Call::AllocManaged { .. }
        | Call::DefaultStream
        | Call::Kernel { .. }
        | Call::OpCache
        | Call::TotalMemory
        | Call::FreeMemory
        | Call::SmCount
        | Call::SweepUnreleased
        | Call::LiveBytes
        | Call::AllocReport { .. }
        | Call::ScanRedzones
        | Call::PoisonRedzones { .. }
        | Call::DebugSyncKernels
        | Call::KernelRegistry
        | Call::DeviceFreeMemory
        | Call::LiveAllocCount
        | Call::CreateStream
        | Call::BindToThread
        | Call::CreateEvent
        | Call::AllocHostPinned { .. }
        | Call::RedzoneHits
        | Call::StepBoundary { .. } => {}
        Call::EncodeTensorMap { base, .. } => r.dev(base),
        Call::Collective {
            send, recv, stream, ..
        } => {
            r.dev(send);
            r.dev(recv);
            r.stream(stream);
        }
        Call::CommUniqueId
        | Call::CommInit { .. }
        | Call::CommDestroy { .. }
        | Call::CommGroupStart
        | Call::CommGroupEnd
        | Call::Opaque { .. } => {}
    }
    r
}

/// The buffers `call` may write: copy and memset destinations, and every buffer a launch takes
/// (a kernel may write any pointer it is given unless its layout says otherwise, which the
/// recorder checks where it knows the layout).
pub fn written_by(call: &Call) -> Vec<BufferId> {
    let mut r = Refs::default();
    match call {
        Call::CopyH2D { dst, .. }
        | Call::CopyD2D { dst, .. }
        | Call::Memset { dst, .. }
        | Call::MemsetAsync { dst, .. }
        | Call::CopyH2DAsync { dst, .. }
        | Call::CopyH2DAsyncRetained { dst, .. }
        | Call::CopyD2DAsync { dst, .. }
        | Call::CopyD2D2DAsync { dst, .. } => r.dev(dst),
        Call::Launch { args, .. } | Call::LaunchTyped { args, .. } => {
            // A tensor map's buffer too: TMA both loads and stores.
            for d in args.iter().filter_map(Arg::device_addr) {
                r.dev(d);
            }
        }
        Call::Collective { recv, op, .. } => {
            if !matches!(op, crate::backend::Collective::Send { .. }) {
                r.dev(recv);
            }
        }
        Call::CommUniqueId
        | Call::CommInit { .. }
        | Call::CommDestroy { .. }
        | Call::CommGroupStart
        | Call::CommGroupEnd
        | Call::Opaque { .. } => {}
        Call::Alloc { .. }
        | Call::AllocManaged { .. }
        | Call::Free { .. }
        | Call::CopyD2H { .. }
        | Call::Synchronize { .. }
        | Call::DefaultStream
        | Call::Kernel { .. }
        | Call::OpCache
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
        | Call::EncodeTensorMap { .. } => {}
    }
    r.bufs
}
