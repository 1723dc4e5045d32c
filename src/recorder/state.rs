//! The recorder's bookkeeping: the ledger of live allocations (kept even when not recording),
//! the raw-handle-to-id maps, and the writer. `RecState` is what the recorder's one lock
//! guards; its methods here are the operations that must see all of it at once (an
//! allocation's id, its ledger entry and the frame that says so, under one lock). What
//! stands apart lives apart: how blobs are written (`blob_out.rs`), what sync hashes leave
//! out (`settle.rs`), what changed since a flight checkpoint (`writes.rs`), the flight store
//! (`flight/`), checkpoints (`checkpoint.rs`, `device_ckpt/`), communicators (`comm.rs`),
//! and the id maps events and graphs share (`ids.rs`).

use super::flight::FlightStore;
use super::ids::IdMap;
use super::settle::SyncWrites;
use super::writes::SinceCheckpoint;
use crate::backend::{KernelInfo, ParamAccess, ParamInfo, Site};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeMap;
use std::thread::ThreadId;

pub(crate) struct LiveBuf {
    pub id: BufferId,
    pub size: u64,
    pub site: Site,
    /// For a device alias of pinned host memory: the region's host base. Such buffers are not
    /// freed with `free` and not snapshotted.
    pub alias_of: Option<usize>,
}

pub(crate) struct Pending {
    pub seq: u64,
    pub stream: u64,
    pub ptr: usize,
    pub len: usize,
    /// For retained sources: the hash at the call.
    pub hash: Option<BlobId>,
}

pub(crate) struct KernelEntry {
    pub id: KernelId,
    pub params: Option<Vec<ParamInfo>>,
    /// The kernel as the backend's registry describes it, or, for a backend without one, as
    /// its lookup named it (no parameter layout).
    pub info: Option<KernelInfo>,
}

/// See `RecState::launch_parts`.
pub(crate) struct LaunchParts<'a> {
    pub addrs: Addrs<'a>,
    pub layout: &'a [ParamInfo],
    pub writer: Option<&'a mut TraceWriter>,
}

/// What the address ledger needs of a live buffer: its id and size.
pub(crate) trait Span {
    fn id(&self) -> BufferId;
    fn size(&self) -> u64;
}

impl Span for LiveBuf {
    fn id(&self) -> BufferId {
        self.id
    }
    fn size(&self) -> u64 {
        self.size
    }
}

/// A live buffer as a ledger that knows nothing else keeps it (`shimtrace`).
impl Span for (BufferId, u64) {
    fn id(&self) -> BufferId {
        self.0
    }
    fn size(&self) -> u64 {
        self.1
    }
}

/// The address ledger, read-only: device addresses to (buffer, offset). The recorder's, and
/// the driver-level recording's (`shimtrace`), so both spell an address the same way.
pub(crate) struct Addrs<'a, L: Span = LiveBuf> {
    bufs: &'a BTreeMap<u64, L>,
    freed: &'a BTreeMap<u64, (BufferId, u64)>,
}

impl<'a, L: Span> Addrs<'a, L> {
    /// The ledger of `bufs` (live, by base address) and `freed` (freed, last by base).
    pub fn new(bufs: &'a BTreeMap<u64, L>, freed: &'a BTreeMap<u64, (BufferId, u64)>) -> Self {
        Addrs { bufs, freed }
    }

    pub fn addr(&self, p: u64) -> DevAddr {
        if p == 0 {
            return DevAddr::Null;
        }
        // Most pointer arguments are a buffer's base: an exact lookup is a third of the cost
        // of the range search below.
        if let Some(b) = self.bufs.get(&p) {
            return DevAddr::Buf {
                buf: b.id(),
                off: 0,
            };
        }
        match self.bufs.range(..=p).next_back() {
            Some((&base, b)) if p <= base + b.size() => DevAddr::Buf {
                buf: b.id(),
                off: p - base,
            },
            _ if self.freed_at(p).is_some() => {
                let (buf, off) = self.freed_at(p).expect("checked");
                DevAddr::Freed { buf, off }
            }
            Some((&base, b)) => DevAddr::Unknown {
                near: Some((b.id(), p - base)),
            },
            None => DevAddr::Unknown { near: None },
        }
    }

    fn freed_at(&self, p: u64) -> Option<(BufferId, u64)> {
        let (&base, &(id, size)) = self.freed.range(..=p).next_back()?;
        (p < base + size.max(1)).then_some((id, p - base))
    }
}

/// A call inside the wrapped backend (see `RecState::open_calls`).
pub(crate) struct OpenCall {
    pub seq: u64,
    pub thread: u16,
    pub since: std::time::Instant,
    /// The recorder's own wait (a checkpoint draining the streams), not a recorded call:
    /// what it is; `seq` is then the last call recorded before it.
    pub own: Option<&'static str>,
}

pub(crate) struct RecState {
    pub writer: Option<TraceWriter>,
    pub recording: bool,
    pub seq: u64,
    pub bufs: BTreeMap<u64, LiveBuf>,
    /// Freed buffers (base -> id, size), so a stale pointer is named, not just "unknown".
    pub freed: BTreeMap<u64, (BufferId, u64)>,
    pub next_buf: u32,
    pub streams: HashMap<u64, StreamId>,
    pub next_stream: u32,
    pub events: IdMap<EventId>,
    /// Communicators joined, by the backend's handle (`recorder/comm.rs`).
    pub comms: HashMap<u64, super::comm::CommRec>,
    pub event_stream: HashMap<u64, u64>,
    pub graphs: IdMap<GraphId>,
    pub hosts: BTreeMap<usize, (HostId, usize)>,
    pub next_host: u32,
    pub kernels: HashMap<u64, KernelEntry>,
    pub next_kernel: u32,
    pub sites: HashMap<usize, SiteId>,
    /// The thread inside `RecordingBackend::tools_own`, if one is: its calls are the tool's,
    /// recorded under sites marked `TOOL_SITE`.
    pub tool_thread: Option<ThreadId>,
    pub threads: HashMap<ThreadId, u16>,
    /// The thread of the last call: an engine's calls come in runs from one thread.
    last_thread: Option<(ThreadId, u16)>,
    pub blobs: HashSet<BlobId>,
    /// The shared blob store large blobs go to (`RecordingBackend::blob_store`), if any.
    pub store: Option<std::path::PathBuf>,
    pub modules: HashSet<String>,
    pub pending: Vec<Pending>,
    /// Readbacks a flight recorder has numbered (`readback`).
    pub readbacks: u64,
    pub write_error: Option<String>,
    pub default_stream: u64,
    /// Calls whose Begin frame is written and whose End frame is not yet: `stop` waits for
    /// them, so a clean stop never leaves a call that seems to have died.
    pub in_flight: usize,
    /// Said once per recorder: kernels known only by name.
    pub warned_opaque: bool,
    /// The segment being recorded (counted from 0).
    pub segment: u32,
    /// The flight recorder's store, when this recorder is one.
    pub flight: Option<Box<FlightStore>>,
    /// Streams (raw handles) whose capture began through this recorder and has not ended.
    pub capturing: HashSet<u64>,
    /// Flight recorder only: calls begun on the slow path (syncs, copies, allocations: the
    /// calls that block) and not yet returned, oldest first. A hang's dump names them.
    pub open_calls: Vec<OpenCall>,
    /// What changed since the last flight checkpoint (`recorder/writes.rs`).
    pub since: SinceCheckpoint,
    /// What sync hashes must leave out (`recorder/settle.rs`).
    pub sync_writes: SyncWrites,
    /// Moves whenever a handle map or the address ledger changes: the flight recorder's fast
    /// path knows a call by its raw inputs only within one generation.
    pub gen: u64,
    /// Tensor maps the backend encoded (image -> the address and description it was built
    /// from), kept recording or not, so a launch passing one is recorded as what it describes.
    pub tensor_maps: HashMap<crate::backend::TensorMapImage, (u64, crate::backend::TensorMapDesc)>,
}

impl RecState {
    pub fn new(writer: TraceWriter, default_stream: u64) -> Self {
        let mut s = RecState {
            writer: Some(writer),
            recording: false,
            seq: 0,
            bufs: BTreeMap::new(),
            freed: BTreeMap::new(),
            next_buf: 0,
            streams: HashMap::default(),
            next_stream: 0,
            events: IdMap::new(EventId),
            comms: HashMap::default(),
            event_stream: HashMap::default(),
            graphs: IdMap::new(GraphId),
            hosts: BTreeMap::new(),
            next_host: 0,
            kernels: HashMap::default(),
            next_kernel: 0,
            sites: HashMap::default(),
            tool_thread: None,
            threads: HashMap::default(),
            last_thread: None,
            blobs: HashSet::default(),
            store: None,
            modules: HashSet::default(),
            pending: Vec::new(),
            readbacks: 0,
            write_error: None,
            default_stream,
            in_flight: 0,
            warned_opaque: false,
            segment: 0,
            flight: None,
            capturing: HashSet::default(),
            open_calls: Vec::new(),
            tensor_maps: HashMap::default(),
            since: SinceCheckpoint::default(),
            sync_writes: SyncWrites::default(),
            gen: 0,
        };
        s.stream_id_quiet(default_stream);
        s
    }

    /// Write a frame; an I/O failure stops recording (the engine's call still goes through)
    /// and keeps everything already written.
    pub fn emit(&mut self, f: &Frame) {
        self.emit_with(|w| w.write(f));
    }

    /// `emit` for a call's Begin frame, encoded from the borrowed call.
    pub fn emit_begin(&mut self, b: &BeginRef<'_>) {
        self.emit_with(|w| w.write_begin(b));
    }

    /// A call's Begin frame with `head`, its writes noted first where they are tracked.
    pub fn emit_call(&mut self, head: &BeginRef<'_, ()>, call: &Call) {
        if self.tracks_writes() {
            self.note_writes(head.seq, call);
        }
        self.emit_begin(&head.with(call));
    }

    /// `emit` for a call's End frame.
    pub fn emit_end(&mut self, seq: u64, dur_ns: u64, ret: &Ret) {
        self.emit_with(|w| w.write_end(seq, dur_ns, ret));
    }

    /// Run one write on the writer, when recording.
    #[inline]
    pub(super) fn emit_with(
        &mut self,
        write: impl FnOnce(&mut TraceWriter) -> Result<(), TraceError>,
    ) {
        if !self.recording {
            return;
        }
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = write(w) {
                self.write_failed(e);
                return;
            }
            Self::to_flight(w, self.flight.as_deref_mut());
        }
    }

    /// A flight recorder's frame, from its writer into its store.
    #[inline]
    fn to_flight(w: &mut TraceWriter, flight: Option<&mut FlightStore>) {
        if let (Some(f), Some((class, payload))) = (flight, w.take_last()) {
            f.take_frame(class, payload);
        }
    }

    /// What a launch's Begin frame is encoded from, borrowed together: the address ledger and,
    /// for a raw launch (`layout_of` its kernel), the kernel's parameter layout (empty when
    /// unknown) for its arguments, and the writer (`None` when not recording).
    pub fn launch_parts(&mut self, layout_of: Option<u64>) -> LaunchParts<'_> {
        LaunchParts {
            addrs: Addrs {
                bufs: &self.bufs,
                freed: &self.freed,
            },
            layout: layout_of
                .and_then(|k| self.kernels.get(&k))
                .and_then(|k| k.params.as_deref())
                .unwrap_or(&[]),
            writer: if self.recording {
                self.writer.as_mut()
            } else {
                None
            },
        }
    }

    /// A typed launch as a `Call` whose 128-byte arguments that are tensor maps this recorder
    /// saw encoded become `Arg::TensorMap`; `None` when none is (the hot path applies).
    pub fn launch_with_tensor_maps(
        &mut self,
        kernel: KernelId,
        (grid, block, shared_mem, stream): ([u32; 3], [u32; 3], u32, StreamRef),
        args: &[crate::backend::KernelArg<'_>],
    ) -> Option<Call> {
        use crate::backend::{KernelArg, TENSOR_MAP_BYTES};
        if self.tensor_maps.is_empty() {
            return None;
        }
        let known = |b: &[u8]| {
            b.len() == TENSOR_MAP_BYTES
                && self
                    .tensor_maps
                    .contains_key(<&[u8; TENSOR_MAP_BYTES]>::try_from(b).expect("length checked"))
        };
        if !args
            .iter()
            .any(|a| matches!(a, KernelArg::Bytes(b) if known(b)))
        {
            return None;
        }
        let addrs = Addrs {
            bufs: &self.bufs,
            freed: &self.freed,
        };
        let args = args
            .iter()
            .map(|a| match a {
                KernelArg::Buffer(p) => Arg::Buf(addrs.addr(p.0)),
                KernelArg::Bytes(b) if known(b) => {
                    let key = <&[u8; TENSOR_MAP_BYTES]>::try_from(*b).expect("length checked");
                    let (addr, desc) = &self.tensor_maps[key];
                    Arg::TensorMap(Box::new(TensorMapArg {
                        base: addrs.addr(*addr),
                        desc: desc.clone(),
                    }))
                }
                KernelArg::Bytes(b) => Arg::Val(ArgBytes::from(*b)),
            })
            .collect();
        Some(Call::LaunchTyped {
            head: LaunchHead {
                kernel,
                grid,
                block,
                shared_mem,
                stream,
            },
            args,
        })
    }

    /// The outcome of a write made through `launch_parts`.
    pub fn written(&mut self, r: Option<Result<(), TraceError>>) {
        match (r, self.writer.as_mut()) {
            (Some(Err(e)), _) => self.write_failed(e),
            (Some(Ok(())), Some(w)) => Self::to_flight(w, self.flight.as_deref_mut()),
            _ => {}
        }
    }

    /// Mark what `call` writes as written since the last checkpoint (flight recorder only).
    pub fn note_writes(&mut self, seq: u64, call: &Call) {
        let written = match call {
            // A graph writes what its nodes write, which this recorder does not keep: count
            // every buffer as written.
            Call::LaunchGraph { .. } => self.bufs.values().map(|b| b.id).collect(),
            _ => crate::trace::written_by(call),
        };
        // A synchronous call has finished its writes when it returns; async work has not
        // until its stream is synchronised.
        let stream = (!call.is_host_sync()).then(|| call.work_stream()).flatten();
        self.sync_writes.wrote(seq, stream, &written);
    }

    /// Whether calls' writes are tracked as they are recorded (for hashes at syncs). The
    /// flight recorder does not pay for it per call: a checkpoint reads the writes off the
    /// span's frames (`begin_checkpoint`).
    pub fn tracks_writes(&self) -> bool {
        self.sync_writes.on
    }

    /// Mark the buffers a launch of kernel `handle` may write: each pointer argument (`None`
    /// for the others) that points into a buffer, unless the kernel's layout says it only
    /// reads it.
    pub fn note_launch_writes(
        &mut self,
        seq: u64,
        handle: u64,
        stream: StreamRef,
        ptrs: impl Iterator<Item = Option<u64>>,
    ) {
        let params = self.kernels.get(&handle).and_then(|k| k.params.as_deref());
        let written: smallvec::SmallVec<[BufferId; 8]> = ptrs
            .enumerate()
            .filter_map(|(i, p)| {
                let access = params.and_then(|l| l.get(i)).map(|x| x.access);
                if matches!(access, Some(ParamAccess::Read | ParamAccess::Value)) {
                    return None;
                }
                match self.addr(p?) {
                    DevAddr::Buf { buf, .. } => Some(buf),
                    _ => None,
                }
            })
            .collect();
        self.sync_writes.wrote(seq, Some(stream), &written);
    }

    /// A new segment starts: what it needs defined is written again, and its calls count from
    /// zero, so each segment is a trace of its own.
    pub fn new_segment(&mut self, writer: TraceWriter) {
        self.writer = Some(writer);
        self.seq = 0;
        // Site and handle numbers start again: nothing learned before holds.
        self.gen += 1;
        self.sites.clear();
        self.blobs.clear();
        self.modules.clear();
        self.write_error = None;
        self.pending.clear();
        // Calls of the last segment still running belong to it, not to this one.
        self.in_flight = 0;
        self.sync_writes.clear();
    }

    /// The capture the flight store holds open ended: into the graph of raw handle `made`,
    /// or abandoned (`None`).
    pub fn capture_closed(&mut self, made: Option<u64>) {
        let made = made.and_then(|g| self.graphs.get(g));
        if let Some(f) = self.flight.as_deref_mut() {
            f.capture_closed(made);
        }
    }

    /// Dump the flight recorder now (`None`: this is no flight recorder), for `reason`, with
    /// `open` (a fast-path call the dumping thread is inside) and every slow-path call still
    /// inside the wrapped backend named as in flight. The recorder's own failures so far are
    /// added to the reason.
    pub fn flight_dump(
        &mut self,
        reason: &str,
        open: Option<u64>,
    ) -> Option<Result<std::path::PathBuf, TraceError>> {
        let mut in_flight: Vec<(u64, u16)> = self
            .open_calls
            .iter()
            .filter(|c| c.own.is_none())
            .map(|c| (c.seq, c.thread))
            .collect();
        if let Some(seq) = open {
            let thread = self.thread();
            in_flight.push((seq, thread));
        }
        let f = self.flight.as_deref_mut()?;
        let reason = format!("{reason}{}", f.failure_note());
        let dumped = f.dump(&reason, open, in_flight);
        if let (Ok(path), Some(dir)) = (&dumped, f.cfg.peers.clone()) {
            let comms = self.comms.values().cloned();
            if let Err(why) = super::peers::announce(&dir, comms, &reason, path) {
                self.own_failure(format!(
                    "the dump {} was written, but {why}",
                    path.display()
                ));
            }
        }
        Some(dumped)
    }

    /// Something the recorder does for itself failed (a checkpoint, a dump, telling the peers):
    /// the engine must be able to see it, so it is said once on stderr (an engine may have no
    /// `tracing` subscriber), counted in `flight_held`, and written into the next dump's
    /// reason.
    pub fn own_failure(&mut self, what: String) {
        tracing::error!("gputape: flight recorder: {what}");
        let first = self
            .flight
            .as_deref_mut()
            .is_some_and(|f| f.note_failure(what.clone()));
        if first {
            eprintln!("gputape: flight recorder: {what} (later failures are counted in flight_held and named in the next dump)");
        }
    }

    pub(super) fn write_failed(&mut self, e: TraceError) {
        let mut why = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            why = format!("{why}: {s}");
            src = s.source();
        }
        let why = format!(
            "recording stopped at call #{}, the trace could not be written: {why}; the calls before it are kept",
            self.seq
        );
        tracing::error!("gputape: {why}");
        self.write_error = Some(why);
        self.recording = false;
        if let Some(w) = self.writer.as_mut() {
            let _ = w.flush();
        }
    }

    pub fn flush(&mut self) {
        if let Some(w) = self.writer.as_mut() {
            let _ = w.flush();
        }
    }

    pub fn site(&mut self, site: Site) -> SiteId {
        // A call the tool makes for itself (`tools_own`) gets a site of its own, marked, even
        // where the engine calls from the same line. Locations are aligned: the low bit is
        // free to tell the two apart.
        let tool =
            self.tool_thread.is_some() && self.tool_thread == Some(std::thread::current().id());
        let key = site as *const _ as usize | tool as usize;
        if let Some(id) = self.sites.get(&key) {
            return *id;
        }
        let id = SiteId(self.sites.len() as u32);
        self.sites.insert(key, id);
        let file = if tool {
            format!("{TOOL_SITE} {}", site.file())
        } else {
            site.file().to_string()
        };
        self.emit(&Frame::Site {
            id,
            file,
            line: site.line(),
            col: site.column(),
        });
        id
    }

    pub fn thread(&mut self) -> u16 {
        thread_local!(static ME: ThreadId = std::thread::current().id());
        let me = ME.with(|t| *t);
        match self.last_thread {
            Some((t, id)) if t == me => id,
            _ => {
                let n = self.threads.len() as u16;
                let id = *self.threads.entry(me).or_insert(n);
                self.last_thread = Some((me, id));
                id
            }
        }
    }

    pub fn addr(&self, p: u64) -> DevAddr {
        Addrs {
            bufs: &self.bufs,
            freed: &self.freed,
        }
        .addr(p)
    }

    /// Move a freed buffer out of the live ledger.
    pub fn remove_buf(&mut self, p: u64) {
        self.gen += 1;
        if let Some(b) = self.bufs.remove(&p) {
            if b.alias_of.is_none() && !self.since.checkpointed.contains_key(&b.id) {
                self.since.unread_bytes = self.since.unread_bytes.saturating_sub(b.size);
            }
            self.freed.insert(p, (b.id, b.size));
            // Maps into it are stale: a later map of the same bytes describes new memory.
            if !self.tensor_maps.is_empty() {
                let end = p.saturating_add(b.size.max(1));
                self.tensor_maps
                    .retain(|_, (addr, _)| !(p..end).contains(addr));
            }
        }
    }

    /// Every live buffer a snapshot or checkpoint holds (not pinned host memory's device
    /// aliases): id, address, size and site, in creation order.
    pub fn live_buffers(&self) -> Vec<(BufferId, u64, u64, Site)> {
        let mut live: Vec<(BufferId, u64, u64, Site)> = self
            .bufs
            .iter()
            .filter(|(_, b)| b.alias_of.is_none())
            .map(|(p, b)| (b.id, *p, b.size, b.site))
            .collect();
        live.sort();
        live
    }

    pub fn add_buf(&mut self, p: u64, size: u64, site: Site, alias_of: Option<usize>) -> BufferId {
        // The address, and the ones near it, now mean this buffer: raw keys learned when they
        // meant a freed one or nothing go.
        self.gen += 1;
        let id = BufferId(self.next_buf);
        self.next_buf += 1;
        self.freed.remove(&p);
        if alias_of.is_none() {
            self.since.unread_bytes = self.since.unread_bytes.saturating_add(size);
        }
        self.emit(&Frame::Address { buf: id, addr: p });
        self.bufs.insert(
            p,
            LiveBuf {
                id,
                size,
                site,
                alias_of,
            },
        );
        id
    }

    pub fn host(&self, p: usize) -> HostAddr {
        match self.hosts.range(..=p).next_back() {
            Some((&base, &(id, len))) if p < base + len.max(1) => HostAddr::Pinned {
                host: id,
                off: (p - base) as u64,
            },
            _ => HostAddr::Unknown,
        }
    }

    fn stream_id_quiet(&mut self, raw: u64) -> StreamId {
        self.gen += 1;
        let n = StreamId(self.next_stream);
        let id = *self.streams.entry(raw).or_insert(n);
        if id == n {
            self.next_stream += 1;
        }
        id
    }

    /// The id of a stream; one first seen while recording is adopted.
    pub fn stream(&mut self, raw: u64) -> StreamRef {
        if raw == 0 {
            return StreamRef::Legacy;
        }
        if let Some(id) = self.streams.get(&raw) {
            return StreamRef::Id(*id);
        }
        let id = self.stream_id_quiet(raw);
        self.emit(&Frame::Adopt(Adopted::Stream {
            id,
            is_default: raw == self.default_stream,
        }));
        StreamRef::Id(id)
    }

    pub fn new_stream(&mut self, raw: u64) -> StreamRef {
        self.streams.remove(&raw);
        StreamRef::Id(self.stream_id_quiet(raw))
    }

    pub fn event(&mut self, raw: u64) -> EventId {
        if let Some(id) = self.events.get(raw) {
            return id;
        }
        let id = self.new_event(raw);
        self.emit(&Frame::Adopt(Adopted::Event { id }));
        id
    }

    pub fn new_event(&mut self, raw: u64) -> EventId {
        self.gen += 1;
        self.events.fresh(raw)
    }

    pub fn graph(&mut self, raw: u64) -> GraphId {
        if let Some(id) = self.graphs.get(raw) {
            return id;
        }
        let id = self.new_graph(raw);
        self.emit(&Frame::Adopt(Adopted::Graph { id }));
        id
    }

    pub fn new_graph(&mut self, raw: u64) -> GraphId {
        self.gen += 1;
        self.graphs.fresh(raw)
    }

    /// The id of a kernel handle; the first sighting writes its definition (and its module's
    /// code, once) so the trace is self-contained.
    /// The id of kernel `handle`; `looked_up` is the (module, name) a lookup asked for, which
    /// names a kernel the backend's registry does not know.
    pub fn kernel(
        &mut self,
        handle: u64,
        registry: Option<&crate::backend::KernelRegistry>,
        looked_up: Option<(&str, &str, Option<Vec<ParamInfo>>)>,
    ) -> KernelId {
        if let Some(k) = self.kernels.get(&handle) {
            return k.id;
        }
        let id = KernelId(self.next_kernel);
        self.next_kernel += 1;
        let info = registry
            .and_then(|r| r.kernel_by_handle(crate::backend::KernelHandle(handle)))
            .or_else(|| {
                let (module, name, asked) = looked_up?;
                if let Some(params) = asked {
                    return Some(KernelInfo {
                        module: module.to_string(),
                        name: name.to_string(),
                        params,
                        elems: Vec::new(),
                    });
                }
                if !self.warned_opaque {
                    self.warned_opaque = true;
                    tracing::warn!(
                        "gputape: kernel {module}::{name} has no parameter layout (the backend has no kernel registry and does not implement GpuBackend::kernel_params): typed launches are recorded in full; raw `launch` arguments of such kernels are not, and a replay reports those launches as not run"
                    );
                }
                Some(KernelInfo {
                    module: module.to_string(),
                    name: name.to_string(),
                    params: Vec::new(),
                    elems: Vec::new(),
                })
            });
        self.gen += 1;
        self.kernels.insert(
            handle,
            KernelEntry {
                id,
                params: info
                    .as_ref()
                    .filter(|i| !i.params.is_empty())
                    .map(|i| i.params.clone()),
                info: info.clone(),
            },
        );
        self.write_kernel(id, info, registry);
        id
    }

    pub fn write_kernel(
        &mut self,
        id: KernelId,
        info: Option<KernelInfo>,
        registry: Option<&crate::backend::KernelRegistry>,
    ) {
        if !self.recording {
            return;
        }
        let mut info = info.unwrap_or_else(|| KernelInfo {
            module: "?".into(),
            name: format!("unregistered-{}", id.0),
            params: Vec::new(),
            elems: Vec::new(),
        });
        if !self.modules.contains(&info.module) {
            if let Some(code) = registry.and_then(|r| r.module(&info.module)) {
                self.modules.insert(info.module.clone());
                self.emit(&Frame::Module(code));
            }
        }
        let elems = std::mem::take(&mut info.elems);
        self.emit(&Frame::Kernel { id, info });
        if !elems.is_empty() {
            self.emit(&Frame::KernelElems { id, elems });
        }
    }
}
