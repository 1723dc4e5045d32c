//! What a trace file is made of: a header, then frames, each one self-describing.

use super::call::*;
use crate::backend::{KernelInfo, ModuleCode};
use serde::{Deserialize, Serialize, Serializer};

/// The format this build writes.
///
/// 3 added `Frame::Provenance` (when, by what command, where), `Call::EncodeTensorMap` and
/// `Arg::TensorMap`. 4 added chunked blobs (`Frame::Chunked`: a large buffer's contents as
/// parts of `CHUNK_BYTES`, each its own checksummed frame) and the shared blob store
/// (`Frame::BlobStore`, `Frame::Stored`). 5 added `Frame::Dumped` (why a flight dump was
/// taken, and the calls in flight then). 6 added `Frame::KernelElems` (what a kernel's
/// pointers point at). 7 added collectives (`Call::CommUniqueId`, `CommInit`, `Collective`,
/// `CommDestroy`, `Value::Comm`, `Adopted::Comm`). 8 added what a driver-level recording
/// (`gputape run -o`) needs: `Frame::ModuleImage` (a module's binary image), `Arg::Words`
/// (addresses inside a by-value parameter) and `Call::Opaque` (a driver call not understood).
/// 9 added collective groups (`Call::CommGroupStart`, `CommGroupEnd`). 10 added
/// `Adopted::CommPairs` (a dump's per-peer send and receive numbers). 11 added `Frame::Restart`
/// (a dump's later checkpoints) and `Frame::Clock` (the wall time of a trace's time 0). 12 added
/// `Frame::Stack` (a site's Python stack) and `Frame::Global` (a module's variable). 13 added
/// `Finding::Sanitizer` (what `minimize --sanitize` kept). 14 added `Frame::KernelCooperative`
/// (a kernel launched cooperatively). 15 added `Call::HostFunc` (a host
/// function queued on a stream). 16 added `Frame::Shared` (a buffer or event shared
/// with another process through an IPC handle). 17 added `SharedId::Memory` (physical memory
/// shared through a shareable handle). A format-2 to 16 file reads the same as before.
pub const FORMAT_VERSION: u16 = 17;
/// The oldest reader that can read what this build writes: a format-16 reader does not know
/// `SharedId::Memory` and would call the trace corrupt where one is.
pub const MIN_READER_VERSION: u16 = 17;
/// The file's first 8 bytes: what `Trace::open` checks before anything else.
pub const MAGIC: [u8; 8] = *b"GPUTAPE\0";

/// How the file of a call's site begins when the call was the recording tool's own, not the
/// engine's (`RecordingBackend::tools_own`; `Trace::is_tools_own`): no source path begins so.
pub const TOOL_SITE: &str = "<gputape>";

/// What the trace was recorded on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// The format it was written in (`FORMAT_VERSION` of the build that wrote it).
    pub format: u16,
    /// The oldest reader that can read it (`MIN_READER_VERSION` then).
    pub min_reader: u16,
    /// The version of gputape that wrote it.
    pub gputape: String,
    /// `mock` or `cuda`.
    pub backend: String,
    /// Which device of the host was recorded (0 for the first).
    pub device_ordinal: u32,
    /// The device's name as the driver reports it, when known.
    pub device_name: Option<String>,
    /// SMs on the device, when known.
    pub sm_count: Option<u32>,
    /// Bytes of device memory, when known.
    pub total_memory: Option<u64>,
    /// The driver version as CUDA reports it (12040 for 12.4), when known.
    pub driver_version: Option<i32>,
}

/// When a trace was recorded, and by what. A bug report's trace gets read far from where it
/// was made; this says which run it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Milliseconds since the Unix epoch (UTC) when this trace's recording began (for a
    /// segment, when the segment began; for a flight dump, when the flight recorder was armed).
    pub unix_ms: u64,
    /// The recorded process's command line, as it received it.
    pub command_line: Vec<String>,
    /// The recorded process's id.
    pub pid: u32,
    /// The machine's host name, when it has one.
    pub host: Option<String>,
}

impl Provenance {
    /// This process, now.
    pub fn now() -> Provenance {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty());
        Provenance {
            unix_ms,
            command_line: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            pid: std::process::id(),
            host,
        }
    }

    /// `2026-12-01 10:32:05 UTC`.
    pub fn recorded_at(&self) -> String {
        let secs = self.unix_ms / 1000;
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (y, m, d) = civil_from_days(days as i64);
        format!(
            "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }

    /// The command line as a shell would take it back (arguments with spaces or quotes quoted).
    pub fn command(&self) -> String {
        self.command_line
            .iter()
            .map(|a| {
                if !a.is_empty()
                    && a.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
                {
                    a.clone()
                } else {
                    format!("'{}'", a.replace('\'', "'\\''"))
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A call as it begins: written before the wrapped backend runs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Begin {
    /// The call's number in its segment, from 0, in the order calls began; its `End` has the
    /// same.
    pub seq: u64,
    /// The recording thread that made it, numbered from 0 in order of first call.
    pub thread: u16,
    /// The engine's line that made it.
    pub site: SiteId,
    /// Nanoseconds since recording started.
    pub t_ns: u64,
    /// The call and its arguments.
    pub call: Call,
}

/// A call as it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct End {
    /// The `Begin` it closes.
    pub seq: u64,
    /// Nanoseconds the wrapped backend took, from before the call to its return.
    pub dur_ns: u64,
    /// What it returned, or its error.
    pub ret: Ret,
}

/// Something the recorder noticed that is not a call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Finding {
    /// `copy_h2d_async_retained` promised its source would not change before the next sync of
    /// its stream; it did.
    RetainedSourceChanged {
        /// The copy's call.
        seq: u64,
        /// The sync whose check found the source changed.
        at_sync: u64,
    },
    /// A raw `launch` (call `seq`) of a kernel whose parameter layout nobody gave (a backend
    /// without a kernel registry that does not implement `GpuBackend::kernel_params`): its
    /// `params` arguments were not recorded, so a replay cannot run it.
    ArgsNotRecorded {
        /// The launch.
        seq: u64,
        /// How many parameters the launch passed.
        params: u32,
    },
    /// What compute-sanitizer found in launch `seq` when `minimize --sanitize` kept it (a
    /// race, a read of unwritten memory: no driver error marks it), so a replay under the same
    /// tool knows what reproducing means (format 13).
    Sanitizer {
        /// The launch it was found in (its last launch of the kernel).
        seq: u64,
        /// The tool: memcheck, racecheck, initcheck or synccheck.
        tool: String,
        /// The finding's first line, as the tool wrote it.
        what: String,
        /// The kernel, as the tool names it.
        kernel: String,
    },
}

/// A resource that existed before recording started and was first seen in use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Adopted {
    /// A stream created before recording started.
    Stream {
        /// The id it gets from now on.
        id: StreamId,
        /// It is the backend's `default_stream`.
        is_default: bool,
    },
    /// An event created before recording started.
    Event {
        /// The id it gets from now on.
        id: EventId,
    },
    /// A graph captured before recording started: a replay has no calls to build it from.
    Graph {
        /// The id it gets from now on.
        id: GraphId,
    },
    /// A pinned host region allocated before recording started.
    Host {
        /// The id it gets from now on.
        id: HostId,
        /// Its size.
        bytes: u64,
    },
    /// A communicator joined before recording started (a flight dump's checkpoint lists
    /// them): what its `comm_init` said, and the number of its next collective.
    Comm {
        /// The id it gets from now on.
        id: CommId,
        /// The unique id the rank set joined with.
        unique: crate::backend::CommUniqueId,
        /// Ranks in it.
        nranks: u32,
        /// This rank.
        rank: u32,
        /// The number its next group collective has (sends and receives are numbered per
        /// peer: `CommPairs`).
        next_seq: u64,
    },
    /// Where a communicator joined before recording started stood with each peer (format
    /// 10; after its `Comm`): the number its next send to, and its next receive from, each
    /// peer takes, for the peers it had exchanged with (any other's is 0). A dump whose window
    /// holds none of a pair's exchanges still says which one its rank would have made next,
    /// so the rank that never made it is named, and a rank set's replay leaves out exactly
    /// the exchanges made before the other side's dump began.
    CommPairs {
        /// The communicator (its `Comm`'s id).
        id: CommId,
        /// (peer, the number of the next send to it).
        sends: Vec<(u32, u64)>,
        /// (peer, the number of the next receive from it).
        recvs: Vec<(u32, u64)>,
    },
}

// `Begin` is large (a call's inline args), and boxing it would put a heap allocation on every
// recorded call; frames live on the stack only while being encoded.
#[allow(clippy::large_enum_variant)]
/// One record of a trace file. A name (site, blob, module, kernel, initial buffer) comes
/// before the first frame that uses it, so a trace read up to a cut means what it says. New
/// variants go at the end: the encoding names them by position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// The first frame: format and device.
    Header(TraceHeader),
    /// A call site, named once; calls then carry its id.
    Site {
        /// The id calls carry.
        id: SiteId,
        /// The source file, as `Location::file` gives it.
        file: String,
        /// 1-based line.
        line: u32,
        /// 1-based column.
        col: u32,
    },
    /// Content-addressed bytes; `zstd` says whether `data` is compressed.
    Blob {
        /// The hash of the uncompressed bytes.
        id: BlobId,
        /// Uncompressed size, in bytes.
        len: u64,
        /// `data` is zstd-compressed.
        zstd: bool,
        /// The bytes as stored. As serde bytes: the same encoding as a sequence of `u8`,
        /// written in one copy rather than an element at a time (a step's new bytes, or a
        /// copied-in weight, pass through here on the recorder's thread).
        #[serde(with = "super::args::byte_vec")]
        data: Vec<u8>,
    },
    /// A module's code, written when a kernel of it is first named: a replay compiles exactly
    /// what ran.
    Module(ModuleCode),
    /// A kernel, named once: its module, name and parameter layout.
    Kernel {
        /// The id launches carry.
        id: KernelId,
        /// What the backend's registry knew of it.
        info: KernelInfo,
    },
    /// A buffer live when recording started, with its contents then.
    Initial {
        /// The buffer.
        buf: BufferId,
        /// Its size.
        bytes: u64,
        /// Its contents when recording started.
        data: BlobId,
        /// Where it was allocated.
        site: SiteId,
    },
    /// A stream, event, graph or pinned region that existed before recording, first seen in
    /// use.
    Adopt(Adopted),
    /// A call, written before the wrapped backend runs it.
    Begin(Begin),
    /// The same call's result, written after it returned.
    End(End),
    /// An async device-to-host copy's bytes, captured at the sync that made them visible.
    D2HResult {
        /// The copy's call.
        seq: u64,
        /// The bytes it delivered.
        data: BlobId,
        /// The host sync that made them visible.
        at_sync: u64,
    },
    /// Something the recorder noticed that is not a call.
    Finding(Finding),
    /// Recording stopped cleanly.
    Stop,
    /// Where a buffer lived in the recorded process. Metadata, never identity (calls name
    /// buffers by id): it lets a replay find device addresses hidden inside buffer contents,
    /// and put buffers back at those addresses when it must.
    Address {
        /// The buffer.
        buf: BufferId,
        /// Its base address in the recorded process.
        addr: u64,
    },
    /// Content hashes of every live buffer right after the host sync `seq` (opt-in: see
    /// `RecordingBackend::hash_at_syncs`). A replay compares them to find the first sync at
    /// which a buffer differs, which narrows a divergence to the kernels since the sync before.
    SyncHashes {
        /// The host sync.
        seq: u64,
        /// Each live buffer and the hash of its contents then.
        hashes: Vec<(BufferId, BlobId)>,
    },
    /// When and by what the trace was recorded (format 3). Written right after the header.
    Provenance(Provenance),
    /// Blob `id` is the concatenation of `parts` (format 4): a large buffer is stored chunk by
    /// chunk, each part a blob of its own, so a kill loses at most the part being written, a
    /// second recording of the same bytes stores nothing again, and a reader holds one part
    /// at a time. `id` is `BlobId::chunked(len, parts)`.
    Chunked {
        /// The whole blob's id.
        id: BlobId,
        /// Its size, in bytes.
        len: u64,
        /// Its parts in order, each `CHUNK_BYTES` but the last.
        parts: Vec<BlobId>,
    },
    /// Blob `id` of `len` bytes is in the shared blob store, not in this file (format 4).
    Stored {
        /// The blob, named in the store by `BlobId::hex`.
        id: BlobId,
        /// Its size, in bytes.
        len: u64,
    },
    /// Where the shared blob store was when the trace was recorded (format 4); a reader may
    /// be pointed elsewhere (`--blobs DIR`).
    BlobStore {
        /// The store's directory, as the recorder was given it.
        dir: String,
    },
    /// This trace is a flight recorder's dump, and why it was taken (format 5).
    Dumped(DumpInfo),
    /// The element type of each parameter of kernel `id`, as its owner declared them
    /// (`KernelDesc::with_elems`; format 6). Its own frame so the `Kernel` frame keeps the
    /// encoding older readers know.
    KernelElems {
        /// The kernel, named by an earlier `Frame::Kernel`.
        id: KernelId,
        /// One per parameter; `None` for values and pointers of no declared float type.
        elems: Vec<Option<crate::backend::ElemType>>,
    },
    /// Kernel `id` is launched in thread-block clusters of `dims` (format 8: a driver-level
    /// recording's `cuLaunchKernelEx` asked for them; Hopper kernels that use cluster
    /// instructions fault without). Its own frame, as `KernelElems` is.
    KernelCluster {
        /// The kernel, named by an earlier `Frame::Kernel`.
        id: KernelId,
        /// Blocks per cluster, per dimension.
        dims: [u32; 3],
    },
    /// Module `name`'s binary image (a fatbin, cubin or PTX, as a program handed it to the
    /// driver: format 8), in blob `image`. A replay loads it as it is, under that name.
    ModuleImage {
        /// The module, as `Frame::Kernel`s name it.
        name: String,
        /// Its image.
        image: BlobId,
    },
    /// A later checkpoint a flight dump holds (format 11), written before the first call
    /// after it. A dump starts from its older checkpoint; a rank set's dumps that begin at
    /// different collectives replay together from a checkpoint every rank holds
    /// (`Trace::rebased`), so nothing is left out.
    Restart(Restart),
    /// When the recording's clock read 0 (format 11), in nanoseconds since the Unix epoch
    /// (UTC): calls' `t_ns` count from it. The traces of a rank set, one per process or
    /// thread, are laid on one time line by it (`gputape export --perfetto` of several);
    /// `Provenance::unix_ms` says when recording began, to the millisecond only.
    Clock {
        /// The wall-clock time of `t_ns` 0.
        epoch_unix_ns: u64,
    },
    /// Site `site`'s Python stack (format 12), right after the site: a driver-level recording
    /// of a Python program knows the program's frames at each call, and the site names the
    /// program's own line among them.
    Stack {
        /// The site.
        site: SiteId,
        /// Its frames and marks.
        stack: super::SiteStack,
    },
    /// Buffer `buf` is a module's variable (format 12): a `__constant__` or `__device__` symbol
    /// a driver-level recording's program asked the address of (`cuModuleGetGlobal`,
    /// `cuLibraryGetGlobal`). No allocation holds it; a replay finds it in the module it loaded
    /// and uses it where the recording's copies and launches used the recorded address.
    Global {
        /// The buffer the calls name.
        buf: BufferId,
        /// Its module and symbol, and size.
        global: ModuleGlobal,
    },
    /// Kernel `id` is launched cooperatively (format 14: a driver-level recording's
    /// `cuLaunchCooperativeKernel`, or `cuLaunchKernelEx` with the cooperative attribute): all
    /// its blocks resident at once, so that `this_grid().sync()` can return. A replay that
    /// launched it plainly could hang in that sync. Its own frame, as `KernelCluster` is.
    KernelCooperative {
        /// The kernel, named by an earlier `Frame::Kernel`.
        id: KernelId,
    },
    /// A buffer or an event shared between processes through a CUDA IPC handle (format 16: a
    /// driver-level recording's `cuIpcGetMemHandle`, `cuIpcOpenMemHandle`,
    /// `cuIpcGetEventHandle`, `cuIpcOpenEventHandle`). A trace replayed alone needs none of it
    /// (an opened buffer is made and filled with the bytes seen when it was opened, an opened
    /// event is an event of its own); a joint replay of the processes' traces (`gputape ranks
    /// --replay`) pairs each opened one with the one another trace exported under the same
    /// handle, so that both replays use one piece of memory, or one event, as the processes did.
    Shared {
        /// The buffer or event the calls name.
        what: SharedId,
        /// Its handle, and which side of the sharing this process was.
        share: Share,
    },
}

/// What a process shared with another (`Frame::Shared`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SharedId {
    /// A buffer (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle`).
    Buffer(BufferId),
    /// An event (`cuIpcGetEventHandle`, `cuIpcOpenEventHandle`).
    Event(EventId),
    /// A buffer that is one physical allocation mapped whole, shared through the virtual
    /// memory API (`cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`): its
    /// handle is the recording's key for the allocation (a file descriptor's exporting process
    /// and number, or a fabric handle), not an IPC handle.
    Memory(BufferId),
}

impl SharedId {
    /// The buffer shared, for either kind of buffer.
    pub fn buffer(&self) -> Option<BufferId> {
        match *self {
            SharedId::Buffer(b) | SharedId::Memory(b) => Some(b),
            SharedId::Event(_) => None,
        }
    }

    /// What the sharing went through, for a person: "IPC handle", "shareable handle".
    pub fn through(&self) -> &'static str {
        match self {
            SharedId::Buffer(_) | SharedId::Event(_) => "IPC handle",
            SharedId::Memory(_) => "shareable handle",
        }
    }
}

impl std::fmt::Display for SharedId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SharedId::Buffer(b) | SharedId::Memory(b) => write!(f, "{b}"),
            SharedId::Event(e) => write!(f, "{e}"),
        }
    }
}

/// A buffer or event shared between processes (`Frame::Shared`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    /// The driver's handle (at most `IPC_HANDLE_BYTES`): what pairs the exporting process's
    /// buffer or event with those other processes opened from it.
    pub handle: Vec<u8>,
    /// Which side of the sharing this process was.
    pub side: ShareSide,
}

/// The most bytes an IPC handle has (`CUipcMemHandle` and `CUipcEventHandle` are 64): a longer
/// one is a damaged file.
pub const IPC_HANDLE_BYTES: usize = 64;

/// Which side of a sharing a process was (`Share::side`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShareSide {
    /// This process shared its buffer or event: the handle was taken after the calls numbered
    /// below `at` and before call `at`. A joint replay hands it to its openers there.
    Exported {
        /// The first call after the handle was taken.
        at: u64,
    },
    /// This process opened another's: the `Alloc` (or `CreateEvent`) that makes it stands for
    /// the open, and for a buffer `fill` (when the bytes were read) is the upload of what it
    /// held then, which a joint replay leaves out (the exporter's replay makes those bytes).
    Opened {
        /// The upload's call number.
        fill: Option<u64>,
    },
}

/// A module's variable, as a driver-level recording found it (`Frame::Global`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleGlobal {
    /// The module, as `Frame::ModuleImage` names it.
    pub module: String,
    /// The variable's symbol.
    pub name: String,
    /// Its size.
    pub bytes: u64,
}

/// Why a flight dump was taken: a failed call, a signal, a hang's deadline, the engine's own
/// `flight_dump(reason)`. Stored in the dump so whoever reads it far from the crash knows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpInfo {
    /// In words, as the trigger gave it.
    pub reason: String,
    /// Calls that had begun and not returned when the dump was taken (by seq), with the
    /// recording thread each was on: for a hang, the blocked host call.
    pub in_flight: Vec<(u64, u16)>,
}

/// A checkpoint inside a dump, after its first: the device state, whole, before call
/// `first_seq`. Whole rather than the changes since the checkpoint before, so a replay can
/// begin here without the calls before it (which, in a rank set, met other ranks' calls that
/// their dumps may not hold).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restart {
    /// The recorder's count of step boundaries when it was taken.
    pub step: u64,
    /// The first call after it.
    pub first_seq: u64,
    /// Buffers live then, with their contents.
    pub initial: Vec<super::InitialBuffer>,
    /// Streams, events, graphs, pinned regions and communicators alive then (a
    /// communicator with the numbers of its next collectives).
    pub adopted: Vec<Adopted>,
    /// Where each live buffer was in the recorded process.
    pub addresses: Vec<(BufferId, u64)>,
}

/// How the reason of a dump taken for a hang begins (the recorder's watcher writes it).
pub const HANG_REASON: &str = "hang:";

impl DumpInfo {
    /// The engine dumped for a NaN it saw (its reason says so): the NaN is the fault to
    /// reproduce, and `replay` checks values rather than only errors.
    pub fn names_nan(&self) -> bool {
        self.reason
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w.eq_ignore_ascii_case("nan"))
    }

    /// Taken because a call did not return in time: its replay is expected to hang too.
    pub fn is_hang(&self) -> bool {
        self.reason.starts_with(HANG_REASON)
    }

    /// For a hang's dump, how long the blocked call had waited when the watcher gave up (its
    /// reason says "has not returned after X s"): a replay stuck at the same place for longer
    /// has shown the same hang, without waiting out a deadline sized for the whole trace.
    pub fn hang_waited_s(&self) -> Option<f64> {
        if !self.is_hang() {
            return None;
        }
        let rest = self.reason.split("has not returned after ").nth(1)?;
        let secs: f64 = rest.split(' ').next()?.parse().ok()?;
        (secs.is_finite() && secs > 0.0).then_some(secs)
    }

    /// Whether call `seq` was in flight when the dump was taken.
    pub fn was_in_flight(&self, seq: u64) -> bool {
        self.in_flight.iter().any(|(s, _)| *s == seq)
    }
}

/// `Frame::Begin` by reference. The recorder's hot path encodes a call where it was built: a
/// `Frame` would move the call (with its inline arguments) into the frame and drop it after,
/// which was a tenth of a recorded launch. Encodes to exactly the bytes of the `Frame` (tested).
pub struct BeginRef<'a, C: Serialize + ?Sized = Call> {
    /// `Begin::seq`.
    pub seq: u64,
    /// `Begin::thread`.
    pub thread: u16,
    /// `Begin::site`.
    pub site: SiteId,
    /// `Begin::t_ns`.
    pub t_ns: u64,
    /// A `Call`, or anything that serializes like one. (A launch goes through
    /// `TraceWriter::write_launch_begin` instead.)
    pub call: &'a C,
}

impl BeginRef<'_, ()> {
    /// This head with its call.
    pub fn with<'b, C: Serialize + ?Sized>(&self, call: &'b C) -> BeginRef<'b, C> {
        BeginRef {
            seq: self.seq,
            thread: self.thread,
            site: self.site,
            t_ns: self.t_ns,
            call,
        }
    }
}

/// `Begin`'s position among `Frame`'s variants, which is what the encoding names it by.
const FRAME_BEGIN_INDEX: u32 = 7;

impl<C: Serialize + ?Sized> Serialize for BeginRef<'_, C> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename = "Begin")]
        struct Body<'b, C: Serialize + ?Sized> {
            seq: u64,
            thread: u16,
            site: SiteId,
            t_ns: u64,
            call: &'b C,
        }
        let body = Body {
            seq: self.seq,
            thread: self.thread,
            site: self.site,
            t_ns: self.t_ns,
            call: self.call,
        };
        s.serialize_newtype_variant("Frame", FRAME_BEGIN_INDEX, "Begin", &body)
    }
}

/// `Call::Launch` or `Call::LaunchTyped` by parts, each argument made by `arg(i)` as it is
/// encoded: a recorded launch never collects its arguments into an `Args` (which was a fifth of
/// a recorded launch, counting the drop). The codec writes it by hand
/// (`codec::append_launch_begin`), in exactly the bytes of the `Call` it stands for (tested).
pub struct LaunchRef<F> {
    /// `Call::LaunchTyped` rather than `Call::Launch`.
    pub typed: bool,
    /// The launch's kernel, shape and stream.
    pub head: LaunchHead,
    /// How many arguments `arg` gives (indices `0..n_args`).
    pub n_args: usize,
    /// `Fn(usize) -> ArgRef`.
    pub arg: F,
}

/// An `Arg` whose value bytes are borrowed from the caller: the hot path need not copy them
/// into an `ArgBytes` only to encode them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgRef<'a> {
    /// `Arg::Buf`.
    Buf(DevAddr),
    /// `Arg::Val`, its bytes borrowed.
    Val(&'a [u8]),
}

impl Begin {
    /// A launch's Begin frame in the parts the recorder writes it from (its head, and a view of
    /// the launch for `codec::append_launch_begin`); `None` for any other call. Lets tests and
    /// benchmarks write recorded frames the way the recorder does.
    // An `impl Fn` cannot be named in a type alias on stable Rust.
    #[allow(clippy::type_complexity)]
    pub fn launch_parts<'a>(
        &'a self,
    ) -> Option<(
        BeginRef<'static, ()>,
        LaunchRef<impl Fn(usize) -> ArgRef<'a> + 'a>,
    )> {
        let (Call::Launch { head, args } | Call::LaunchTyped { head, args }) = &self.call else {
            return None;
        };
        // The hand-written launch encoding has no tensor maps or address words: such launches
        // take serde's path.
        if args
            .iter()
            .any(|a| matches!(a, Arg::TensorMap(_) | Arg::Words(_)))
        {
            return None;
        }
        let typed = matches!(self.call, Call::LaunchTyped { .. });
        let begin = BeginRef {
            seq: self.seq,
            thread: self.thread,
            site: self.site,
            t_ns: self.t_ns,
            call: &(),
        };
        let view = LaunchRef {
            typed,
            head: *head,
            n_args: args.len(),
            arg: move |i: usize| match &args[i] {
                Arg::Buf(a) => ArgRef::Buf(*a),
                Arg::Val(v) => ArgRef::Val(v),
                // Refused above.
                Arg::TensorMap(_) | Arg::Words(_) => ArgRef::Val(&[]),
            },
        };
        Some((begin, view))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::codec;

    /// If `Frame`'s variants are reordered, `BeginRef` would write frames a reader decodes as
    /// something else; this pins the two encodings together, for a call with every kind of
    /// argument.
    #[test]
    fn begin_ref_encodes_like_the_frame() {
        let call = Call::LaunchTyped {
            head: LaunchHead {
                kernel: KernelId(3),
                grid: [4, 1, 1],
                block: [128, 1, 1],
                shared_mem: 64,
                stream: StreamRef::Id(StreamId(1)),
            },
            args: [
                Arg::Buf(DevAddr::Buf {
                    buf: BufferId(2),
                    off: 16,
                }),
                Arg::Buf(DevAddr::Null),
                Arg::Val(ArgBytes::from(&7u32.to_le_bytes()[..])),
            ]
            .into_iter()
            .collect(),
        };
        let frame = Frame::Begin(Begin {
            seq: 300,
            thread: 2,
            site: SiteId(9),
            t_ns: 123_456_789,
            call: call.clone(),
        });
        let by_ref = BeginRef {
            seq: 300,
            thread: 2,
            site: SiteId(9),
            t_ns: 123_456_789,
            call: &call,
        };
        let a = codec::encode_with_bincode(&frame).unwrap();
        let b = codec::encode_to_vec(&by_ref).unwrap();
        assert_eq!(a, b);
        assert_eq!(codec::decode(&b).unwrap(), frame);
    }
}
