//! The replayer: runs a trace on any backend, checks it against what was recorded, reproduces
//! faults, and replays steps as CUDA graphs.
//!
//! It depends on the trace model and the trait only (never on the recorder): buffers are
//! allocated with their recorded sizes and filled from the initial snapshot, every recorded
//! (buffer, offset) becomes an address of the new allocation, and the calls are issued in
//! recorded order.

#![warn(missing_docs)]

mod graph;
mod issue;
mod minimize;
mod pointers;
mod policy;
mod report;
mod trim;

pub use crate::analysis::window::{
    captured_work, fault_windows, is_async_fault, FaultWindow, WindowKind,
};
pub use crate::analysis::{plan_segments, Breaker, Segment, SegmentPlan};
pub use graph::GraphReport;
pub use minimize::{minimize, signature, FaultSignature, MinimizeError, Minimized, Oracle};
pub use pointers::{hidden_pointers, HiddenPointer};
pub use policy::ReplayPolicy;
pub use report::{
    replay_json, CallTiming, Culprit, Divergence, FaultReport, ReplayReport, REPLAY_SCHEMA,
};

use crate::backend::{
    DevicePtr, GpuBackend, GraphHandle, KernelArg, KernelHandle, ModuleCode, ParamAccess,
};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::time::Instant;

/// Why a replay could not run (or go on): the trace asks for something this backend or this replay
/// cannot give.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The backend has no kernel the trace launches.
    #[error("trace needs kernel {module}::{name} (k{id}), which the replay backend cannot provide: {cause}")]
    Kernel {
        /// The kernel's id in the trace (`k{id}`).
        id: u32,
        /// The name of the module the kernel belongs to.
        module: String,
        /// The kernel's name within its module.
        name: String,
        /// The backend's error, rendered.
        cause: String,
    },
    /// Building the replay's state (loading modules, creating the recorded resources, restoring
    /// initial contents) failed.
    #[error("setting up the replay failed at {what}: {cause}")]
    Setup {
        /// The step that failed (`loading module m`, `allocating buf3`, ...).
        what: String,
        /// The backend's error, rendered.
        cause: String,
    },
    /// A call names a buffer, stream or event that the trace never defines.
    #[error("call #{seq} ({kind}) refers to {what}, which the trace never defines")]
    Dangling {
        /// The call's sequence number.
        seq: u64,
        /// The call's kind (`launch`, `copy_d2h`, ...).
        kind: &'static str,
        /// The resource it names, as an id (`buf3`, ...).
        what: String,
    },
    /// The trace names a blob of data that it does not hold.
    #[error("the trace is missing blob {0}")]
    MissingBlob(BlobId),
    /// A blob the trace defines could not be read: damaged in the file, or not in its store.
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    /// A call asks for more host memory than the replay may allocate for one call.
    #[error("call #{seq} ({what}) asks for {bytes} bytes of host memory, more than the replay's limit of {limit} (--max-memory)")]
    TooLarge {
        /// The call's sequence number.
        seq: u64,
        /// The call's kind (`copy_d2h`, ...).
        what: &'static str,
        /// Host memory asked for, in bytes.
        bytes: u64,
        /// The most one call may ask for, in bytes (`Replayer::with_max_memory`).
        limit: u64,
    },
    /// A buffer's recorded initial contents are larger than the buffer itself.
    #[error("{buf}'s initial contents are {have} bytes, more than its {bytes}: the trace contradicts itself")]
    InitialTooBig {
        /// The buffer.
        buf: BufferId,
        /// Size of its recorded initial contents, in bytes.
        have: u64,
        /// The buffer's recorded size, in bytes.
        bytes: u64,
    },
    /// A call the replay cannot issue faithfully (an address it cannot remap, an out-of-range host
    /// offset, ...).
    #[error("call #{seq} at {site}: {msg}")]
    Unsupported {
        /// The call's sequence number.
        seq: u64,
        /// Where the recorded program made the call (`file:line:col`).
        site: String,
        /// What the replay cannot do with it.
        msg: String,
    },
    /// A buffer holds a device address that would dangle at the replay's addresses; the replay
    /// refuses rather than run with it.
    #[error("{holder} holds the device address of {target} (byte {offset}{}), recorded at {recorded:#x}; the replay put {target} at {replayed:#x}, so the pointer would dangle. Replay with fixed addresses (`--fixed-addresses`, CUDA) to put buffers where they were recorded", .seq.map(|s| format!(", written by call #{s}")).unwrap_or_else(|| ", in the initial snapshot".into()))]
    HiddenPointer {
        /// The buffer whose contents hold the address.
        holder: BufferId,
        /// Where in the holder the address lies, in bytes from its start.
        offset: u64,
        /// The buffer the address points into.
        target: BufferId,
        /// The call that wrote the address (`None`: it was in the initial snapshot).
        seq: Option<u64>,
        /// The target's address when recorded.
        recorded: u64,
        /// The target's address in this replay.
        replayed: u64,
    },
}

/// What to replay and how.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Replay (verify and time) only calls with seq in `[a, b)`; the calls before `a` still run,
    /// unverified, to rebuild the state at `a`.
    pub range: Option<(u64, u64)>,
    /// Stop after this call.
    pub stop_at: Option<u64>,
    /// Replay the whole trace this many times, each from the recorded initial state (default
    /// 1). Later loops put the initial contents back into the first loop's buffers.
    pub loops: usize,
    /// Synchronise after every launch, so a fault is reported at its kernel.
    pub sync_each: bool,
    /// Scan red zones after every launch (backends with red zones).
    pub scan_redzones_each: bool,
    /// Compare every device-to-host result with the recorded bytes.
    pub verify: bool,
    /// Keep each call's wall time (to the end of the sync after it, with `sync_each`).
    pub per_call_timing: bool,
}

/// A replay checks its results against the recording unless told not to, as the CLI does.
impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            range: None,
            stop_at: None,
            loops: 1,
            sync_each: false,
            scan_redzones_each: false,
            verify: true,
            per_call_timing: false,
        }
    }
}

/// How the replay gets the trace's kernels onto its backend. The default asks the backend by
/// name (kernels registered on a mock, or modules a CUDA backend already loaded).
pub type ModuleLoader<'a> = &'a dyn Fn(&ModuleCode) -> anyhow::Result<()>;

/// Replay state: recorded ids to this backend's handles.
/// Owns a replay's state and tears it down however the replay ends.
pub(crate) struct Guard<'r, 't> {
    pub r: &'r Replayer<'t>,
    pub gpu: &'r dyn GpuBackend,
    pub st: State,
}

impl Drop for Guard<'_, '_> {
    fn drop(&mut self) {
        self.r.teardown(self.gpu, &mut self.st);
    }
}

impl State {
    /// A fresh state with the resolved kernels and those the backend cannot run.
    pub(crate) fn new(
        (kernels, opaque): &(HashMap<KernelId, KernelHandle>, HashSet<KernelId>),
    ) -> State {
        State {
            bufs: HashMap::default(),
            streams: HashMap::default(),
            events: HashMap::default(),
            graphs: HashMap::default(),
            kernels: kernels.clone(),
            hosts: HashMap::default(),
            pending: Vec::new(),
            last_scan: None,
            opaque: opaque.clone(),
            tainted: HashMap::default(),
            unchecked: Vec::new(),
        }
    }
}

pub(crate) struct State {
    pub bufs: HashMap<BufferId, (DevicePtr, u64)>,
    pub streams: HashMap<StreamId, u64>,
    pub events: HashMap<EventId, u64>,
    pub graphs: HashMap<GraphId, GraphHandle>,
    pub kernels: HashMap<KernelId, KernelHandle>,
    pub hosts: HashMap<HostId, (*mut u8, usize)>,
    /// Host buffers that async copies write into or read from until their stream syncs.
    pub pending: Vec<(u64, StreamRef, Vec<u8>)>,
    /// What the last replayed `scan_redzones` returned.
    pub last_scan: Option<usize>,
    /// Kernels this backend cannot run (no CPU body on the mock): their launches are skipped.
    pub opaque: HashSet<KernelId>,
    /// Buffers whose contents depend on a skipped launch, with the kernel they depend on.
    pub tainted: HashMap<BufferId, KernelId>,
    /// Readbacks not compared because they depend on a skipped launch: (seq, buffer, kernel).
    pub unchecked: Vec<(u64, BufferId, KernelId)>,
}

/// Puts a buffer at a given device address (for traces whose buffers hold pointers); the
/// CUDA backend does it with the driver's virtual memory management.
pub type Placer<'a> = &'a dyn Fn(u64, usize) -> anyhow::Result<DevicePtr>;

/// Replays one trace on a backend, as often as asked, checking its results against the recording.
pub struct Replayer<'t> {
    /// The trace being replayed.
    pub trace: &'t Trace,
    placer: Option<Placer<'t>>,
    hidden: Vec<HiddenPointer>,
    windows: Vec<FaultWindow>,
    captured: HashMap<GraphId, Vec<u64>>,
    by_seq: HashMap<u64, &'t CallRecord>,
    max_host_bytes: u64,
    opaque_ok: bool,
}

/// Host memory a replay may allocate for one call by default (`with_max_memory`).
pub const DEFAULT_MAX_HOST_BYTES: u64 = 8 << 30;

fn err_code(e: &anyhow::Error) -> Option<u32> {
    crate::driver_code(e)
}

impl<'t> Replayer<'t> {
    /// A replayer for `trace`: its hidden pointers, fault windows and graph captures found up
    /// front, buffers at fresh addresses, and the default host memory limit.
    pub fn new(trace: &'t Trace) -> Self {
        Replayer {
            trace,
            placer: None,
            hidden: hidden_pointers(trace),
            windows: fault_windows(trace),
            captured: captured_work(trace),
            by_seq: crate::analysis::window::by_seq(trace),
            max_host_bytes: DEFAULT_MAX_HOST_BYTES,
            opaque_ok: false,
        }
    }

    /// Allocate every buffer at its recorded address through `placer`.
    pub fn with_fixed_addresses(mut self, placer: Placer<'t>) -> Self {
        self.placer = Some(placer);
        self
    }

    /// Kernels the backend cannot provide (an engine's own kernels, with no CPU body on the
    /// mock) are *opaque* instead of an error: their launches are skipped, and a readback that
    /// depends on one is reported as not checked, so allocation, ordering, capture and leak
    /// checks still run on any engine's trace.
    pub fn with_opaque_kernels(mut self) -> Self {
        self.opaque_ok = true;
        self
    }

    /// The most host memory one call may ask for (a readback, an async copy's buffer).
    pub fn with_max_memory(mut self, bytes: u64) -> Self {
        self.max_host_bytes = bytes;
        self
    }

    /// Where the trace's recorded faults may have been raised.
    pub fn windows(&self) -> &[FaultWindow] {
        &self.windows
    }

    /// Device addresses the trace hides inside buffer contents.
    pub fn hidden(&self) -> &[HiddenPointer] {
        &self.hidden
    }

    /// Allocate buffer `id` of `bytes`: at its recorded address when placing, else anywhere.
    fn alloc_buf(
        &self,
        gpu: &dyn GpuBackend,
        id: BufferId,
        bytes: u64,
        managed: bool,
    ) -> anyhow::Result<DevicePtr> {
        match (self.placer, self.trace.addresses.get(&id)) {
            (Some(place), Some(addr)) => place(*addr, bytes as usize)
                .map_err(|e| e.context(format!("placing {id} ({bytes} bytes) at {addr:#x}"))),
            _ if managed => gpu.alloc_managed(bytes as usize),
            _ => gpu.alloc(bytes as usize),
        }
    }

    /// Refuse to go on if a pointer hidden in some buffer targets `id` and `id` is not where the
    /// recording had it.
    fn check_hidden(&self, id: BufferId, at: DevicePtr) -> Result<(), ReplayError> {
        for h in self.hidden.iter().filter(|h| h.target == id) {
            let recorded = self.trace.addresses.get(&id).copied().unwrap_or(0);
            if recorded != at.0 {
                return Err(ReplayError::HiddenPointer {
                    holder: h.holder,
                    offset: h.offset,
                    target: h.target,
                    seq: h.seq,
                    recorded,
                    replayed: at.0,
                });
            }
        }
        Ok(())
    }

    fn blob(&self, id: BlobId) -> Result<&'t [u8], ReplayError> {
        self.trace.try_blob(id)?.ok_or(ReplayError::MissingBlob(id))
    }

    /// Load modules (through `loader`, if given) and resolve every kernel the trace uses.
    pub(crate) fn kernels(
        &self,
        gpu: &dyn GpuBackend,
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<(HashMap<KernelId, KernelHandle>, HashSet<KernelId>), ReplayError> {
        if let Some(load) = loader {
            for m in &self.trace.modules {
                load(m).map_err(|e| ReplayError::Setup {
                    what: format!("loading module {}", m.name),
                    cause: format!("{e:#}"),
                })?;
            }
        }
        let mut out = HashMap::default();
        let mut opaque = HashSet::default();
        let registry = gpu.kernel_registry();
        for (id, info) in &self.trace.kernels {
            // What the recording knew of each parameter, so a recorded replay knows it too.
            if let Some(reg) = &registry {
                if info.params.iter().any(|p| p.access != ParamAccess::Unknown) {
                    reg.declare_access(&info.module, &info.name, &info.params);
                }
            }
            match gpu.kernel(&info.module, &info.name) {
                Ok(h) => {
                    out.insert(*id, h);
                }
                Err(_) if self.opaque_ok => {
                    opaque.insert(*id);
                }
                Err(e) => {
                    return Err(ReplayError::Kernel {
                        id: id.0,
                        module: info.module.clone(),
                        name: info.name.clone(),
                        cause: format!("{e:#}"),
                    })
                }
            }
        }
        Ok((out, opaque))
    }

    /// Launch `kernel` over `args`: which buffers now depend on an opaque kernel. A skipped
    /// launch taints every buffer it may write; a run one taints what it writes when it reads
    /// a tainted buffer.
    fn taint_launch(&self, st: &mut State, kernel: KernelId, args: &[Arg]) {
        let params = self
            .trace
            .kernels
            .get(&kernel)
            .map(|k| &k.params[..])
            .unwrap_or(&[]);
        // A tensor map's parameter is a by-value blob; TMA may load and store through it.
        let access = |i: usize| match args.get(i) {
            Some(Arg::TensorMap(_)) => ParamAccess::ReadWrite,
            _ => params.get(i).map_or(ParamAccess::Unknown, |p| p.access),
        };
        let bufs = || {
            args.iter()
                .enumerate()
                .filter_map(|(i, a)| match a.device_addr() {
                    Some(DevAddr::Buf { buf, .. }) => Some((i, *buf)),
                    _ => None,
                })
        };
        let origin = if st.opaque.contains(&kernel) {
            Some(kernel)
        } else {
            bufs()
                .filter(|(i, _)| access(*i) != ParamAccess::Write)
                .find_map(|(_, b)| st.tainted.get(&b).copied())
        };
        if let Some(k) = origin {
            for (i, b) in bufs() {
                if !matches!(access(i), ParamAccess::Read | ParamAccess::Value) {
                    st.tainted.insert(b, k);
                }
            }
        }
    }

    /// A readback of `src`: true when it depends on an opaque kernel (and is logged as not
    /// checked rather than compared).
    fn unchecked(&self, st: &mut State, seq: u64, src: &DevAddr) -> bool {
        let DevAddr::Buf { buf, .. } = src else {
            return false;
        };
        match st.tainted.get(buf).copied() {
            Some(k) => {
                st.unchecked.push((seq, *buf, k));
                true
            }
            None => false,
        }
    }

    /// The initial state: adopted resources created and initial buffers allocated (each only
    /// if `st` lacks it), then every initial buffer filled with its recorded contents. Fills
    /// `st` as it goes, so whatever was made before a failure is still torn down.
    pub(crate) fn setup(&self, gpu: &dyn GpuBackend, st: &mut State) -> Result<(), ReplayError> {
        let setup = |what: String| {
            move |e: anyhow::Error| ReplayError::Setup {
                what,
                cause: format!("{e:#}"),
            }
        };
        for a in &self.trace.adopted {
            match a {
                Adopted::Stream { id, is_default } if !st.streams.contains_key(id) => {
                    let s = if *is_default {
                        gpu.default_stream()
                    } else {
                        gpu.create_stream()
                            .map_err(setup(format!("creating {id}")))?
                    };
                    st.streams.insert(*id, s);
                }
                Adopted::Event { id } if !st.events.contains_key(id) => {
                    let e = gpu
                        .create_event()
                        .map_err(setup(format!("creating {id}")))?;
                    st.events.insert(*id, e);
                }
                Adopted::Host { id, bytes } if !st.hosts.contains_key(id) => {
                    let p = gpu
                        .alloc_host_pinned(*bytes as usize)
                        .map_err(setup(format!("allocating {id}")))?;
                    st.hosts.insert(*id, (p, *bytes as usize));
                }
                _ => {}
            }
        }
        for i in &self.trace.initial {
            let p = match st.bufs.get(&i.buf) {
                Some((p, _)) => *p,
                None => {
                    let p = self
                        .alloc_buf(gpu, i.buf, i.bytes, false)
                        .map_err(setup(format!("allocating {}", i.buf)))?;
                    self.check_hidden(i.buf, p)?;
                    st.bufs.insert(i.buf, (p, i.bytes));
                    p
                }
            };
            let data = self.blob(i.data)?;
            if data.len() as u64 > i.bytes {
                return Err(ReplayError::InitialTooBig {
                    buf: i.buf,
                    have: data.len() as u64,
                    bytes: i.bytes,
                });
            }
            gpu.copy_h2d(data, p)
                .map_err(setup(format!("restoring {}", i.buf)))?;
        }
        Ok(())
    }

    /// Back to the initial state for another loop, keeping what `setup` made: wait for every
    /// stream, drop what the replayed calls created (buffers, graphs, events, pinned regions),
    /// then `setup` again, which makes only what a call destroyed and refills the initial
    /// buffers.
    pub(crate) fn restore(&self, gpu: &dyn GpuBackend, st: &mut State) -> Result<(), ReplayError> {
        for (id, s) in &st.streams {
            gpu.synchronize(*s).map_err(|e| ReplayError::Setup {
                what: format!("waiting for {id} after the previous loop"),
                cause: format!("{e:#}"),
            })?;
        }
        for (_, g) in st.graphs.drain() {
            let _ = gpu.destroy_graph(g);
        }
        let initial: HashSet<BufferId> = self.trace.initial.iter().map(|i| i.buf).collect();
        st.bufs.retain(|id, (p, _)| {
            let keep = initial.contains(id);
            if !keep {
                let _ = gpu.free(*p);
            }
            keep
        });
        let adopted = |want: &dyn Fn(&Adopted) -> bool| self.trace.adopted.iter().any(want);
        st.events.retain(|id, e| {
            let keep = adopted(&|a| matches!(a, Adopted::Event { id: x } if x == id));
            if !keep {
                let _ = gpu.destroy_event(*e);
            }
            keep
        });
        st.hosts.retain(|id, (p, n)| {
            let keep = adopted(&|a| matches!(a, Adopted::Host { id: x, .. } if x == id));
            if !keep {
                let _ = gpu.free_host_pinned(*p, *n);
            }
            keep
        });
        st.pending.clear();
        st.last_scan = None;
        st.tainted.clear();
        self.setup(gpu, st)
    }

    /// Free what `setup` and the replayed calls left allocated.
    pub(crate) fn teardown(&self, gpu: &dyn GpuBackend, st: &mut State) {
        for (_, g) in st.graphs.drain() {
            let _ = gpu.destroy_graph(g);
        }
        for (_, (p, _)) in st.bufs.drain() {
            let _ = gpu.free(p);
        }
        for (_, e) in st.events.drain() {
            let _ = gpu.destroy_event(e);
        }
        for (_, (p, n)) in st.hosts.drain() {
            let _ = gpu.free_host_pinned(p, n);
        }
    }

    /// Run the trace. `loader` gets each embedded module first (for backends that compile).
    pub fn run(
        &self,
        gpu: &dyn GpuBackend,
        opts: &ReplayOptions,
        loader: Option<ModuleLoader<'_>>,
        mut progress: impl FnMut(u64),
    ) -> Result<ReplayReport, ReplayError> {
        let kernels = self.kernels(gpu, loader)?;
        let (a, b) = opts.range.unwrap_or((0, u64::MAX));
        let stop = opts
            .stop_at
            .map_or(u64::MAX, |s| s.saturating_add(1))
            .min(b);
        let mut report = ReplayReport {
            loops: opts.loops.max(1),
            opaque_kernels: {
                let mut v: Vec<String> = kernels
                    .1
                    .iter()
                    .map(|k| self.trace.kernel_name(*k))
                    .collect();
                v.sort();
                v
            },
            ..Default::default()
        };
        let in_range: Vec<&CallRecord> = self
            .trace
            .calls
            .iter()
            .filter(|c| c.seq >= a && c.seq < stop)
            .collect();
        if let (Some(first), Some(last)) = (in_range.first(), in_range.last()) {
            report.recorded_ms =
                (last.t_ns + last.dur_ns.unwrap_or(0)).saturating_sub(first.t_ns) as f64 / 1e6;
        }
        // One state for all loops: the first sets it up, each later one puts the initial
        // contents back into the same buffers (`restore`). A fresh allocation per loop would
        // measure cold device memory mappings and caches every time, which a running engine,
        // stepping over long-lived buffers, does not see.
        let mut guard = Guard {
            r: self,
            gpu,
            st: State::new(&kernels),
        };
        for lp in 0..report.loops {
            if lp == 0 {
                self.setup(gpu, &mut guard.st)?;
            } else {
                self.restore(gpu, &mut guard.st)?;
            }
            let st = &mut guard.st;
            let mut t0 = None;
            let mut last_writer: HashMap<BufferId, KernelId> = HashMap::default();
            let mut scanned_since = Bands::default();
            // Inside a fault window every launch is followed by a sync of every stream (and
            // a red-zone scan for a red-zone window), so the fault shows at its launch.
            let mut pinning = false;
            // Captures open at this call: nothing may sync while one is (it would invalidate
            // the capture), so pinning waits for the graph's launch.
            let mut open_captures = 0usize;
            for c in &self.trace.calls {
                if c.seq >= stop {
                    break;
                }
                match (&c.call, &c.ret) {
                    (Call::BeginCapture { .. }, Some(Ok(_))) => open_captures += 1,
                    (Call::EndCapture { .. }, _) => open_captures = open_captures.saturating_sub(1),
                    _ => {}
                }
                let capturing = open_captures > 0 || matches!(c.call, Call::EndCapture { .. });
                let live = c.seq >= a;
                if live && t0.is_none() {
                    t0 = Some(Instant::now());
                }
                let timed = live && lp == 0 && opts.per_call_timing;
                let tc = timed.then(Instant::now);
                let window = self.windows.iter().find(|w| w.contains(c.seq)).copied();
                let pin = live && window.is_some() && !capturing;
                // Red zones are read inside every window: an overrun that faulted when recorded
                // (or on the mock's exact bounds) may land in a guard band here instead.
                let pin_scan = pin;
                let mut culprit: Option<(u64, Option<String>)> = None;
                let mut outcome = Outcome::Ok {
                    checked: false,
                    mismatch: None,
                };
                if pin && !pinning {
                    // A fault raised before the window would otherwise be blamed on its first
                    // launch: make sure everything before it has finished cleanly.
                    if let Err(e) = sync_all(gpu, st) {
                        outcome = Outcome::Failed(e.context(format!(
                            "the device had already faulted before call #{} (the window of the recorded fault starts there)",
                            c.seq
                        )));
                    }
                }
                pinning = pin;
                let expand = match (&c.call, pin) {
                    (Call::LaunchGraph { graph, .. }, true) => self.captured.get(graph),
                    _ => None,
                };
                if matches!(outcome, Outcome::Ok { .. }) {
                    outcome = match expand {
                        // A graph launch inside a window: run the graph's recorded work eagerly,
                        // a sync after each launch, so a fault names its node.
                        Some(nodes) => {
                            let mut o = Outcome::Ok {
                                checked: false,
                                mismatch: None,
                            };
                            for seq in nodes {
                                let Some(n) = self.by_seq.get(seq) else {
                                    continue;
                                };
                                let r = match self.issue(gpu, st, n, false)? {
                                    Outcome::Failed(e) => Err(e),
                                    _ if n.call.launch().is_some() => sync_all(gpu, st),
                                    _ => Ok(()),
                                };
                                if let Err(e) = r {
                                    culprit = Some((*seq, Some(c.call.kind().name().into())));
                                    o = Outcome::Failed(e);
                                    break;
                                }
                                if pin_scan && n.call.launch().is_some() {
                                    self.scan_after(
                                        gpu,
                                        n.seq,
                                        lp,
                                        &mut scanned_since,
                                        &mut report,
                                    );
                                }
                            }
                            match (o, c.ret.as_ref()) {
                                (Outcome::Ok { .. }, Some(Err(_))) => {
                                    Outcome::SucceededButRecordedError
                                }
                                (o, _) => o,
                            }
                        }
                        None => self.issue(gpu, st, c, live && opts.verify)?,
                    };
                }
                if live && lp == 0 {
                    report.calls += 1;
                    progress(c.seq);
                }
                if let Some((kid, args)) = c.call.launch() {
                    for arg in args {
                        if let Some(DevAddr::Buf { buf, .. }) = arg.device_addr() {
                            last_writer.insert(*buf, kid);
                        }
                    }
                }
                // After a launch that went through, synchronise (and scan red zones) when asked
                // or inside a fault window: an asynchronous fault then surfaces at its own
                // launch and is that call's outcome.
                let outcome = match outcome {
                    o @ (Outcome::Ok { .. } | Outcome::SucceededButRecordedError)
                        if live
                            && (opts.sync_each || opts.scan_redzones_each || pin)
                            && c.call.launch().is_some() =>
                    {
                        let synced = match (pin, c.call.work_stream()) {
                            (true, _) => sync_all(gpu, st),
                            (false, Some(s)) => gpu.synchronize(resolve_stream(st, s, c)?),
                            (false, None) => Ok(()),
                        };
                        match synced {
                            Err(e) => {
                                culprit = Some((c.seq, None));
                                Outcome::Failed(e)
                            }
                            Ok(()) => {
                                if opts.scan_redzones_each || pin_scan {
                                    self.scan_after(
                                        gpu,
                                        c.seq,
                                        lp,
                                        &mut scanned_since,
                                        &mut report,
                                    );
                                }
                                o
                            }
                        }
                    }
                    other => other,
                };
                // With a sync after each launch, a launch's time runs to its completion.
                if let (Some(tc), Some(t0)) = (tc, t0) {
                    report.per_call_us.push(CallTiming {
                        seq: c.seq,
                        start_us: tc.duration_since(t0).as_secs_f64() * 1e6,
                        us: tc.elapsed().as_secs_f64() * 1e6,
                    });
                }
                let outcome = match outcome {
                    Outcome::Ok {
                        checked,
                        mismatch: None,
                    } if live && opts.verify => Outcome::Ok {
                        checked,
                        mismatch: self.check_sync_hashes(gpu, st, c),
                    },
                    other => other,
                };
                match outcome {
                    Outcome::Ok { checked, mismatch } => {
                        if live {
                            report.d2h_checked += checked as u64;
                            if checked && mismatch.is_none() {
                                report.d2h_matched += 1;
                            }
                        }
                        if let (Call::ScanRedzones, Some(Ok(Value::Count(n))), Some(m)) =
                            (&c.call, &c.ret, st.last_scan.take())
                        {
                            // Per-launch scans since the last recorded scan already found (and
                            // refilled) some zones: they count towards this one.
                            scanned_since.add(m, &gpu.redzone_hits());
                            let bands = std::mem::take(&mut scanned_since);
                            let m = bands.len();
                            if (*n > 0 || m > 0) && lp == 0 {
                                let w = window.filter(|w| w.kind == WindowKind::Redzone);
                                let raised_by = self.band_culprit(st, &bands);
                                report.faults.push(FaultReport {
                                    seq: c.seq,
                                    site: self.trace.site(c.site),
                                    call: "scan_redzones".into(),
                                    kernel: None,
                                    recorded: format!("{n} red zone(s) written"),
                                    recorded_code: None,
                                    replayed: Some(format!("{m} red zone(s) written")),
                                    replayed_code: None,
                                    reproduced: *n == m as u64,
                                    observed_at: None,
                                    window: w.map(|w| (w.start, w.observed)),
                                    raised_by,
                                });
                            }
                        }
                        if let Some((buf, off, detail)) = mismatch {
                            if report.divergence.is_none() {
                                report.divergence = Some(Divergence {
                                    seq: c.seq,
                                    site: self.trace.site(c.site),
                                    call: c.call.kind().name().to_string(),
                                    buffer: buf.map(|b| b.to_string()),
                                    byte_offset: off,
                                    last_writer: buf
                                        .and_then(|b| last_writer.get(&b))
                                        .map(|k| self.trace.kernel_name(*k)),
                                    detail,
                                });
                            }
                        }
                    }
                    Outcome::Failed(e) => {
                        let replayed_code = err_code(&e);
                        // A recorded asynchronous fault whose window holds this call, with the
                        // same code: the recorded fault, seen where this replay first waited.
                        // Or a recorded red-zone hit that a backend with exact bounds (the
                        // mock) catches as the out-of-bounds access itself.
                        let out_of_bounds = crate::backend::device_error(&e)
                            .and_then(|d| d.alloc.as_ref())
                            .is_some_and(|a| a.past_end > 0);
                        let recorded_window = window.filter(|w| match w.kind {
                            WindowKind::Error => w.code.is_none() || w.code == replayed_code,
                            WindowKind::Redzone => out_of_bounds,
                        });
                        let fault = match recorded_window.and_then(|w| self.by_seq.get(&w.observed))
                        {
                            Some(rc) => {
                                let recorded = rc.ret.as_ref().and_then(|r| r.as_ref().err());
                                let mut f = self.fault(rc, recorded, Some(&e));
                                if let (Call::ScanRedzones, Some(Ok(Value::Count(n)))) =
                                    (&rc.call, &rc.ret)
                                {
                                    f.recorded = format!("{n} red zone(s) written");
                                }
                                f.reproduced = true;
                                f.observed_at = Some(c.seq);
                                f.window = recorded_window.map(|w| (w.start, w.observed));
                                f.raised_by = culprit.and_then(|(seq, graph)| {
                                    self.culprit(st, seq, graph.map(|_| c), Some(&e))
                                });
                                f
                            }
                            None => {
                                let recorded = c.ret.as_ref().and_then(|r| r.as_ref().err());
                                let mut f = self.fault(c, recorded, Some(&e));
                                f.window = window
                                    .filter(|w| w.observed == c.seq)
                                    .map(|w| (w.start, w.observed));
                                f.raised_by = culprit.and_then(|(seq, graph)| {
                                    self.culprit(st, seq, graph.map(|_| c), Some(&e))
                                });
                                f
                            }
                        };
                        let dead = replayed_code.is_some_and(crate::backend::is_sticky);
                        let recorded_here =
                            matches!(c.ret, Some(Err(_))) || recorded_window.is_some();
                        if lp == 0 {
                            report.faults.push(fault);
                        }
                        if dead {
                            // The context is gone: nothing after this call can be replayed in
                            // this process.
                            if lp == 0 {
                                report.stopped_at = Some(c.seq);
                                if !recorded_here && report.divergence.is_none() {
                                    report.divergence = Some(self.failed_divergence(st, c, &e));
                                }
                            }
                            break;
                        }
                        if !recorded_here {
                            // Diverged: the state is no longer the recording's.
                            if report.divergence.is_none() {
                                report.divergence = Some(self.failed_divergence(st, c, &e));
                            }
                            break;
                        }
                    }
                    Outcome::SucceededButRecordedError => {
                        let recorded = c.ret.as_ref().and_then(|r| r.as_ref().err());
                        if lp == 0 {
                            let mut f = self.fault(c, recorded, None);
                            let w = window.filter(|w| w.observed == c.seq);
                            f.window = w
                                .filter(|w| w.start != w.observed)
                                .map(|w| (w.start, w.observed));
                            // No fault here, but the window's scans found a guard band written:
                            // the recorded fault's overrun, stopped short of unmapped memory by
                            // the red zone.
                            if w.is_some_and(|w| w.kind == WindowKind::Error)
                                && !scanned_since.is_empty()
                            {
                                let bands = std::mem::take(&mut scanned_since);
                                f.replayed = Some(format!(
                                    "no error, but {} red zone(s) written",
                                    bands.len()
                                ));
                                f.reproduced = true;
                                f.observed_at = bands.first.map(|(s, _)| s);
                                f.raised_by = self.band_culprit(st, &bands);
                            }
                            report.faults.push(f);
                        }
                    }
                }
            }
            let unchecked = std::mem::take(&mut guard.st.unchecked);
            if lp == 0 {
                report.unchecked = unchecked
                    .into_iter()
                    .map(|(seq, b, k)| {
                        format!("call #{seq}: {b} depends on {}", self.trace.kernel_name(k))
                    })
                    .collect();
            }
            if let Some(t0) = t0 {
                // A fault the device raised asynchronously, after the last call that looked,
                // must not go unnoticed.
                if let Err(e) = gpu.synchronize(gpu.default_stream()) {
                    if lp == 0 && report.stopped_at.is_none() {
                        report.late_fault = Some(format!("{e:#}"));
                    }
                }
                report.loop_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            if report.stopped_at.is_some() {
                // The context is dead: nothing more can run in this process.
                break;
            }
        }
        drop(guard);
        Ok(report)
    }

    /// At a sync with recorded buffer hashes: the first buffer whose replayed bytes differ, with
    /// the kernels since the previous hashed sync that wrote it (the suspects).
    fn check_sync_hashes(
        &self,
        gpu: &dyn GpuBackend,
        st: &State,
        c: &CallRecord,
    ) -> Option<(Option<BufferId>, Option<u64>, String)> {
        let hashes = self.trace.sync_hashes.get(&c.seq)?;
        let mut bytes = Vec::new();
        for (id, want) in hashes.iter().filter(|(id, _)| !st.tainted.contains_key(id)) {
            let (p, size) = st.bufs.get(id)?;
            bytes.clear();
            bytes.resize(*size as usize, 0);
            gpu.copy_d2h(*p, &mut bytes).ok()?;
            if BlobId::of(&bytes) == *want {
                continue;
            }
            let since = self
                .trace
                .sync_hashes
                .range(..c.seq)
                .next_back()
                .map_or(0, |(s, _)| *s);
            let mut suspects: Vec<String> = self
                .trace
                .calls
                .iter()
                .filter(|x| x.seq > since && x.seq < c.seq)
                .filter(|x| {
                    x.call.launch().is_some_and(|(_, args)| {
                        args.iter()
                            .any(|a| matches!(a.device_addr(), Some(DevAddr::Buf { buf, .. }) if buf == id))
                    })
                })
                .map(|x| {
                    format!(
                        "#{} {} ({})",
                        x.seq,
                        x.call
                            .launch()
                            .map_or("?".into(), |(k, _)| self.trace.kernel_name(k)),
                        self.trace.site(x.site)
                    )
                })
                .collect();
            suspects.dedup();
            return Some((
                Some(*id),
                None,
                format!(
                    "{id} no longer matches its recorded hash at this sync (it matched at #{since}); kernels since then that took it: {}",
                    if suspects.is_empty() { "none".to_string() } else { suspects.join(", ") }
                ),
            ));
        }
        None
    }

    /// The recorded buffer a backend error is about, when the backend says which allocation
    /// (the mock's sanitizer errors do), with the site that allocated it in the recording, and
    /// how far past its end the access ran.
    fn buffer_in_error(&self, st: &State, e: &anyhow::Error) -> Option<(String, u64)> {
        let a = crate::backend::device_error(e)?.alloc.as_ref()?;
        let (id, _) = st.bufs.iter().find(|(_, (p, _))| p.0 == a.base)?;
        Some((self.describe_buffer(*id), a.past_end))
    }

    /// `buf30 (512 bytes, allocated at src/model/resources.rs:111:22)`.
    fn describe_buffer(&self, id: BufferId) -> String {
        let initial = self.trace.initial.iter().find(|i| i.buf == id);
        let alloc = || {
            self.trace
                .calls
                .iter()
                .find_map(|c| match (&c.call, &c.ret) {
                    (
                        Call::Alloc { bytes } | Call::AllocManaged { bytes },
                        Some(Ok(Value::Buffer(b))),
                    ) if *b == id => Some((*bytes, c.site)),
                    _ => None,
                })
        };
        match initial.map(|i| (i.bytes, i.site)).or_else(alloc) {
            Some((bytes, site)) => format!(
                "{id} ({bytes} bytes, allocated at {})",
                self.trace.site(site)
            ),
            None => id.to_string(),
        }
    }

    /// The divergence of a call that succeeded when recorded and failed on replay.
    fn failed_divergence(&self, st: &State, c: &CallRecord, e: &anyhow::Error) -> Divergence {
        Divergence {
            seq: c.seq,
            site: self.trace.site(c.site),
            call: c.call.kind().name().to_string(),
            buffer: self.buffer_in_error(st, e).map(|(b, _)| b),
            byte_offset: None,
            last_writer: None,
            detail: format!("succeeded when recorded, failed on replay: {e:#}"),
        }
    }

    /// The launch `seq` as the one that raised a fault (`graph_launch`: the call that launched
    /// the graph it was captured into), with what the backend's error says of the buffer.
    fn culprit(
        &self,
        st: &State,
        seq: u64,
        graph_launch: Option<&CallRecord>,
        e: Option<&anyhow::Error>,
    ) -> Option<Culprit> {
        let c = self.by_seq.get(&seq)?;
        let (kid, args) = c.call.launch()?;
        let info = self.trace.kernels.get(&kid);
        let in_error = e.and_then(|e| self.buffer_in_error(st, e));
        // The buffers the kernel may write, as candidates, only when the backend did not say.
        let writes = args
            .iter()
            .filter(|_| in_error.is_none())
            .enumerate()
            .filter_map(|(i, a)| match a.device_addr() {
                Some(DevAddr::Buf { buf, .. }) => {
                    let access = match a {
                        Arg::TensorMap(_) => ParamAccess::ReadWrite,
                        _ => info
                            .and_then(|k| k.params.get(i))
                            .map_or(ParamAccess::Unknown, |p| p.access),
                    };
                    matches!(
                        access,
                        ParamAccess::Write | ParamAccess::ReadWrite | ParamAccess::Unknown
                    )
                    .then(|| self.describe_buffer(*buf))
                }
                _ => None,
            })
            .collect();
        let graph = graph_launch.map(|g| match &g.call {
            Call::LaunchGraph { graph, .. } => format!("{graph} (launched by call #{})", g.seq),
            _ => format!("the graph launched by call #{}", g.seq),
        });
        Some(Culprit {
            seq,
            kernel: self.trace.kernel_name(kid),
            site: self.trace.site(c.site),
            graph,
            past_end: in_error.as_ref().map(|(_, n)| *n),
            buffer: in_error.map(|(b, _)| b),
            writes,
        })
    }

    /// The launch after which a scan first found a guard band, with the band's buffer and how
    /// far past its end the band was written.
    fn band_culprit(&self, st: &State, bands: &Bands) -> Option<Culprit> {
        let (seq, band) = bands.first?;
        let mut c = self.culprit(st, seq, None, None)?;
        if let Some((base, last)) = band {
            if let Some((id, _)) = st.bufs.iter().find(|(_, (p, _))| p.0 == base) {
                c.buffer = Some(self.describe_buffer(*id));
                c.past_end = Some(last as u64 + 1);
                c.writes.clear();
            }
        }
        Some(c)
    }

    /// A red-zone scan after the launch `seq`; hits are kept in the report (first loop).
    fn scan_after(
        &self,
        gpu: &dyn GpuBackend,
        seq: u64,
        lp: usize,
        scanned_since: &mut Bands,
        report: &mut ReplayReport,
    ) {
        if let Ok(n) = gpu.scan_redzones() {
            if n > 0 {
                let hits = gpu.redzone_hits();
                if scanned_since.first.is_none() {
                    scanned_since.first = Some((seq, hits.first().map(|h| (h.base.0, h.last))));
                }
                scanned_since.add(n, &hits);
            }
            if n > 0 && lp == 0 {
                report.redzone_hits.push((seq, n as u64));
            }
        }
    }

    fn fault(
        &self,
        c: &CallRecord,
        recorded: Option<&ErrorRec>,
        replayed: Option<&anyhow::Error>,
    ) -> FaultReport {
        let replayed_code = replayed.and_then(err_code);
        let recorded_code = recorded.and_then(|r| r.code);
        FaultReport {
            seq: c.seq,
            site: self.trace.site(c.site),
            call: c.call.kind().name().to_string(),
            kernel: c.call.launch().map(|(k, _)| self.trace.kernel_name(k)),
            recorded: match (recorded, &c.ret) {
                (Some(r), _) => match r.code {
                    Some(code) => format!("{} ({code})", crate::backend::cuda_error_name(code)),
                    None => r.message.clone(),
                },
                (None, None) => "never returned (the process died in this call)".into(),
                (None, Some(_)) => "success".into(),
            },
            recorded_code,
            replayed: replayed.map(|e| match err_code(e) {
                Some(code) => format!("{} ({code})", crate::backend::cuda_error_name(code)),
                None => format!("{e:#}"),
            }),
            replayed_code,
            reproduced: match (recorded, replayed) {
                (Some(r), Some(_)) => r.code.is_none() || r.code == replayed_code,
                (None, Some(_)) => c.ret.is_none(),
                _ => false,
            },
            observed_at: None,
            window: None,
            raised_by: None,
        }
    }
}

pub(crate) enum Outcome {
    Ok {
        checked: bool,
        mismatch: Option<(Option<BufferId>, Option<u64>, String)>,
    },
    Failed(anyhow::Error),
    SucceededButRecordedError,
}

/// The guard bands found written since the last recorded scan, as a set: a scan refills what
/// it finds, so an overrun repeated by a later launch dirties the same band again, and that is
/// still one violation.
#[derive(Default)]
struct Bands {
    /// (allocation base, first byte past its end).
    set: std::collections::BTreeSet<(u64, usize)>,
    /// Hits from a backend that counts them without saying where.
    unplaced: usize,
    /// The first launch after which a scan found a band, and the band (base, last changed
    /// byte past the end).
    first: Option<(u64, Option<(u64, usize)>)>,
}

impl Bands {
    fn add(&mut self, n: usize, hits: &[crate::backend::RedzoneHit]) {
        if hits.is_empty() {
            self.unplaced += n;
        }
        self.set.extend(hits.iter().map(|h| (h.base.0, h.first)));
    }

    fn len(&self) -> usize {
        self.set.len() + self.unplaced
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Wait for every stream of the replay (the legacy stream too): after a launch inside a fault
/// window, whatever the launch raised is reported here.
pub(crate) fn sync_all(gpu: &dyn GpuBackend, st: &State) -> anyhow::Result<()> {
    gpu.synchronize(0)?;
    for s in st.streams.values() {
        gpu.synchronize(*s)?;
    }
    Ok(())
}

/// A device-to-device copy carries its source's dependence on an opaque kernel.
fn taint_copy(st: &mut State, src: &DevAddr, dst: &DevAddr) {
    if let (DevAddr::Buf { buf: s, .. }, DevAddr::Buf { buf: d, .. }) = (src, dst) {
        if let Some(k) = st.tainted.get(s).copied() {
            st.tainted.insert(*d, k);
        }
    }
}

pub(crate) fn resolve_stream(st: &State, s: StreamRef, c: &CallRecord) -> Result<u64, ReplayError> {
    match s {
        StreamRef::Legacy => Ok(0),
        StreamRef::Id(id) => st
            .streams
            .get(&id)
            .copied()
            .ok_or_else(|| ReplayError::Dangling {
                seq: c.seq,
                kind: c.call.kind().name(),
                what: id.to_string(),
            }),
    }
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<u64> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .map(|p| p as u64)
        .or((a.len() != b.len()).then_some(a.len().min(b.len()) as u64))
}

impl Replayer<'_> {
    fn addr(&self, st: &State, a: &DevAddr, c: &CallRecord) -> Result<DevicePtr, ReplayError> {
        match a {
            DevAddr::Null => Ok(DevicePtr::NULL),
            DevAddr::Buf { buf, off } | DevAddr::Freed { buf, off } => st
                .bufs
                .get(buf)
                .map(|(p, _)| p.offset(*off as usize))
                .ok_or_else(|| ReplayError::Dangling {
                    seq: c.seq,
                    kind: c.call.kind().name(),
                    what: buf.to_string(),
                }),
            // Outside every buffer when recorded: aim just as far past the nearest one, so an
            // out-of-bounds access stays out of bounds.
            DevAddr::Unknown {
                near: Some((buf, off)),
            } => st
                .bufs
                .get(buf)
                .map(|(p, _)| p.offset(*off as usize))
                .ok_or_else(|| ReplayError::Dangling {
                    seq: c.seq,
                    kind: c.call.kind().name(),
                    what: buf.to_string(),
                }),
            DevAddr::Unknown { near: None } => Err(ReplayError::Unsupported {
                seq: c.seq,
                site: self.trace.site(c.site),
                msg: "a pointer that was in no known buffer when recorded cannot be remapped"
                    .into(),
            }),
        }
    }

    /// The replay's address for `len` bytes at a recorded pinned host address, checked to lie
    /// inside the region (a trace is untrusted: its offsets are not believed, they are checked).
    fn host(
        &self,
        st: &State,
        h: &HostAddr,
        len: u64,
        c: &CallRecord,
    ) -> Result<Option<*mut u8>, ReplayError> {
        match h {
            HostAddr::Pinned { host, off } => match st.hosts.get(host) {
                Some((p, n)) => {
                    if off.checked_add(len).is_none_or(|end| end > *n as u64) {
                        return Err(ReplayError::Unsupported {
                            seq: c.seq,
                            site: self.trace.site(c.site),
                            msg: format!(
                                "{len} bytes at offset {off} of {host} run past its {n} bytes"
                            ),
                        });
                    }
                    // SAFETY: `off + len` lies inside this live pinned region of `n` bytes
                    // (checked above), so the pointer stays in the same allocation.
                    Ok(Some(unsafe { p.add(*off as usize) }))
                }
                None => Ok(None),
            },
            HostAddr::Unknown => Ok(None),
        }
    }

    /// Zeroed host memory for `len` bytes a trace asks for, refused past the replay's limit
    /// instead of aborting the process.
    fn host_bytes(&self, len: u64, c: &CallRecord) -> Result<Vec<u8>, ReplayError> {
        let too_big = || ReplayError::TooLarge {
            seq: c.seq,
            what: c.call.kind().name(),
            bytes: len,
            limit: self.max_host_bytes,
        };
        if len > self.max_host_bytes {
            return Err(too_big());
        }
        let mut v = Vec::new();
        v.try_reserve_exact(len as usize).map_err(|_| too_big())?;
        v.resize(len as usize, 0);
        Ok(v)
    }

    /// At a sync of `s`: async readbacks on it are complete; compare them with the recording.
    fn settle(
        &self,
        st: &mut State,
        s: StreamRef,
        c: &CallRecord,
        verify: bool,
        checked: &mut bool,
        mismatch: &mut Option<(Option<BufferId>, Option<u64>, String)>,
    ) -> Result<(), ReplayError> {
        let mut keep = Vec::new();
        for (seq, ps, bytes) in std::mem::take(&mut st.pending) {
            if ps != s {
                keep.push((seq, ps, bytes));
                continue;
            }
            let Some(rec) = self.trace.calls.iter().find(|x| x.seq == seq) else {
                continue;
            };
            if !verify {
                continue;
            }
            let Call::CopyD2HAsync { len, dst, src, .. } = &rec.call else {
                continue;
            };
            let Some(blob) = self.trace.d2h_async.get(&seq) else {
                continue;
            };
            if self.unchecked(st, seq, src) {
                continue;
            }
            let got: Vec<u8> = match self.host(st, dst, *len, c)? {
                // SAFETY: the replay's pinned region, at the recorded offset and length; the
                // copy into it completed at this sync.
                Some(h) => unsafe { std::slice::from_raw_parts(h, *len as usize) }.to_vec(),
                None => bytes,
            };
            *checked = true;
            let want = self.blob(*blob)?;
            if let Some(off) = first_diff(want, &got) {
                if mismatch.is_none() {
                    let buf = match src {
                        DevAddr::Buf { buf, off: o } => Some((*buf, *o)),
                        _ => None,
                    };
                    *mismatch = Some((
                        buf.map(|b| b.0),
                        Some(off + buf.map_or(0, |b| b.1)),
                        format!(
                            "async readback #{seq} differs (checked at the sync #{})",
                            c.seq
                        ),
                    ));
                }
            }
        }
        st.pending = keep;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Bands;
    use crate::backend::{DevicePtr, RedzoneHit};

    /// A scan refills what it finds: the same band dirtied again by a later launch is still
    /// one violation, two buffers' bands are two.
    #[test]
    fn red_zone_hits_count_as_a_set_of_bands() {
        let hit = |base, last| RedzoneHit {
            base: DevicePtr(base),
            first: 0,
            last,
        };
        let mut b = Bands::default();
        b.add(1, &[hit(0x1000, 63)]);
        b.add(1, &[hit(0x1000, 63)]);
        assert_eq!(b.len(), 1);
        b.add(1, &[hit(0x2000, 3)]);
        assert_eq!(b.len(), 2);
        // A backend that only counts: each hit counts.
        b.add(2, &[]);
        assert_eq!(b.len(), 4);
    }
}
