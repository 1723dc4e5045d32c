//! What a trace file is made of: a header, then frames, each one self-describing.

use super::call::*;
use crate::backend::{KernelInfo, ModuleCode};
use serde::{Deserialize, Serialize};

/// The format this build writes.
pub const FORMAT_VERSION: u16 = 2;
/// The oldest reader that can read what this build writes.
pub const MIN_READER_VERSION: u16 = 2;
pub const MAGIC: [u8; 8] = *b"GPUTAPE\0";

/// What the trace was recorded on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    pub format: u16,
    pub min_reader: u16,
    pub gputape: String,
    /// `mock` or `cuda`.
    pub backend: String,
    pub device_ordinal: u32,
    pub device_name: Option<String>,
    pub sm_count: Option<u32>,
    pub total_memory: Option<u64>,
    pub driver_version: Option<i32>,
}

/// A call as it begins: written before the wrapped backend runs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Begin {
    pub seq: u64,
    pub thread: u16,
    pub site: SiteId,
    /// Nanoseconds since recording started.
    pub t_ns: u64,
    pub call: Call,
}

/// A call as it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub seq: u64,
    pub dur_ns: u64,
    pub ret: Ret,
}

/// Something the recorder noticed that is not a call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Finding {
    /// `copy_h2d_async_retained` promised its source would not change before the next sync of
    /// its stream; it did.
    RetainedSourceChanged { seq: u64, at_sync: u64 },
}

/// A resource that existed before recording started and was first seen in use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Adopted {
    Stream { id: StreamId, is_default: bool },
    Event { id: EventId },
    Graph { id: GraphId },
    Host { id: HostId, bytes: u64 },
}

// `Begin` is large (a call's inline args), and boxing it would put a heap allocation on every
// recorded call; frames live on the stack only while being encoded.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    Header(TraceHeader),
    Site {
        id: SiteId,
        file: String,
        line: u32,
        col: u32,
    },
    /// Content-addressed bytes; `zstd` says whether `data` is compressed.
    Blob {
        id: BlobId,
        len: u64,
        zstd: bool,
        data: Vec<u8>,
    },
    Module(ModuleCode),
    Kernel {
        id: KernelId,
        info: KernelInfo,
    },
    /// A buffer live when recording started, with its contents then.
    Initial {
        buf: BufferId,
        bytes: u64,
        data: BlobId,
        site: SiteId,
    },
    Adopt(Adopted),
    Begin(Begin),
    End(End),
    /// An async device-to-host copy's bytes, captured at the sync that made them visible.
    D2HResult {
        seq: u64,
        data: BlobId,
        at_sync: u64,
    },
    Finding(Finding),
    /// Recording stopped cleanly.
    Stop,
    /// Where a buffer lived in the recorded process. Metadata, never identity (calls name
    /// buffers by id): it lets a replay find device addresses hidden inside buffer contents,
    /// and put buffers back at those addresses when it must.
    Address {
        buf: BufferId,
        addr: u64,
    },
    /// Content hashes of every live buffer right after the host sync `seq` (opt-in: see
    /// `RecordingBackend::hash_at_syncs`). A replay compares them to find the first sync at
    /// which a buffer differs, which narrows a divergence to the kernels since the sync before.
    SyncHashes {
        seq: u64,
        hashes: Vec<(BufferId, BlobId)>,
    },
}
