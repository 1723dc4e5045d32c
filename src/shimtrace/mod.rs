//! A driver-level recording into a trace: the call log the driver shim wrote for one process
//! (`gputape run -o`; `gputape_shimlog`'s layout) becomes an ordinary trace, which every verb
//! reads.
//!
//! The shim logs what it saw (raw handles, addresses, parameter bytes) and nothing it would
//! have to work out inside the recorded program; this does the rest, afterwards:
//!
//! | driver call | trace call |
//! |---|---|
//! | `cuMemAlloc*` / `cuMemFree*` (the stream-ordered forms too) | `Alloc` (`AllocManaged`) / `Free`, buffers by id, `Address` frames |
//! | `cuMemAddressReserve` / `cuMemMap` / `cuMemAddressFree` | one `Alloc` per reservation, as far as it was ever mapped (a first pass finds how far), and its `Free` |
//! | `cuMemcpyHtoD*` | `CopyH2D` / `CopyH2DAsync`, the bytes as a blob |
//! | `cuMemcpyDtoH*` | `CopyD2H` with its bytes / `CopyD2HAsync`, bytes at the sync that completed it |
//! | `cuMemcpyDtoD*` | `CopyD2D` / `CopyD2DAsync` |
//! | `cuMemsetD8/16/32*` | `Memset` / `MemsetAsync` when every byte is the same; else opaque |
//! | module and library loads | a module named by the image's kind and hash, its image a blob (`Frame::ModuleImage`) |
//! | `cuModuleGetFunction`, `cuLibraryGetKernel` | `Kernel` (module, symbol) |
//! | `cuModuleGetGlobal_v2`, `cuLibraryGetGlobal` | no call: the variable is a buffer of its own at its address (`Frame::Global`: module, symbol, size), which a replay finds in the module it loaded |
//! | `cuLaunchKernel*`, `cuLaunchKernelEx*` | `Launch`: each parameter by the driver's layout; an 8-byte one holding an address inside a live buffer is that buffer plus offset, a larger one with such words is `Arg::Words`; a cluster shape asked for is the kernel's (`Frame::KernelCluster`) |
//! | `cuLaunchCooperativeKernel*`, `cuLaunchKernelEx*` (cooperative attribute) | `Launch`, its kernel marked cooperative (`Frame::KernelCooperative`): replayed with the cooperative attribute |
//! | `cuLaunchKernelEx*`'s other attributes | a programmatic or completion event: `RecordEvent` on the launch's stream just after it; the rest (priority, programmatic serialization, memory sync domain, access policy, ...) counted by name in the summary, not applied |
//! | `cuTensorMapEncodeTiled` | `EncodeTensorMap`; a parameter holding the map's bytes is `Arg::TensorMap` (or a map inside `Arg::Words`) |
//! | `cuStreamWriteValue*` / `cuStreamWaitValue*` (alone, or in a `cuStreamBatchMemOp*` batch, in its order) | an upload of the value's bytes, and an event recorded after it on its stream (`Adopted::Event`) / a `StreamWaitEvent` for the latest write that meets the wait (nothing when it was on the same stream; opaque when no recorded write meets it) |
//! | streams, events, syncs | `CreateStream`, `CreateEvent`, `RecordEvent`, `StreamWaitEvent`, `EventSynchronize`, `Synchronize` |
//! | `cuStreamBeginCapture*` / `cuStreamEndCapture*` | `BeginCapture` / `EndCapture` (the graph), the calls between captured as recorded |
//! | `cuGraphAddKernelNode*`, `cuGraphAddMemcpyNode`, `cuGraphAddMemsetNode`, `cuGraphAddHostNode`, `cuGraphAddChildGraphNode`, `cuGraphAddEvent{Record,Wait}Node`, `cuGraphAddNode*` (those kinds), `cuGraphClone` | each node the `Launch`, copy, memset, `HostFunc`, `RecordEvent` or `StreamWaitEvent` it runs, held aside by its handle (`Rec::NodeWork` before it; `graphs.rs`); where the graph is first instantiated, `BeginCapture` / the nodes in the order added / `EndCapture` on a stream of the graph's own, its event nodes left out of the capture: each `LaunchGraph` of it waits for their events before and records theirs after (`convert/graph_calls.rs`) |
//! | `cuGraph*NodeSetParams`, `cuGraph*Event*NodeSetEvent`, `cuGraphExec*NodeSetParams`, `cuGraphNodeSetEnabled`, `cuGraphExecUpdate*`, `cuGraphDestroyNode`, `cuGraphExecChildGraphNodeSetParams` | the graph's or the executable's own copy of its nodes changed; a changed executable's next launch first makes a trace graph of what it now runs (its old one destroyed when no executable runs it); an update the recording cannot follow (a captured graph's node): the executable's launches opaque, with why |
//! | `cuGraphInstantiate*`, `cuGraphLaunch*`, `cuGraphExecDestroy`, `cuGraphDestroy` | no call (the trace's graph is made when its capture ends, or from its nodes) / `LaunchGraph` / `DestroyGraph` with the graph's last executable (or with its template, where it has none); a graph of nothing the trace holds: its launches opaque |
//! | `cuLaunchHostFunc*`, `cuStreamAddCallback*` | `HostFunc` (its stream, the function by symbol or file + offset) |
//! | `cuIpcOpenMemHandle*` / `cuIpcCloseMemHandle` (another process's allocation), `cuIpcOpenEventHandle` (its event) | `Alloc` and an upload of its bytes as they were when opened / `Free`; `CreateEvent`; each with its handle in `Frame::Shared`. `cuIpcGetMemHandle`, `cuIpcGetEventHandle`: the exported buffer or event and its handle in `Frame::Shared` (what `ranks --replay` pairs) |
//! | `cuMemExportToShareableHandle` / `cuMemImportFromShareableHandle` (physical memory shared through a file descriptor or fabric handle), `cuMemSetAccess` of an imported allocation's mapping | no call / the reservation's `Alloc` where its mapping became readable, and an upload of its bytes then; each reservation that holds the one allocation at its start named in `Frame::Shared` (`SharedId::Memory`) with the key both processes logged (`convert/shared_memory.rs`) |
//! | pinned memory the device maps (`cuMemHostAlloc`/`cuMemHostRegister` with the device-map flag, `cuMemHostGetDevicePointer`), freed or unregistered | `AllocManaged` (a buffer at the host address) / `Free`; the shim's managed-memory records carry its bytes |
//! | anything else that changes the device | `Opaque` by name |
//! | the calling thread's Python frames (`Rec::Code`, `Rec::Stack`) | each call's site: the program's own line (the innermost frame outside PyTorch and Triton), its stack kept (`Frame::Stack`; `lines.rs`) |
//!
//! Each thread's per-thread default stream (stream 0 through a `_ptsz`/`_ptds` entry point, or
//! `CU_STREAM_PER_THREAD`) is a stream of its own, adopted at its first use (a blocking stream,
//! as the driver's is); the legacy stream is `legacy`.
//!
//! A thread's capture interaction mode (`cuThreadExchangeStreamCaptureMode`) is followed: an
//! allocation made while a capture is open goes before the capture (a replay captures in its
//! backend's mode, where it would fail), and the summary says how many were, and how many a
//! thread in relaxed mode made (PyTorch's allocator does, around each allocation).
//!
//! Approximations, said here so nobody relies on them: `cuCtxSynchronize` is a sync of the
//! legacy stream; a capture's
//! mode (global, thread-local, relaxed) is not kept: a replay captures in its backend's; pinned host
//! allocations are not calls (copies through them are recorded with their bytes); an 8-byte
//! value that equals an address inside a live buffer is taken for a pointer.

mod convert;
mod elf;
mod graphs;
mod lines;
pub mod triton;

use std::collections::BTreeMap;

pub use convert::convert;
pub use lines::ENV_LIBRARY_FRAMES;

/// Why a call log could not be turned into a trace.
#[derive(Debug, thiserror::Error)]
pub enum ShimTraceError {
    /// The file is no call log, or one of a layout this build does not read.
    #[error("{path}: {source}")]
    Log {
        /// The log.
        path: String,
        /// What the reader said.
        source: gputape_shimlog::LogError,
    },
    /// The log could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The log.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The trace could not be written.
    #[error("writing the trace: {0}")]
    Trace(#[from] crate::trace::TraceError),
}

/// What a conversion found, for the line `gputape run` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The recorded process.
    pub pid: u32,
    /// Driver calls read from the log.
    pub records: u64,
    /// Calls in the trace.
    pub calls: u64,
    /// Of them, launches.
    pub launches: u64,
    /// Distinct kernels launched or looked up.
    pub kernels: usize,
    /// Module images kept.
    pub modules: usize,
    /// Calls the driver failed (recorded with their error).
    pub failed: u64,
    /// Opaque calls, by entry point.
    pub opaque: BTreeMap<String, u64>,
    /// Launches of a function no logged lookup named (their kernel is unknown).
    pub unnamed_launches: u64,
    /// Launches whose parameter layout the driver would not give (their arguments are lost).
    pub no_layout: u64,
    /// Launch attributes a replay does not apply, by name, and how many launches gave each
    /// (`cuLaunchKernelEx`: priority, programmatic stream serialization, ...).
    pub launch_attrs: BTreeMap<String, u64>,
    /// Waits for a value on a stream met by a recorded write (`cuStreamWaitValue*`): each a
    /// wait for the event recorded after that write, or nothing when it was on the same stream.
    pub value_waits: u64,
    /// Events launches recorded through an attribute (programmatic or completion events), each
    /// an event record just after its launch.
    pub launch_events: u64,
    /// Launches in a thread-block cluster other than the first their kernel was launched in
    /// (the trace keeps one per kernel; these replay in the first).
    pub other_clusters: u64,
    /// Where the log stopped short, if it did (the process died writing it).
    pub cut: Option<String>,
    /// A flight dump's reason (the log is a dump, not a whole recording).
    pub dump: Option<String>,
    /// Driver calls a flight dump left out (its ring had wrapped).
    pub dropped: u64,
    /// The first trace call after the last gap: where the dump's window of work begins.
    pub window_from: Option<u64>,
    /// Kernels typed from Triton's cache (`triton.rs`).
    pub triton_typed: usize,
    /// Threads whose per-thread default stream was used (each a stream of its own).
    pub per_thread_streams: usize,
    /// Graphs built node by node, each made a capture of its nodes where it was instantiated.
    pub node_graphs: usize,
    /// Event record and wait nodes of those graphs, each lifted out to the graph's launches.
    pub graph_event_nodes: usize,
    /// Executables changed after they were made (`cuGraphExec*NodeSetParams`,
    /// `cuGraphNodeSetEnabled`, `cuGraphExecUpdate`): each change a trace graph of its own,
    /// made where the executable next ran.
    pub graph_changes: usize,
    /// Events this process shared with others (`cuIpcGetEventHandle`).
    pub ipc_events_exported: usize,
    /// Other processes' events opened here (`cuIpcOpenEventHandle`), each an event of the
    /// trace's own.
    pub ipc_events_imported: usize,
    /// Allocations this process shared with others (`cuIpcGetMemHandle`).
    pub ipc_exported: usize,
    /// Other processes' allocations opened here (`cuIpcOpenMemHandle`), each a buffer of the
    /// trace's own holding its bytes as they were when opened.
    pub ipc_imported: usize,
    /// Physical allocations this process shared with others (`cuMemExportToShareableHandle`).
    pub vmm_exported: usize,
    /// Other processes' physical allocations imported here
    /// (`cuMemImportFromShareableHandle`).
    pub vmm_imported: usize,
    /// Of those exported or imported, the ones a joint replay cannot pair: no key (the
    /// exporter was not found, a handle type without one) or not mapped whole at a
    /// reservation's base.
    pub vmm_unpaired: usize,
    /// Pinned host regions the device reads and writes where they lie (zero-copy), each a
    /// buffer of the trace's own, followed as managed memory.
    pub host_mapped: usize,
    /// Runs of managed memory the host wrote (copies before the work that followed).
    pub managed_writes: usize,
    /// Runs of managed memory the device changed (read backs after a context sync).
    pub managed_reads: usize,
    /// Allocations made while a capture was open, moved before it (`place`).
    pub allocs_moved: usize,
    /// Of them, made by a thread in relaxed capture mode (`cuThreadExchangeStreamCaptureMode`).
    pub relaxed_allocs_moved: usize,
}

impl Summary {
    /// One paragraph for a person.
    pub fn text(&self) -> String {
        let mut s = format!(
            "process {}: {} driver calls -> {} trace calls ({} launches of {} kernels from {} module images)",
            self.pid, self.records, self.calls, self.launches, self.kernels, self.modules
        );
        if self.failed > 0 {
            s.push_str(&format!("; {} failed in the driver", self.failed));
        }
        if !self.opaque.is_empty() {
            s.push_str(&format!(
                "; not understood, kept by name only (a replay skips them): {}",
                listed(&self.opaque)
            ));
        }
        if self.unnamed_launches > 0 {
            s.push_str(&format!(
                "; {} launches of functions no logged lookup named",
                self.unnamed_launches
            ));
        }
        if self.no_layout > 0 {
            s.push_str(&format!(
                "; {} launches without a parameter layout (arguments not recorded)",
                self.no_layout
            ));
        }
        if self.other_clusters > 0 {
            s.push_str(&format!(
                "; {} launches in a cluster shape other than their kernel's first (replayed in the first)",
                self.other_clusters
            ));
        }
        if !self.launch_attrs.is_empty() {
            s.push_str(&format!(
                "; launch attributes a replay does not apply (they change how launches overlap or are scheduled, not what they compute): {}",
                listed(&self.launch_attrs)
            ));
        }
        if self.launch_events > 0 {
            s.push_str(&format!(
                "; {} recorded by launch attributes (each an event record just after its launch)",
                count(self.launch_events as usize, "event", "s")
            ));
        }
        if self.value_waits > 0 {
            s.push_str(&format!(
                "; {} for a value a recorded stream write set (each a wait for that write's event)",
                count(self.value_waits as usize, "stream wait", "s")
            ));
        }
        if self.triton_typed > 0 {
            s.push_str(&format!(
                "; {} Triton kernels typed from Triton's cache",
                self.triton_typed
            ));
        }
        if self.per_thread_streams > 0 {
            s.push_str(&format!(
                "; per-thread default streams of {} (a stream each)",
                count(self.per_thread_streams, "thread", "s")
            ));
        }
        if self.node_graphs > 0 {
            s.push_str(&format!(
                "; {} built node by node (replayed as a capture of its nodes)",
                count(self.node_graphs, "graph", "s")
            ));
        }
        if self.graph_event_nodes > 0 {
            s.push_str(&format!(
                "; {} of those graphs (each a wait before the graph's launches, or a record after them)",
                count(self.graph_event_nodes, "event node", "s")
            ));
        }
        if self.graph_changes > 0 {
            s.push_str(&format!(
                "; {} after instantiation (each replayed as a graph of the nodes it then had)",
                count(self.graph_changes, "executable graph change", "s")
            ));
        }
        if self.ipc_exported > 0 {
            s.push_str(&format!(
                "; {} shared with other processes (IPC)",
                count(self.ipc_exported, "allocation", "s")
            ));
        }
        if self.ipc_imported > 0 {
            s.push_str(&format!(
                "; {} of other processes opened (IPC: a buffer each, with its bytes as they were when opened; what the other process wrote after is in its own trace: replay them together with `gputape ranks --replay`)",
                count(self.ipc_imported, "allocation", "s")
            ));
        }
        if self.ipc_events_exported > 0 {
            s.push_str(&format!(
                "; {} shared with other processes (IPC)",
                count(self.ipc_events_exported, "event", "s")
            ));
        }
        if self.ipc_events_imported > 0 {
            s.push_str(&format!(
                "; {} of other processes opened (IPC: an event each, the other process's in a joint replay)",
                count(self.ipc_events_imported, "event", "s")
            ));
        }
        if self.vmm_exported > 0 {
            s.push_str(&format!(
                "; {} shared with other processes (shareable handles)",
                count(self.vmm_exported, "physical allocation", "s")
            ));
        }
        if self.vmm_imported > 0 {
            s.push_str(&format!(
                "; {} of other processes imported (shareable handles: a buffer each, with its bytes as they were when mapped; replay the processes together with `gputape ranks --replay`)",
                count(self.vmm_imported, "physical allocation", "s")
            ));
        }
        if self.vmm_unpaired > 0 {
            s.push_str(&format!(
                "; {} that a joint replay cannot pair (the exporter not found, or not mapped whole at a reservation's start): replayed as when alone",
                count(self.vmm_unpaired, "shared allocation", "s")
            ));
        }
        if self.host_mapped > 0 {
            s.push_str(&format!(
                "; {} the device maps (zero-copy: a buffer each, followed as managed memory)",
                count(self.host_mapped, "pinned host region", "s")
            ));
        }
        if self.managed_writes + self.managed_reads > 0 {
            s.push_str(&format!(
                "; managed memory: {}, {} read as the host saw them",
                count(self.managed_writes, "host write", "s"),
                count(self.managed_reads, "device result", "s")
            ));
        }
        if self.allocs_moved > 0 {
            s.push_str(&format!(
                "; {} made while a capture was open moved before it ({} by a thread in relaxed capture mode, as PyTorch's allocator makes them)",
                count(self.allocs_moved, "allocation", "s"),
                self.relaxed_allocs_moved
            ));
        }
        if let Some(d) = &self.dump {
            s.push_str(&format!("; flight dump: {d}"));
        }
        if let Some(c) = &self.cut {
            s.push_str(&format!("; the log stops short: {c}"));
        }
        s
    }
}

/// `name xN, ...` of counts by name, in name order.
fn listed(counts: &BTreeMap<String, u64>) -> String {
    let list: Vec<String> = counts.iter().map(|(n, k)| format!("{n} x{k}")).collect();
    list.join(", ")
}

/// `n thing` or `n things` (`suffix` makes the plural).
pub(crate) fn count(n: usize, thing: &str, suffix: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}{suffix}")
    }
}

/// Reads the call log at `path`.
pub fn read_log(path: &std::path::Path) -> Result<Vec<u8>, ShimTraceError> {
    std::fs::read(path).map_err(|source| ShimTraceError::Io {
        path: path.display().to_string(),
        source,
    })
}
