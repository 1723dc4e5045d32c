//! The replayer: runs a trace on any backend, checks it against what was recorded, reproduces
//! faults, and replays steps as CUDA graphs.
//!
//! It depends on the trace model and the trait only (never on the recorder): buffers are
//! allocated with their recorded sizes and filled from the initial snapshot, every recorded
//! (buffer, offset) becomes an address of the new allocation, and the calls are issued in
//! recorded order.

#![warn(missing_docs)]

mod chaos;
pub mod child;
pub mod debugger;
mod delay_kernel;
mod fault;
mod finite;
mod graph;
mod inspect;
mod issue;
mod layout;
mod lockstep;
mod minimize;
mod minimize_ranks;
mod pointers;
mod policy;
mod ranks;
mod report;
mod restore;
pub mod sanitizer;
mod state;
mod trim;
mod verify;
mod views;
pub mod writes;

pub use crate::analysis::window::{
    captured_work, fault_windows, is_async_fault, FaultWindow, WindowKind,
};
pub use crate::analysis::{plan_segments, Breaker, Segment, SegmentPlan};
pub use chaos::Cause;
pub use finite::{FiniteOptions, FiniteReport, NonFinite, Planted, RecordedNonFinite};
pub use graph::GraphReport;
pub use layout::{render_layout, replay_layout};
pub use lockstep::{LaunchDifference, LockstepOptions, LockstepReport, Tolerance};
pub use minimize::{
    minimize, minimize_at, minimize_value, records_fault, signature, FaultSignature, MinimizeError,
    Minimized, Oracle,
};
pub use minimize_ranks::{faulting_rank, minimize_ranks, RanksMinimized, RanksOracle};
pub use pointers::{hidden_pointers, HiddenPointer};
pub use policy::ReplayPolicy;
pub use ranks::{aligned, replay_ranks, Aligned};
pub use report::{
    replay_json, CallTiming, Culprit, Divergence, FaultReport, ReplayReport, REPLAY_SCHEMA,
};
pub use state::Seen;
pub use views::{written_tensors, WrittenTensor};

use fault::{err_code, Bands};
use state::{resolve_stream, sync_all, Guard, State};

use crate::backend::{DevicePtr, GpuBackend, KernelArg, ModuleCode};
use crate::trace::*;
use rustc_hash::FxHashMap as HashMap;
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
    /// For a trace of one rank of a rank set replayed together (`replay_ranks`): the unique
    /// id each recorded communicator is joined under now, the same for every rank's replay.
    /// Without it only a one-rank communicator replays.
    pub comms:
        std::collections::HashMap<crate::backend::CommUniqueId, crate::backend::CommUniqueId>,
    /// Calls not issued, by seq, each with why (the report names the first 8 and counts the
    /// rest): a rank's collectives made before another rank's flight dump begins, which no
    /// rank of the replay can meet (`replay_ranks`).
    pub skip: std::collections::BTreeMap<u64, String>,
    /// Stop this process just before issuing this launch, for the debugger running it
    /// (`replay --debug --break-at N`: `debugger::stop_before`).
    pub break_before: Option<u64>,
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
            comms: Default::default(),
            skip: Default::default(),
            break_before: None,
        }
    }
}

/// How the replay gets the trace's kernels onto its backend. The default asks the backend by
/// name (kernels registered on a mock, or modules a CUDA backend already loaded).
pub type ModuleLoader<'a> = &'a dyn Fn(&ModuleCode) -> anyhow::Result<()>;

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
    /// Raw launches recorded without their arguments (seq -> how many there were).
    args_missing: HashMap<u64, u32>,
}

/// Host memory a replay may allocate for one call by default (`with_max_memory`).
pub const DEFAULT_MAX_HOST_BYTES: u64 = 8 << 30;

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
            args_missing: trace
                .findings
                .iter()
                .filter_map(|f| match f {
                    Finding::ArgsNotRecorded { seq, params } => Some((*seq, *params)),
                    Finding::RetainedSourceChanged { .. } | Finding::Sanitizer { .. } => None,
                })
                .collect(),
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

    /// The kernels the trace launches that `gpu` cannot run (no CPU body on the mock, no code
    /// it can load), `module::name`, sorted: what a replay there would skip.
    pub fn kernels_it_cannot_run(&self, gpu: &dyn GpuBackend) -> Result<Vec<String>, ReplayError> {
        let (_, opaque) = self.kernels_with(gpu, None, true)?;
        let launched: std::collections::BTreeSet<String> = self
            .trace
            .calls
            .iter()
            .filter_map(|c| c.call.launch().map(|(k, _)| k))
            .filter(|k| opaque.contains(k))
            .map(|k| self.trace.kernel_name(k))
            .collect();
        Ok(launched.into_iter().collect())
    }

    /// Where the trace's recorded faults may have been raised.
    pub fn windows(&self) -> &[FaultWindow] {
        &self.windows
    }

    /// Device addresses the trace hides inside buffer contents.
    pub fn hidden(&self) -> &[HiddenPointer] {
        &self.hidden
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
            dump_reason: self.trace.dump.as_ref().map(|d| d.reason.clone()),
            opaque_kernels: {
                let mut v: Vec<String> = kernels
                    .1
                    .iter()
                    .map(|k| self.trace.kernel_name(*k))
                    .collect();
                v.sort();
                v
            },
            opaque_calls: opaque_calls(self.trace, a, stop),
            skipped: opts.skip.values().take(8).cloned().collect(),
            skipped_count: opts.skip.len(),
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
        guard.st.comm_ids = opts.comms.iter().map(|(k, v)| (*k, *v)).collect();
        for lp in 0..report.loops {
            let tr = Instant::now();
            if lp == 0 {
                self.setup(gpu, &mut guard.st)?;
            } else {
                self.restore(gpu, &mut guard.st)?;
            }
            report.restore_ms.push(tr.elapsed().as_secs_f64() * 1e3);
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
                if opts.skip.contains_key(&c.seq) {
                    continue;
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
                if opts.break_before == Some(c.seq) && lp == 0 {
                    debugger::stop_before(self.trace, st, c);
                }
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
                    for d in args.iter().flat_map(Arg::device_addrs) {
                        if let DevAddr::Buf { buf, .. } = d {
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
                            WindowKind::Error => match (w.code, replayed_code) {
                                (None, _) => true,
                                (Some(a), Some(b)) => crate::backend::same_fault(a, b),
                                (Some(_), None) => false,
                            },
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
                            if !f.reproduced {
                                if let Some(k) = w.and_then(|w| self.skipped_in(st, w)) {
                                    f.replayed = Some(format!(
                                        "not checked: a launch that may have raised it ({k}) cannot run on this backend"
                                    ));
                                }
                            }
                            report.faults.push(f);
                        }
                    }
                }
            }
            let unchecked = std::mem::take(&mut guard.st.unchecked);
            let failed_unrun = std::mem::take(&mut guard.st.failed_unrun);
            let unrecorded = std::mem::take(&mut guard.st.unrecorded_args);
            if lp == 0 {
                report.not_checked = unrecorded
                    .into_iter()
                    .map(|(seq, k, n)| {
                        format!(
                            "call #{seq}: launch of {} not run: its {n} argument(s) were not recorded (the recording backend gave no parameter layout; implement GpuBackend::kernel_params)",
                            self.trace.kernel_name(k)
                        )
                    })
                    .collect();
                report
                    .not_checked
                    .extend(failed_unrun.into_iter().map(|(seq, k)| {
                        let err = self
                            .by_seq
                            .get(&seq)
                            .map_or_else(|| "an error".into(), |c| crate::trace::ret_text(&c.ret));
                        format!(
                        "call #{seq}: launch of {} recorded {err}, but this backend cannot run it",
                        self.trace.kernel_name(k)
                    )
                    }));
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
        report.seen = std::mem::take(&mut guard.st.seen);
        drop(guard);
        Ok(report)
    }
}

impl Replayer<'_> {
    /// The first launch in `w` of a kernel this replay skips, by name: the recorded fault may
    /// be its, so not reproducing it proves nothing.
    fn skipped_in(&self, st: &State, w: FaultWindow) -> Option<String> {
        (w.start..=w.observed).find_map(|seq| {
            let (k, _) = self.by_seq.get(&seq)?.call.launch()?;
            st.opaque.contains(&k).then(|| self.trace.kernel_name(k))
        })
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

/// The driver calls of calls `a..stop` that were not understood when recorded
/// (`Call::Opaque`): each name, how many, and the first.
fn opaque_calls(t: &Trace, a: u64, stop: u64) -> Vec<String> {
    let mut by_name: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for c in t.calls.iter().filter(|c| (a..stop).contains(&c.seq)) {
        if let Call::Opaque { name } = &c.call {
            by_name.entry(name).or_insert((0, c.seq)).0 += 1;
        }
    }
    by_name
        .into_iter()
        .map(|(n, (k, first))| format!("{n} x{k} (first #{first})"))
        .collect()
}
