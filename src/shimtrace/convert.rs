//! The call log, record by record, into trace calls (the table in `mod.rs`).
//!
//! One room, over 900 lines: the `Converter`'s state (the handle-to-id maps of one process,
//! its reservations, modules, functions and captures) is what every record reads and writes,
//! and `record` is its one match over the log's record kinds, an arm each; the parts that need
//! none of that state (reservation extents, launch arguments as addresses) are free functions
//! here, the summary's text is `mod.rs`'s, and the converter's calls for graphs
//! (`convert/graph_calls.rs`) and for stream values and launch attributes
//! (`convert/stream_calls.rs`) are rooms of their own.

use std::collections::{BTreeMap, HashMap, HashSet};

use gputape_shimlog::{LogError, On, Reader, Rec, Record};

use super::graphs::{Graphs, NodeTo};
use super::{ShimTraceError, Summary};
use crate::backend::image::image_kind;
use crate::backend::{
    KernelInfo, ModuleCode, ParamAccess, ParamInfo, TensorMapDesc, TensorMapDtype,
};
use crate::recorder::Addrs;
use crate::trace::{
    Adopted, Arg, Args, BlobId, BufferId, Call, CallRecord, DevAddr, ErrorRec, EventId, GraphId,
    HostAddr, HostId, KernelId, LaunchHead, OperandMut, Provenance, Share, ShareSide, SharedId,
    SiteDef, SiteId, StreamId, StreamRef, TensorMapArg, Trace, TraceHeader, Value, WordsArg,
    FORMAT_VERSION, IPC_HANDLE_BYTES, MIN_READER_VERSION, TOOL_SITE,
};

/// The log in `bytes` (read from `path`, named in errors) as a trace of the process that wrote
/// it, and what was found. A log cut short converts up to the cut (`Summary::cut` says where).
pub fn convert(
    path: &str,
    bytes: &[u8],
    command_line: Vec<String>,
) -> Result<(Trace, Summary), ShimTraceError> {
    let (header, reader) = Reader::new(bytes).map_err(|source| ShimTraceError::Log {
        path: path.to_string(),
        source,
    })?;
    let mut c = Converter::new(header.pid, header.driver_version, command_line);
    let mut records = Vec::new();
    for rec in reader {
        match rec {
            Ok(r) => records.push(r),
            Err(e @ LogError::Cut { .. }) => {
                c.summary.cut = Some(e.to_string());
                break;
            }
            Err(source) => {
                return Err(ShimTraceError::Log {
                    path: path.to_string(),
                    source,
                })
            }
        }
    }
    (c.extents, c.vmm.opened) = reservation_extents(&records);
    for r in records {
        c.record(r);
    }
    let (mut t, mut summary) = c.finish();
    for cache in super::triton::cache_dirs() {
        summary.triton_typed += super::triton::type_kernels(&mut t, &cache);
    }
    Ok((t, summary))
}

/// How far each reservation of virtual addresses (by the index of its `Reserve` record) was
/// ever backed by maps, from its base: the one buffer it becomes in the trace. PyTorch's
/// expandable segments reserve far more than they map, and a tensor may straddle two maps, so
/// the reservation (up to its last mapped byte), not each map, is the allocation. Second, the
/// reservations whose only map is of an imported allocation, at their base from its start
/// (`SharedMemory::opened`).
fn reservation_extents(records: &[Record<'_>]) -> (HashMap<u64, u64>, HashSet<u64>) {
    /// A reservation open in the first pass.
    struct Open {
        size: u64,
        index: u64,
        extent: u64,
        maps: u32,
        /// Its one map so far is an imported allocation's, at its base.
        imported: bool,
    }
    let mut open: BTreeMap<u64, Open> = BTreeMap::new();
    let mut imported = HashSet::new();
    let (mut out, mut opened) = (HashMap::new(), HashSet::new());
    let mut i = 0u64;
    for r in records {
        // The index the converter gives this record (a flight dump's gaps skip indices).
        let at = i;
        i = i.saturating_add(match r.call {
            Rec::Gap { dropped } => dropped,
            _ => 1,
        });
        let (ptr, size, whole) = match r.call {
            Rec::Reserve { ptr, size } => {
                let o = Open {
                    size,
                    index: at,
                    extent: 0,
                    maps: 0,
                    imported: false,
                };
                open.insert(ptr, o);
                continue;
            }
            Rec::ShareableImport { handle, .. } => {
                imported.insert(handle);
                continue;
            }
            Rec::Unreserve { ptr, .. } => {
                if let Some(o) = open.remove(&ptr) {
                    out.insert(o.index, o.extent);
                    if o.imported {
                        opened.insert(o.index);
                    }
                }
                continue;
            }
            Rec::Map { ptr, size } => (ptr, size, None),
            Rec::MapHandle {
                ptr,
                size,
                offset,
                handle,
            } => (ptr, size, Some(offset == 0 && imported.contains(&handle))),
            _ => continue,
        };
        if let Some((base, o)) = open.range_mut(..=ptr).next_back() {
            if ptr - base < o.size {
                o.extent = o.extent.max((ptr - base).saturating_add(size).min(o.size));
                o.maps += 1;
                o.imported = o.maps == 1 && ptr == *base && whole == Some(true);
            }
        }
    }
    for o in open.into_values() {
        out.insert(o.index, o.extent);
        if o.imported {
            opened.insert(o.index);
        }
    }
    (out, opened)
}

/// A copy the converter makes of its own that happens at once (not on a stream): what another
/// process's memory held when this one opened it.
const AT_ONCE: On = On {
    stream: 0,
    sync: true,
};

/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const CAPTURE_MODE_RELAXED: u32 = 2;

/// Bytes of a `CUtensorMap`.
const TENSOR_MAP: usize = 128;

/// The site of a driver-level recording's calls whose Python stack is not known (no Python in
/// the process, a thread Python never ran on, lines off): `<driver call>`.
const SITE: SiteId = SiteId(0);

struct Converter {
    t: Trace,
    summary: Summary,
    /// Live allocations by base address: (buffer, size).
    live: BTreeMap<u64, (BufferId, u64)>,
    /// Freed ones, last by base address, for naming a use after free.
    freed: BTreeMap<u64, (BufferId, u64)>,
    next_buf: u32,
    streams: HashMap<u64, StreamId>,
    events: HashMap<u64, EventId>,
    /// Ids handed out so far (a destroyed handle's id is never reused).
    next_stream: u32,
    next_event: u32,
    /// Module and library handles: (handle, is a library) -> module name.
    modules: HashMap<(u64, bool), String>,
    /// Function and kernel handles -> (module, symbol).
    functions: HashMap<u64, (String, String)>,
    /// Functions whose next launch a `Cooperative` record marked, and not yet launched.
    cooperative: HashSet<u64>,
    /// Functions whose next launch a `LaunchAttrs` record gave attributes: (id, value) pairs.
    launch_attrs: HashMap<u64, Vec<u64>>,
    /// Calls the converter makes of its own just after the record being converted (an event a
    /// launch attribute records, or recorded after a value written on a stream).
    after: Vec<Call>,
    /// The buffer an `IpcImport` (or an imported allocation's `ImportedBytes`) just made, its
    /// handle, and whether its bytes were read (and so uploaded by a call of the converter's
    /// own): a `Frame::Shared` once numbered.
    opened: Option<(SharedId, Vec<u8>, bool)>,
    /// Physical memory shared through shareable handles (`convert/shared_memory.rs`).
    vmm: shared_memory::SharedMemory,
    /// The events each trace graph built of nodes waits for and records (its event nodes,
    /// lifted out of it to its launches: `graph_calls.rs`).
    graph_events: HashMap<GraphId, GraphEvents>,
    /// Values written on streams (`cuStreamWriteValue*`), by address: the stream, the event
    /// recorded just after, the bytes written.
    value_writes: HashMap<u64, Vec<(StreamRef, EventId, Vec<u8>)>>,
    /// The event recorded after values written on a stream (by handle) at an address.
    value_events: HashMap<(u64, u64), EventId>,
    kernels: HashMap<(String, String), KernelId>,
    /// Log index of an async read back -> its call's seq.
    copies: HashMap<u64, u64>,
    /// The recording thread ids (gettid) in order of first call.
    threads: HashMap<u32, u16>,
    /// The thread (gettid) of the record being converted.
    thread: u32,
    /// Each thread's per-thread default stream, once used.
    per_thread: HashMap<u32, StreamId>,
    /// Threads whose next record is a graph node's work (`NodeWork`): where it goes.
    node_of: HashMap<u32, NodeTo>,
    /// Graphs built node by node, and executables changed after they were made.
    built: Graphs,
    /// Pinned host regions handed out so far (copy nodes' host sides).
    next_host: u32,
    /// Each thread's capture interaction mode (`cuThreadExchangeStreamCaptureMode`), where
    /// it set one: thread -> mode (2 relaxed).
    capture_mode: HashMap<u32, u32>,
    /// The record being placed was made by a thread in relaxed capture mode.
    relaxed_now: bool,
    /// Each reservation's extent, by the index of its record (`reservation_extents`).
    extents: HashMap<u64, u64>,
    /// Tensor maps encoded so far, by their 128 bytes: what a launch parameter holding those
    /// bytes describes.
    tensor_maps: HashMap<Vec<u8>, TensorMapArg>,
    /// Captured graphs by `CUgraph` handle.
    graphs: HashMap<u64, GraphId>,
    /// Executable graphs by `CUgraphExec` handle: the captured graph each was made from.
    execs: HashMap<u64, GraphId>,
    /// Executable graphs alive per captured graph: the trace's graph (instantiated when its
    /// capture ends) is destroyed with the last.
    exec_count: HashMap<GraphId, u32>,
    /// Trace graphs destroyed already.
    dead: HashSet<GraphId>,
    next_graph: u32,
    /// Captures open, and the calls made while one is (numbered when it ends: `place`).
    capture_depth: u32,
    /// Host functions as the log named them -> as the trace names them (`host_function`).
    host_functions: HashMap<String, String>,
    /// Files host functions lie in -> their symbol tables (`None`: none to read), read once.
    elf_files: HashMap<String, Option<super::elf::Symbols>>,
    /// The calls of the open capture (numbered when it ends: `place`), each with the graph
    /// node it became (0: not logged; `CapturedNode` names it).
    captured: Vec<(CallRecord, u64)>,
    /// Each thread's last call in `captured`.
    last_captured: HashMap<u32, usize>,
    /// The open capture holds another (captures on two streams at once): its calls are not
    /// one graph's, and no node list is kept for it.
    nested_capture: bool,
    /// The graph the capture being closed made (its `CaptureEnd`'s), for its node list.
    ending: Option<u64>,
    /// Calls a hang's dump says had not returned: (seq, thread).
    in_flight: Vec<(u64, u16)>,
    /// Records read (the index the next one has).
    index: u64,
    seq: u64,
    /// The Python stacks named so far, and their sites.
    lines: super::lines::Lines,
}

impl Converter {
    fn new(pid: u32, driver_version: i32, command_line: Vec<String>) -> Self {
        let mut t = Trace {
            header: Some(TraceHeader {
                format: FORMAT_VERSION,
                min_reader: MIN_READER_VERSION,
                gputape: env!("CARGO_PKG_VERSION").to_string(),
                backend: "cuda".into(),
                device_ordinal: 0,
                device_name: None,
                sm_count: None,
                total_memory: None,
                driver_version: (driver_version != 0).then_some(driver_version),
            }),
            ..Default::default()
        };
        let mut prov = Provenance::now();
        prov.command_line = command_line;
        prov.pid = pid;
        t.provenance = Some(prov);
        t.sites.insert(
            SITE,
            SiteDef {
                file: "<driver call>".into(),
                line: 0,
                col: 0,
            },
        );
        Converter {
            t,
            summary: Summary {
                pid,
                ..Default::default()
            },
            live: BTreeMap::new(),
            freed: BTreeMap::new(),
            next_buf: 0,
            streams: HashMap::new(),
            events: HashMap::new(),
            next_stream: 1,
            next_event: 0,
            modules: HashMap::new(),
            functions: HashMap::new(),
            cooperative: HashSet::new(),
            launch_attrs: HashMap::new(),
            after: Vec::new(),
            opened: None,
            vmm: Default::default(),
            graph_events: HashMap::new(),
            value_writes: HashMap::new(),
            value_events: HashMap::new(),
            kernels: HashMap::new(),
            copies: HashMap::new(),
            threads: HashMap::new(),
            thread: 0,
            per_thread: HashMap::new(),
            node_of: HashMap::new(),
            built: Graphs::default(),
            next_host: 0,
            capture_mode: HashMap::new(),
            relaxed_now: false,
            extents: HashMap::new(),
            tensor_maps: HashMap::new(),
            graphs: HashMap::new(),
            execs: HashMap::new(),
            exec_count: HashMap::new(),
            dead: HashSet::new(),
            next_graph: 0,
            capture_depth: 0,
            host_functions: HashMap::default(),
            elf_files: HashMap::default(),
            captured: Vec::new(),
            last_captured: HashMap::new(),
            nested_capture: false,
            ending: None,
            in_flight: Vec::new(),
            index: 0,
            seq: 0,
            lines: super::lines::Lines::new(),
        }
    }

    /// The flight recorder's reason for the dump this log is, led by the fault's name when
    /// `status` (the dump record's) is one.
    fn dumped(&mut self, reason: &[u8], status: i32) {
        let mut reason = String::from_utf8_lossy(reason).into_owned();
        if status != 0 {
            let name = crate::backend::cuda_error_name(status as u32);
            reason = format!("{name} ({status}) {reason}");
        }
        if self.summary.dropped > 0 {
            reason.push_str(&format!(
                "; buffers written before trace call {} start without their contents in a \
                 replay",
                self.summary.window_from.unwrap_or(0)
            ));
        }
        self.summary.dump = Some(reason.clone());
        self.t.dump = Some(crate::trace::DumpInfo {
            reason,
            in_flight: std::mem::take(&mut self.in_flight),
        });
    }

    fn finish(mut self) -> (Trace, Summary) {
        self.flush_captured();
        self.t.stopped = self.summary.cut.is_none();
        self.summary.calls = self.t.calls.len() as u64;
        self.summary.kernels = self.t.kernels.len();
        self.summary.modules = self.t.module_images.len();
        // Exported allocations never mapped at a reservation's start: nothing to hand over.
        self.summary.vmm_unpaired += self.vmm.exports.len();
        (self.t, self.summary)
    }

    /// One record of the log into the trace. One long function on purpose: a single match over
    /// the log's record kinds, an arm each (so a new kind is a compile error until it is
    /// converted), which arms longer than a few lines leave to a method of their own.
    fn record(&mut self, r: Record<'_>) {
        let index = self.index;
        self.index += 1;
        self.summary.records += 1;
        self.thread = r.thread;
        // The work record after a thread's `GraphNode` is a node of that graph (records that
        // name stacks may come between).
        let node = match r.call {
            Rec::Launch { .. }
            | Rec::CopyH2D { .. }
            | Rec::ValueWrite { .. }
            | Rec::CopyD2H { .. }
            | Rec::CopyD2D { .. }
            | Rec::Memset { .. }
            | Rec::HostFunc { .. }
            | Rec::EventRecord { .. }
            | Rec::StreamWaitEvent { .. }
            | Rec::Opaque { .. } => self.node_of.remove(&r.thread),
            _ => None,
        };
        self.relaxed_now = self.capture_mode.get(&r.thread) == Some(&CAPTURE_MODE_RELAXED);
        let ok = r.status == 0;
        let ret = |v: Value| -> Result<Value, ErrorRec> {
            if ok {
                Ok(v)
            } else {
                Err(driver_error(r.status))
            }
        };
        let (call, value) = match r.call {
            Rec::Alloc {
                ptr,
                bytes,
                managed,
            } => {
                let call = if managed {
                    Call::AllocManaged { bytes }
                } else {
                    Call::Alloc { bytes }
                };
                if !ok {
                    (call, ret(Value::Unit))
                } else {
                    (call, Ok(Value::Buffer(self.new_buffer(ptr, bytes))))
                }
            }
            Rec::Free { ptr } => (
                Call::Free {
                    ptr: self.freed_at(ptr, ok),
                },
                ret(Value::Unit),
            ),
            // Pinned host memory is not a device call here: copies through it carry their bytes.
            Rec::HostAlloc { .. } | Rec::HostFree { .. } => return,
            // Pinned memory the device reads and writes where it lies (zero-copy): a buffer of
            // the trace's own, which a replay makes as managed memory; the shim follows it as
            // managed memory (what the host wrote before work, what the device left after a
            // sync), so its bytes travel as copies into it and read backs of it.
            Rec::HostMapped { ptr, bytes } => {
                self.summary.records -= 1;
                self.summary.host_mapped += 1;
                let id = self.new_buffer(ptr, bytes);
                (Call::AllocManaged { bytes }, Ok(Value::Buffer(id)))
            }
            // Memory this process shares with others: no call (the process that opens it
            // records its own view), but the buffer and its handle, for a joint replay.
            Rec::IpcExport { ptr, handle } => {
                self.summary.ipc_exported += 1;
                if let (true, DevAddr::Buf { buf, .. }) = (ok, self.addr(ptr)) {
                    self.exported(SharedId::Buffer(buf), handle);
                }
                return;
            }
            // An event this process shares with others: no call, the event and its handle.
            Rec::IpcEventExport { event, handle } => {
                self.summary.ipc_events_exported += 1;
                if ok {
                    let id = self.event(event);
                    self.exported(SharedId::Event(id), handle);
                }
                return;
            }
            // Another process's event, opened here: an event of the trace's own (a replay alone
            // records and waits for it as for any), paired with the exporter's in a joint one.
            Rec::IpcEventImport { event, handle } => {
                self.summary.ipc_events_imported += 1;
                let id = self.new_event(event);
                let side = ShareSide::Opened { fill: None };
                self.share(SharedId::Event(id), handle.to_vec(), side);
                (Call::CreateEvent, Ok(Value::Event(id)))
            }
            Rec::WallClock { wall_ns } => {
                self.summary.records -= 1;
                if self.t.clock_epoch_ns.is_none() {
                    self.t.clock_epoch_ns = Some(wall_ns.saturating_sub(r.t_ns));
                }
                return;
            }
            // Another process's allocation, opened here: a buffer of the trace's own, its
            // bytes as they were when opened copied in (the tool's call, not the program's).
            Rec::IpcImport {
                ptr,
                bytes,
                data,
                handle,
            } => {
                self.summary.ipc_imported += 1;
                let id = self.open_buffer(ptr, bytes, data);
                self.opened = Some((SharedId::Buffer(id), handle.to_vec(), !data.is_empty()));
                (Call::Alloc { bytes }, Ok(Value::Buffer(id)))
            }
            Rec::IpcClose { ptr } => (
                Call::Free {
                    ptr: self.freed_at(ptr, ok),
                },
                ret(Value::Unit),
            ),
            Rec::HostUnmapped { ptr } => {
                self.summary.records -= 1;
                (
                    Call::Free {
                        ptr: self.freed_at(ptr, true),
                    },
                    Ok(Value::Unit),
                )
            }
            // Markers of a flight dump, not calls: they take no index of their own.
            Rec::Gap { dropped } => {
                self.summary.records -= 1;
                self.index = index.saturating_add(dropped);
                self.summary.dropped = self.summary.dropped.saturating_add(dropped);
                self.summary.window_from = Some(self.seq);
                return;
            }
            Rec::Dump { reason } => {
                self.summary.records -= 1;
                self.index = index;
                self.dumped(reason, r.status);
                return;
            }
            // Names for later records, not calls (they keep their index: the shim counts them).
            Rec::Code {
                id,
                py_minor,
                first_line,
                filename,
                qualname,
                linetable,
            } => {
                self.summary.records -= 1;
                self.lines
                    .code(id, py_minor, first_line, (filename, qualname), linetable);
                return;
            }
            Rec::Stack { id, frames } => {
                self.summary.records -= 1;
                self.lines
                    .stack(&mut self.t, id, gputape_shimlog::stack_frames(frames));
                return;
            }
            Rec::NativeFrame {
                id,
                module,
                offset,
                symbol,
                symbol_offset,
            } => {
                self.summary.records -= 1;
                self.lines
                    .native_frame(id, module, offset, (symbol, symbol_offset));
                return;
            }
            Rec::NativeStack { id, frames } => {
                self.summary.records -= 1;
                self.lines
                    .native_stack(&mut self.t, id, gputape_shimlog::native_frames(frames));
                return;
            }
            Rec::ValueWrite { dst, on, data } => {
                // A flag another stream may wait for: an event recorded on its stream just
                // after it (eager work only: not in a graph), which a wait that this write
                // meets waits for.
                if ok && !on.sync && node.is_none() && self.capture_depth == 0 {
                    let event = self.value_event(on.stream, dst);
                    let stream = self.stream(on.stream);
                    self.value_writes
                        .entry(dst)
                        .or_default()
                        .push((stream, event, data.to_vec()));
                    self.after.push(Call::RecordEvent { event, stream });
                }
                let call = self.upload(dst, on, data);
                (call, ret(Value::Unit))
            }
            Rec::ValueWait {
                stream,
                addr,
                value,
                flags,
                wide,
            } => {
                let waits = self.stream(stream);
                match self.value_met(addr, value, flags, wide) {
                    // Met by a write on its own stream: stream order already holds it.
                    Some((s, _)) if s == waits => {
                        self.summary.value_waits += 1;
                        return;
                    }
                    Some((_, event)) => {
                        self.summary.value_waits += 1;
                        let call = Call::StreamWaitEvent {
                            stream: waits,
                            event,
                        };
                        (call, ret(Value::Unit))
                    }
                    None => {
                        let bits = if wide { 64 } else { 32 };
                        let name = format!(
                            "cuStreamWaitValue{bits} (for a value no recorded stream write set)"
                        );
                        *self.summary.opaque.entry(name.clone()).or_default() += 1;
                        (Call::Opaque { name }, ret(Value::Unit))
                    }
                }
            }
            Rec::CopyH2D { dst, on, data } => {
                let call = self.upload(dst, on, data);
                (call, ret(Value::Unit))
            }
            Rec::CopyD2H {
                src, len, on, data, ..
            } => {
                let src = self.addr(src);
                if on.sync {
                    let v = if ok {
                        Ok(Value::Bytes(self.t.blobs.insert_content(data.to_vec())))
                    } else {
                        ret(Value::Unit)
                    };
                    (Call::CopyD2H { src, len }, v)
                } else {
                    // A copy captured into a graph delivers its bytes at each graph launch,
                    // not at a sync now: none are matched to it, and it writes a region of its
                    // own (a node's gets one where its graph is built, `build_graph`).
                    let dst = match (node, self.capture_depth) {
                        (Some(_), _) => HostAddr::Unknown,
                        (None, 0) => {
                            self.copies.insert(index, self.seq);
                            HostAddr::Unknown
                        }
                        (None, _) => self.own_pinned(len),
                    };
                    let call = Call::CopyD2HAsync {
                        src,
                        len,
                        stream: self.stream(on.stream),
                        dst,
                    };
                    (call, ret(Value::Unit))
                }
            }
            Rec::D2HBytes { copy, data } => {
                if let Some(seq) = self.copies.remove(&copy) {
                    let blob = self.t.blobs.insert_content(data.to_vec());
                    self.t.d2h_async.insert(seq, blob);
                }
                return;
            }
            Rec::CopyD2D { src, dst, len, on } => {
                let (src, dst) = (self.addr(src), self.addr(dst));
                let call = if on.sync {
                    Call::CopyD2D { src, dst, len }
                } else {
                    Call::CopyD2DAsync {
                        src,
                        dst,
                        len,
                        stream: self.stream(on.stream),
                    }
                };
                (call, ret(Value::Unit))
            }
            Rec::Memset {
                dst,
                value,
                elem,
                count,
                on,
            } => (self.memset(dst, value, elem, count, on), ret(Value::Unit)),
            Rec::ModuleLoad {
                handle,
                library,
                image,
            } => {
                if ok {
                    let name = self.module(image);
                    self.modules.insert((handle, library), name);
                }
                return;
            }
            Rec::ModuleUnload { .. } => return,
            Rec::Function {
                owner,
                library,
                handle,
                name,
            } => {
                let module = self
                    .modules
                    .get(&(owner, library))
                    .cloned()
                    .unwrap_or_else(|| format!("unlogged-module-{owner:#x}"));
                let func = String::from_utf8_lossy(name).into_owned();
                if ok {
                    self.functions
                        .insert(handle, (module.clone(), func.clone()));
                }
                let k = ok.then(|| self.kernel_id(&module, &func, None));
                let v = match k {
                    Some(k) => Ok(Value::Kernel(k)),
                    None => ret(Value::Unit),
                };
                (Call::Kernel { module, func }, v)
            }
            // A module variable: a buffer of its own at its address (named once; asked again,
            // the same buffer), so copies to it and launches given it spell it as any buffer.
            Rec::Global {
                owner,
                library,
                name,
                ptr,
                bytes,
            } => {
                self.summary.records -= 1;
                let module = self.modules.get(&(owner, library)).cloned();
                if ok && module.is_none() {
                    // Of a module the log never named: listed with what a replay lacks.
                    *self
                        .summary
                        .opaque
                        .entry("cuModuleGetGlobal (of a module not logged)".into())
                        .or_default() += 1;
                }
                if let (true, Some(module), false) = (ok, module, self.live.contains_key(&ptr)) {
                    let id = BufferId(self.next_buf);
                    self.next_buf += 1;
                    self.live.insert(ptr, (id, bytes));
                    self.t.addresses.insert(id, ptr);
                    self.t.globals.insert(
                        id,
                        crate::trace::ModuleGlobal {
                            module,
                            name: String::from_utf8_lossy(name).into_owned(),
                            bytes,
                        },
                    );
                }
                return;
            }
            // The module behind a library: named as the library is.
            Rec::LibraryModule { library, module } => {
                self.summary.records -= 1;
                if let (true, Some(name)) = (ok, self.modules.get(&(library, true)).cloned()) {
                    self.modules.insert((module, false), name);
                }
                return;
            }
            // Marks the launch record that follows it.
            Rec::Cooperative { func } => {
                self.summary.records -= 1;
                self.cooperative.insert(func);
                return;
            }
            Rec::LaunchAttrs { func, attrs } => {
                self.summary.records -= 1;
                self.launch_attrs.insert(func, attrs);
                return;
            }
            // No call of its own: what it says is which allocations a capture let through.
            Rec::CaptureMode { mode } => {
                self.capture_mode.insert(r.thread, mode);
                return;
            }
            Rec::GraphNode { graph } => {
                self.summary.records -= 1;
                self.node_of
                    .insert(r.thread, NodeTo::Add { graph, node: 0 });
                return;
            }
            Rec::CapturedNode { node } => {
                self.summary.records -= 1;
                let at = self.last_captured.get(&r.thread).copied();
                if let Some((_, n)) = at.and_then(|i| self.captured.get_mut(i)) {
                    *n = node;
                }
                return;
            }
            Rec::NodeWork {
                target,
                node,
                how,
                first,
            } => {
                self.summary.records -= 1;
                if let Some(to) = NodeTo::of(target, node, how, first) {
                    self.node_of.insert(r.thread, to);
                }
                return;
            }
            // Managed memory the host wrote before the work after it: a copy of those bytes,
            // made where the program made that work.
            Rec::ManagedWrite { dst, data } => {
                self.summary.records -= 1;
                self.summary.managed_writes += 1;
                let dst = self.addr(dst);
                let len = data.len() as u64;
                let data = self.t.blobs.insert_content(data.to_vec());
                (Call::CopyH2D { dst, data, len }, Ok(Value::Unit))
            }
            // Managed memory the device changed, as the host saw it after a context sync: a
            // read back of it, the tool's own (not the program's call), which a replay compares.
            Rec::ManagedRead { src, data } => {
                self.managed_read(&r, src, data);
                return;
            }
            // The first device a context was made on is the one the trace says it was
            // recorded on.
            Rec::Device {
                ordinal,
                sm_count,
                total_memory,
                name,
            } => {
                self.summary.records -= 1;
                self.device(ordinal, sm_count, total_memory, name);
                return;
            }
            Rec::KernelFunction { kernel, func } => {
                if ok {
                    if let Some(named) = self.functions.get(&kernel).cloned() {
                        self.functions.insert(func, named);
                    }
                }
                return;
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
                let (module, name) = match self.functions.get(&func) {
                    Some(n) => n.clone(),
                    None => {
                        self.summary.unnamed_launches += 1;
                        ("unlogged".to_string(), format!("function-{func:#x}"))
                    }
                };
                if layout.is_none() {
                    self.summary.no_layout += 1;
                }
                let kernel = self.kernel_id(&module, &name, layout.as_deref());
                if cluster != [0; 3] {
                    // The trace keeps one cluster shape per kernel (Hopper kernels are built
                    // for theirs): a launch asking for another is counted.
                    let first = *self.t.kernel_clusters.entry(kernel).or_insert(cluster);
                    if first != cluster {
                        self.summary.other_clusters += 1;
                    }
                }
                if self.cooperative.remove(&func) {
                    self.t.kernel_cooperative.insert(kernel);
                }
                if let Some(attrs) = self.launch_attrs.remove(&func) {
                    self.launch_attributes(&attrs, stream, ok);
                }
                let args = self.args(layout.as_deref(), params);
                self.summary.launches += 1;
                let call = Call::Launch {
                    head: LaunchHead {
                        kernel,
                        grid,
                        block,
                        shared_mem,
                        stream: self.stream(stream),
                    },
                    args,
                };
                (call, ret(Value::Unit))
            }
            Rec::StreamCreate { stream, .. } => {
                if !ok {
                    (Call::CreateStream, ret(Value::Unit))
                } else {
                    let id = self.new_stream(stream);
                    (Call::CreateStream, Ok(Value::Stream(StreamRef::Id(id))))
                }
            }
            // The trait has no stream destruction; a handle reused later is a new stream.
            Rec::StreamDestroy { stream } => {
                if ok {
                    self.streams.remove(&stream);
                }
                return;
            }
            Rec::EventCreate { event, .. } => {
                if !ok {
                    (Call::CreateEvent, ret(Value::Unit))
                } else {
                    let id = self.new_event(event);
                    (Call::CreateEvent, Ok(Value::Event(id)))
                }
            }
            Rec::EventDestroy { event } => {
                let e = self.event(event);
                if ok {
                    self.events.remove(&event);
                }
                (Call::DestroyEvent { event: e }, ret(Value::Unit))
            }
            Rec::EventRecord { event, stream } => (
                Call::RecordEvent {
                    event: self.event(event),
                    stream: self.stream(stream),
                },
                ret(Value::Unit),
            ),
            Rec::StreamWaitEvent { stream, event } => (
                Call::StreamWaitEvent {
                    stream: self.stream(stream),
                    event: self.event(event),
                },
                ret(Value::Unit),
            ),
            Rec::EventSync { event } => (
                Call::EventSynchronize {
                    event: self.event(event),
                },
                ret(Value::Unit),
            ),
            Rec::StreamSync { stream } => (
                Call::Synchronize {
                    stream: self.stream(stream),
                },
                ret(Value::Unit),
            ),
            Rec::CtxSync {} => (
                Call::Synchronize {
                    stream: StreamRef::Legacy,
                },
                ret(Value::Unit),
            ),
            Rec::Reserve { ptr, .. } => {
                let extent = self.extents.get(&index).copied().unwrap_or(0);
                if extent == 0 || self.defer_reservation(index, ptr, extent) {
                    return;
                }
                let id = BufferId(self.next_buf);
                self.next_buf += 1;
                self.live.insert(ptr, (id, extent));
                self.t.addresses.insert(id, ptr);
                (Call::Alloc { bytes: extent }, Ok(Value::Buffer(id)))
            }
            Rec::Unreserve { ptr, .. } => {
                if self.drop_deferred(ptr) {
                    return;
                }
                let Some(b) = self.live.remove(&ptr) else {
                    return;
                };
                self.freed.insert(ptr, b);
                (
                    Call::Free {
                        ptr: DevAddr::Buf { buf: b.0, off: 0 },
                    },
                    Ok(Value::Unit),
                )
            }
            // The reservation is the buffer; what backs it when does not change its bytes.
            Rec::Map { .. } | Rec::Unmap { .. } => return,
            Rec::MapHandle {
                ptr,
                offset,
                handle,
                ..
            } => {
                if ok {
                    self.mapped_allocation(ptr, offset, handle);
                }
                return;
            }
            // Physical memory shared with other processes, or opened from one: no call, but
            // the key that pairs the two (`convert/shared_memory.rs`).
            Rec::ShareableExport { handle, key, .. } => {
                if ok {
                    self.shareable_export(handle, key);
                }
                return;
            }
            Rec::ShareableImport { handle, key, .. } => {
                if ok {
                    self.shareable_import(handle, key);
                }
                return;
            }
            Rec::ImportedBytes { ptr, data } => match self.imported_bytes(ptr, data) {
                Some((call, value)) => (call, Ok(value)),
                None => return,
            },
            Rec::TensorMap {
                map,
                dtype,
                base,
                dims,
                strides,
                box_dims,
                element_strides,
                modes,
            } => match TensorMapDtype::from_driver(dtype) {
                Some(dtype) => {
                    let desc = TensorMapDesc {
                        dtype,
                        dims,
                        strides,
                        box_dims,
                        element_strides,
                        interleave: modes[0],
                        swizzle: modes[1],
                        l2_promotion: modes[2],
                        oob_fill: modes[3],
                    };
                    let base = self.addr(base);
                    self.tensor_maps.insert(
                        map.to_vec(),
                        TensorMapArg {
                            base,
                            desc: desc.clone(),
                        },
                    );
                    (Call::EncodeTensorMap { base, desc }, ret(Value::Unit))
                }
                None => {
                    let name = format!("cuTensorMapEncodeTiled (element type {dtype})");
                    *self.summary.opaque.entry(name.clone()).or_default() += 1;
                    (Call::Opaque { name }, Ok(Value::Unit))
                }
            },
            Rec::Opaque { name } => {
                let name = String::from_utf8_lossy(name).into_owned();
                *self.summary.opaque.entry(name.clone()).or_default() += 1;
                // Logged before the call ran: its result is not known.
                (Call::Opaque { name }, Ok(Value::Unit))
            }
            Rec::HostFunc { stream, func } => (
                Call::HostFunc {
                    stream: self.stream(stream),
                    func: self.host_function(&String::from_utf8_lossy(func)),
                },
                ret(Value::Unit),
            ),
            Rec::CaptureBegin { stream, .. } => (
                Call::BeginCapture {
                    stream: self.stream(stream),
                },
                ret(Value::Unit),
            ),
            Rec::CaptureEnd { stream, graph } => {
                let call = Call::EndCapture {
                    stream: self.stream(stream),
                };
                if ok && self.capture_depth == 1 {
                    self.ending = Some(graph);
                }
                if ok {
                    let id = GraphId(self.next_graph);
                    self.next_graph += 1;
                    self.graphs.insert(graph, id);
                    (call, Ok(Value::Graph(id)))
                } else {
                    (call, ret(Value::Unit))
                }
            }
            // The trace's graph is instantiated when its capture ends: instantiating it again
            // is no call, only another handle for the same graph.
            Rec::GraphInstantiate { exec, graph } => {
                let head = self.head(&r);
                if let Some(id) = self.trace_graph(graph, head) {
                    self.execs.insert(exec, id);
                    *self.exec_count.entry(id).or_default() += 1;
                }
                self.built.instantiate(exec, graph);
                return;
            }
            Rec::GraphUpdate { exec, graph } => {
                self.summary.graph_changes += 1;
                self.built.update(exec, graph);
                let head = self.head(&r);
                match self.trace_graph(graph, head) {
                    Some(id) => self.rebind(exec, id, head),
                    None => self.built.lose_exec(
                        exec,
                        "updated from a graph the recording does not hold".into(),
                    ),
                }
                return;
            }
            Rec::ChildGraph { graph, node, child } => {
                let captured = self.graph_grows(graph);
                self.built.child(graph, node, child, captured);
                return;
            }
            Rec::NodeDestroyed { node } => {
                if let Some(graph) = self.built.destroy_node(node) {
                    self.graphs.remove(&graph);
                }
                return;
            }
            Rec::ExecChildGraph { exec, node, child } => {
                self.built.exec_child(exec, node, child);
                return;
            }
            Rec::GraphClone { clone, original } => {
                self.built.clone_graph(clone, original);
                if let (false, Some(&id)) = (self.built.built(original), self.graphs.get(&original))
                {
                    self.graphs.insert(clone, id);
                }
                return;
            }
            Rec::NodeEnabled {
                exec,
                node,
                enabled,
            } => {
                self.built.set_enabled(exec, node, enabled);
                return;
            }
            Rec::GraphLaunch { exec, .. } if self.built.lost(exec).is_some() => {
                let why = self.built.lost(exec).unwrap_or_default();
                let name = format!("cuGraphLaunch ({why})");
                *self.summary.opaque.entry(name.clone()).or_default() += 1;
                (Call::Opaque { name }, ret(Value::Unit))
            }
            Rec::GraphLaunch { exec, stream } => match self.changed_graph(exec, &r) {
                Some(graph) => {
                    let (stream, head) = (self.stream(stream), self.head(&r));
                    self.around_launch(graph, stream, head);
                    (Call::LaunchGraph { graph, stream }, ret(Value::Unit))
                }
                // A graph made some other way (of nodes the recording does not understand, or
                // before a flight dump's window): not replayable, and said.
                None => {
                    let name = "cuGraphLaunch".to_string();
                    *self.summary.opaque.entry(name.clone()).or_default() += 1;
                    (Call::Opaque { name }, ret(Value::Unit))
                }
            },
            Rec::GraphExecDestroy { exec } => {
                self.built.destroy_exec(exec);
                let Some(graph) = self.execs.remove(&exec) else {
                    return;
                };
                if !self.unused(graph) {
                    return;
                }
                (Call::DestroyGraph { graph }, ret(Value::Unit))
            }
            // The graph's template: the trace's graph lives as long as its executables, or
            // until this where it has none (a handle no later instantiation can name).
            Rec::GraphDestroy { graph } => {
                self.built.destroy_graph(graph);
                let Some(id) = self.graphs.remove(&graph) else {
                    return;
                };
                let named = self.graphs.values().any(|&g| g == id);
                if named
                    || self.exec_count.get(&id).is_some_and(|&n| n > 0)
                    || !self.dead.insert(id)
                {
                    return;
                }
                (Call::DestroyGraph { graph: id }, ret(Value::Unit))
            }
        };
        // A hang's dump writes the calls threads were blocked in as not returned.
        let returned = r.status != gputape_shimlog::STATUS_NOT_RETURNED;
        if value.is_err() && returned {
            self.summary.failed += 1;
        }
        let rec = CallRecord {
            seq: 0,
            thread: self.thread_id(r.thread),
            site: self.site(r.stack),
            t_ns: r.t_ns,
            dur_ns: returned.then_some(0),
            call,
            ret: returned.then_some(value),
        };
        if let Some(to) = node {
            self.node_work(to, rec);
            return;
        }
        let head = (rec.thread, rec.site, rec.t_ns);
        // The node a captured call became (`CapturedNode`, next) is this call's, not the
        // converter's own calls' after it.
        if let Some(i) = self.place(rec) {
            self.last_captured.insert(self.thread, i);
        }
        for call in std::mem::take(&mut self.after) {
            self.place_own(head, call);
        }
        // An opened buffer's upload, numbered just now (unless a capture holds it).
        if let Some((what, handle, filled)) = self.opened.take() {
            let fill = (filled && self.capture_depth == 0).then(|| self.seq.saturating_sub(1));
            self.share(what, handle, ShareSide::Opened { fill });
        }
    }

    /// A call of the converter's own (returning nothing, at once), placed as made by `head`'s
    /// thread at its site and time.
    fn place_own(&mut self, head: (u16, SiteId, u64), call: Call) {
        self.place(own_call(head, call, Value::Unit));
    }

    /// The thread, site and time of record `r`, for the calls the converter makes of its own
    /// there.
    fn head(&mut self, r: &Record<'_>) -> (u16, SiteId, u64) {
        (self.thread_id(r.thread), self.site(r.stack), r.t_ns)
    }

    /// `what` is shared with other processes under `handle`, from the next call on.
    fn exported(&mut self, what: SharedId, handle: &[u8]) {
        let side = ShareSide::Exported { at: self.seq };
        self.share(what, handle.to_vec(), side);
    }

    /// `what` is shared under `handle`, on this `side`: a `Frame::Shared`, unless the handle
    /// is longer than a handle is (a damaged log), which no trace may hold (its reader would
    /// refuse the file): the sharing is then left out, and the trace replays as alone.
    fn share(&mut self, what: SharedId, handle: Vec<u8>, side: ShareSide) {
        if handle.len() <= IPC_HANDLE_BYTES {
            self.t.shared.push((what, Share { handle, side }));
        }
    }

    /// Another process's memory, opened here at `ptr`, `bytes` long: a buffer of the trace's
    /// own, live from here, with `data` (what it held when opened; empty when not read)
    /// uploaded just after by a call of the converter's own.
    fn open_buffer(&mut self, ptr: u64, bytes: u64, data: &[u8]) -> BufferId {
        let id = self.new_buffer(ptr, bytes);
        if !data.is_empty() {
            let fill = self.upload(ptr, AT_ONCE, data);
            self.after.push(fill);
        }
        id
    }

    /// A new buffer for the memory at `ptr`, `bytes` long: live from here.
    fn new_buffer(&mut self, ptr: u64, bytes: u64) -> BufferId {
        let id = BufferId(self.next_buf);
        self.next_buf += 1;
        self.live.insert(ptr, (id, bytes));
        self.t.addresses.insert(id, ptr);
        id
    }

    /// The buffer at `ptr` as a free names it; freed from here when `ok` (the call succeeded).
    fn freed_at(&mut self, ptr: u64, ok: bool) -> DevAddr {
        let a = self.addr(ptr);
        let gone = if ok { self.live.remove(&ptr) } else { None };
        if let Some(b) = gone {
            self.freed.insert(ptr, b);
        }
        a
    }

    /// Managed memory the device changed, `data` at `src` as the host saw it after a context
    /// sync: a read back of the tool's own, which a replay compares.
    fn managed_read(&mut self, r: &Record<'_>, src: u64, data: &[u8]) {
        self.summary.records -= 1;
        self.summary.managed_reads += 1;
        let call = Call::CopyD2H {
            src: self.addr(src),
            len: data.len() as u64,
        };
        let blob = self.t.blobs.insert_content(data.to_vec());
        let rec = CallRecord {
            seq: 0,
            thread: self.thread_id(r.thread),
            site: self.managed_site(),
            t_ns: r.t_ns,
            dur_ns: Some(0),
            call,
            ret: Some(Ok(Value::Bytes(blob))),
        };
        self.place(rec);
    }

    /// The device a context was made on, into the trace's header if none is there yet.
    fn device(&mut self, ordinal: u32, sm_count: u32, total_memory: u64, name: &[u8]) {
        if let Some(h) = self.t.header.as_mut().filter(|h| h.device_name.is_none()) {
            h.device_ordinal = ordinal;
            h.device_name = Some(String::from_utf8_lossy(name).into_owned());
            h.sm_count = (sm_count > 0).then_some(sm_count);
            h.total_memory = (total_memory > 0).then_some(total_memory);
        }
    }

    /// The trace's number for recording thread `tid` (gettid), in order of first call.
    fn thread_id(&mut self, tid: u32) -> u16 {
        let next = self.threads.len() as u16;
        *self.threads.entry(tid).or_insert(next)
    }

    /// The site of the host's reads of managed memory: the tool's own (`TOOL_SITE`), so the
    /// analyses leave them out while a replay still compares them.
    fn managed_site(&mut self) -> SiteId {
        let file = format!("{TOOL_SITE} managed memory as the host saw it after a context sync");
        if let Some((id, _)) = self.t.sites.iter().find(|(_, s)| s.file == file) {
            return *id;
        }
        let id = SiteId(self.t.sites.keys().next_back().map_or(0, |k| k.0 + 1));
        self.t.sites.insert(
            id,
            SiteDef {
                file,
                line: 0,
                col: 0,
            },
        );
        id
    }

    /// The site of a record whose stack is `stack`.
    fn site(&mut self, stack: u32) -> SiteId {
        self.lines.site(stack).unwrap_or(SITE)
    }

    /// Adds `rec` to the trace, numbered in order, with one exception: while a capture is open
    /// its calls wait, and an allocation made meanwhile goes before the capture. A program
    /// capturing in thread-local or relaxed mode may allocate mid-capture (PyTorch's graph
    /// pool does); a replay captures in its backend's mode, where that would invalidate the
    /// capture, and an allocation is no stream work: made earlier, it changes nothing else.
    /// Returns where `rec` waits in `captured`, if it waits there.
    fn place(&mut self, rec: CallRecord) -> Option<usize> {
        let opens = matches!(rec.call, Call::BeginCapture { .. })
            && rec.ret.as_ref().is_some_and(|r| r.is_ok());
        let alloc = matches!(rec.call, Call::Alloc { .. } | Call::AllocManaged { .. });
        if opens {
            self.capture_depth += 1;
            self.nested_capture |= self.capture_depth > 1;
        }
        if self.capture_depth > 0 && alloc {
            self.summary.allocs_moved += 1;
            self.summary.relaxed_allocs_moved += usize::from(self.relaxed_now);
        }
        if self.capture_depth > 0 && !alloc {
            let ends = matches!(rec.call, Call::EndCapture { .. });
            self.captured.push((rec, 0));
            if ends {
                self.capture_depth -= 1;
                if self.capture_depth == 0 {
                    self.flush_captured();
                    return None;
                }
            }
            return Some(self.captured.len() - 1);
        }
        self.number(rec);
        None
    }

    /// The calls of a capture, numbered now (at its end, or where the log ends). A capture that
    /// made one graph (none other open meanwhile) leaves its calls, by the node each became, as
    /// that graph's node list (`Graphs::captured`): what new parameters for its nodes change.
    fn flush_captured(&mut self) {
        self.last_captured.clear();
        let nested = std::mem::take(&mut self.nested_capture);
        if let (Some(graph), false) = (self.ending.take(), nested) {
            let work = self.captured.iter().filter(|(c, _)| {
                !matches!(c.call, Call::BeginCapture { .. } | Call::EndCapture { .. })
            });
            let work = work.map(|(c, n)| (*n, c.clone())).collect();
            self.built.captured(graph, work);
        }
        for (rec, _) in std::mem::take(&mut self.captured) {
            self.number(rec);
        }
    }

    /// Gives `rec` the next seq and adds it; a call without a result is one a hang's dump
    /// says had not returned.
    fn number(&mut self, mut rec: CallRecord) {
        rec.seq = self.seq;
        if rec.ret.is_none() {
            self.in_flight.push((rec.seq, rec.thread));
        }
        self.t.calls.push(rec);
        self.seq += 1;
    }

    /// `a` as the trace spells it, by the recorder's own ledger rules: null, inside (or one
    /// past) a live buffer, inside a freed one, or outside every buffer (with the nearest one
    /// below).
    /// How the trace names a host function the log named `logged`: as it is when that is a
    /// symbol; for a file and offset (`/path/app+0x1a2b`), the function its file's symbol table
    /// says is there, demangled, with the file's name and the offset (`take (app+0x1a2b)`), or
    /// the file's name and the offset alone. Each looked up once.
    fn host_function(&mut self, logged: &str) -> String {
        if let Some(n) = self.host_functions.get(logged) {
            return n.clone();
        }
        let named = match logged.rsplit_once("+0x") {
            Some((path, off)) if path.starts_with('/') => {
                let file = path.rsplit('/').next().unwrap_or(path);
                let at = format!("{file}+0x{off}");
                let symbols = self
                    .elf_files
                    .entry(path.to_string())
                    .or_insert_with(|| super::elf::Symbols::read(std::path::Path::new(path)));
                u64::from_str_radix(off, 16)
                    .ok()
                    .and_then(|o| symbols.as_ref()?.function_at(o))
                    .map_or(at.clone(), |f| {
                        format!("{} ({at})", crate::trace::demangle::readable(&f))
                    })
            }
            _ => logged.to_string(),
        };
        self.host_functions
            .insert(logged.to_string(), named.clone());
        named
    }

    /// A pinned host region of the trace's own, `len` bytes, for a copy a graph makes to the
    /// host at each launch: where it landed in the program is the program's, and a replay that
    /// captures the copy needs memory that stays (a capture refuses pageable memory).
    fn own_pinned(&mut self, len: u64) -> HostAddr {
        let host = HostId(self.next_host);
        self.next_host += 1;
        self.t.adopted.push(Adopted::Host {
            id: host,
            bytes: len,
        });
        HostAddr::Pinned { host, off: 0 }
    }

    fn addr(&self, a: u64) -> DevAddr {
        Addrs::new(&self.live, &self.freed).addr(a)
    }

    /// A word that points strictly inside a live buffer (one past its end is no pointer a
    /// kernel would be passed), as that buffer plus offset.
    fn pointer(&self, w: u64) -> Option<DevAddr> {
        let (base, (buf, size)) = self.live.range(..=w).next_back()?;
        (w != 0 && w - base < *size).then_some(DevAddr::Buf {
            buf: *buf,
            off: w - base,
        })
    }

    fn stream(&mut self, h: u64) -> StreamRef {
        // 0 and CU_STREAM_LEGACY (1) are the legacy stream; CU_STREAM_PER_THREAD (2), as the
        // shim logs a per-thread form's 0 too, is the calling thread's own.
        match h {
            0 | 1 => return StreamRef::Legacy,
            2 => return StreamRef::Id(self.per_thread_stream()),
            _ => {}
        }
        if let Some(id) = self.streams.get(&h) {
            return StreamRef::Id(*id);
        }
        // A stream the log never saw created (made before the shim was loaded, or by a call
        // it does not log): adopted.
        let id = self.adopted_stream();
        self.streams.insert(h, id);
        StreamRef::Id(id)
    }

    fn event(&mut self, h: u64) -> EventId {
        if let Some(id) = self.events.get(&h) {
            return *id;
        }
        let id = self.new_event(h);
        self.t.adopted.push(Adopted::Event { id });
        id
    }

    /// The calling thread's per-thread default stream: adopted at its first use, a blocking
    /// stream as the driver's is (it orders against the legacy stream both ways).
    fn per_thread_stream(&mut self) -> StreamId {
        if let Some(id) = self.per_thread.get(&self.thread) {
            return *id;
        }
        let id = self.adopted_stream();
        self.per_thread.insert(self.thread, id);
        self.summary.per_thread_streams += 1;
        id
    }

    /// A new stream no trace call creates: adopted, so a replay creates it before the first
    /// call (a blocking stream).
    fn adopted_stream(&mut self) -> StreamId {
        let id = StreamId(self.next_stream);
        self.next_stream += 1;
        self.t.adopted.push(Adopted::Stream {
            id,
            is_default: false,
        });
        id
    }

    fn new_stream(&mut self, h: u64) -> StreamId {
        let id = StreamId(self.next_stream);
        self.next_stream += 1;
        self.streams.insert(h, id);
        id
    }

    fn new_event(&mut self, h: u64) -> EventId {
        let id = EventId(self.next_event);
        self.next_event += 1;
        self.events.insert(h, id);
        id
    }

    /// A memset as the trace's byte fill when every byte of the element is the same; any other
    /// pattern is kept by name, as opaque.
    fn memset(&mut self, dst: u64, value: u32, elem: u8, count: u64, on: On) -> Call {
        let bytes = value.to_le_bytes();
        let elem = elem.clamp(1, 4);
        let fill = &bytes[..elem as usize];
        if fill.iter().any(|b| *b != fill[0]) {
            let name = format!(
                "cuMemsetD{}{}",
                elem as u32 * 8,
                if on.sync { "" } else { "Async" }
            );
            *self.summary.opaque.entry(name.clone()).or_default() += 1;
            return Call::Opaque { name };
        }
        let dst = self.addr(dst);
        let len = count.saturating_mul(elem as u64);
        if on.sync {
            Call::Memset {
                dst,
                value: fill[0],
                len,
            }
        } else {
            Call::MemsetAsync {
                dst,
                value: fill[0],
                len,
                stream: self.stream(on.stream),
            }
        }
    }

    /// The module name of an image: its kind and the head of its hash, so one image loaded
    /// twice is one module; its bytes kept as a blob.
    fn module(&mut self, image: &[u8]) -> String {
        let kind = match image_kind(image) {
            Ok(k) => k.name(),
            Err(_) => "unknown",
        };
        let id = BlobId::of(image);
        let name = format!("{kind}-{}", &id.hex()[..12]);
        if !self.t.module_images.contains_key(&name) && kind != "unknown" {
            let blob = self.t.blobs.insert_content(image.to_vec());
            self.t.module_images.insert(name.clone(), blob);
            self.t.modules.push(ModuleCode {
                name: name.clone(),
                source: None,
                ptx: None,
            });
        }
        name
    }

    fn kernel_id(&mut self, module: &str, name: &str, layout: Option<&[(u32, u32)]>) -> KernelId {
        let key = (module.to_string(), name.to_string());
        if let Some(k) = self.kernels.get(&key) {
            // A lookup names a kernel before its first launch says its layout.
            if let (Some(l), Some(info)) = (layout, self.t.kernels.get_mut(k)) {
                if info.params.is_empty() && !l.is_empty() {
                    info.params = params(l);
                }
            }
            return *k;
        }
        let id = KernelId(self.kernels.len() as u32);
        self.kernels.insert(key, id);
        self.t.kernels.insert(
            id,
            KernelInfo {
                module: module.to_string(),
                name: name.to_string(),
                params: layout.map(params).unwrap_or_default(),
                elems: Vec::new(),
            },
        );
        id
    }

    /// A launch's parameter bytes, one argument per parameter of `layout`: an address inside
    /// a live buffer is that buffer plus offset (alone, or as a word of a larger parameter).
    fn args(&self, layout: Option<&[(u32, u32)]>, bytes: &[u8]) -> Args {
        let mut out = Args::new();
        let Some(layout) = layout else {
            return out;
        };
        for &(off, size) in layout {
            let (o, n) = (off as usize, size as usize);
            let Some(p) = bytes.get(o..o.saturating_add(n)) else {
                // A layout the bytes do not cover: what there is, zero-filled.
                let mut v = bytes.get(o..).unwrap_or(&[]).to_vec();
                v.resize(n, 0);
                out.push(Arg::Val(v.as_slice().into()));
                continue;
            };
            let word = |k: usize| u64::from_le_bytes(p[k..k + 8].try_into().expect("8 bytes"));
            if n == 8 {
                match self.pointer(word(0)) {
                    Some(d) => out.push(Arg::Buf(d)),
                    None => out.push(Arg::Val(p.into())),
                }
                continue;
            }
            if let Some(m) = (n == TENSOR_MAP).then(|| self.tensor_maps.get(p)).flatten() {
                out.push(Arg::TensorMap(Box::new(m.clone())));
                continue;
            }
            // Tensor maps inside a larger parameter (CUTLASS's Params hold them), 64-byte
            // aligned as CUtensorMap is; then address words outside them.
            let maps: Vec<(u32, TensorMapArg)> = (0..n.saturating_sub(TENSOR_MAP - 1))
                .filter(|k| (o + k) % 64 == 0)
                .filter_map(|k| {
                    let m = self.tensor_maps.get(&p[k..k + TENSOR_MAP])?;
                    Some((k as u32, m.clone()))
                })
                .collect();
            let in_map = |k: usize| {
                maps.iter()
                    .any(|(m, _)| (*m as usize..*m as usize + TENSOR_MAP).contains(&k))
            };
            let ptrs: Vec<(u32, DevAddr)> = (0..n / 8)
                .map(|k| k * 8)
                .filter(|k| (o + k) % 8 == 0 && !in_map(*k))
                .filter_map(|k| self.pointer(word(k)).map(|d| (k as u32, d)))
                .collect();
            if ptrs.is_empty() && maps.is_empty() {
                out.push(Arg::Val(p.into()));
            } else {
                out.push(Arg::Words(Box::new(WordsArg {
                    bytes: p.to_vec(),
                    ptrs,
                    maps,
                })));
            }
        }
        out
    }
}

fn params(layout: &[(u32, u32)]) -> Vec<ParamInfo> {
    layout
        .iter()
        .map(|&(offset, size)| ParamInfo {
            offset,
            size,
            access: ParamAccess::Unknown,
        })
        .collect()
}

/// A call of the converter's own that returned `value` at once, as made by `head`'s thread at
/// its site and time.
fn own_call(head: (u16, SiteId, u64), call: Call, value: Value) -> CallRecord {
    let (thread, site, t_ns) = head;
    CallRecord {
        seq: 0,
        thread,
        site,
        t_ns,
        dur_ns: Some(0),
        call,
        ret: Some(Ok(value)),
    }
}

/// A driver status as a recorded error.
fn driver_error(code: i32) -> ErrorRec {
    ErrorRec {
        code: Some(code as u32),
        message: format!("CUDA driver error {code}"),
    }
}

mod graph_calls;
mod shared_memory;
use graph_calls::GraphEvents;
mod stream_calls;
#[cfg(test)]
mod tests;
