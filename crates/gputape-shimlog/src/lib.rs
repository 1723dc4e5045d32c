//! The driver shim's call log: one file per process that called the CUDA driver under
//! `gputape run -o`, written by gputape's `libcuda.so.1` as calls return and read by gputape,
//! which turns it into a trace. One crate for both sides, so the writer and the reader cannot
//! disagree on a byte; it depends on nothing, so the shim stays small.
//!
//! The shim writes what it saw and nothing it would have to work out (which buffer an address
//! falls in, what a kernel is called when demangled): it runs inside the recorded program, on
//! its threads, and must stay cheap. Everything else is done afterwards, by the reader.
//!
//! Layout, little-endian throughout:
//!
//! ```text
//! file   := MAGIC (8) version:u16 pid:u32 driver_version:i32  record*
//! record := body_len:u32 tag:u8 t_ns:u64 thread:u32 status:i32 stack:u32 body
//! bytes  := len:u64 data      string := len:u32 utf8-ish data
//! ```
//!
//! `body_len` counts the bytes after itself. A process killed mid-write leaves a record cut
//! short at the end: the reader stops there with [`LogError::Cut`] and keeps every record
//! before it. A record of an unknown tag is refused (the reader is from an older build);
//! every length is checked against the bytes that are left, so a damaged file can ask for no
//! allocation larger than itself.

use std::borrow::Cow;
use std::fmt;

pub mod entry;
pub mod env;

/// The file's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"GTSHMLOG";
/// The layout this build writes. 2 added each record's `stack` (the calling Python thread's
/// frames, `Rec::Stack`) and the `Code` and `Stack` records; a layout-1 log reads as one whose
/// records have no stack.
pub const VERSION: u16 = 2;
/// The oldest layout this build reads.
pub const OLDEST_READ: u16 = 1;
/// Bytes before the first record.
pub const HEADER_LEN: usize = 8 + 2 + 4 + 4;
/// Bytes of a record's fixed part after `body_len`: tag, time, thread, status, stack.
const FIXED: usize = 1 + 8 + 4 + 4 + 4;
/// The fixed part in layout 1, which had no stack.
const FIXED_V1: usize = FIXED - 4;
/// A record's `stack` when the call's Python frames are not known: no Python in the process,
/// a thread Python never ran on, lines off, or a layout-1 log.
pub const NO_STACK: u32 = 0;

/// A record's status when the call's result is not known: an opaque call, logged before it
/// ran.
pub const STATUS_UNKNOWN: i32 = i32::MIN;
/// A record's status when the call had not returned: a flight dump taken for a hang writes the
/// blocked calls so, just before its `Dump` record.
/// A launch record's type byte (`Rec::tag`), for code that accounts launches before it has
/// built the record.
pub const TAG_LAUNCH: u8 = 14;

pub const STATUS_NOT_RETURNED: i32 = i32::MIN + 1;

/// How a hang's dump reason begins (the same words the trace's hang dumps begin with).
pub const HANG_PREFIX: &str = "hang: ";

/// Where a flight directory's notes between processes live: peers' announcements, and
/// `gputape dump PID`'s requests (`ask_path`).
pub const PEERS_DIR: &str = ".peers";

/// The request `gputape dump PID` writes for process `pid` in flight directory `dir` (its text
/// is the reason): the shim's peers thread and a trait-level recorder's watcher look for it.
pub fn ask_path(dir: &std::path::Path, pid: u32) -> std::path::PathBuf {
    dir.join(PEERS_DIR).join(ask_name(pid))
}

/// The name of `ask_path`'s file, in `PEERS_DIR`.
pub fn ask_name(pid: u32) -> String {
    format!("ask.{pid}")
}

/// What the file says about the process that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The process.
    pub pid: u32,
    /// `cuDriverGetVersion`'s answer, 0 when it was not asked.
    pub driver_version: i32,
}

/// One driver call, as the shim saw it return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Nanoseconds since the process's first recorded call.
    pub t_ns: u64,
    /// The calling thread (`gettid`).
    pub thread: u32,
    /// What the driver returned (`CUresult`; 0 is success).
    pub status: i32,
    /// The calling thread's Python frames when it called (a `Rec::Stack` written before), or
    /// [`NO_STACK`].
    pub stack: u32,
    /// Which call, and its arguments and results.
    pub call: Rec<'a>,
}

/// What every record's fixed part holds besides its type: (time, thread, status, stack), as
/// in [`Record`].
pub type Head = (u64, u32, i32, u32);

/// Where a copy or memset ran: `stream` is the handle passed; `sync` says the call was the
/// blocking form (no stream argument: the legacy stream, or the per-thread one through a
/// `_ptds` form, and the host waits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct On {
    /// The stream handle as passed (0 for the blocking forms); 0 through a `_ptsz`/`_ptds`
    /// form is logged as `CU_STREAM_PER_THREAD` (2).
    pub stream: u64,
    /// The blocking form of the call.
    pub sync: bool,
}

/// The calls the shim understands. Handles and addresses are the process's own numbers; the
/// reader maps them to the trace's ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rec<'a> {
    /// `cuMemAlloc*`: `ptr` is the new allocation.
    Alloc { ptr: u64, bytes: u64, managed: bool },
    /// `cuMemFree*`.
    Free { ptr: u64 },
    /// `cuMemAllocHost*`, `cuMemHostAlloc`: a pinned host region.
    HostAlloc { ptr: u64, bytes: u64 },
    /// `cuMemFreeHost`.
    HostFree { ptr: u64 },
    /// `cuMemcpyHtoD*`: `data` is the source's bytes when the call was made.
    CopyH2D { dst: u64, on: On, data: &'a [u8] },
    /// `cuMemcpyDtoH*`: for the blocking form `data` is what arrived; for the async form it
    /// is empty and a [`Rec::D2HBytes`] follows at the sync that made the bytes visible.
    CopyD2H {
        src: u64,
        dst_host: u64,
        len: u64,
        on: On,
        data: &'a [u8],
    },
    /// The bytes of the async device-to-host copy recorded `copy` records earlier in the file
    /// (its index among all records, from 0), read after a sync it had to be done by.
    D2HBytes { copy: u64, data: &'a [u8] },
    /// `cuMemcpyDtoD*`, and `cuMemcpy*` between two device addresses.
    CopyD2D {
        src: u64,
        dst: u64,
        len: u64,
        on: On,
    },
    /// `cuMemsetD8/D16/D32*`: `count` elements of `elem` bytes (1, 2 or 4), each `value`.
    Memset {
        dst: u64,
        value: u32,
        elem: u8,
        count: u64,
        on: On,
    },
    /// `cuModuleLoadData*`, `cuModuleLoadFatBinary`, `cuLibraryLoadData`, and the file forms:
    /// `image` is the whole image (fatbin, cubin or PTX) the driver was given.
    ModuleLoad {
        handle: u64,
        library: bool,
        image: &'a [u8],
    },
    /// `cuModuleUnload`, `cuLibraryUnload`.
    ModuleUnload { handle: u64, library: bool },
    /// `cuModuleGetFunction` (`library` false: `owner` a module, `handle` a `CUfunction`) and
    /// `cuLibraryGetKernel` (`library` true: `owner` a library, `handle` a `CUkernel`).
    Function {
        owner: u64,
        library: bool,
        handle: u64,
        name: &'a [u8],
    },
    /// `cuKernelGetFunction`: the `CUfunction` of a `CUkernel` in the current context.
    KernelFunction { kernel: u64, func: u64 },
    /// `cuModuleGetGlobal_v2` (`library` false) or `cuLibraryGetGlobal` (true): module
    /// variable `name` of `owner` (a `__constant__` or `__device__` symbol) lies at `ptr`,
    /// `bytes` long. Memory of its own that no allocation holds.
    Global {
        owner: u64,
        library: bool,
        name: &'a [u8],
        ptr: u64,
        bytes: u64,
    },
    /// `cuLibraryGetModule`: `module` is library `library`'s module in the current context
    /// (the CUDA runtime asks a variable's address of it).
    LibraryModule { library: u64, module: u64 },
    /// `cuLaunchKernel*`, `cuLaunchKernelEx*`: `func` as passed (a `CUfunction` or a
    /// `CUkernel`); `cluster` the thread-block cluster `cuLaunchKernelEx` asked for (zeros:
    /// none); `layout` the parameters' (offset, size) as the driver gave them (`None` when it
    /// could not); `params` the parameter bytes laid out by it.
    Launch {
        func: u64,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        cluster: [u32; 3],
        /// Borrowed when written (the shim keeps one per function), owned when read.
        layout: Option<Cow<'a, [(u32, u32)]>>,
        params: &'a [u8],
    },
    /// `cuStreamCreate*`.
    StreamCreate { stream: u64, flags: u32 },
    /// `cuStreamDestroy*`.
    StreamDestroy { stream: u64 },
    /// `cuEventCreate`.
    EventCreate { event: u64, flags: u32 },
    /// `cuEventDestroy*`.
    EventDestroy { event: u64 },
    /// `cuEventRecord*`.
    EventRecord { event: u64, stream: u64 },
    /// `cuStreamWaitEvent*`.
    StreamWaitEvent { stream: u64, event: u64 },
    /// `cuEventSynchronize`.
    EventSync { event: u64 },
    /// `cuStreamSynchronize*`.
    StreamSync { stream: u64 },
    /// `cuCtxSynchronize`.
    CtxSync,
    /// A call that changes what the device holds or runs, which the shim does not understand:
    /// its entry point's name. A replay cannot do it, and says so.
    Opaque { name: &'a [u8] },
    /// `cuMemAddressReserve`: a range of virtual addresses (the allocator's expandable
    /// segments), backed piecewise by `Map`s.
    Reserve { ptr: u64, size: u64 },
    /// `cuMemAddressFree`.
    Unreserve { ptr: u64, size: u64 },
    /// `cuMemMap`: `size` bytes at `ptr` now backed by physical memory.
    Map { ptr: u64, size: u64 },
    /// `cuMemUnmap`.
    Unmap { ptr: u64, size: u64 },
    /// `cuTensorMapEncodeTiled`: the 128 bytes it wrote (`map`, which launches then pass by
    /// value) and everything it was given: the element type (`CUtensorMapDataType`), the
    /// global address, the dimensions, strides (`rank - 1`), box and element strides, and
    /// interleave, swizzle, L2 promotion and out-of-bounds fill.
    TensorMap {
        map: &'a [u8],
        dtype: u32,
        base: u64,
        dims: Vec<u64>,
        strides: Vec<u64>,
        box_dims: Vec<u32>,
        element_strides: Vec<u32>,
        modes: [u32; 4],
    },
    /// `cuStreamBeginCapture*`: work on `stream` is captured from here (`mode` the driver's
    /// `CUstreamCaptureMode`: 0 global, 1 thread-local, 2 relaxed).
    CaptureBegin { stream: u64, mode: u32 },
    /// `cuStreamEndCapture*`: the capture on `stream` ended, making `graph` (0 when it failed).
    CaptureEnd { stream: u64, graph: u64 },
    /// `cuGraphInstantiate*`: `exec` made from `graph`.
    GraphInstantiate { exec: u64, graph: u64 },
    /// `cuGraphLaunch*`.
    GraphLaunch { exec: u64, stream: u64 },
    /// `cuGraphExecDestroy`.
    GraphExecDestroy { exec: u64 },
    /// `cuGraphDestroy`.
    GraphDestroy { graph: u64 },
    /// A flight dump (`GPUTAPE_SHIM_FLIGHT_DIR`) left out `dropped` records here: the ring of
    /// recent calls had wrapped. Records keep their indices (the next one's is this many
    /// higher), so a `D2HBytes` still names its copy.
    Gap { dropped: u64 },
    /// The flight recorder dumped here, and why (`reason`, words for a person: the call that
    /// returned the fault, whose code is the record's status, or a hang, status 0). The last
    /// record of a dump; a hang's blocked calls come just before it, with
    /// `STATUS_NOT_RETURNED`.
    Dump { reason: &'a [u8] },
    /// A Python code object, the first time a stack holds it: what turns a frame's
    /// instruction offset into a line, read offline (`co_linetable`'s format is CPython's, of
    /// minor version `py_minor`). `id` is the log's own number for it: a freed code object's
    /// address is reused, so addresses are not names.
    Code {
        id: u32,
        py_minor: u8,
        first_line: i32,
        filename: &'a [u8],
        qualname: &'a [u8],
        linetable: &'a [u8],
    },
    /// A calling thread's Python frames, innermost first, named once: `frames` is
    /// little-endian (code id, instruction index) pairs, 8 bytes each ([`stack_frames`]); none
    /// for a Python thread with no Python frame (autograd's backward thread).
    Stack { id: u32, frames: &'a [u8] },
    /// A native frame, the first time a stack holds it: the module (its path as the loader
    /// has it) and the offset of the return address in it, and the nearest exported symbol
    /// the loader knows (empty when none) with the offset into it. A program without Python
    /// has no line: its sites are these.
    NativeFrame {
        id: u32,
        module: &'a [u8],
        offset: u64,
        symbol: &'a [u8],
        symbol_offset: u64,
    },
    /// A calling thread's native frames outside the shim, innermost first, named once:
    /// `frames` is little-endian `NativeFrame` ids, 4 bytes each ([`native_frames`]). Its id is
    /// of the same numbering as `Stack`'s: a record's stack is one or the other.
    NativeStack { id: u32, frames: &'a [u8] },
    /// `cuLaunchCooperativeKernel*`, or `cuLaunchKernelEx*` with the cooperative attribute:
    /// written just before the launch's own `Launch` record, which it marks as one whose
    /// blocks must all be resident at once (`this_grid().sync()`).
    Cooperative { func: u64 },
    /// `cuGraphAdd*Node` (a kernel, copy or memset node): the same thread's next record is
    /// not work queued now but a node added to `graph`, run at each launch of an executable
    /// made from it. Nodes are logged in the order they were added, which their dependencies
    /// allow (a node's dependencies exist before it).
    GraphNode { graph: u64 },
    /// The device a context was made on (`cuDevicePrimaryCtxRetain`, `cuCtxCreate*`), the first
    /// time it is: its ordinal, name, SMs and bytes of memory, as the driver reports them
    /// (what a trace says it was recorded on).
    Device {
        ordinal: u32,
        sm_count: u32,
        total_memory: u64,
        name: &'a [u8],
    },
    /// Managed memory the host wrote since the device last ran: `data` at `dst`, as the host
    /// left it before the work this record precedes (the shim compares each managed
    /// allocation with what it last saw while the device was idle).
    ManagedWrite { dst: u64, data: &'a [u8] },
    /// Managed memory the device changed, as the host sees it once a context sync returned:
    /// `data` at `src` (what the program can read with plain loads, no copy).
    ManagedRead { src: u64, data: &'a [u8] },
    /// `cuThreadExchangeStreamCaptureMode`: the calling thread's capture interaction mode is
    /// `mode` from here (0 global, 1 thread-local, 2 relaxed), as PyTorch's allocator sets it
    /// around each allocation it makes while a capture is open.
    CaptureMode { mode: u32 },
}

/// The `NativeFrame` ids of a `Rec::NativeStack`'s `frames`, innermost first.
pub fn native_frames(frames: &[u8]) -> impl Iterator<Item = u32> + '_ {
    frames
        .chunks_exact(4)
        .map(|p| u32::from_le_bytes(p.try_into().expect("4 bytes")))
}

/// Whether a native module (a path) is one a program calls the driver through rather than
/// the program itself: CUDA's own libraries, PyTorch's, the C and C++ runtimes and the
/// loader. A native site names the innermost frame outside them.
pub fn native_library(module: &[u8]) -> bool {
    const LIBRARIES: [&[u8]; 22] = [
        b"libcuda.",
        b"libcudart",
        b"libcublas",
        b"libcudnn",
        b"libnccl",
        b"libnvrtc",
        b"libnvJitLink",
        b"libcufft",
        b"libcurand",
        b"libcusparse",
        b"libcusolver",
        b"libnvToolsExt",
        b"libnvperf",
        b"libcupti",
        b"libtorch",
        b"libc10",
        b"libstdc++",
        b"libc.so",
        b"libgcc_s",
        b"libgomp",
        b"ld-linux",
        b"libpython",
    ];
    let name = module
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(module, |i| &module[i + 1..]);
    LIBRARIES.iter().any(|l| name.starts_with(l))
}

/// The (code id, instruction index) pairs of a `Rec::Stack`'s `frames`, innermost first.
pub fn stack_frames(frames: &[u8]) -> impl Iterator<Item = (u32, u32)> + '_ {
    frames.chunks_exact(8).map(|p| {
        (
            u32::from_le_bytes(p[..4].try_into().expect("4 bytes")),
            u32::from_le_bytes(p[4..].try_into().expect("4 bytes")),
        )
    })
}

impl Rec<'_> {
    /// The driver entry points the record stands for, for a person (`cuStreamSynchronize`).
    pub fn family(&self) -> &'static str {
        match self {
            Rec::Alloc { .. } => "cuMemAlloc",
            Rec::Free { .. } => "cuMemFree",
            Rec::HostAlloc { .. } => "cuMemHostAlloc",
            Rec::HostFree { .. } => "cuMemFreeHost",
            Rec::CopyH2D { .. } => "cuMemcpyHtoD",
            Rec::CopyD2H { .. } | Rec::D2HBytes { .. } => "cuMemcpyDtoH",
            Rec::CopyD2D { .. } => "cuMemcpyDtoD",
            Rec::Memset { .. } => "cuMemset",
            Rec::ModuleLoad { .. } => "cuModuleLoad",
            Rec::ModuleUnload { .. } => "cuModuleUnload",
            Rec::Function { .. } => "cuModuleGetFunction",
            Rec::KernelFunction { .. } => "cuKernelGetFunction",
            Rec::Global { .. } => "cuModuleGetGlobal",
            Rec::LibraryModule { .. } => "cuLibraryGetModule",
            Rec::Launch { .. } => "cuLaunchKernel",
            Rec::StreamCreate { .. } => "cuStreamCreate",
            Rec::StreamDestroy { .. } => "cuStreamDestroy",
            Rec::EventCreate { .. } => "cuEventCreate",
            Rec::EventDestroy { .. } => "cuEventDestroy",
            Rec::EventRecord { .. } => "cuEventRecord",
            Rec::StreamWaitEvent { .. } => "cuStreamWaitEvent",
            Rec::EventSync { .. } => "cuEventSynchronize",
            Rec::StreamSync { .. } => "cuStreamSynchronize",
            Rec::CtxSync => "cuCtxSynchronize",
            Rec::Opaque { .. } => "an opaque call",
            Rec::Reserve { .. } => "cuMemAddressReserve",
            Rec::Unreserve { .. } => "cuMemAddressFree",
            Rec::Map { .. } => "cuMemMap",
            Rec::Unmap { .. } => "cuMemUnmap",
            Rec::TensorMap { .. } => "cuTensorMapEncodeTiled",
            Rec::CaptureBegin { .. } => "cuStreamBeginCapture",
            Rec::CaptureEnd { .. } => "cuStreamEndCapture",
            Rec::GraphInstantiate { .. } => "cuGraphInstantiate",
            Rec::GraphLaunch { .. } => "cuGraphLaunch",
            Rec::GraphExecDestroy { .. } => "cuGraphExecDestroy",
            Rec::GraphDestroy { .. } => "cuGraphDestroy",
            Rec::Gap { .. } => "(dropped records)",
            Rec::Dump { .. } => "(flight dump)",
            Rec::Code { .. } => "(Python code object)",
            Rec::Stack { .. } => "(Python stack)",
            Rec::NativeFrame { .. } => "(native frame)",
            Rec::NativeStack { .. } => "(native stack)",
            Rec::Cooperative { .. } => "cuLaunchCooperativeKernel",
            Rec::GraphNode { .. } => "cuGraphAddNode",
            Rec::Device { .. } => "cuDevicePrimaryCtxRetain",
            Rec::ManagedWrite { .. } | Rec::ManagedRead { .. } => "(managed memory)",
            Rec::CaptureMode { .. } => "cuThreadExchangeStreamCaptureMode",
        }
    }

    /// Whether a flight ring keeps this record for as long as the process lives rather than
    /// only while it is recent: what defines the state later calls run against (allocations,
    /// modules, kernels, streams, events, tensor maps), not the work itself.
    pub fn is_state(&self) -> bool {
        match self {
            Rec::Alloc { .. }
            | Rec::Free { .. }
            | Rec::HostAlloc { .. }
            | Rec::HostFree { .. }
            | Rec::ModuleLoad { .. }
            | Rec::ModuleUnload { .. }
            | Rec::Function { .. }
            | Rec::KernelFunction { .. }
            | Rec::Global { .. }
            | Rec::LibraryModule { .. }
            | Rec::StreamCreate { .. }
            | Rec::StreamDestroy { .. }
            | Rec::EventCreate { .. }
            | Rec::EventDestroy { .. }
            | Rec::Reserve { .. }
            | Rec::Unreserve { .. }
            | Rec::Map { .. }
            | Rec::Unmap { .. }
            | Rec::TensorMap { .. }
            // A graph is launched long after it was made: its capture and everything
            // captured (the ring keeps what comes between a begin and its end) are state.
            | Rec::CaptureBegin { .. }
            | Rec::CaptureEnd { .. }
            | Rec::GraphInstantiate { .. }
            | Rec::GraphExecDestroy { .. }
            | Rec::GraphDestroy { .. }
            // A node's work (the record after it) is kept for good too (`flight.rs`).
            | Rec::GraphNode { .. }
            | Rec::Device { .. }
            // Named once and used by every later record that carries them.
            | Rec::Code { .. }
            | Rec::Stack { .. }
            | Rec::NativeFrame { .. }
            | Rec::NativeStack { .. } => true,
            Rec::CopyH2D { .. }
            | Rec::CopyD2H { .. }
            | Rec::D2HBytes { .. }
            | Rec::CopyD2D { .. }
            | Rec::Memset { .. }
            | Rec::Launch { .. }
            | Rec::EventRecord { .. }
            | Rec::StreamWaitEvent { .. }
            | Rec::EventSync { .. }
            | Rec::StreamSync { .. }
            | Rec::CtxSync
            | Rec::Opaque { .. }
            | Rec::GraphLaunch { .. }
            | Rec::Gap { .. }
            | Rec::Dump { .. }
            | Rec::ManagedWrite { .. }
            | Rec::ManagedRead { .. }
            | Rec::CaptureMode { .. }
            // Travels with the launch it precedes.
            | Rec::Cooperative { .. } => false,
        }
    }

    /// The record's type byte in the log (what a reader dispatches on).
    pub fn tag(&self) -> u8 {
        match self {
            Rec::Alloc { .. } => 1,
            Rec::Free { .. } => 2,
            Rec::HostAlloc { .. } => 3,
            Rec::HostFree { .. } => 4,
            Rec::CopyH2D { .. } => 5,
            Rec::CopyD2H { .. } => 6,
            Rec::D2HBytes { .. } => 7,
            Rec::CopyD2D { .. } => 8,
            Rec::Memset { .. } => 9,
            Rec::ModuleLoad { .. } => 10,
            Rec::ModuleUnload { .. } => 11,
            Rec::Function { .. } => 12,
            Rec::KernelFunction { .. } => 13,
            Rec::Launch { .. } => TAG_LAUNCH,
            Rec::StreamCreate { .. } => 15,
            Rec::StreamDestroy { .. } => 16,
            Rec::EventCreate { .. } => 17,
            Rec::EventDestroy { .. } => 18,
            Rec::EventRecord { .. } => 19,
            Rec::StreamWaitEvent { .. } => 20,
            Rec::EventSync { .. } => 21,
            Rec::StreamSync { .. } => 22,
            Rec::CtxSync => 23,
            Rec::Opaque { .. } => 24,
            Rec::Reserve { .. } => 25,
            Rec::Unreserve { .. } => 26,
            Rec::Map { .. } => 27,
            Rec::Unmap { .. } => 28,
            Rec::TensorMap { .. } => 29,
            Rec::Gap { .. } => 30,
            Rec::Dump { .. } => 31,
            Rec::CaptureBegin { .. } => 32,
            Rec::CaptureEnd { .. } => 33,
            Rec::GraphInstantiate { .. } => 34,
            Rec::GraphLaunch { .. } => 35,
            Rec::GraphExecDestroy { .. } => 36,
            Rec::GraphDestroy { .. } => 37,
            Rec::Code { .. } => 38,
            Rec::Stack { .. } => 39,
            Rec::Global { .. } => 40,
            Rec::LibraryModule { .. } => 41,
            Rec::NativeFrame { .. } => 42,
            Rec::NativeStack { .. } => 43,
            Rec::Cooperative { .. } => 44,
            Rec::GraphNode { .. } => 45,
            Rec::Device { .. } => 46,
            Rec::ManagedWrite { .. } => 47,
            Rec::ManagedRead { .. } => 48,
            Rec::CaptureMode { .. } => 49,
        }
    }
}

/// The file's header bytes.
pub fn header(h: Header) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8..10].copy_from_slice(&VERSION.to_le_bytes());
    out[10..14].copy_from_slice(&h.pid.to_le_bytes());
    out[14..18].copy_from_slice(&h.driver_version.to_le_bytes());
    out
}

/// Appends `r`'s bytes to `out`.
pub fn encode(r: &Record<'_>, out: &mut Vec<u8>) {
    let start = begin(out, r.call.tag(), (r.t_ns, r.thread, r.status, r.stack));
    let on = |out: &mut Vec<u8>, on: &On| {
        put64(out, on.stream);
        out.push(u8::from(on.sync));
    };
    match &r.call {
        Rec::Alloc {
            ptr,
            bytes,
            managed,
        } => {
            put64(out, *ptr);
            put64(out, *bytes);
            out.push(u8::from(*managed));
        }
        Rec::Free { ptr } | Rec::HostFree { ptr } => put64(out, *ptr),
        Rec::HostAlloc { ptr, bytes } => {
            put64(out, *ptr);
            put64(out, *bytes);
        }
        Rec::LibraryModule { library, module } => {
            put64(out, *library);
            put64(out, *module);
        }
        Rec::Cooperative { func } => put64(out, *func),
        Rec::GraphNode { graph } => put64(out, *graph),
        Rec::CaptureMode { mode } => out.extend_from_slice(&mode.to_le_bytes()),
        Rec::ManagedWrite { dst: at, data } | Rec::ManagedRead { src: at, data } => {
            put64(out, *at);
            put_bytes(out, data);
        }
        Rec::Device {
            ordinal,
            sm_count,
            total_memory,
            name,
        } => {
            out.extend_from_slice(&ordinal.to_le_bytes());
            out.extend_from_slice(&sm_count.to_le_bytes());
            put64(out, *total_memory);
            put_bytes(out, name);
        }
        Rec::CopyH2D { dst, on: o, data } => {
            put64(out, *dst);
            on(out, o);
            put_bytes(out, data);
        }
        Rec::CopyD2H {
            src,
            dst_host,
            len,
            on: o,
            data,
        } => {
            put64(out, *src);
            put64(out, *dst_host);
            put64(out, *len);
            on(out, o);
            put_bytes(out, data);
        }
        Rec::D2HBytes { copy, data } => {
            put64(out, *copy);
            put_bytes(out, data);
        }
        Rec::CopyD2D {
            src,
            dst,
            len,
            on: o,
        } => {
            put64(out, *src);
            put64(out, *dst);
            put64(out, *len);
            on(out, o);
        }
        Rec::Memset {
            dst,
            value,
            elem,
            count,
            on: o,
        } => {
            put64(out, *dst);
            out.extend_from_slice(&value.to_le_bytes());
            out.push(*elem);
            put64(out, *count);
            on(out, o);
        }
        Rec::ModuleLoad {
            handle,
            library,
            image,
        } => {
            put64(out, *handle);
            out.push(u8::from(*library));
            put_bytes(out, image);
        }
        Rec::ModuleUnload { handle, library } => {
            put64(out, *handle);
            out.push(u8::from(*library));
        }
        Rec::Function {
            owner,
            library,
            handle,
            name,
        } => {
            put64(out, *owner);
            out.push(u8::from(*library));
            put64(out, *handle);
            put_str(out, name);
        }
        Rec::KernelFunction { kernel, func } => {
            put64(out, *kernel);
            put64(out, *func);
        }
        Rec::Launch {
            func,
            grid,
            block,
            shared_mem,
            stream,
            cluster,
            layout,
            params,
        } => {
            let h = LaunchHead {
                func: *func,
                grid: *grid,
                block: *block,
                shared_mem: *shared_mem,
                stream: *stream,
                cluster: *cluster,
            };
            launch_body(out, &h, layout.as_deref(), params.len(), |b| {
                b.copy_from_slice(params)
            });
        }
        Rec::StreamCreate { stream: h, flags } | Rec::EventCreate { event: h, flags } => {
            put64(out, *h);
            out.extend_from_slice(&flags.to_le_bytes());
        }
        Rec::StreamDestroy { stream: h }
        | Rec::EventDestroy { event: h }
        | Rec::EventSync { event: h }
        | Rec::StreamSync { stream: h } => put64(out, *h),
        Rec::EventRecord { event, stream } => {
            put64(out, *event);
            put64(out, *stream);
        }
        Rec::StreamWaitEvent { stream, event } => {
            put64(out, *stream);
            put64(out, *event);
        }
        Rec::CtxSync => {}
        Rec::Opaque { name } => put_str(out, name),
        Rec::Reserve { ptr, size }
        | Rec::Unreserve { ptr, size }
        | Rec::Map { ptr, size }
        | Rec::Unmap { ptr, size } => {
            put64(out, *ptr);
            put64(out, *size);
        }
        Rec::TensorMap {
            map,
            dtype,
            base,
            dims,
            strides,
            box_dims,
            element_strides,
            modes,
        } => {
            put_bytes(out, map);
            out.extend_from_slice(&dtype.to_le_bytes());
            put64(out, *base);
            // The rank, then each list at its own length (strides has one fewer).
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                put64(out, *d);
            }
            out.extend_from_slice(&(strides.len() as u32).to_le_bytes());
            for s in strides {
                put64(out, *s);
            }
            for list in [box_dims, element_strides] {
                out.extend_from_slice(&(list.len() as u32).to_le_bytes());
                for v in list {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            for m in modes {
                out.extend_from_slice(&m.to_le_bytes());
            }
        }
        Rec::Gap { dropped } => put64(out, *dropped),
        Rec::CaptureBegin { stream, mode } => {
            put64(out, *stream);
            out.extend_from_slice(&mode.to_le_bytes());
        }
        Rec::CaptureEnd {
            stream: a,
            graph: b,
        }
        | Rec::GraphInstantiate { exec: a, graph: b }
        | Rec::GraphLaunch { exec: a, stream: b } => {
            put64(out, *a);
            put64(out, *b);
        }
        Rec::GraphExecDestroy { exec: h } | Rec::GraphDestroy { graph: h } => put64(out, *h),
        Rec::Dump { reason } => put_str(out, reason),
        Rec::Code {
            id,
            py_minor,
            first_line,
            filename,
            qualname,
            linetable,
        } => {
            out.extend_from_slice(&id.to_le_bytes());
            out.push(*py_minor);
            out.extend_from_slice(&first_line.to_le_bytes());
            put_str(out, filename);
            put_str(out, qualname);
            put_bytes(out, linetable);
        }
        Rec::Stack { id, frames } | Rec::NativeStack { id, frames } => {
            out.extend_from_slice(&id.to_le_bytes());
            put_bytes(out, frames);
        }
        Rec::NativeFrame {
            id,
            module,
            offset,
            symbol,
            symbol_offset,
        } => {
            out.extend_from_slice(&id.to_le_bytes());
            put_str(out, module);
            put64(out, *offset);
            put_str(out, symbol);
            put64(out, *symbol_offset);
        }
        Rec::Global {
            owner,
            library,
            name,
            ptr,
            bytes,
        } => {
            put64(out, *owner);
            out.push(u8::from(*library));
            put_str(out, name);
            put64(out, *ptr);
            put64(out, *bytes);
        }
    }
    end(out, start);
}

/// A record's framing and common fields: its length (filled in by `end`), type byte, time,
/// thread, status and stack. Returns where it starts.
fn begin(out: &mut Vec<u8>, tag: u8, (t_ns, thread, status, stack): Head) -> usize {
    let start = out.len();
    let mut h = [0u8; 25];
    h[4] = tag;
    h[5..13].copy_from_slice(&t_ns.to_le_bytes());
    h[13..17].copy_from_slice(&thread.to_le_bytes());
    h[17..21].copy_from_slice(&status.to_le_bytes());
    h[21..25].copy_from_slice(&stack.to_le_bytes());
    out.extend_from_slice(&h);
    start
}

/// The record begun at `start` is complete: its length.
fn end(out: &mut [u8], start: usize) {
    let body = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&body.to_le_bytes());
}

/// What a launch record holds besides its parameters' layout and bytes.
#[derive(Clone, Copy, Debug)]
pub struct LaunchHead {
    pub func: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: u64,
    pub cluster: [u32; 3],
}

/// `encode` of a `Rec::Launch` made of `h`, `layout` and `len` parameter bytes that `fill`
/// writes (into zeroed bytes: what it leaves alone is padding), without the record being
/// built first: the bytes `encode` writes for it. The flight recorder's hot path gathers the
/// parameters straight into its ring this way, with no buffer between.
pub fn encode_launch(
    out: &mut Vec<u8>,
    head: Head,
    h: &LaunchHead,
    layout: Option<&[(u32, u32)]>,
    len: usize,
    fill: impl FnOnce(&mut [u8]),
) {
    let start = begin(out, TAG_LAUNCH, head);
    launch_body(out, h, layout, len, fill);
    end(out, start);
}

/// A launch record's fields after the common ones.
fn launch_body(
    out: &mut Vec<u8>,
    h: &LaunchHead,
    layout: Option<&[(u32, u32)]>,
    len: usize,
    fill: impl FnOnce(&mut [u8]),
) {
    // The fixed part in one piece: launches are most of a log, and each small write checks
    // the buffer's capacity again.
    let mut f = [0u8; 60];
    f[..8].copy_from_slice(&h.func.to_le_bytes());
    for (i, v) in h.grid.iter().chain(&h.block).chain(&h.cluster).enumerate() {
        f[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    f[44..48].copy_from_slice(&h.shared_mem.to_le_bytes());
    f[48..56].copy_from_slice(&h.stream.to_le_bytes());
    let n = layout.map_or(u32::MAX, |l| l.len() as u32);
    f[56..60].copy_from_slice(&n.to_le_bytes());
    let pairs = layout.unwrap_or(&[]);
    out.reserve(f.len() + 8 * pairs.len() + len);
    out.extend_from_slice(&f);
    for (o, s) in pairs {
        let mut p = [0u8; 8];
        p[..4].copy_from_slice(&o.to_le_bytes());
        p[4..].copy_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&p);
    }
    put64(out, len as u64);
    let at = out.len();
    out.resize(at + len, 0);
    fill(&mut out[at..]);
}

fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put64(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_str(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Why a log could not be read (past a point): what, and at which byte of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogError {
    /// The file does not begin with [`MAGIC`].
    NotALog,
    /// Written in a layout this build does not read.
    Version { found: u16 },
    /// The file ends inside the record that starts at `offset` (the process died writing it):
    /// every record before it was read.
    Cut { offset: u64 },
    /// The record at `offset` has a tag this build does not know.
    UnknownTag { offset: u64, tag: u8 },
    /// A field of the record at `offset` does not fit inside it.
    Field { offset: u64, what: &'static str },
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::NotALog => write!(f, "not a driver shim call log (no {:?} magic)", "GTSHMLOG"),
            LogError::Version { found } => write!(
                f,
                "call log layout {found}, this build reads layouts {OLDEST_READ} to {VERSION}"
            ),
            LogError::Cut { offset } => write!(
                f,
                "the log ends inside the record at byte {offset} (the process stopped while writing it)"
            ),
            LogError::UnknownTag { offset, tag } => {
                write!(f, "record at byte {offset}: unknown call tag {tag}")
            }
            LogError::Field { offset, what } => write!(
                f,
                "record at byte {offset}: its {what} runs past the record's end"
            ),
        }
    }
}

impl std::error::Error for LogError {}

/// Reads a log's header and records from its bytes.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    failed: bool,
    /// The fixed part's length in this file's layout.
    fixed: usize,
}

impl<'a> Reader<'a> {
    /// The header, and a reader positioned at the first record.
    pub fn new(bytes: &'a [u8]) -> Result<(Header, Reader<'a>), LogError> {
        if bytes.len() < 8 || bytes[..8] != MAGIC {
            return Err(LogError::NotALog);
        }
        if bytes.len() < HEADER_LEN {
            return Err(LogError::Cut { offset: 0 });
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if !(OLDEST_READ..=VERSION).contains(&version) {
            return Err(LogError::Version { found: version });
        }
        let h = Header {
            pid: u32::from_le_bytes(bytes[10..14].try_into().expect("4 bytes")),
            driver_version: i32::from_le_bytes(bytes[14..18].try_into().expect("4 bytes")),
        };
        Ok((
            h,
            Reader {
                bytes,
                pos: HEADER_LEN,
                failed: false,
                fixed: if version == 1 { FIXED_V1 } else { FIXED },
            },
        ))
    }

    /// The byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn next_record(&mut self) -> Result<Record<'a>, LogError> {
        let offset = self.pos as u64;
        let rest = &self.bytes[self.pos..];
        if rest.len() < 4 {
            return Err(LogError::Cut { offset });
        }
        let body_len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        if rest.len() - 4 < body_len {
            return Err(LogError::Cut { offset });
        }
        if body_len < self.fixed {
            return Err(LogError::Field {
                offset,
                what: "fixed part",
            });
        }
        let body = &rest[4..4 + body_len];
        let mut f = Fields {
            b: body,
            at: 0,
            offset,
        };
        let tag = f.u8("tag")?;
        let t_ns = f.u64("time")?;
        let thread = f.u32("thread")?;
        let status = f.u32("status")? as i32;
        let stack = if self.fixed == FIXED {
            f.u32("stack")?
        } else {
            NO_STACK
        };
        let on = |f: &mut Fields<'a>| -> Result<On, LogError> {
            Ok(On {
                stream: f.u64("stream")?,
                sync: f.u8("sync flag")? != 0,
            })
        };
        let call = match tag {
            1 => Rec::Alloc {
                ptr: f.u64("pointer")?,
                bytes: f.u64("size")?,
                managed: f.u8("managed flag")? != 0,
            },
            2 => Rec::Free {
                ptr: f.u64("pointer")?,
            },
            3 => Rec::HostAlloc {
                ptr: f.u64("pointer")?,
                bytes: f.u64("size")?,
            },
            4 => Rec::HostFree {
                ptr: f.u64("pointer")?,
            },
            5 => Rec::CopyH2D {
                dst: f.u64("destination")?,
                on: on(&mut f)?,
                data: f.bytes("data")?,
            },
            6 => Rec::CopyD2H {
                src: f.u64("source")?,
                dst_host: f.u64("host destination")?,
                len: f.u64("length")?,
                on: on(&mut f)?,
                data: f.bytes("data")?,
            },
            7 => Rec::D2HBytes {
                copy: f.u64("copy index")?,
                data: f.bytes("data")?,
            },
            8 => Rec::CopyD2D {
                src: f.u64("source")?,
                dst: f.u64("destination")?,
                len: f.u64("length")?,
                on: on(&mut f)?,
            },
            9 => Rec::Memset {
                dst: f.u64("destination")?,
                value: f.u32("value")?,
                elem: f.u8("element size")?,
                count: f.u64("count")?,
                on: on(&mut f)?,
            },
            10 => Rec::ModuleLoad {
                handle: f.u64("handle")?,
                library: f.u8("library flag")? != 0,
                image: f.bytes("image")?,
            },
            11 => Rec::ModuleUnload {
                handle: f.u64("handle")?,
                library: f.u8("library flag")? != 0,
            },
            12 => Rec::Function {
                owner: f.u64("owner")?,
                library: f.u8("library flag")? != 0,
                handle: f.u64("handle")?,
                name: f.str("name")?,
            },
            13 => Rec::KernelFunction {
                kernel: f.u64("kernel")?,
                func: f.u64("function")?,
            },
            14 => {
                let func = f.u64("function")?;
                let mut dims = [0u32; 9];
                for d in &mut dims {
                    *d = f.u32("launch dimensions")?;
                }
                let shared_mem = f.u32("shared memory")?;
                let stream = f.u64("stream")?;
                let n = f.u32("parameter count")?;
                let layout = if n == u32::MAX {
                    None
                } else {
                    let l = f.entries(n, 8, "parameter layout", |f| {
                        Ok((f.u32("parameter offset")?, f.u32("parameter size")?))
                    })?;
                    Some(Cow::Owned(l))
                };
                Rec::Launch {
                    func,
                    grid: [dims[0], dims[1], dims[2]],
                    block: [dims[3], dims[4], dims[5]],
                    cluster: [dims[6], dims[7], dims[8]],
                    shared_mem,
                    stream,
                    layout,
                    params: f.bytes("parameters")?,
                }
            }
            15 => Rec::StreamCreate {
                stream: f.u64("stream")?,
                flags: f.u32("flags")?,
            },
            16 => Rec::StreamDestroy {
                stream: f.u64("stream")?,
            },
            17 => Rec::EventCreate {
                event: f.u64("event")?,
                flags: f.u32("flags")?,
            },
            18 => Rec::EventDestroy {
                event: f.u64("event")?,
            },
            19 => Rec::EventRecord {
                event: f.u64("event")?,
                stream: f.u64("stream")?,
            },
            20 => Rec::StreamWaitEvent {
                stream: f.u64("stream")?,
                event: f.u64("event")?,
            },
            21 => Rec::EventSync {
                event: f.u64("event")?,
            },
            22 => Rec::StreamSync {
                stream: f.u64("stream")?,
            },
            23 => Rec::CtxSync,
            24 => Rec::Opaque {
                name: f.str("name")?,
            },
            29 => {
                let map = f.bytes("tensor map")?;
                let dtype = f.u32("element type")?;
                let base = f.u64("global address")?;
                let dims = f.list64("dimensions")?;
                let strides = f.list64("strides")?;
                let box_dims = f.list32("box")?;
                let element_strides = f.list32("element strides")?;
                let mut modes = [0u32; 4];
                for m in &mut modes {
                    *m = f.u32("modes")?;
                }
                Rec::TensorMap {
                    map,
                    dtype,
                    base,
                    dims,
                    strides,
                    box_dims,
                    element_strides,
                    modes,
                }
            }
            25..=28 => {
                let (ptr, size) = (f.u64("address")?, f.u64("size")?);
                match tag {
                    25 => Rec::Reserve { ptr, size },
                    26 => Rec::Unreserve { ptr, size },
                    27 => Rec::Map { ptr, size },
                    _ => Rec::Unmap { ptr, size },
                }
            }
            30 => Rec::Gap {
                dropped: f.u64("dropped count")?,
            },
            31 => Rec::Dump {
                reason: f.str("reason")?,
            },
            32 => Rec::CaptureBegin {
                stream: f.u64("stream")?,
                mode: f.u32("capture mode")?,
            },
            33 => Rec::CaptureEnd {
                stream: f.u64("stream")?,
                graph: f.u64("graph")?,
            },
            34 => Rec::GraphInstantiate {
                exec: f.u64("executable graph")?,
                graph: f.u64("graph")?,
            },
            35 => Rec::GraphLaunch {
                exec: f.u64("executable graph")?,
                stream: f.u64("stream")?,
            },
            36 => Rec::GraphExecDestroy {
                exec: f.u64("executable graph")?,
            },
            37 => Rec::GraphDestroy {
                graph: f.u64("graph")?,
            },
            38 => Rec::Code {
                id: f.u32("code id")?,
                py_minor: f.u8("Python minor version")?,
                first_line: f.u32("first line")? as i32,
                filename: f.str("file name")?,
                qualname: f.str("qualified name")?,
                linetable: f.bytes("line table")?,
            },
            39 => Rec::Stack {
                id: f.u32("stack id")?,
                frames: {
                    let b = f.bytes("stack frames")?;
                    if b.len() % 8 != 0 {
                        return Err(LogError::Field {
                            offset,
                            what: "stack frames (not whole pairs)",
                        });
                    }
                    b
                },
            },
            40 => Rec::Global {
                owner: f.u64("owner")?,
                library: f.u8("library flag")? != 0,
                name: f.str("name")?,
                ptr: f.u64("address")?,
                bytes: f.u64("size")?,
            },
            41 => Rec::LibraryModule {
                library: f.u64("library")?,
                module: f.u64("module")?,
            },
            42 => Rec::NativeFrame {
                id: f.u32("native frame id")?,
                module: f.str("module")?,
                offset: f.u64("offset")?,
                symbol: f.str("symbol")?,
                symbol_offset: f.u64("symbol offset")?,
            },
            43 => Rec::NativeStack {
                id: f.u32("stack id")?,
                frames: {
                    let b = f.bytes("native frames")?;
                    if b.len() % 4 != 0 {
                        return Err(LogError::Field {
                            offset,
                            what: "native frames (not whole ids)",
                        });
                    }
                    b
                },
            },
            44 => Rec::Cooperative {
                func: f.u64("function")?,
            },
            45 => Rec::GraphNode {
                graph: f.u64("graph")?,
            },
            47 => Rec::ManagedWrite {
                dst: f.u64("managed address")?,
                data: f.bytes("managed bytes")?,
            },
            48 => Rec::ManagedRead {
                src: f.u64("managed address")?,
                data: f.bytes("managed bytes")?,
            },
            49 => Rec::CaptureMode {
                mode: f.u32("capture mode")?,
            },
            46 => Rec::Device {
                ordinal: f.u32("device ordinal")?,
                sm_count: f.u32("SM count")?,
                total_memory: f.u64("device memory")?,
                name: f.bytes("device name")?,
            },
            tag => return Err(LogError::UnknownTag { offset, tag }),
        };
        self.pos += 4 + body_len;
        Ok(Record {
            t_ns,
            thread,
            status,
            stack,
            call,
        })
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Record<'a>, LogError>;

    /// The next record; after an error, nothing more (a reader does not guess where the next
    /// record of a damaged file begins).
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.bytes.len() {
            return None;
        }
        let r = self.next_record();
        self.failed = r.is_err();
        Some(r)
    }
}

/// A record's body, read field by field.
struct Fields<'a> {
    b: &'a [u8],
    at: usize,
    offset: u64,
}

impl<'a> Fields<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], LogError> {
        if n > self.left() {
            return Err(LogError::Field {
                offset: self.offset,
                what,
            });
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, LogError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, LogError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, LogError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }

    fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], LogError> {
        let n = self.u64(what)?;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        self.take(n, what)
    }

    /// `n` entries of `width` bytes each, read by `read`: a count past what is left is refused
    /// before anything is allocated for it.
    fn entries<T>(
        &mut self,
        n: u32,
        width: usize,
        what: &'static str,
        mut read: impl FnMut(&mut Self) -> Result<T, LogError>,
    ) -> Result<Vec<T>, LogError> {
        if (n as usize).saturating_mul(width) > self.left() {
            return Err(LogError::Field {
                offset: self.offset,
                what,
            });
        }
        (0..n).map(|_| read(self)).collect()
    }

    /// A count then that many u64s.
    fn list64(&mut self, what: &'static str) -> Result<Vec<u64>, LogError> {
        let n = self.u32(what)?;
        self.entries(n, 8, what, |f| f.u64(what))
    }

    /// A count then that many u32s.
    fn list32(&mut self, what: &'static str) -> Result<Vec<u32>, LogError> {
        let n = self.u32(what)?;
        self.entries(n, 4, what, |f| f.u32(what))
    }

    fn str(&mut self, what: &'static str) -> Result<&'a [u8], LogError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Rec<'static>> {
        let on = On {
            stream: 0x55,
            sync: false,
        };
        vec![
            Rec::Alloc {
                ptr: 0x7f00_0000_0000,
                bytes: 4096,
                managed: false,
            },
            Rec::CopyH2D {
                dst: 0x7f00_0000_0010,
                on,
                data: b"abcd",
            },
            Rec::CopyD2H {
                src: 1,
                dst_host: 2,
                len: 3,
                on,
                data: b"",
            },
            Rec::D2HBytes {
                copy: 2,
                data: b"xyz",
            },
            Rec::Memset {
                dst: 9,
                value: 0xabab_abab,
                elem: 4,
                count: 10,
                on,
            },
            Rec::ModuleLoad {
                handle: 77,
                library: true,
                image: b"\x7fELF...",
            },
            Rec::Function {
                owner: 77,
                library: true,
                handle: 78,
                name: b"_Z6kernelPf",
            },
            Rec::Launch {
                func: 78,
                grid: [1, 2, 3],
                block: [4, 5, 6],
                shared_mem: 7,
                stream: 0x55,
                cluster: [1, 2, 1],
                layout: Some(vec![(0, 8), (8, 4)].into()),
                params: &[1; 12],
            },
            Rec::Launch {
                func: 78,
                grid: [1, 1, 1],
                block: [1, 1, 1],
                shared_mem: 0,
                stream: 0,
                cluster: [0; 3],
                layout: None,
                params: b"",
            },
            Rec::CtxSync,
            Rec::Opaque {
                name: b"cuMemcpy3D_v2",
            },
            Rec::Reserve {
                ptr: 1 << 40,
                size: 1 << 34,
            },
            Rec::Map {
                ptr: 1 << 40,
                size: 2 << 20,
            },
            Rec::Unmap {
                ptr: 1 << 40,
                size: 2 << 20,
            },
            Rec::Unreserve {
                ptr: 1 << 40,
                size: 1 << 34,
            },
            Rec::TensorMap {
                map: &[7; 128],
                dtype: 9,
                base: 1 << 40,
                dims: vec![64, 32],
                strides: vec![128],
                box_dims: vec![32, 8],
                element_strides: vec![1, 1],
                modes: [0, 3, 2, 0],
            },
            Rec::CaptureBegin {
                stream: 0x5000,
                mode: 2,
            },
            Rec::CaptureEnd {
                stream: 0x5000,
                graph: 0x6000,
            },
            Rec::GraphInstantiate {
                exec: 0x7000,
                graph: 0x6000,
            },
            Rec::GraphLaunch {
                exec: 0x7000,
                stream: 0x5000,
            },
            Rec::GraphExecDestroy { exec: 0x7000 },
            Rec::GraphDestroy { graph: 0x6000 },
            Rec::Gap { dropped: 1 << 33 },
            Rec::Dump {
                reason: b"CUDA_ERROR_ASSERT (710) from cuStreamSynchronize",
            },
            Rec::Code {
                id: 3,
                py_minor: 12,
                first_line: 40,
                filename: b"/home/u/model.py",
                qualname: b"Block.forward",
                linetable: &[0x80, 0x00, 0xd8, 0x08, 0x0c],
            },
            Rec::Stack {
                id: 5,
                frames: &[3, 0, 0, 0, 17, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0],
            },
            Rec::Stack { id: 6, frames: &[] },
            Rec::Global {
                owner: 0x9000,
                library: true,
                name: b"table",
                ptr: 0x7f00_0000_1000,
                bytes: 64,
            },
            Rec::LibraryModule {
                library: 0x9000,
                module: 0x9100,
            },
            Rec::NativeFrame {
                id: 2,
                module: b"/usr/bin/app",
                offset: 0x1a2b,
                symbol: b"",
                symbol_offset: 0,
            },
            Rec::NativeStack {
                id: 7,
                frames: &[2, 0, 0, 0, 9, 0, 0, 0],
            },
            Rec::Cooperative { func: 0x5000 },
            Rec::GraphNode { graph: 0x6a00 },
            Rec::Device {
                ordinal: 1,
                sm_count: 132,
                total_memory: 150_000_000_000,
                name: b"NVIDIA H200",
            },
            Rec::ManagedWrite {
                dst: 0x7000,
                data: &[1, 2, 3],
            },
            Rec::ManagedRead {
                src: 0x7000,
                data: &[4, 5],
            },
            Rec::CaptureMode { mode: 2 },
        ]
    }

    fn log(recs: &[Rec<'_>]) -> Vec<u8> {
        let mut out = header(Header {
            pid: 42,
            driver_version: 13000,
        })
        .to_vec();
        for (i, call) in recs.iter().enumerate() {
            encode(
                &Record {
                    t_ns: i as u64 * 10,
                    thread: 7,
                    status: 0,
                    stack: i as u32,
                    call: call.clone(),
                },
                &mut out,
            );
        }
        out
    }

    #[test]
    fn every_record_reads_back_as_written() {
        let recs = samples();
        let bytes = log(&recs);
        let (h, r) = Reader::new(&bytes).unwrap();
        assert_eq!(h.pid, 42);
        assert_eq!(h.driver_version, 13000);
        let back: Vec<Record<'_>> = r.map(|r| r.unwrap()).collect();
        assert_eq!(
            back.iter().map(|r| r.call.clone()).collect::<Vec<_>>(),
            recs
        );
        assert!(back.iter().enumerate().all(|(i, r)| r.stack == i as u32));
        let Some(Rec::Stack { frames, .. }) = back
            .iter()
            .map(|r| &r.call)
            .find(|c| matches!(c, Rec::Stack { id: 5, .. }))
        else {
            panic!("no stack 5")
        };
        assert_eq!(stack_frames(frames).collect::<Vec<_>>(), [(3, 17), (4, 2)]);
        let Some(Rec::NativeStack { frames, .. }) = back
            .iter()
            .map(|r| &r.call)
            .find(|c| matches!(c, Rec::NativeStack { .. }))
        else {
            panic!("no native stack")
        };
        assert_eq!(native_frames(frames).collect::<Vec<_>>(), [2, 9]);
    }

    /// A layout-1 log (records without a stack) still reads, its records with `NO_STACK`.
    #[test]
    fn a_layout_1_log_reads_with_no_stacks() {
        let mut v1 = header(Header {
            pid: 1,
            driver_version: 0,
        })
        .to_vec();
        v1[8..10].copy_from_slice(&1u16.to_le_bytes());
        for call in [Rec::Free { ptr: 0x10 }, Rec::CtxSync] {
            let mut one = Vec::new();
            encode(
                &Record {
                    t_ns: 5,
                    thread: 2,
                    status: 0,
                    stack: 9,
                    call,
                },
                &mut one,
            );
            // Layout 1 had no stack: drop its 4 bytes and shorten the length.
            let body = u32::from_le_bytes(one[..4].try_into().unwrap()) - 4;
            one.drain(21..25);
            one[..4].copy_from_slice(&body.to_le_bytes());
            v1.extend_from_slice(&one);
        }
        let (_, r) = Reader::new(&v1).unwrap();
        let back: Vec<Record<'_>> = r.map(|r| r.unwrap()).collect();
        assert_eq!(back.len(), 2);
        assert!(back.iter().all(|r| r.stack == NO_STACK && r.thread == 2));
        assert_eq!(back[0].call, Rec::Free { ptr: 0x10 });
    }

    /// The flight recorder's hot path writes a launch's bytes as `encode` does, whatever
    /// its layout (none, some) and parameter bytes.
    #[test]
    fn a_launch_encoded_in_place_is_the_record_encoded() {
        let params: Vec<u8> = (0..40u8).collect();
        let pairs = [(0u32, 8u32), (8, 4), (16, 24)];
        for layout in [None, Some(&pairs[..])] {
            let h = LaunchHead {
                func: 0xdead_beef,
                grid: [3, 2, 1],
                block: [128, 1, 1],
                shared_mem: 4096,
                stream: 0x77,
                cluster: [2, 1, 1],
            };
            let r = Record {
                t_ns: 12345,
                thread: 9,
                status: 700,
                stack: 4,
                call: Rec::Launch {
                    func: h.func,
                    grid: h.grid,
                    block: h.block,
                    shared_mem: h.shared_mem,
                    stream: h.stream,
                    cluster: h.cluster,
                    layout: layout.map(Cow::Borrowed),
                    params: &params,
                },
            };
            let (mut want, mut got) = (vec![1u8, 2], vec![1u8, 2]);
            encode(&r, &mut want);
            encode_launch(
                &mut got,
                (12345, 9, 700, 4),
                &h,
                layout,
                params.len(),
                |b| b.copy_from_slice(&params),
            );
            assert_eq!(got, want, "layout {layout:?}");
        }
    }

    #[test]
    fn a_cut_log_keeps_what_came_before_and_says_where_it_stops() {
        let bytes = log(&samples());
        for cut in HEADER_LEN..bytes.len() {
            let (_, r) = Reader::new(&bytes[..cut]).unwrap();
            let mut n = 0;
            for rec in r {
                match rec {
                    Ok(_) => n += 1,
                    Err(LogError::Cut { offset }) => assert!(offset < cut as u64),
                    Err(e) => panic!("cut at {cut}: {e}"),
                }
            }
            assert!(n < samples().len());
        }
    }

    #[test]
    fn damaged_bytes_give_errors_never_a_panic() {
        let bytes = log(&samples());
        // Every byte of every record flipped in turn: the reader may read something else,
        // or refuse with an error, but never panics or allocates past the file.
        for i in HEADER_LEN..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            let (_, r) = Reader::new(&b).unwrap();
            for rec in r {
                let _ = rec;
            }
        }
        assert_eq!(Reader::new(b"nope").err(), Some(LogError::NotALog));
        let mut v = bytes.clone();
        v[8] = 9;
        assert_eq!(Reader::new(&v).err(), Some(LogError::Version { found: 9 }));
    }
}
