//! The trace: the one schema recorder, replayer, renderer and analyses share, and its file
//! format.

#![warn(missing_docs)]

mod args;
mod blobs;
mod call;
pub mod codec;
pub mod crc;
pub(crate) mod demangle;
mod diff;
mod elems;
mod format;
mod frame;
pub mod kernel_types;
mod operands;
mod prefault;
mod reader;
mod refs;
mod relabel;
mod render;
mod restart;
pub mod signature;
mod stack;
mod write;

pub use blobs::{store_path, store_put, BlobStore, Part, PartFn, MAX_BLOB, STORE_MIN};
pub use call::*;
pub use diff::{diff, diff_report, result_diff, same_calls, ResultDiff, ResultDifference};
pub use elems::{elem_of, writes_through, written_through};
pub use format::{
    partial_path, Cut, FrameClass, MmapSink, Sink, TraceError, TraceWriter, VecSink,
    FILE_HEADER_LEN, FRAME_HEADER_LEN,
};
pub use frame::*;
pub use operands::{On, Operand, OperandMut, Use};
pub use reader::{read_frames, FileSource, FrameReader, Item, LazyBlob, Source};
pub use refs::{refs, written_by, Refs};
pub use relabel::each_blob_mut;
pub use render::{call_text, render, render_call, ret_text, summary};
pub use restart::RestartError;
pub use signature::ParamType;
pub use stack::{SiteStack, StackFrame};
pub use write::blob_frame;

use crate::backend::{KernelInfo, ModuleCode};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// A site, as the trace stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteDef {
    /// The source file, as `Location::file` gives it.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
}

impl std::fmt::Display for SiteDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A site with no line (a native frame's `module+0x1a2b`, `<driver call>`) is its file.
        if self.line == 0 && self.col == 0 {
            return f.write_str(&self.file);
        }
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// One call with its outcome. `ret` is `None` when the trace ends inside the call (the process
/// died there), which is exactly the call a fault reproduction wants.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRecord {
    /// The call's number in its segment, from 0.
    pub seq: u64,
    /// The recording thread that made it, numbered in order of first call.
    pub thread: u16,
    /// The engine's line that made it.
    pub site: SiteId,
    /// When it began, in nanoseconds since recording started.
    pub t_ns: u64,
    /// Nanoseconds the wrapped backend took; `None` with `ret`.
    pub dur_ns: Option<u64>,
    /// The call and its arguments.
    pub call: Call,
    /// What it returned or how it failed; `None` if the trace ends inside it.
    pub ret: Option<Ret>,
}

/// A buffer live when recording started, with its contents then: what a replay allocates and
/// fills before the first call (`Frame::Initial`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InitialBuffer {
    /// The buffer.
    pub buf: BufferId,
    /// Its size.
    pub bytes: u64,
    /// Its contents when recording started.
    pub data: BlobId,
    /// Where it was allocated.
    pub site: SiteId,
}

/// A trace, loaded.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The header frame; `None` only for a `Trace::default()` (a file without one is refused).
    pub header: Option<TraceHeader>,
    /// When and by what it was recorded; `None` in format-2 traces.
    pub provenance: Option<Provenance>,
    /// The wall time of `t_ns` 0, in nanoseconds since the Unix epoch (`Frame::Clock`;
    /// `None` before format 11 and in driver-level recordings).
    pub clock_epoch_ns: Option<u64>,
    /// Set when the trace is a flight recorder's dump: why it was taken.
    pub dump: Option<DumpInfo>,
    /// Every call site the calls name.
    pub sites: BTreeMap<SiteId, SiteDef>,
    /// The Python stack of each site that has one (`Frame::Stack`: a driver-level recording
    /// of a Python program).
    pub stacks: BTreeMap<SiteId, SiteStack>,
    /// Every blob, read from the file as it is asked for (see `BlobStore`).
    pub blobs: BlobStore,
    /// The code of every module a recorded kernel came from, in the order written.
    pub modules: Vec<ModuleCode>,
    /// Binary images of modules, by module name (a driver-level recording's: `Frame::ModuleImage`).
    pub module_images: BTreeMap<String, BlobId>,
    /// Buffers that are module variables, not allocations (`Frame::Global`).
    pub globals: BTreeMap<BufferId, ModuleGlobal>,
    /// The thread-block cluster each kernel is launched in, where one was asked for
    /// (`Frame::KernelCluster`).
    pub kernel_clusters: BTreeMap<KernelId, [u32; 3]>,
    /// Kernels launched cooperatively (`Frame::KernelCooperative`).
    pub kernel_cooperative: BTreeSet<KernelId>,
    /// Buffers and events shared with other processes through IPC handles, in the order
    /// shared (`Frame::Shared`).
    pub shared: Vec<(SharedId, Share)>,
    /// Every kernel the calls name: module, name, layout.
    pub kernels: BTreeMap<KernelId, KernelInfo>,
    /// Buffers live when recording started, with their contents then.
    pub initial: Vec<InitialBuffer>,
    /// Streams, events, graphs and pinned regions that existed before recording.
    pub adopted: Vec<Adopted>,
    /// Every call the trace holds, in file order.
    pub calls: Vec<CallRecord>,
    /// A flight dump's later checkpoints, in order (`Frame::Restart`): where else a replay
    /// may begin (`Trace::rebased`).
    pub restarts: Vec<Restart>,
    /// Bytes of async device-to-host copies, by the copy's seq.
    pub d2h_async: BTreeMap<u64, BlobId>,
    /// What the recorder noticed besides calls, in order.
    pub findings: Vec<Finding>,
    /// Buffer hashes at host syncs, by the sync's seq (see `Frame::SyncHashes`).
    pub sync_hashes: BTreeMap<u64, Vec<(BufferId, BlobId)>>,
    /// Every buffer's size, from the initial snapshot and the allocations (derived on load, so
    /// the analyses can ask per kernel argument without rescanning the calls).
    pub sizes: BTreeMap<BufferId, u64>,
    /// Recorded device address of each buffer (see `Frame::Address`).
    pub addresses: BTreeMap<BufferId, u64>,
    /// Recording was stopped cleanly.
    pub stopped: bool,
    /// Where the file stops short of a clean end: a cut, or a recording that never stopped.
    pub cut: Option<Cut>,
    /// Frames read, header included.
    pub frames: u64,
    /// Each kernel's parameter types, read from its module's code on first use (see
    /// `signature`): a cache, so it is filled lazily and never stored.
    pub param_types: std::sync::OnceLock<BTreeMap<KernelId, Vec<ParamType>>>,
}

/// Blob frames of at least this many bytes are left in the file when a trace is opened.
const LAZY_BLOB: usize = 1 << 20;

impl Trace {
    /// An empty trace made from this one (a cut, a minimized candidate): its header,
    /// provenance and dump, and the sites, stacks and globals its calls may name; stopped, as
    /// a part of a run is.
    pub fn derived(&self) -> Trace {
        Trace {
            header: self.header.clone(),
            provenance: self.provenance.clone(),
            dump: self.dump.clone(),
            sites: self.sites.clone(),
            stacks: self.stacks.clone(),
            globals: self.globals.clone(),
            stopped: true,
            ..Default::default()
        }
    }

    /// The blob of bytes call `c` read back when recorded: its result, or for an async copy
    /// the bytes its sync made visible. `None` for any other call.
    pub fn readback_blob(&self, c: &CallRecord) -> Option<BlobId> {
        match (&c.call, &c.ret) {
            (Call::CopyD2HAsync { .. }, _) => self.d2h_async.get(&c.seq).copied(),
            (_, Some(Ok(Value::Bytes(b)))) => Some(*b),
            _ => None,
        }
    }

    /// Whether this trace is a hang's dump: one taken because a call did not return in time,
    /// or one taken with a call that had not returned (by a signal, on request, at a peer's
    /// word) in a recording that saw no device fault and no NaN. Its replay is expected to
    /// hang too. A dump at a fault is the fault's, whatever another thread was waiting in.
    pub fn is_hang_dump(&self) -> bool {
        let Some(d) = &self.dump else {
            return false;
        };
        let faulted = || {
            self.calls.iter().any(
                |c| matches!(&c.ret, Some(Err(e)) if e.code.is_some_and(crate::backend::is_sticky)),
            )
        };
        d.is_hang() || (!d.in_flight.is_empty() && !d.names_nan() && !faulted())
    }

    /// Nanoseconds from the first recorded call's start to the last one's (0 for none).
    pub fn recorded_span_ns(&self) -> u64 {
        match (self.calls.first(), self.calls.last()) {
            (Some(a), Some(b)) => b.t_ns.saturating_sub(a.t_ns),
            _ => 0,
        }
    }

    /// Open a trace file: frame headers and small frames are read now, large blobs when they
    /// are first asked for, so opening a trace of many gigabytes takes a moment and little
    /// memory. A blob store the trace names is looked for where it was recorded.
    pub fn open(path: &Path) -> Result<Trace, TraceError> {
        Self::open_with(path, None)
    }

    /// `open`, looking for stored blobs in `blobs` instead of where the trace says.
    pub fn open_with(path: &Path, blobs: Option<&Path>) -> Result<Trace, TraceError> {
        let file = std::fs::File::open(path).map_err(|source| {
            let partial = format::partial_path(path);
            if source.kind() == std::io::ErrorKind::NotFound && partial.exists() {
                TraceError::OnlyPartial {
                    path: path.to_path_buf(),
                    partial,
                }
            } else {
                TraceError::Io {
                    what: "read",
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        let file = std::sync::Arc::new(file);
        let src = FileSource::new(file.clone()).map_err(|source| TraceError::Io {
            what: "read",
            path: path.to_path_buf(),
            source,
        })?;
        let reader = FrameReader::with_source(path, src)?.lazy_blobs(LAZY_BLOB);
        let mut t = Self::load(path, reader, BlobStore::backed_by(path, file))?;
        if let Some(dir) = blobs {
            t.blobs.set_store(dir.to_path_buf());
        }
        Ok(t)
    }

    /// A trace from bytes in memory (every blob read now).
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Trace, TraceError> {
        Self::load(path, FrameReader::new(path, bytes)?, BlobStore::default())
    }

    fn load<S: Source>(
        path: &Path,
        mut reader: FrameReader<'_, S>,
        blobs: BlobStore,
    ) -> Result<Trace, TraceError> {
        let mut t = Trace {
            blobs,
            ..Trace::default()
        };
        let mut open: HashMap<u64, usize> = HashMap::new();
        let mut i = 0u64;
        while let Some(item) = reader.next_item() {
            let f = match item? {
                Item::Frame(f) => f,
                Item::Lazy(l) => {
                    t.frames += 1;
                    i += 1;
                    t.blobs.insert_lazy(l);
                    continue;
                }
            };
            t.frames += 1;
            let at = i;
            let offset = reader.last_offset();
            let bad = |detail: String| TraceError::Corrupt {
                path: path.to_path_buf(),
                frame: at,
                offset,
                detail,
            };
            i += 1;
            t.take(f, &mut open).map_err(bad)?;
        }
        if t.header.is_none() {
            // A recorder writes its header first: without one nothing was recorded, and an
            // empty trace must not replay as "no divergence".
            return Err(TraceError::NoHeader {
                path: path.to_path_buf(),
                reason: match &reader.cut {
                    Some(c) => c.reason.clone(),
                    None => format!("{} frames, none of them the header", t.frames),
                },
            });
        }
        t.size_buffers();
        t.cut = reader.cut.take();
        if let Some(c) = &t.cut {
            // A stopped trace followed by zeros (a copy padded to a block size, say) is whole.
            if t.stopped && reader.zero_after(c.offset) {
                t.cut = None;
            }
        }
        if t.cut.is_none() && !t.stopped {
            t.cut = Some(Cut {
                offset: reader.end(),
                frames: t.frames,
                reason: format!(
                    "ends after frame {} with no stop record: the recording did not finish",
                    t.frames
                ),
            });
        }
        Ok(t)
    }

    /// One frame into the trace being loaded: the trace's vocabulary of frames, an arm each.
    /// `open` maps a begun call's seq to its place until its end frame comes. The error is
    /// what is wrong with the frame, said by the caller with where it is.
    fn take(&mut self, f: Frame, open: &mut HashMap<u64, usize>) -> Result<(), String> {
        match f {
            Frame::Header(h) => self.header = Some(h),
            Frame::Provenance(p) => self.provenance = Some(p),
            Frame::Dumped(d) => self.dump = Some(d),
            Frame::Restart(r) => self.restarts.push(r),
            Frame::Clock { epoch_unix_ns } => self.clock_epoch_ns = Some(epoch_unix_ns),
            Frame::Site {
                id,
                file,
                line,
                col,
            } => {
                self.sites.insert(id, SiteDef { file, line, col });
            }
            Frame::Stack { site, stack } => {
                self.stacks.insert(site, stack);
            }
            Frame::Blob {
                id,
                len,
                zstd,
                data,
            } => {
                let data = blobs::verified(id, len, zstd, data)?;
                self.blobs.insert(id, data);
            }
            Frame::Chunked { id, len, parts } => {
                // Its id hashes its length and parts: a lie in either is caught here, at
                // its frame, before a reader sizes anything by the length.
                if BlobId::chunked(len, &parts) != id {
                    return Err(format!(
                        "chunked blob {id}: its length ({len}) and {} parts do not hash to its id",
                        parts.len()
                    ));
                }
                self.blobs.insert_chunked(id, len, parts)
            }
            Frame::Stored { id, len } => self.blobs.insert_stored(id, len),
            Frame::BlobStore { dir } => {
                if self.blobs.store_dir().is_none() {
                    self.blobs.set_store(dir.into());
                }
            }
            Frame::Module(m) => self.modules.push(m),
            Frame::Kernel { id, info } => {
                self.kernels.insert(id, info);
            }
            Frame::KernelElems { id, elems } => {
                if let Some(k) = self.kernels.get_mut(&id) {
                    k.elems = elems;
                }
            }
            Frame::ModuleImage { name, image } => {
                self.module_images.insert(name, image);
            }
            Frame::Global { buf, global } => {
                self.globals.insert(buf, global);
            }
            Frame::KernelCluster { id, dims } => {
                self.kernel_clusters.insert(id, dims);
            }
            Frame::KernelCooperative { id } => {
                self.kernel_cooperative.insert(id);
            }
            Frame::Shared { what, share } => {
                if share.handle.len() > IPC_HANDLE_BYTES {
                    return Err(format!(
                        "{what}'s IPC handle is {} bytes; a handle is at most {IPC_HANDLE_BYTES}",
                        share.handle.len()
                    ));
                }
                self.shared.push((what, share));
            }
            Frame::Initial {
                buf,
                bytes,
                data,
                site,
            } => self.initial.push(InitialBuffer {
                buf,
                bytes,
                data,
                site,
            }),
            Frame::Adopt(a) => self.adopted.push(a),
            Frame::Begin(b) => {
                open.insert(b.seq, self.calls.len());
                self.calls.push(CallRecord {
                    seq: b.seq,
                    thread: b.thread,
                    site: b.site,
                    t_ns: b.t_ns,
                    dur_ns: None,
                    call: b.call,
                    ret: None,
                });
            }
            Frame::End(e) => {
                let Some(ix) = open.remove(&e.seq) else {
                    return Err(format!("end of call {} that never began", e.seq));
                };
                self.calls[ix].dur_ns = Some(e.dur_ns);
                self.calls[ix].ret = Some(e.ret);
            }
            Frame::D2HResult { seq, data, .. } => {
                self.d2h_async.insert(seq, data);
            }
            Frame::Finding(f) => self.findings.push(f),
            Frame::Stop => self.stopped = true,
            Frame::SyncHashes { seq, hashes } => {
                self.sync_hashes.insert(seq, hashes);
            }
            Frame::Address { buf, addr } => {
                self.addresses.insert(buf, addr);
            }
        }
        Ok(())
    }

    /// `sizes` from the initial snapshot and the allocations: after loading, or after a
    /// change of either (a trim, a dump begun at a later checkpoint).
    pub fn size_buffers(&mut self) {
        self.sizes = self.initial.iter().map(|i| (i.buf, i.bytes)).collect();
        self.sizes
            .extend(self.globals.iter().map(|(b, g)| (*b, g.bytes)));
        for c in &self.calls {
            if let (
                Call::Alloc { bytes } | Call::AllocManaged { bytes },
                Some(Ok(Value::Buffer(b))),
            ) = (&c.call, &c.ret)
            {
                self.sizes.insert(*b, *bytes);
            }
        }
    }

    /// A site as `file:line:col` (with its function where the site has a Python stack), or
    /// `<site4>` if the trace does not define it.
    pub fn site(&self, id: SiteId) -> String {
        let Some(s) = self.sites.get(&id) else {
            return format!("<{id}>");
        };
        match self.stacks.get(&id).and_then(SiteStack::named) {
            Some(f) if !f.function.is_empty() => format!("{s} in {}", f.function),
            _ => s.to_string(),
        }
    }

    /// Whether `c` was the recording tool's own call (a red-zone scan `gputape record` makes
    /// after the steps, say), not the engine's: replayed like any other, left out of the
    /// analyses, which judge the engine.
    pub fn is_tools_own(&self, c: &CallRecord) -> bool {
        self.sites
            .get(&c.site)
            .is_some_and(|s| s.file.starts_with(TOOL_SITE))
    }

    /// Leaves out every module image (`Frame::ModuleImage`) and its blob: names, layouts and
    /// calls stay, so the trace reads as before, but a replay cannot run those kernels. For a
    /// trace shared without the vendors' code it ran. Returns how many images were dropped.
    pub fn drop_module_images(&mut self) -> Result<usize, TraceError> {
        let images: std::collections::HashSet<BlobId> =
            self.module_images.values().copied().collect();
        let mut kept = BlobStore::default();
        for id in self.blobs.ids() {
            if !images.contains(&id) {
                self.blobs.copy_to(&id, &mut kept)?;
            }
        }
        if let Some(dir) = self.blobs.store_dir() {
            kept.set_store(dir.to_path_buf());
        }
        self.blobs = kept;
        let n = self.module_images.len();
        self.module_images.clear();
        Ok(n)
    }

    /// `module::name` of a kernel, or its id if the trace does not define it.
    pub fn kernel_name(&self, k: KernelId) -> String {
        self.kernels
            .get(&k)
            .map(|i| format!("{}::{}", i.module, demangle::readable(&i.name)))
            .unwrap_or_else(|| k.to_string())
    }

    /// The call that never returned, if the trace ends inside one.
    /// A stopped trace has none: a call still running on another thread when recording
    /// stopped (past `RecordingBackend::stop`'s wait) was in flight, not where a process died.
    pub fn unfinished(&self) -> Option<&CallRecord> {
        if self.stopped {
            return None;
        }
        self.calls.iter().rev().find(|c| c.ret.is_none())
    }

    /// The recorded size of a buffer: from the initial snapshot or the call that allocated it.
    pub fn buffer_size(&self, b: BufferId) -> Option<u64> {
        self.sizes.get(&b).copied()
    }

    /// The type of parameter `index` of kernel `k`, when its module's source or PTX says.
    pub fn param_type(&self, k: KernelId, index: usize) -> Option<ParamType> {
        let types = self.param_types.get_or_init(|| {
            self.kernels
                .iter()
                .filter_map(|(id, info)| {
                    let m = self.modules.iter().find(|m| m.name == info.module)?;
                    let types =
                        signature::param_types(m.source.as_deref(), m.ptx.as_deref(), &info.name)?;
                    Some((*id, types))
                })
                .collect()
        });
        types.get(&k)?.get(index).copied()
    }

    /// Blob `id` whole, or `None` if the trace does not define it or its bytes are damaged
    /// (`try_blob` says which).
    pub fn blob(&self, id: BlobId) -> Option<&[u8]> {
        self.blobs.get(&id).ok().flatten()
    }

    /// Blob `id` whole: `Ok(None)` if the trace does not define it, an error naming where if
    /// its bytes are damaged or its store cannot give it.
    pub fn try_blob(&self, id: BlobId) -> Result<Option<&[u8]>, TraceError> {
        self.blobs.get(&id)
    }
}
