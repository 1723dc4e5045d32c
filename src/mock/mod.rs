//! `MockGpuBackend`: the trait on host memory, behaving like the driver.
//!
//! Every CPU-only test and CI snapshot runs here, so the mock is strict where CUDA is silent:
//! every copy, memset and pointer argument is bounds-checked against the exact allocation, freed
//! addresses are never reused (so a use-after-free is always caught), and capture is emulated from
//! the same rule table the offline analysis uses. Work executes at enqueue time, in call order,
//! which is one legal schedule of the stream semantics; races are the analysis's business.

mod backend;
mod error;
mod kernel;
mod memory;

pub use crate::backend::ledger::SiteTotal;
pub use error::{AllocDesc, MockError};
pub use kernel::{KernelBody, KernelCtx};
pub use memory::{ALIGN, BASE_ADDR};

use crate::backend::ledger::by_site;

use crate::backend::{
    decide, CallKind, CaptureContext, CaptureMode, CaptureOp, DevicePtr, GpuBackend, GraphHandle,
    KernelArg, KernelHandle, KernelInfo, KernelRegistry, ModuleCode, OpCache, ParamAccess,
    ParamInfo, Relation, Site, StreamKind, Verdict, LEGACY_STREAM,
};
use kernel::MockKernel;
use memory::Memory;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::c_void;
use std::panic::Location;
use std::sync::Arc;
use std::thread::ThreadId;

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
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            total_memory: 16 << 30,
            sm_count: 132,
            capture_mode: CaptureMode::Global,
            stream_kind: StreamKind::Blocking,
            debug_sync_kernels: false,
        }
    }
}

/// A unit of device work, executed now or kept in a graph to execute at launch.
#[derive(Clone)]
enum Work {
    Launch {
        kernel: usize,
        grid: [u32; 3],
        block: [u32; 3],
        args: Vec<Vec<u8>>,
    },
    /// Host-to-device copy. A source inside a pinned region is read when the work runs (as a
    /// graph's memcpy node reads at launch); any other source was copied at enqueue time.
    H2D {
        dst: u64,
        src: HostSrc,
    },
    D2H {
        src: u64,
        dst: usize,
        len: usize,
    },
    D2D {
        src: u64,
        dst: u64,
        len: usize,
    },
    Memset {
        dst: u64,
        value: u8,
        len: usize,
    },
    Graph(u64),
}

#[derive(Clone)]
enum HostSrc {
    Pinned { addr: usize, len: usize },
    Copied(Vec<u8>),
}

struct Capture {
    origin: u64,
    streams: BTreeSet<u64>,
    /// Streams that forked into the capture and have not been joined back into the origin.
    unjoined: BTreeSet<u64>,
    mode: CaptureMode,
    kind: StreamKind,
    thread: ThreadId,
    work: Vec<Work>,
    invalidated: Option<(u32, &'static str)>,
}

#[derive(Default, Clone, Copy)]
struct EventState {
    /// The capture (by origin stream) and stream it was last recorded in, if recorded in one.
    in_capture: Option<(u64, u64, usize)>,
}

struct State {
    mem: Memory,
    streams: BTreeMap<u64, StreamKind>,
    /// Work items issued per stream inside captures, to tell whether a fork was joined.
    stream_ops: HashMap<u64, usize>,
    next_stream: u64,
    events: BTreeMap<u64, EventState>,
    next_event: u64,
    graphs: BTreeMap<u64, Vec<Work>>,
    next_graph: u64,
    captures: Vec<Capture>,
    kernels: Vec<MockKernel>,
    calls: HashMap<CallKind, usize>,
    fail_at: HashMap<CallKind, usize>,
    last_sweep: Vec<SiteTotal>,
    /// The line the last sweep logged, if it found anything.
    last_sweep_line: Option<String>,
    /// Kernel faults are raised at the launch and observed at the next call that waits, as on
    /// CUDA without a sync after each launch (`MockConfig::debug_sync_kernels` off).
    async_faults: bool,
    /// A kernel fault raised and not yet observed: the device stopped there, so later work does
    /// not run, and the next call that waits reports it.
    raised: Option<MockError>,
    /// A fault that was observed: the context is dead and every call fails with it.
    dead: Option<MockError>,
}

/// The mock backend. See the module docs.
pub struct MockGpuBackend {
    cfg: MockConfig,
    state: Mutex<State>,
    registry: Arc<KernelRegistry>,
    op_cache: OpCache,
    default_stream: u64,
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

#[track_caller]
fn here() -> Site {
    Location::caller()
}

type R<T> = Result<T, MockError>;

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
        MockGpuBackend {
            state: Mutex::new(State {
                mem: Memory::new(),
                streams,
                stream_ops: HashMap::new(),
                next_stream: 2,
                events: BTreeMap::new(),
                next_event: 1,
                graphs: BTreeMap::new(),
                next_graph: 1,
                captures: Vec::new(),
                kernels: Vec::new(),
                calls: HashMap::new(),
                fail_at: HashMap::new(),
                last_sweep: Vec::new(),
                last_sweep_line: None,
                async_faults: !cfg.debug_sync_kernels,
                raised: None,
                dead: None,
            }),
            registry: Arc::new(KernelRegistry::new()),
            op_cache: OpCache::new(),
            default_stream: 1,
            cfg,
        }
    }

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
        Ok(DevicePtr(st.mem.alloc_at(addr, bytes, site)?))
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

    fn tick(st: &mut State, kind: CallKind, site: Site) -> R<()> {
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

    fn check_stream(st: &State, stream: u64, op: &'static str, site: Site) -> R<()> {
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

    /// Judge `op` on `stream` (or on no stream) against every active capture. Returns the
    /// index of the capture the call belongs to when it is captured or joins one.
    fn judge(
        st: &mut State,
        op: CaptureOp,
        stream: Option<u64>,
        name: &'static str,
        site: Site,
    ) -> R<Option<usize>> {
        let me = std::thread::current().id();
        let mut into = None;
        for i in 0..st.captures.len() {
            let c = &st.captures[i];
            let relation = match stream {
                None => Relation::NoStream,
                Some(s) if c.streams.contains(&s) => Relation::Capturing,
                Some(LEGACY_STREAM) => Relation::Legacy,
                Some(_) => Relation::Other,
            };
            if relation == Relation::Capturing {
                if let Some((_, _)) = c.invalidated {
                    return Err(MockError::Capture {
                        op: name,
                        site,
                        code: crate::backend::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                        rule: "capture-invalidated",
                        why: "an earlier call invalidated this capture",
                    });
                }
            }
            let ctx = CaptureContext {
                relation,
                kind: c.kind,
                mode: c.mode,
                same_thread: c.thread == me,
            };
            let rule = decide(op, ctx);
            match rule.verdict {
                Verdict::Captured | Verdict::Joins => into = Some(i),
                Verdict::Eager | Verdict::Host => {}
                Verdict::Fails { code, invalidates } => {
                    if invalidates {
                        st.captures[i].invalidated = Some((code, rule.id));
                    }
                    return Err(MockError::Capture {
                        op: name,
                        site,
                        code,
                        rule: rule.id,
                        why: rule.why,
                    });
                }
            }
        }
        Ok(into)
    }

    /// Enqueue device work on `stream`: captured into a graph, or executed now.
    fn submit(
        st: &mut State,
        op: CaptureOp,
        stream: u64,
        work: Work,
        name: &'static str,
        site: Site,
    ) -> R<()> {
        Self::check_stream(st, stream, name, site)?;
        match Self::judge(st, op, Some(stream), name, site)? {
            Some(ci) => {
                // Validate now, as the driver validates a node's pointers when it is added.
                Self::validate(st, &work, name, site)?;
                st.captures[ci].work.push(work);
                Self::note_capture_op(st, ci, stream);
                Ok(())
            }
            None => Self::exec(st, &work, name, site),
        }
    }

    fn note_capture_op(st: &mut State, ci: usize, stream: u64) {
        *st.stream_ops.entry(stream).or_insert(0) += 1;
        let c = &mut st.captures[ci];
        if stream != c.origin {
            c.unjoined.insert(stream);
        }
    }

    fn validate(st: &State, work: &Work, name: &'static str, site: Site) -> R<()> {
        match work {
            Work::H2D { dst, src } => {
                let len = match src {
                    HostSrc::Pinned { len, .. } => *len,
                    HostSrc::Copied(v) => v.len(),
                };
                st.mem.locate(*dst, len, name, site).map(|_| ())
            }
            Work::D2H { src, len, .. } => st.mem.locate(*src, *len, name, site).map(|_| ()),
            Work::D2D { src, dst, len } => {
                st.mem.locate(*src, *len, name, site)?;
                st.mem.locate(*dst, *len, name, site).map(|_| ())
            }
            Work::Memset { dst, len, .. } => st.mem.locate(*dst, *len, name, site).map(|_| ()),
            Work::Launch { .. } | Work::Graph(_) => Ok(()),
        }
    }

    fn exec(st: &mut State, work: &Work, name: &'static str, site: Site) -> R<()> {
        if st.raised.is_some() {
            // The device stopped at a faulting kernel: nothing queued after it runs.
            return Ok(());
        }
        match work {
            Work::H2D { dst, src } => match src {
                HostSrc::Copied(v) => {
                    st.mem.write(*dst, v.len(), name, site)?.copy_from_slice(v);
                }
                HostSrc::Pinned { addr, len } => {
                    if st.mem.pinned_containing(*addr, *len).is_none() {
                        return Err(MockError::Invalid {
                            op: name,
                            site,
                            detail: format!(
                                "host source {addr:#x} (+{len}) is no longer a live pinned region"
                            ),
                        });
                    }
                    // SAFETY: the range lies inside a live pinned region owned by this mock
                    // (checked just above, under the state lock that guards frees).
                    let bytes = unsafe { std::slice::from_raw_parts(*addr as *const u8, *len) };
                    st.mem.write(*dst, *len, name, site)?.copy_from_slice(bytes);
                }
            },
            Work::D2H { src, dst, len } => {
                let bytes = st.mem.read(*src, *len, name, site)?;
                // SAFETY: `dst` is either the caller's live `&mut [u8]` (eager execution,
                // during the call that lent it) or, for a graph, a range that was inside a
                // pinned region at capture time; graph launches re-check it below.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), *dst as *mut u8, *len) };
            }
            Work::D2D { src, dst, len } => st.mem.copy_within(*src, *dst, *len, name, site)?,
            Work::Memset { dst, value, len } => st.mem.write(*dst, *len, name, site)?.fill(*value),
            Work::Launch {
                kernel,
                grid,
                block,
                args,
            } => match Self::run_kernel(st, *kernel, *grid, *block, args, site) {
                Err(e) if crate::backend::is_sticky(e.cuda_code()) => {
                    if st.async_faults {
                        // The launch went through; the fault shows at the next call that waits.
                        st.raised = Some(e);
                    } else {
                        st.dead = Some(e.clone());
                        return Err(e);
                    }
                }
                r => r?,
            },
            Work::Graph(g) => {
                let Some(work) = st.graphs.get(g).cloned() else {
                    return Err(MockError::UnknownHandle {
                        op: name,
                        what: "graph",
                        id: *g,
                        site,
                    });
                };
                for w in &work {
                    if let Work::D2H { dst, len, .. } = w {
                        if st.mem.pinned_containing(*dst, *len).is_none() {
                            // A graph writing into pageable or freed host memory: the driver
                            // would scribble there; the mock refuses.
                            return Err(MockError::Invalid {
                                op: name,
                                site,
                                detail: format!(
                                    "graph {g} copies into host {dst:#x} (+{len}), which is not a live pinned region"
                                ),
                            });
                        }
                    }
                    Self::exec(st, w, name, site)?;
                }
            }
        }
        Ok(())
    }

    fn run_kernel(
        st: &mut State,
        k: usize,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[Vec<u8>],
        site: Site,
    ) -> R<()> {
        let (info, body) = {
            let mk = &st.kernels[k];
            (mk.info.clone(), mk.body.clone())
        };
        let kname = || format!("{}::{}", info.module, info.name);
        for (i, p) in info.params.iter().enumerate() {
            if p.size != 8 {
                continue;
            }
            let v = u64::from_le_bytes(args[i][..8].try_into().expect("8"));
            let res = if p.access.is_pointer() {
                st.mem.check_pointer(v, "kernel pointer argument", site)
            } else if p.access == ParamAccess::Unknown && v != 0 {
                // An undeclared 8-byte value: only a pointer into freed memory is certainly wrong.
                match st.mem.check_pointer(v, "kernel pointer argument", site) {
                    Err(e @ MockError::UseAfterFree { .. }) => Err(e),
                    _ => Ok(()),
                }
            } else {
                Ok(())
            };
            res.map_err(|e| MockError::InKernel {
                kernel: format!("{} (argument {i})", kname()),
                site,
                cause: Box::new(e),
            })?;
        }
        if let Some(body) = body {
            let name = kname();
            let mut ctx = KernelCtx {
                mem: &mut st.mem,
                args,
                grid,
                block,
                site,
                name: &name,
            };
            body(&mut ctx).map_err(|e| MockError::InKernel {
                kernel: name.clone(),
                site,
                cause: Box::new(kernel::fault_to_mock(e, &name, site)),
            })?;
        }
        Ok(())
    }

    fn kernel_index(st: &State, func: KernelHandle, op: &'static str, site: Site) -> R<usize> {
        let i = func.0.wrapping_sub(1) as usize;
        if i < st.kernels.len() {
            Ok(i)
        } else {
            Err(MockError::BadKernelHandle {
                op,
                site,
                handle: func.0,
            })
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_args(
        st: &mut State,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        stream: u64,
        args: Vec<Vec<u8>>,
        op: &'static str,
        site: Site,
    ) -> R<()> {
        let kernel = Self::kernel_index(st, func, op, site)?;
        Self::submit(
            st,
            CaptureOp::StreamWork,
            stream,
            Work::Launch {
                kernel,
                grid,
                block,
                args,
            },
            op,
            site,
        )
    }

    fn sync_copy(st: &mut State, work: Work, name: &'static str, site: Site) -> R<()> {
        Self::judge(st, CaptureOp::SyncCopy, Some(LEGACY_STREAM), name, site)?;
        Self::exec(st, &work, name, site)
    }

    fn end_capture_inner(&self, stream: u64, site: Site) -> R<GraphHandle> {
        let mut st = self.state.lock();
        Self::tick(&mut st, CallKind::EndCapture, site)?;
        Self::check_stream(&st, stream, "end_capture", site)?;
        let Some(ci) = st.captures.iter().position(|c| c.origin == stream) else {
            if !st.captures.iter().any(|c| c.streams.contains(&stream)) {
                // Not a capturing stream: judged against the running captures first (the
                // legacy stream kills a blocking one), then refused on its own account.
                Self::judge(
                    &mut st,
                    CaptureOp::EndCapture,
                    Some(stream),
                    "end_capture",
                    site,
                )?;
            }
            if st.captures.iter().any(|c| c.streams.contains(&stream)) {
                return Err(MockError::Capture {
                    op: "end_capture",
                    site,
                    code: 903,
                    rule: "end-on-forked-stream",
                    why: "a capture must end on the stream that began it",
                });
            }
            let relation = if stream == LEGACY_STREAM {
                Relation::Legacy
            } else {
                Relation::Other
            };
            let rule = decide(
                CaptureOp::EndCapture,
                CaptureContext {
                    relation,
                    kind: self.cfg.stream_kind,
                    mode: self.cfg.capture_mode,
                    same_thread: true,
                },
            );
            return Err(capture_err("end_capture", site, rule));
        };
        let c = st.captures.remove(ci);
        for e in st.events.values_mut() {
            if e.in_capture.is_some_and(|(o, _, _)| o == c.origin) {
                e.in_capture = None;
            }
        }
        if let Some((code, rule)) = c.invalidated {
            return Err(MockError::Capture {
                op: "end_capture",
                site,
                code: crate::backend::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                rule,
                why: if code == crate::backend::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED {
                    "the capture was invalidated"
                } else {
                    "an earlier call inside the capture failed and invalidated it"
                },
            });
        }
        if !c.unjoined.is_empty() {
            return Err(MockError::Capture {
                op: "end_capture",
                site,
                code: crate::backend::CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
                rule: "end-unjoined",
                why:
                    "a stream forked into the capture was never joined back into the origin stream",
            });
        }
        let g = st.next_graph;
        st.next_graph += 1;
        st.graphs.insert(g, c.work);
        Ok(GraphHandle(g))
    }
}

fn capture_err(
    op: &'static str,
    site: Site,
    rule: &'static crate::backend::CaptureRule,
) -> MockError {
    match rule.verdict {
        Verdict::Fails { code, .. } => MockError::Capture {
            op,
            site,
            code,
            rule: rule.id,
            why: rule.why,
        },
        _ => MockError::Invalid {
            op,
            site,
            detail: format!("rule {} does not fail", rule.id),
        },
    }
}
