//! `MockGpuBackend`: the trait on host memory, behaving like the driver.
//!
//! Every CPU-only test and CI snapshot runs here, so the mock is strict where CUDA is silent:
//! every copy, memset and pointer argument is bounds-checked against the exact allocation, freed
//! addresses are never reused (so a use-after-free is always caught), and capture is emulated from
//! the same rule table the offline analysis uses. Work executes at enqueue time, in call order,
//! which is one legal schedule of the stream semantics; races are the analysis's business.
//! Unless `MockConfig::chaos` is set: then streams run deferred and out of order, as far as
//! events and syncs allow, and fresh memory is poisoned (`chaos.rs`), so a missing dependency
//! or a read of memory nobody wrote changes the numbers.

/// A `MockError` result as the trait's `anyhow` one (through `DeviceError`, as every backend's
/// failures travel). Defined before the rooms so that each of them sees it.
macro_rules! mock_try {
    ($e:expr) => {
        $e.map_err(|e: MockError| anyhow::Error::from(crate::backend::DeviceError::from(e)))
    };
}

mod alloc;
mod backend;
mod capture;
mod chaos;
mod comm;
mod copy;
mod error;
mod exec;
mod exec_log;
mod kernel;
mod launch;
mod memory;
mod state;
mod stream;

pub use crate::backend::ledger::SiteTotal;
pub use chaos::POISON;
pub use error::{AllocDesc, MockError};
pub use exec_log::{Executed, Ran};
pub use kernel::{KernelBody, KernelCtx};
pub use memory::{ALIGN, BASE_ADDR};
pub use state::MockConfig;

use crate::backend::ledger::by_site;

use crate::backend::{
    decide, CallKind, CaptureContext, CaptureOp, DevicePtr, GpuBackend, GraphHandle, KernelArg,
    KernelHandle, KernelInfo, KernelRegistry, ModuleCode, OpCache, ParamInfo, Relation, Site,
    Verdict, LEGACY_STREAM,
};
use capture::{capture_err, Capture, EventState};
use chaos::Until;
use exec::{HostSrc, Work};
use kernel::MockKernel;
use parking_lot::Mutex;
use state::State;
use std::collections::BTreeSet;
use std::ffi::c_void;
use std::panic::Location;
use std::sync::Arc;

/// The mock backend. See the module docs.
pub struct MockGpuBackend {
    cfg: MockConfig,
    state: Mutex<State>,
    registry: Arc<KernelRegistry>,
    op_cache: OpCache,
    default_stream: u64,
    /// Communicators this rank has joined (`comm.rs`).
    comms: Mutex<comm::Comms>,
}

#[track_caller]
fn here() -> Site {
    Location::caller()
}

type R<T> = Result<T, MockError>;

impl MockGpuBackend {
    pub fn config(&self) -> &MockConfig {
        &self.cfg
    }

    /// Register a kernel: its layout, and optionally a CPU body. Without a body a launch is a
    /// no-op that still checks its pointer arguments.
    pub fn register_kernel(
        &self,
        module: &str,
        name: &str,
        params: Vec<ParamInfo>,
        body: Option<KernelBody>,
    ) -> KernelHandle {
        let mut st = self.state.lock();
        let info = KernelInfo {
            module: module.to_string(),
            name: name.to_string(),
            params,
            elems: Vec::new(),
        };
        if self.registry.module(module).is_none() {
            self.registry.add_module(ModuleCode {
                name: module.to_string(),
                ..Default::default()
            });
        }
        let handle = match st
            .kernels
            .iter()
            .position(|k| k.info.module == module && k.info.name == name)
        {
            Some(i) => {
                st.kernels[i] = MockKernel {
                    info: Arc::new(info.clone()),
                    body,
                };
                KernelHandle(i as u64 + 1)
            }
            None => {
                st.kernels.push(MockKernel {
                    info: Arc::new(info.clone()),
                    body,
                });
                KernelHandle(st.kernels.len() as u64)
            }
        };
        self.registry.add_kernel(handle, info);
        handle
    }

    /// Attach source text to a module, so a recorder embeds it.
    pub fn set_module_code(&self, code: ModuleCode) {
        self.registry.add_module(code);
    }

    /// The calls made so far while a stream captured that were not captured into it (a sync,
    /// a readback, an allocation, work on another stream), by name and site, oldest first
    /// (the first 4096). A recorder or any other layer between an engine and its GPU can be
    /// checked to add none of its own.
    pub fn calls_beside_captures(&self) -> Vec<(&'static str, Site)> {
        self.state.lock().beside_captures.clone()
    }

    /// Calls of `kind` made so far, the failed ones included: a layer between an engine and
    /// its GPU (a recorder) can be checked to add none of a kind to what the engine makes.
    pub fn calls_of(&self, kind: CallKind) -> usize {
        self.state.lock().calls.get(&kind).copied().unwrap_or(0)
    }

    /// Make the `n`-th call (1-based, counted from now) of `kind` fail before it changes
    /// anything.
    pub fn fail_nth(&self, kind: CallKind, n: usize) {
        let mut st = self.state.lock();
        let seen = st.calls.get(&kind).copied().unwrap_or(0);
        st.fail_at.insert(kind, seen + n);
    }

    /// Allocate `bytes` at exactly `addr` (for replays that must put buffers where they were
    /// recorded). Fails if the range overlaps a live allocation.
    #[track_caller]
    pub fn alloc_at(&self, addr: u64, bytes: usize) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        let base = st.mem.alloc_at(addr, bytes, site)?;
        st.log(|| Executed::Alloc { base, size: bytes });
        Ok(DevicePtr(base))
    }

    /// Start (or restart, emptied) the log of what this mock does: `execution_log` returns it.
    pub fn log_execution(&self) {
        let mut st = self.state.lock();
        st.exec_log = Some(Default::default());
        st.records_due.clear();
    }

    /// What this mock did since `log_execution`, in order (empty if it was never asked), and
    /// how many entries past the log's bound were counted and not kept.
    pub fn execution_log(&self) -> (Vec<Executed>, u64) {
        self.state
            .lock()
            .exec_log
            .as_ref()
            .map_or((Vec::new(), 0), |l| (l.entries.clone(), l.dropped))
    }

    /// Work queued by the chaos scheduler and not run yet, on every stream (the items a wait
    /// would run: launches, copies, memsets, event waits, an upload's poisoning); always 0
    /// without `MockConfig::chaos`.
    pub fn chaos_pending(&self) -> usize {
        self.state.lock().chaos.as_ref().map_or(0, |c| c.pending())
    }

    /// The warning the last `sweep_unreleased` logged (`None` when it found nothing): what an
    /// operator reads, kept so tests need not capture the log.
    pub fn last_sweep_line(&self) -> Option<String> {
        self.state.lock().last_sweep_line.clone()
    }

    /// What the last `sweep_unreleased` found, by site, biggest first.
    pub fn last_sweep(&self) -> Vec<SiteTotal> {
        self.state.lock().last_sweep.clone()
    }

    /// Live allocations by site, biggest first.
    pub fn live_by_site(&self) -> Vec<SiteTotal> {
        let st = self.state.lock();
        by_site(
            st.mem
                .allocs
                .values()
                .filter(|a| matches!(a.storage, memory::Storage::Owned(_)))
                .map(|a| (a.site, a.size)),
        )
    }

    /// The allocation containing `ptr`: (base, size, creation index).
    pub fn allocation_of(&self, ptr: DevicePtr) -> Option<(DevicePtr, usize, usize)> {
        let st = self.state.lock();
        let (base, off) = st.mem.locate(ptr.0, 0, "query", here()).ok()?;
        let a = &st.mem.allocs[&base];
        let _ = off;
        Some((DevicePtr(base), a.size, a.index))
    }
}
