//! The trace's vocabulary: one `Call` variant per trait method, and the values they carry.
//!
//! Everything here holds ids, never raw pointers or handles, so that two recordings of the same
//! program produce the same bytes and a trace means the same thing on any machine.

use crate::backend::{CallKind, CaptureOp};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::fmt;

macro_rules! id_type {
    ($name:ident, $prefix:literal) => {
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        pub struct $name(pub u32);
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(BufferId, "buf");
id_type!(StreamId, "s");
id_type!(EventId, "ev");
id_type!(GraphId, "graph");
id_type!(KernelId, "k");
id_type!(HostId, "host");
id_type!(SiteId, "site");

/// A content hash (first 16 bytes of BLAKE3) naming a blob of bytes stored once per trace.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlobId(pub [u8; 16]);

/// The size of a chunked blob's parts (the last may be shorter). A buffer larger than this is
/// stored as parts: host memory while recording or replaying it is a few parts, not the
/// buffer.
pub const CHUNK_BYTES: usize = 16 << 20;

impl BlobId {
    pub fn of(bytes: &[u8]) -> BlobId {
        Self::from_hash(blake3::hash(bytes))
    }

    /// The id of a blob made of `parts` (in order) totalling `len` bytes: a hash over the
    /// parts' ids, so it is known without the bytes in one place, and the same bytes chunked
    /// the same way always get the same id.
    pub fn chunked(len: u64, parts: &[BlobId]) -> BlobId {
        let mut h = blake3::Hasher::new();
        h.update(b"gputape chunked blob");
        h.update(&len.to_le_bytes());
        for p in parts {
            h.update(&p.0);
        }
        Self::from_hash(h.finalize())
    }

    fn from_hash(h: blake3::Hash) -> BlobId {
        let mut id = [0u8; 16];
        id.copy_from_slice(&h.as_bytes()[..16]);
        BlobId(id)
    }

    /// All 32 hex digits (`Display` shows the first 12): the name of its file in a blob store.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A device address, as a trace spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DevAddr {
    Null,
    /// Inside (or one past the end of) a buffer the recorder knows.
    Buf {
        buf: BufferId,
        off: u64,
    },
    /// Inside a buffer that was already freed (a use-after-free or double free).
    Freed {
        buf: BufferId,
        off: u64,
    },
    /// Not in any live buffer. The nearest buffer below it, and how far past its base, is kept
    /// so a fault report can still say "4 KiB past the end of buf7".
    Unknown {
        near: Option<(BufferId, u64)>,
    },
}

impl fmt::Display for DevAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevAddr::Null => write!(f, "null"),
            DevAddr::Buf { buf, off } => write!(f, "{buf}+{off}"),
            DevAddr::Freed { buf, off } => write!(f, "{buf}+{off} (freed)"),
            DevAddr::Unknown {
                near: Some((b, off)),
            } => write!(f, "?({b}+{off}, outside)"),
            DevAddr::Unknown { near: None } => write!(f, "?(no buffer)"),
        }
    }
}

/// A stream argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum StreamRef {
    /// The legacy NULL stream (handle 0).
    Legacy,
    Id(StreamId),
}

impl fmt::Display for StreamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamRef::Legacy => write!(f, "legacy"),
            StreamRef::Id(s) => write!(f, "{s}"),
        }
    }
}

/// A host pointer into a pinned region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HostAddr {
    Pinned {
        host: HostId,
        off: u64,
    },
    /// Not a pinned region this recorder saw allocated.
    Unknown,
}

/// One kernel argument.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arg {
    /// A pointer-sized argument that pointed into a live buffer (or was declared a buffer).
    Buf(DevAddr),
    /// Anything else, by value, little-endian.
    Val(ArgBytes),
    /// A tensor map built by `encode_tensor_map`: what it describes and the buffer its
    /// address points into, so a replay encodes it anew for that buffer (format 3).
    TensorMap(Box<TensorMapArg>),
}

impl Arg {
    /// The device address this argument carries: a pointer's, or the one inside a tensor map.
    pub fn device_addr(&self) -> Option<&DevAddr> {
        match self {
            Arg::Buf(d) => Some(d),
            Arg::TensorMap(m) => Some(&m.base),
            Arg::Val(_) => None,
        }
    }
}

/// A tensor-map argument, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMapArg {
    pub base: DevAddr,
    pub desc: crate::backend::TensorMapDesc,
}

/// A by-value kernel argument's bytes, inline up to 8. Serialised as one byte string (a length
/// and a copy) rather than as a sequence of single bytes, which is what serde would do for a
/// `SmallVec<u8>` and which cost the recorder's hot path a visitor call per byte.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ArgBytes(pub SmallVec<[u8; 8]>);

impl std::ops::Deref for ArgBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<&[u8]> for ArgBytes {
    fn from(b: &[u8]) -> Self {
        ArgBytes(SmallVec::from_slice(b))
    }
}

impl Serialize for ArgBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for ArgBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ArgBytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("argument bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ArgBytes, E> {
                Ok(ArgBytes::from(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<ArgBytes, A::Error> {
                let mut out = SmallVec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(ArgBytes(out))
            }
        }
        d.deserialize_bytes(V)
    }
}

pub type Args = SmallVec<[Arg; 8]>;

/// One call of the trait, with its arguments as ids and blobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    Alloc {
        bytes: u64,
    },
    AllocManaged {
        bytes: u64,
    },
    Free {
        ptr: DevAddr,
    },
    CopyH2D {
        dst: DevAddr,
        data: BlobId,
        len: u64,
    },
    CopyD2H {
        src: DevAddr,
        len: u64,
    },
    CopyD2D {
        src: DevAddr,
        dst: DevAddr,
        len: u64,
    },
    Launch {
        kernel: KernelId,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: StreamRef,
        args: Args,
    },
    LaunchTyped {
        kernel: KernelId,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: StreamRef,
        args: Args,
    },
    Synchronize {
        stream: StreamRef,
    },
    DefaultStream,
    Kernel {
        module: String,
        func: String,
    },
    OpCache,
    Memset {
        dst: DevAddr,
        value: u8,
        len: u64,
    },
    MemsetAsync {
        dst: DevAddr,
        value: u8,
        len: u64,
        stream: StreamRef,
    },
    TotalMemory,
    FreeMemory,
    SmCount,
    SweepUnreleased,
    LiveBytes,
    AllocReport {
        top_n: u64,
        min_mb: u64,
    },
    CopyD2HOnStream {
        src: DevAddr,
        len: u64,
        stream: StreamRef,
    },
    StreamIsCapturing {
        stream: StreamRef,
    },
    ScanRedzones,
    PoisonRedzones {
        lo: u64,
        hi: u64,
    },
    DebugSyncKernels,
    KernelRegistry,
    CopyH2DAsync {
        dst: DevAddr,
        data: BlobId,
        len: u64,
        stream: StreamRef,
    },
    CopyH2DAsyncRetained {
        dst: DevAddr,
        data: BlobId,
        len: u64,
        stream: StreamRef,
        src: HostAddr,
    },
    CopyD2HAsync {
        src: DevAddr,
        len: u64,
        stream: StreamRef,
        dst: HostAddr,
    },
    CopyD2DAsync {
        src: DevAddr,
        dst: DevAddr,
        len: u64,
        stream: StreamRef,
    },
    CopyD2D2DAsync {
        src: DevAddr,
        src_pitch: u64,
        dst: DevAddr,
        dst_pitch: u64,
        width: u64,
        height: u64,
        stream: StreamRef,
    },
    BeginCapture {
        stream: StreamRef,
    },
    EndCapture {
        stream: StreamRef,
    },
    LaunchGraph {
        graph: GraphId,
        stream: StreamRef,
    },
    DestroyGraph {
        graph: GraphId,
    },
    AbortCaptureIfActive {
        stream: StreamRef,
    },
    DeviceFreeMemory,
    LiveAllocCount,
    CreateStream,
    BindToThread,
    CreateEvent,
    RecordEvent {
        event: EventId,
        stream: StreamRef,
    },
    StreamWaitEvent {
        stream: StreamRef,
        event: EventId,
    },
    EventSynchronize {
        event: EventId,
    },
    DestroyEvent {
        event: EventId,
    },
    HostPtrToDevice {
        host: HostAddr,
    },
    AllocHostPinned {
        bytes: u64,
    },
    FreeHostPinned {
        host: HostAddr,
        bytes: u64,
    },
    /// What the last red-zone scan found: returns how many guard bands.
    RedzoneHits,
    /// The engine says a new step (a decode step, an iteration) begins here.
    StepBoundary {
        step: u64,
    },
    /// A tensor map built for the memory at `base` (returns `Unit`: the bytes hold an address,
    /// which a replay makes anew).
    EncodeTensorMap {
        base: DevAddr,
        desc: crate::backend::TensorMapDesc,
    },
}

impl Call {
    pub fn kind(&self) -> CallKind {
        use CallKind as K;
        match self {
            Call::Alloc { .. } => K::Alloc,
            Call::AllocManaged { .. } => K::AllocManaged,
            Call::Free { .. } => K::Free,
            Call::CopyH2D { .. } => K::CopyH2D,
            Call::CopyD2H { .. } => K::CopyD2H,
            Call::CopyD2D { .. } => K::CopyD2D,
            Call::Launch { .. } => K::Launch,
            Call::LaunchTyped { .. } => K::LaunchTyped,
            Call::Synchronize { .. } => K::Synchronize,
            Call::DefaultStream => K::DefaultStream,
            Call::Kernel { .. } => K::Kernel,
            Call::OpCache => K::OpCache,
            Call::Memset { .. } => K::Memset,
            Call::MemsetAsync { .. } => K::MemsetAsync,
            Call::TotalMemory => K::TotalMemory,
            Call::FreeMemory => K::FreeMemory,
            Call::SmCount => K::SmCount,
            Call::SweepUnreleased => K::SweepUnreleased,
            Call::LiveBytes => K::LiveBytes,
            Call::AllocReport { .. } => K::AllocReport,
            Call::CopyD2HOnStream { .. } => K::CopyD2HOnStream,
            Call::StreamIsCapturing { .. } => K::StreamIsCapturing,
            Call::ScanRedzones => K::ScanRedzones,
            Call::PoisonRedzones { .. } => K::PoisonRedzones,
            Call::DebugSyncKernels => K::DebugSyncKernels,
            Call::KernelRegistry => K::KernelRegistry,
            Call::CopyH2DAsync { .. } => K::CopyH2DAsync,
            Call::CopyH2DAsyncRetained { .. } => K::CopyH2DAsyncRetained,
            Call::CopyD2HAsync { .. } => K::CopyD2HAsync,
            Call::CopyD2DAsync { .. } => K::CopyD2DAsync,
            Call::CopyD2D2DAsync { .. } => K::CopyD2D2DAsync,
            Call::BeginCapture { .. } => K::BeginCapture,
            Call::EndCapture { .. } => K::EndCapture,
            Call::LaunchGraph { .. } => K::LaunchGraph,
            Call::DestroyGraph { .. } => K::DestroyGraph,
            Call::AbortCaptureIfActive { .. } => K::AbortCaptureIfActive,
            Call::DeviceFreeMemory => K::DeviceFreeMemory,
            Call::LiveAllocCount => K::LiveAllocCount,
            Call::CreateStream => K::CreateStream,
            Call::BindToThread => K::BindToThread,
            Call::CreateEvent => K::CreateEvent,
            Call::RecordEvent { .. } => K::RecordEvent,
            Call::StreamWaitEvent { .. } => K::StreamWaitEvent,
            Call::EventSynchronize { .. } => K::EventSynchronize,
            Call::DestroyEvent { .. } => K::DestroyEvent,
            Call::HostPtrToDevice { .. } => K::HostPtrToDevice,
            Call::AllocHostPinned { .. } => K::AllocHostPinned,
            Call::FreeHostPinned { .. } => K::FreeHostPinned,
            Call::RedzoneHits => K::RedzoneHits,
            Call::StepBoundary { .. } => K::StepBoundary,
            Call::EncodeTensorMap { .. } => K::EncodeTensorMap,
        }
    }

    /// A launch through `launch_typed` (`typed`) or `launch`: the two variants carry the same
    /// fields.
    pub fn new_launch(
        typed: bool,
        kernel: KernelId,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: StreamRef,
        args: Args,
    ) -> Call {
        if typed {
            Call::LaunchTyped {
                kernel,
                grid,
                block,
                shared_mem,
                stream,
                args,
            }
        } else {
            Call::Launch {
                kernel,
                grid,
                block,
                shared_mem,
                stream,
                args,
            }
        }
    }

    /// A kernel launch's kernel and arguments (typed or not); `None` for any other call.
    pub fn launch(&self) -> Option<(KernelId, &[Arg])> {
        match self {
            Call::Launch { kernel, args, .. } | Call::LaunchTyped { kernel, args, .. } => {
                Some((*kernel, args))
            }
            _ => None,
        }
    }

    /// What a device-to-host copy reads.
    pub fn readback_src(&self) -> Option<&DevAddr> {
        use Call::*;
        match self {
            CopyD2H { src, .. } | CopyD2HOnStream { src, .. } | CopyD2HAsync { src, .. } => {
                Some(src)
            }
            _ => None,
        }
    }

    /// A query or accessor: no device effect, no ordering role.
    pub fn is_query(&self) -> bool {
        matches!(
            self,
            Call::DefaultStream
                | Call::OpCache
                | Call::TotalMemory
                | Call::FreeMemory
                | Call::SmCount
                | Call::LiveBytes
                | Call::AllocReport { .. }
                | Call::StreamIsCapturing { .. }
                | Call::DebugSyncKernels
                | Call::KernelRegistry
                | Call::DeviceFreeMemory
                | Call::LiveAllocCount
                | Call::RedzoneHits
                | Call::StepBoundary { .. }
                | Call::EncodeTensorMap { .. }
        )
    }

    /// Where this call's device work runs: a stream, or the legacy stream for synchronous
    /// copies and memsets. `None` for host-side calls.
    pub fn work_stream(&self) -> Option<StreamRef> {
        use Call::*;
        match self {
            Launch { stream, .. }
            | LaunchTyped { stream, .. }
            | MemsetAsync { stream, .. }
            | CopyH2DAsync { stream, .. }
            | CopyH2DAsyncRetained { stream, .. }
            | CopyD2HAsync { stream, .. }
            | CopyD2DAsync { stream, .. }
            | CopyD2D2DAsync { stream, .. }
            | CopyD2HOnStream { stream, .. }
            | LaunchGraph { stream, .. }
            | RecordEvent { stream, .. }
            | StreamWaitEvent { stream, .. } => Some(*stream),
            CopyH2D { .. } | CopyD2H { .. } | CopyD2D { .. } | Memset { .. } => {
                Some(StreamRef::Legacy)
            }
            // Host-side, or device work the backend does for itself (red-zone scans and
            // poisoning, which synchronise anyway).
            Alloc { .. }
            | AllocManaged { .. }
            | Free { .. }
            | Synchronize { .. }
            | DefaultStream
            | Kernel { .. }
            | OpCache
            | TotalMemory
            | FreeMemory
            | SmCount
            | SweepUnreleased
            | LiveBytes
            | AllocReport { .. }
            | StreamIsCapturing { .. }
            | ScanRedzones
            | PoisonRedzones { .. }
            | DebugSyncKernels
            | KernelRegistry
            | BeginCapture { .. }
            | EndCapture { .. }
            | DestroyGraph { .. }
            | AbortCaptureIfActive { .. }
            | DeviceFreeMemory
            | LiveAllocCount
            | CreateStream
            | BindToThread
            | CreateEvent
            | EventSynchronize { .. }
            | DestroyEvent { .. }
            | HostPtrToDevice { .. }
            | AllocHostPinned { .. }
            | FreeHostPinned { .. }
            | RedzoneHits
            | StepBoundary { .. }
            | EncodeTensorMap { .. } => None,
        }
    }

    /// What the capture rules call this call, and the stream they judge it on.
    /// `in_capture(e)` says whether event `e` was last recorded inside the capture.
    pub fn capture_op(
        &self,
        in_capture: &dyn Fn(EventId) -> bool,
    ) -> (CaptureOp, Option<StreamRef>) {
        use Call::*;
        use CaptureOp as O;
        match self {
            Launch { stream, .. }
            | LaunchTyped { stream, .. }
            | MemsetAsync { stream, .. }
            | CopyD2DAsync { stream, .. }
            | CopyD2D2DAsync { stream, .. }
            | CopyD2HAsync { stream, .. }
            | LaunchGraph { stream, .. } => (O::StreamWork, Some(*stream)),
            CopyH2DAsync { stream, .. } | CopyH2DAsyncRetained { stream, .. } => {
                (O::AsyncH2D, Some(*stream))
            }
            // Red-zone scans and poisoning are synchronous copies and memsets underneath.
            CopyH2D { .. }
            | CopyD2H { .. }
            | CopyD2D { .. }
            | Memset { .. }
            | ScanRedzones
            | PoisonRedzones { .. } => (O::SyncCopy, Some(StreamRef::Legacy)),
            CopyD2HOnStream { stream, .. } => (O::CopyThenWait, Some(*stream)),
            Synchronize { stream } => (O::StreamSync, Some(*stream)),
            RecordEvent { stream, .. } => (O::EventRecord, Some(*stream)),
            StreamWaitEvent { stream, event } => (
                if in_capture(*event) {
                    O::WaitCapturedEvent
                } else {
                    O::WaitExternalEvent
                },
                Some(*stream),
            ),
            EventSynchronize { event } => (
                if in_capture(*event) {
                    O::SyncCapturedEvent
                } else {
                    O::SyncExternalEvent
                },
                None,
            ),
            Free { .. } => (O::DeviceFree, None),
            Alloc { .. } | AllocManaged { .. } => (O::DeviceAlloc, None),
            AllocHostPinned { .. } | FreeHostPinned { .. } => (O::PinnedHost, None),
            BeginCapture { stream } => (O::BeginCapture, Some(*stream)),
            EndCapture { stream } => (O::EndCapture, Some(*stream)),
            // Nothing the capture rules judge: queries, handle creation, host bookkeeping.
            DefaultStream
            | Kernel { .. }
            | OpCache
            | TotalMemory
            | FreeMemory
            | SmCount
            | SweepUnreleased
            | LiveBytes
            | AllocReport { .. }
            | StreamIsCapturing { .. }
            | DebugSyncKernels
            | KernelRegistry
            | DestroyGraph { .. }
            | AbortCaptureIfActive { .. }
            | DeviceFreeMemory
            | LiveAllocCount
            | CreateStream
            | BindToThread
            | CreateEvent
            | DestroyEvent { .. }
            | HostPtrToDevice { .. }
            | RedzoneHits
            | StepBoundary { .. }
            | EncodeTensorMap { .. } => (O::HostOnly, None),
        }
    }

    /// Does the host wait for the device in this call? (Where a trace is flushed, and where
    /// async results become visible.)
    pub fn is_host_sync(&self) -> bool {
        matches!(
            self,
            Call::Synchronize { .. }
                | Call::CopyD2H { .. }
                | Call::CopyH2D { .. }
                | Call::CopyD2D { .. }
                | Call::Memset { .. }
                | Call::CopyD2HOnStream { .. }
                | Call::EventSynchronize { .. }
        )
    }
}

/// What a call returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    Unit,
    Buffer(BufferId),
    Stream(StreamRef),
    Event(EventId),
    Graph(GraphId),
    Kernel(KernelId),
    Host(HostId),
    Count(u64),
    OptCount(Option<u64>),
    Bool(bool),
    /// The bytes a device-to-host copy returned.
    Bytes(BlobId),
    Text(Option<String>),
}

/// A failed call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRec {
    /// The CUDA driver code, when the error has one.
    pub code: Option<u32>,
    pub message: String,
}

pub type Ret = Result<Value, ErrorRec>;
