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
mod run;
pub mod sanitizer;
pub mod shared;
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
pub use ranks::{aligned, replay_ranks, replay_ranks_sharing, Aligned};
pub use report::{
    replay_json, CallTiming, Culprit, Divergence, FaultReport, ReplayReport, REPLAY_SCHEMA,
};
pub use state::Seen;
pub use views::{written_tensors, WrittenTensor};

use fault::err_code;
use state::{resolve_stream, sync_all, State};

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
    /// For a trace of a set replayed together whose processes shared memory through IPC
    /// handles: this rank's part (`shared::plan`), so that what it opened is the memory
    /// another rank's replay exported.
    pub share: Option<shared::RankShare>,
    /// Kernels the backend cannot run are skipped, and said, rather than refused: what a
    /// replay of compiled GPU code on the mock does (`Replayer::with_opaque_kernels`, for
    /// replays whose `Replayer` is made for them: a rank set's).
    pub opaque_kernels: bool,
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
            share: None,
            opaque_kernels: false,
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

/// The host functions of calls `a..stop` (`Call::HostFunc`), which no replay can run: each
/// function and stream, how many, and the first; and the uploads queued after one on its
/// stream (how many, the first), whose bytes are those recorded when they were queued: a
/// function that wrote their source before the copy ran changed what the device got.
fn host_funcs(t: &Trace, a: u64, stop: u64) -> (Vec<String>, Option<(u64, u64)>) {
    let mut by_func: std::collections::BTreeMap<(&str, String), (u64, u64)> = Default::default();
    let mut after: rustc_hash::FxHashSet<StreamRef> = Default::default();
    let mut uploads: Option<(u64, u64)> = None;
    for c in t.calls.iter().filter(|c| (a..stop).contains(&c.seq)) {
        match &c.call {
            Call::HostFunc { stream, func } => {
                by_func
                    .entry((func, stream.to_string()))
                    .or_insert((0, c.seq))
                    .0 += 1;
                after.insert(*stream);
            }
            Call::CopyH2DAsync { stream, .. } | Call::CopyH2DAsyncRetained { stream, .. }
                if after.contains(stream) =>
            {
                uploads.get_or_insert((0, c.seq)).0 += 1;
            }
            _ => {}
        }
    }
    let funcs = by_func
        .into_iter()
        .map(|((f, s), (k, first))| format!("{f} on {s} x{k} (first #{first})"))
        .collect();
    (funcs, uploads)
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
