//! The mock's state, in a room of its own because every other room reads and changes it:
//! how the mock presents itself (`MockConfig`), what it holds (`State`: memory, streams,
//! events, graphs, captures, kernels, call counts, faults), how a fresh one is built, and the
//! checks every call makes first (a dead context, an injected failure, a known stream).

use super::capture::{Capture, EventState};
use super::chaos::{Chaos, POISON};
use super::exec::Work;
use super::kernel::MockKernel;
use super::memory::Memory;
use super::{MockError, MockGpuBackend, SiteTotal, R};
use crate::backend::{
    CallKind, CaptureMode, KernelRegistry, OpCache, Site, StreamKind, LEGACY_STREAM,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// How the mock presents itself.
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// Device memory size; `alloc` beyond it fails with out-of-memory.
    pub total_memory: usize,
    pub sm_count: u32,
    /// The mode `begin_capture` uses.
    pub capture_mode: CaptureMode,
    /// The kind of every stream this backend creates, the default stream included.
    pub stream_kind: StreamKind,
    /// Report a kernel's fault at its launch. Off (the default), the mock behaves as the driver
    /// does without a sync after each launch: the launch succeeds, the fault surfaces at the
    /// next call that waits (a sync, a blocking copy, a free), and from then on every call
    /// fails with it.
    pub debug_sync_kernels: bool,
    /// Chaos mode, with its seed (`None`, the default: work runs at submission, in call order,
    /// on zero-filled memory). With a seed, work on streams other than the legacy one is
    /// queued and run when a wait forces it or the seeded RNG picks it, in any order the
    /// recorded dependencies allow, and fresh device memory holds `POISON` until written
    /// (see `mock/chaos.rs`). The same seed and calls give the same schedule.
    pub chaos: Option<u64>,
    /// Launches are checked (arguments, pointers) but their CPU bodies are not run, so a
    /// launch costs what a driver's enqueue does rather than the kernel's arithmetic: the
    /// recorder's own cost per step (`benches/flight_steps.rs`'s floor) is measured over it.
    /// Results are whatever memory held.
    pub skip_kernel_bodies: bool,
    /// How long a collective waits for the other ranks before it fails naming those that
    /// never came (`mock/comm.rs`; `GPUTAPE_MOCK_COMM_TIMEOUT_S` over the default, 10 s).
    pub comm_timeout: std::time::Duration,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            total_memory: 16 << 30,
            sm_count: 132,
            capture_mode: CaptureMode::Global,
            stream_kind: StreamKind::Blocking,
            debug_sync_kernels: false,
            chaos: None,
            skip_kernel_bodies: false,
            comm_timeout: std::env::var("GPUTAPE_MOCK_COMM_TIMEOUT_S")
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| *s > 0.0 && s.is_finite())
                .map_or(
                    std::time::Duration::from_secs(10),
                    std::time::Duration::from_secs_f64,
                ),
        }
    }
}

pub(crate) struct State {
    pub mem: Memory,
    pub streams: BTreeMap<u64, StreamKind>,
    /// Work items issued per stream inside captures, to tell whether a fork was joined.
    pub stream_ops: HashMap<u64, usize>,
    pub next_stream: u64,
    pub events: BTreeMap<u64, EventState>,
    pub next_event: u64,
    pub graphs: BTreeMap<u64, Vec<Work>>,
    pub next_graph: u64,
    pub captures: Vec<Capture>,
    /// Calls made while some stream captured that were not captured into it (name and
    /// site): what a tool wrapped around an engine must never do on its own behalf.
    pub beside_captures: Vec<(&'static str, Site)>,
    pub kernels: Vec<MockKernel>,
    pub calls: HashMap<CallKind, usize>,
    pub fail_at: HashMap<CallKind, usize>,
    pub last_sweep: Vec<SiteTotal>,
    /// The line the last sweep logged, if it found anything.
    pub last_sweep_line: Option<String>,
    /// Kernel faults are raised at the launch and observed at the next call that waits, as on
    /// CUDA without a sync after each launch (`MockConfig::debug_sync_kernels` off).
    pub async_faults: bool,
    /// `MockConfig::skip_kernel_bodies`.
    pub skip_bodies: bool,
    /// A kernel fault raised and not yet observed: the device stopped there, so later work does
    /// not run, and the next call that waits reports it.
    pub raised: Option<MockError>,
    /// A fault that was observed: the context is dead and every call fails with it.
    pub dead: Option<MockError>,
    /// The chaos scheduler's queues and RNG, when `MockConfig::chaos` is set.
    pub chaos: Option<Chaos>,
    /// What the mock did, when `MockGpuBackend::log_execution` asked for it.
    pub exec_log: Option<super::exec_log::ExecLog>,
    /// Under chaos with the log on: events recorded on a stream whose queue has not reached
    /// them yet, as (stream, its mark, event).
    pub records_due: Vec<(u64, u64, u64)>,
}

impl State {
    /// Log what `e` makes, if the log is on (built only then).
    pub fn log(&mut self, e: impl FnOnce() -> super::exec_log::Executed) {
        if let Some(l) = self.exec_log.as_mut() {
            l.push(e());
        }
    }
}

/// Calls that wait for the device's earlier work, and so report a fault it raised (as CUDA's
/// synchronous copies, frees and syncs do).
fn waits_for_device(kind: CallKind) -> bool {
    use CallKind::*;
    matches!(
        kind,
        Synchronize
            | EventSynchronize
            | CopyH2D
            | CopyD2H
            | CopyD2D
            | Memset
            | CopyD2HOnStream
            | Free
            | FreeHostPinned
    )
}

impl Default for MockGpuBackend {
    fn default() -> Self {
        Self::new(MockConfig::default())
    }
}

impl MockGpuBackend {
    pub fn new(cfg: MockConfig) -> Self {
        let mut streams = BTreeMap::new();
        streams.insert(LEGACY_STREAM, StreamKind::Blocking);
        streams.insert(1, cfg.stream_kind);
        let mut mem = Memory::new();
        if cfg.chaos.is_some() {
            mem.fill = POISON;
        }
        MockGpuBackend {
            state: Mutex::new(State {
                mem,
                streams,
                stream_ops: HashMap::new(),
                next_stream: 2,
                events: BTreeMap::new(),
                next_event: 1,
                graphs: BTreeMap::new(),
                next_graph: 1,
                captures: Vec::new(),
                beside_captures: Vec::new(),
                kernels: Vec::new(),
                calls: HashMap::new(),
                fail_at: HashMap::new(),
                last_sweep: Vec::new(),
                last_sweep_line: None,
                async_faults: !cfg.debug_sync_kernels,
                skip_bodies: cfg.skip_kernel_bodies,
                raised: None,
                dead: None,
                chaos: cfg.chaos.map(Chaos::new),
                exec_log: None,
                records_due: Vec::new(),
            }),
            registry: Arc::new(KernelRegistry::new()),
            op_cache: OpCache::new(),
            default_stream: 1,
            comms: Mutex::new(Default::default()),
            cfg,
        }
    }

    pub(super) fn tick(st: &mut State, kind: CallKind, site: Site) -> R<()> {
        let sticky = |first: &MockError, observed| MockError::Sticky {
            op: kind.name(),
            site,
            observed,
            first: Box::new(first.clone()),
        };
        if let Some(first) = &st.dead {
            return Err(sticky(first, false));
        }
        if waits_for_device(kind) {
            if st.raised.as_ref().is_some_and(MockError::is_hang) {
                // Waiting for a kernel that never finishes: this call never returns, as on
                // the driver. The state's lock stays held, as a hung device holds everything
                // queued behind it.
                loop {
                    std::thread::park();
                }
            }
            if let Some(first) = st.raised.take() {
                let e = sticky(&first, true);
                st.dead = Some(first);
                return Err(e);
            }
        }
        let n = st.calls.entry(kind).or_insert(0);
        *n += 1;
        if st.fail_at.get(&kind) == Some(n) {
            st.fail_at.remove(&kind);
            return Err(MockError::Injected { kind, n: *n, site });
        }
        Ok(())
    }

    pub(super) fn check_stream(st: &State, stream: u64, op: &'static str, site: Site) -> R<()> {
        if st.streams.contains_key(&stream) {
            Ok(())
        } else {
            Err(MockError::UnknownHandle {
                op,
                what: "stream",
                id: stream,
                site,
            })
        }
    }
}
