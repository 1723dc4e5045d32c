//! The trace's vocabulary: one `Call` variant per trait method, and the values they carry.
//!
//! Everything here holds ids, never raw pointers or handles, so that two recordings of the same
//! program produce the same bytes and a trace means the same thing on any machine.

pub use super::args::*;
use crate::backend::{CallKind, CaptureOp};
use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
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

id_type!(
    /// A device allocation, numbered in order of creation; printed `buf3`. An address
    /// allocated again after a free is a new id.
    BufferId,
    "buf"
);
id_type!(
    /// A stream other than the legacy one, numbered as created or first seen; `s1`.
    StreamId,
    "s"
);
id_type!(
    /// An event, numbered as created or first seen; `ev0`.
    EventId,
    "ev"
);
id_type!(
    /// An instantiated graph, numbered as captured or first seen; `graph0`.
    GraphId,
    "graph"
);
id_type!(
    /// A kernel, numbered as first looked up or launched; its `Frame::Kernel` says
    /// which module and name. Printed `k2`.
    KernelId,
    "k"
);
id_type!(
    /// A pinned host region from `alloc_host_pinned`, numbered in order; `host0`.
    HostId,
    "host"
);
id_type!(
    /// A communicator this rank joined, numbered as joined; `comm0`.
    CommId,
    "comm"
);
id_type!(
    /// A call site (`Frame::Site`: file, line, column), numbered as first seen; `site4`.
    SiteId,
    "site"
);

/// A content hash (first 16 bytes of BLAKE3) naming a blob of bytes stored once per trace.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlobId(pub [u8; 16]);

/// The size of a chunked blob's parts (the last may be shorter). A buffer larger than this is
/// stored as parts: host memory while recording or replaying it is a few parts, not the
/// buffer.
pub const CHUNK_BYTES: usize = 16 << 20;

impl BlobId {
    /// The id of these bytes, held whole.
    pub fn of(bytes: &[u8]) -> BlobId {
        Self::from_hash(blake3::hash(bytes))
    }

    /// A provisional id of these bytes (xxh3-128), for what a flight recorder keeps in
    /// memory: about eight times faster than `of` on a step's readback, on the engine's
    /// thread. Never written to a trace: a dump renames each to its `of`
    /// (`trace::each_blob_mut`), since readers check blobs by that.
    pub fn quick(bytes: &[u8]) -> BlobId {
        BlobId(xxhash_rust::xxh3::xxh3_128(bytes).to_le_bytes())
    }

    /// Provisional id number `n` of a flight recorder's own: a readback is new bytes at
    /// every step, which no hash would find again, so it is named by a number instead.
    /// Never written to a trace, as `quick`.
    pub fn numbered(n: u64) -> BlobId {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(b"gtape#rb");
        id[8..].copy_from_slice(&n.to_le_bytes());
        BlobId(id)
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

/// What a launch says besides its arguments: the head both launch calls share. A field of
/// the launch variants, and encoded inline in their place (bincode writes a struct's fields
/// one after another, with nothing around them), so traces are unchanged (the codec tests
/// hold it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchHead {
    /// The kernel, as a `Frame::Kernel` names it.
    pub kernel: KernelId,
    /// Blocks per dimension.
    pub grid: [u32; 3],
    /// Threads per block, per dimension.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem: u32,
    /// The stream it was enqueued on.
    pub stream: StreamRef,
}

/// One call of the trait, with its arguments as ids and blobs.
///
/// Each variant is the [`GpuBackend`](crate::backend::GpuBackend) method of the same name
/// (`CallKind` names them). Sizes and lengths are in bytes; `data` is the blob of bytes a call
/// uploaded, stored once per trace by hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    /// `alloc`: returns the new buffer's id.
    Alloc {
        /// Bytes asked for.
        bytes: u64,
    },
    /// `alloc_managed`: returns the new buffer's id.
    AllocManaged {
        /// Bytes asked for.
        bytes: u64,
    },
    /// `free`.
    Free {
        /// The address freed: a buffer's base, or what else the engine passed.
        ptr: DevAddr,
    },
    /// `copy_h2d`.
    CopyH2D {
        /// Where the bytes went.
        dst: DevAddr,
        /// The bytes uploaded.
        data: BlobId,
        /// Bytes copied.
        len: u64,
    },
    /// `copy_d2h`: returns the bytes read (`Value::Bytes`), which a replay compares.
    CopyD2H {
        /// Where the bytes were read from.
        src: DevAddr,
        /// Bytes read.
        len: u64,
    },
    /// `copy_d2d`.
    CopyD2D {
        /// Where the bytes were read from.
        src: DevAddr,
        /// Where they went.
        dst: DevAddr,
        /// Bytes copied.
        len: u64,
    },
    /// `launch`: a raw launch, its arguments read through the kernel's parameter layout.
    Launch {
        /// Which kernel, its shape and its stream.
        head: LaunchHead,
        /// One per parameter; empty when no layout was known (`Finding::ArgsNotRecorded`).
        args: Args,
    },
    /// `launch_typed`: a launch whose arguments the engine typed.
    LaunchTyped {
        /// Which kernel, its shape and its stream.
        head: LaunchHead,
        /// One per argument passed.
        args: Args,
    },
    /// `synchronize`: a host sync.
    Synchronize {
        /// The stream waited for.
        stream: StreamRef,
    },
    /// `default_stream`: returns the stream.
    DefaultStream,
    /// `kernel`: returns the kernel's id.
    Kernel {
        /// The module asked for.
        module: String,
        /// The kernel asked for in it.
        func: String,
    },
    /// `op_cache`.
    OpCache,
    /// `memset`: synchronous, on the legacy stream.
    Memset {
        /// The first byte filled.
        dst: DevAddr,
        /// The fill byte.
        value: u8,
        /// Bytes filled.
        len: u64,
    },
    /// `memset_async`.
    MemsetAsync {
        /// The first byte filled.
        dst: DevAddr,
        /// The fill byte.
        value: u8,
        /// Bytes filled.
        len: u64,
        /// The stream it was enqueued on.
        stream: StreamRef,
    },
    /// `total_memory`: returns a count of bytes.
    TotalMemory,
    /// `free_memory`: returns a count of bytes.
    FreeMemory,
    /// `sm_count`: returns a count.
    SmCount,
    /// `sweep_unreleased`: returns how many allocations it freed.
    SweepUnreleased,
    /// `live_bytes`: returns an optional count of bytes.
    LiveBytes,
    /// `alloc_report`: returns the report's text, if any.
    AllocReport {
        /// Sites at most.
        top_n: u64,
        /// Smallest site shown, in MiB.
        min_mb: u64,
    },
    /// `copy_d2h_on_stream`: a host sync; returns the bytes read.
    CopyD2HOnStream {
        /// Where the bytes were read from.
        src: DevAddr,
        /// Bytes read.
        len: u64,
        /// The stream whose work the read waits for.
        stream: StreamRef,
    },
    /// `stream_is_capturing`: returns a bool.
    StreamIsCapturing {
        /// The stream asked about.
        stream: StreamRef,
    },
    /// `scan_redzones`: returns how many guard bands were written.
    ScanRedzones,
    /// `poison_redzones`.
    PoisonRedzones {
        /// First creation index filled with the fill byte.
        lo: u64,
        /// One past the last.
        hi: u64,
    },
    /// `debug_sync_kernels`: returns a bool.
    DebugSyncKernels,
    /// `kernel_registry`.
    KernelRegistry,
    /// `copy_h2d_async`.
    CopyH2DAsync {
        /// Where the bytes went.
        dst: DevAddr,
        /// The bytes uploaded, as they were when the call was made.
        data: BlobId,
        /// Bytes copied.
        len: u64,
        /// The stream it was enqueued on.
        stream: StreamRef,
    },
    /// `copy_h2d_async_retained`: the source must not change until the stream's next sync
    /// (`Finding::RetainedSourceChanged` says when it did).
    CopyH2DAsyncRetained {
        /// Where the bytes went.
        dst: DevAddr,
        /// The bytes uploaded, as they were when the call was made.
        data: BlobId,
        /// Bytes copied.
        len: u64,
        /// The stream it was enqueued on.
        stream: StreamRef,
        /// The source, when it lies in a pinned region.
        src: HostAddr,
    },
    /// `copy_d2h_async`: its bytes are recorded at the sync that makes them visible
    /// (`Frame::D2HResult`).
    CopyD2HAsync {
        /// Where the bytes were read from.
        src: DevAddr,
        /// Bytes read.
        len: u64,
        /// The stream it was enqueued on.
        stream: StreamRef,
        /// The destination, when it lies in a pinned region.
        dst: HostAddr,
    },
    /// `copy_d2d_async`.
    CopyD2DAsync {
        /// Where the bytes were read from.
        src: DevAddr,
        /// Where they went.
        dst: DevAddr,
        /// Bytes copied.
        len: u64,
        /// The stream it was enqueued on.
        stream: StreamRef,
    },
    /// `copy_d2d_2d_async`: `height` rows of `width` bytes.
    CopyD2D2DAsync {
        /// The first source row.
        src: DevAddr,
        /// Bytes from one source row to the next.
        src_pitch: u64,
        /// The first destination row.
        dst: DevAddr,
        /// Bytes from one destination row to the next.
        dst_pitch: u64,
        /// Bytes copied per row.
        width: u64,
        /// Rows.
        height: u64,
        /// The stream it was enqueued on.
        stream: StreamRef,
    },
    /// `begin_capture`.
    BeginCapture {
        /// The stream that starts capturing.
        stream: StreamRef,
    },
    /// `end_capture`: returns the graph's id.
    EndCapture {
        /// The capturing stream.
        stream: StreamRef,
    },
    /// `launch_graph`.
    LaunchGraph {
        /// The graph, from an `EndCapture` (or adopted).
        graph: GraphId,
        /// The stream it was enqueued on.
        stream: StreamRef,
    },
    /// `destroy_graph`.
    DestroyGraph {
        /// The graph released.
        graph: GraphId,
    },
    /// `abort_capture_if_active`.
    AbortCaptureIfActive {
        /// The stream whose capture, if any, is dropped.
        stream: StreamRef,
    },
    /// `device_free_memory`: returns a count of bytes.
    DeviceFreeMemory,
    /// `live_alloc_count`: returns a count.
    LiveAllocCount,
    /// `create_stream`: returns the stream's id.
    CreateStream,
    /// `bind_to_thread`.
    BindToThread,
    /// `create_event`: returns the event's id.
    CreateEvent,
    /// `record_event`.
    RecordEvent {
        /// The event marked.
        event: EventId,
        /// The stream whose point it marks.
        stream: StreamRef,
    },
    /// `stream_wait_event`.
    StreamWaitEvent {
        /// The stream made to wait.
        stream: StreamRef,
        /// The event it waits for.
        event: EventId,
    },
    /// `event_synchronize`: a host sync.
    EventSynchronize {
        /// The event waited for.
        event: EventId,
    },
    /// `destroy_event`.
    DestroyEvent {
        /// The event released.
        event: EventId,
    },
    /// `host_ptr_to_device`: returns the device alias as a buffer of its own.
    HostPtrToDevice {
        /// The pinned host pointer asked about.
        host: HostAddr,
    },
    /// `alloc_host_pinned`: returns the region's id.
    AllocHostPinned {
        /// Bytes asked for.
        bytes: u64,
    },
    /// `free_host_pinned`.
    FreeHostPinned {
        /// The region freed.
        host: HostAddr,
        /// Its size, as the engine passed it.
        bytes: u64,
    },
    /// What the last red-zone scan found: returns how many guard bands.
    RedzoneHits,
    /// The engine says a new step (a decode step, an iteration) begins here.
    StepBoundary {
        /// The engine's step number, as it passed it.
        step: u64,
    },
    /// A tensor map built for the memory at `base` (returns `Unit`: the bytes hold an address,
    /// which a replay makes anew).
    EncodeTensorMap {
        /// Where the map points: the buffer a replay encodes it for.
        base: DevAddr,
        /// What the map describes, less its address.
        desc: crate::backend::TensorMapDesc,
    },
    /// `comm_unique_id`: returns the id's 16 bytes (`Value::Bytes`).
    CommUniqueId,
    /// `comm_init`: this rank joins a communicator; returns its id (`Value::Comm`).
    CommInit {
        /// The unique id every rank of it joined with: what ties the rank set's traces.
        unique: crate::backend::CommUniqueId,
        /// Ranks in it.
        nranks: u32,
        /// This rank.
        rank: u32,
    },
    /// `collective`: a group collective, the `seq`-th on its communicator (every rank's
    /// `seq`-th is the same collective, or the run was wrong); a send, the `seq`-th from this
    /// rank to its peer (the peer's `seq`-th receive from this rank is its other side), and a
    /// receive likewise.
    Collective {
        /// The communicator.
        comm: CommId,
        /// Its place, from 0, among this rank's group collectives on the communicator, or
        /// among its sends to (receives from) the peer. Earlier recorders numbered sends and
        /// receives among all the collectives; as every rank then made each of them, the two
        /// sides' numbers agree there too, and they pair alike.
        seq: u64,
        /// Which collective.
        op: crate::backend::Collective,
        /// What it sends (nothing for a `Recv`).
        send: DevAddr,
        /// Where it receives (nothing for a `Send`).
        recv: DevAddr,
        /// Elements per rank.
        count: u64,
        /// Their type.
        dtype: crate::backend::CollDtype,
        /// The stream it runs on.
        stream: StreamRef,
    },
    /// `comm_destroy`.
    CommDestroy {
        /// The communicator left.
        comm: CommId,
    },
    /// A CUDA driver call of a program recorded through the driver shim (`gputape run -o`)
    /// that changes the device but that gputape does not understand (format 8): kept by name,
    /// in its place, so a replay says exactly what it could not do.
    Opaque {
        /// The driver entry point, as the program called it (`cuMemcpy2DAsync_v2`).
        name: String,
    },
    /// `comm_group_start` (format 9): the collectives up to the matching `CommGroupEnd` were
    /// issued together.
    CommGroupStart,
    /// `comm_group_end` (format 9).
    CommGroupEnd,
    /// A host function a program queued on a stream (`cuLaunchHostFunc`,
    /// `cuStreamAddCallback`; format 15): the stream's later work waited for it. A replay
    /// cannot run the program's code; it keeps the place in the stream's order and says what
    /// came after it there.
    HostFunc {
        /// The stream it was queued on.
        stream: StreamRef,
        /// The function: its symbol, or where it exports none, the name its file's symbol table
        /// gives with the file's name and the offset in it (`take (app+0x9570)`), or those alone.
        func: String,
    },
}

impl Call {
    /// The trait method this call is.
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
            Call::CommUniqueId => K::CommUniqueId,
            Call::CommInit { .. } => K::CommInit,
            Call::Collective { .. } => K::Collective,
            Call::CommDestroy { .. } => K::CommDestroy,
            Call::Opaque { .. } => K::Opaque,
            Call::CommGroupStart => K::CommGroupStart,
            Call::CommGroupEnd => K::CommGroupEnd,
            Call::HostFunc { .. } => K::HostFunc,
        }
    }

    /// A launch through `launch_typed` (`typed`) or `launch`.
    pub fn new_launch(typed: bool, head: LaunchHead, args: Args) -> Call {
        if typed {
            Call::LaunchTyped { head, args }
        } else {
            Call::Launch { head, args }
        }
    }

    /// A kernel launch's kernel and arguments (typed or not); `None` for any other call.
    pub fn launch(&self) -> Option<(KernelId, &[Arg])> {
        self.launch_head().map(|(h, args)| (h.kernel, &args[..]))
    }

    /// A kernel launch's head and arguments (typed or not); `None` for any other call.
    pub fn launch_head(&self) -> Option<(&LaunchHead, &Args)> {
        match self {
            Call::Launch { head, args } | Call::LaunchTyped { head, args } => Some((head, args)),
            _ => None,
        }
    }

    /// `launch_head`, to change.
    pub fn launch_mut(&mut self) -> Option<(&mut LaunchHead, &mut Args)> {
        match self {
            Call::Launch { head, args } | Call::LaunchTyped { head, args } => Some((head, args)),
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

    /// What the capture rules call this call, and the stream they judge it on.
    /// `in_capture(e)` says whether event `e` was last recorded inside the capture.
    pub fn capture_op(
        &self,
        in_capture: &dyn Fn(EventId) -> bool,
    ) -> (CaptureOp, Option<StreamRef>) {
        use Call::*;
        use CaptureOp as O;
        match self {
            Launch {
                head: LaunchHead { stream, .. },
                ..
            }
            | LaunchTyped {
                head: LaunchHead { stream, .. },
                ..
            }
            | MemsetAsync { stream, .. }
            | CopyD2DAsync { stream, .. }
            | CopyD2D2DAsync { stream, .. }
            | CopyD2HAsync { stream, .. }
            | LaunchGraph { stream, .. }
            // A host function queued while capturing becomes a host node of the graph.
            | HostFunc { stream, .. }
            | Collective { stream, .. } => (O::StreamWork, Some(*stream)),
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
            | EncodeTensorMap { .. }
            | Opaque { .. } => (O::HostOnly, None),
            // A group only holds the collectives between its ends back on the host; each is
            // judged on its own stream.
            CommGroupStart | CommGroupEnd => (O::HostOnly, None),
            // Joining and leaving wait for the other ranks (NCCL's init is collective): not
            // something to do while capturing.
            CommUniqueId | CommInit { .. } | CommDestroy { .. } => (O::DeviceAlloc, None),
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
    /// Nothing: `Ok(())`.
    Unit,
    /// A new buffer: `alloc`, `alloc_managed`, and `host_ptr_to_device`'s alias.
    Buffer(BufferId),
    /// `default_stream`, `create_stream`.
    Stream(StreamRef),
    /// `create_event`.
    Event(EventId),
    /// `end_capture`.
    Graph(GraphId),
    /// `kernel`.
    Kernel(KernelId),
    /// `alloc_host_pinned`.
    Host(HostId),
    /// A number: bytes (`total_memory`, `free_memory`...), SMs, allocations, guard bands.
    Count(u64),
    /// `live_bytes`: bytes, `None` for a backend without a ledger.
    OptCount(Option<u64>),
    /// `stream_is_capturing`, `debug_sync_kernels`.
    Bool(bool),
    /// The bytes a device-to-host copy returned.
    Bytes(BlobId),
    /// `alloc_report`'s text, `None` for a backend without a ledger.
    Text(Option<String>),
    /// `comm_init`.
    Comm(CommId),
}

/// A failed call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRec {
    /// The CUDA driver code, when the error has one.
    pub code: Option<u32>,
    /// The error's text, its `anyhow` chain included.
    pub message: String,
}

/// What a call returned, or how it failed: the `End` frame's result.
pub type Ret = Result<Value, ErrorRec>;
