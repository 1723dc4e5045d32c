//! `MockGpuBackend`: the trait on host memory, behaving like the driver.
//!
//! Every CPU-only test and CI snapshot runs here, so the mock is strict where CUDA is silent:
//! every copy, memset and pointer argument is bounds-checked against the exact allocation, freed
//! addresses are never reused (so a use-after-free is always caught), and capture is emulated from
//! the same rule table the offline analysis uses. Work executes at enqueue time, in call order,
//! which is one legal schedule of the stream semantics; races are the analysis's business.

mod error;
mod kernel;
mod memory;

pub use crate::backend::ledger::SiteTotal;
pub use error::{AllocDesc, MockError};
pub use kernel::{KernelBody, KernelCtx};
pub use memory::{ALIGN, BASE_ADDR};

use crate::backend::ledger::{by_site, format_sites};

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
                cause: Box::new(e),
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

macro_rules! mock_try {
    ($e:expr) => {
        $e.map_err(|e: MockError| anyhow::Error::from(crate::backend::DeviceError::from(e)))
    };
}

impl GpuBackend for MockGpuBackend {
    #[track_caller]
    fn alloc(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Alloc, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::DeviceAlloc,
            None,
            "alloc",
            site
        ))?;
        if st
            .mem
            .live_bytes
            .checked_add(bytes)
            .is_none_or(|total| total > self.cfg.total_memory)
        {
            return mock_try!(Err(MockError::OutOfMemory {
                op: "alloc",
                site,
                requested: bytes,
                live: st.mem.live_bytes,
                limit: self.cfg.total_memory,
            }));
        }
        Ok(DevicePtr(st.mem.alloc(bytes, site)))
    }

    #[track_caller]
    fn alloc_managed(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::AllocManaged, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::DeviceAlloc,
            None,
            "alloc_managed",
            site
        ))?;
        // Managed memory may oversubscribe the device, up to what the host could back.
        let limit = self.cfg.total_memory.saturating_mul(2);
        if st
            .mem
            .live_bytes
            .checked_add(bytes)
            .is_none_or(|total| total > limit)
        {
            return mock_try!(Err(MockError::OutOfMemory {
                op: "alloc_managed",
                site,
                requested: bytes,
                live: st.mem.live_bytes,
                limit,
            }));
        }
        Ok(DevicePtr(st.mem.alloc(bytes, site)))
    }

    #[track_caller]
    fn free(&self, ptr: DevicePtr) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        if st.dead.is_some() {
            // The driver fails every call on a dead context, frees included, and the memory
            // goes with the context: on a context already dead, the allocation goes.
            let _ = st.mem.free(ptr.0, site);
        }
        mock_try!(Self::tick(&mut st, CallKind::Free, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::DeviceFree,
            None,
            "free",
            site
        ))?;
        mock_try!(st.mem.free(ptr.0, site)).map(|_| ())
    }

    #[track_caller]
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyH2D, site))?;
        let work = Work::H2D {
            dst: dst.0,
            src: HostSrc::Copied(src.to_vec()),
        };
        mock_try!(Self::sync_copy(&mut st, work, "copy_h2d", site))
    }

    #[track_caller]
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2H, site))?;
        let work = Work::D2H {
            src: src.0,
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        mock_try!(Self::sync_copy(&mut st, work, "copy_d2h", site))
    }

    #[track_caller]
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2D, site))?;
        let work = Work::D2D {
            src: src.0,
            dst: dst.0,
            len: bytes,
        };
        mock_try!(Self::sync_copy(&mut st, work, "copy_d2d", site))
    }

    #[track_caller]
    fn launch(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        _shared_mem: u32,
        stream: u64,
        params: &mut [*mut c_void],
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Launch, site))?;
        let k = mock_try!(Self::kernel_index(&st, func, "launch", site))?;
        let info = st.kernels[k].info.clone();
        let layout = &info.params;
        if params.len() != layout.len() {
            return mock_try!(Err(MockError::BadParams {
                kernel: format!("{}::{}", st.kernels[k].info.module, st.kernels[k].info.name),
                site,
                detail: format!(
                    "{} params passed, kernel takes {}",
                    params.len(),
                    layout.len()
                ),
            }));
        }
        let args: Vec<Vec<u8>> = params
            .iter()
            .zip(layout.iter())
            .map(|(p, info)| {
                // SAFETY: the launch contract: params[i] points at a value of the kernel's i-th
                // parameter, whose size the registered layout gives.
                unsafe { std::slice::from_raw_parts(*p as *const u8, info.size as usize) }.to_vec()
            })
            .collect();
        mock_try!(Self::launch_args(
            &mut st, func, grid, block, stream, args, "launch", site
        ))?;
        Ok(())
    }

    #[track_caller]
    fn launch_typed(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        _shared_mem: u32,
        stream: u64,
        args: &[KernelArg<'_>],
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::LaunchTyped, site))?;
        let k = mock_try!(Self::kernel_index(&st, func, "launch_typed", site))?;
        let info = st.kernels[k].info.clone();
        let kname = || format!("{}::{}", info.module, info.name);
        if args.len() != info.params.len() {
            return mock_try!(Err(MockError::BadParams {
                kernel: kname(),
                site,
                detail: format!(
                    "{} args passed, kernel takes {}",
                    args.len(),
                    info.params.len()
                ),
            }));
        }
        let mut raw = Vec::with_capacity(args.len());
        for (i, (a, p)) in args.iter().zip(&info.params).enumerate() {
            let bytes = match a {
                KernelArg::Buffer(ptr) => ptr.0.to_le_bytes().to_vec(),
                KernelArg::Bytes(b) => b.to_vec(),
            };
            if bytes.len() != p.size as usize {
                return mock_try!(Err(MockError::BadParams {
                    kernel: kname(),
                    site,
                    detail: format!(
                        "argument {i} is {} bytes, the kernel's parameter is {}",
                        bytes.len(),
                        p.size
                    ),
                }));
            }
            raw.push(bytes);
        }
        mock_try!(Self::launch_args(
            &mut st,
            func,
            grid,
            block,
            stream,
            raw,
            "launch_typed",
            site
        ))
    }

    #[track_caller]
    fn synchronize(&self, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Synchronize, site))?;
        mock_try!(Self::check_stream(&st, stream, "synchronize", site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::StreamSync,
            Some(stream),
            "synchronize",
            site
        ))?;
        Ok(())
    }

    #[track_caller]
    fn default_stream(&self) -> u64 {
        self.default_stream
    }

    #[track_caller]
    fn kernel(&self, module: &str, func_name: &str) -> anyhow::Result<KernelHandle> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Kernel, site))?;
        match st
            .kernels
            .iter()
            .position(|k| k.info.module == module && k.info.name == func_name)
        {
            Some(i) => {
                drop(st);
                self.registry.note_lookup(
                    module,
                    func_name,
                    crate::backend::site_string(site),
                    None,
                );
                Ok(KernelHandle(i as u64 + 1))
            }
            None => {
                let e = MockError::UnknownKernel {
                    module: module.to_string(),
                    func: func_name.to_string(),
                    site,
                };
                drop(st);
                self.registry.note_lookup(
                    module,
                    func_name,
                    crate::backend::site_string(site),
                    Some(e.to_string()),
                );
                mock_try!(Err(e))
            }
        }
    }

    #[track_caller]
    fn op_cache(&self) -> &OpCache {
        &self.op_cache
    }

    #[track_caller]
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Memset, site))?;
        let work = Work::Memset {
            dst: ptr.0,
            value,
            len: bytes,
        };
        mock_try!(Self::sync_copy(&mut st, work, "memset", site))
    }

    #[track_caller]
    fn memset_async(
        &self,
        ptr: DevicePtr,
        value: u8,
        bytes: usize,
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::MemsetAsync, site))?;
        let work = Work::Memset {
            dst: ptr.0,
            value,
            len: bytes,
        };
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::StreamWork,
            stream,
            work,
            "memset_async",
            site
        ))
    }

    #[track_caller]
    fn total_memory(&self) -> anyhow::Result<usize> {
        Ok(self.cfg.total_memory)
    }

    #[track_caller]
    fn free_memory(&self) -> anyhow::Result<usize> {
        Ok(self
            .cfg
            .total_memory
            .saturating_sub(self.state.lock().mem.live_bytes))
    }

    #[track_caller]
    fn sm_count(&self) -> anyhow::Result<u32> {
        Ok(self.cfg.sm_count)
    }

    #[track_caller]
    fn sweep_unreleased(&self) -> usize {
        let site = here();
        let mut st = self.state.lock();
        let live: Vec<(u64, Site, usize)> = st
            .mem
            .allocs
            .iter()
            .filter(|(_, a)| matches!(a.storage, memory::Storage::Owned(_)))
            .map(|(b, a)| (*b, a.site, a.size))
            .collect();
        let rows = by_site(live.iter().map(|(_, s, n)| (*s, *n)));
        if !live.is_empty() {
            // As on CUDA: after a sticky fault the owners' frees failed and the memory goes
            // with the context; one line says so.
            let why = match &st.dead {
                Some(e) => format!(
                    "go with the context, unusable after {} ({})",
                    crate::backend::cuda_error_name(e.cuda_code()),
                    e.cuda_code()
                ),
                None => "had no owner".into(),
            };
            let line = format!(
                "sweep: {} allocation(s), {} bytes, {why}; largest sites: {}",
                live.len(),
                rows.iter().map(|r| r.bytes).sum::<usize>(),
                format_sites(&rows, 5)
            );
            tracing::warn!("{line}");
            st.last_sweep_line = Some(line);
        } else {
            st.last_sweep_line = None;
        }
        for (b, _, _) in &live {
            let _ = st.mem.free(*b, site);
        }
        st.last_sweep = rows;
        live.len()
    }

    #[track_caller]
    fn live_bytes(&self) -> Option<usize> {
        Some(self.state.lock().mem.live_bytes)
    }

    #[track_caller]
    fn alloc_report(&self, top_n: usize, min_mb: usize) -> Option<String> {
        Some(crate::backend::ledger::alloc_report(
            &self.live_by_site(),
            top_n,
            min_mb,
        ))
    }

    #[track_caller]
    fn copy_d2h_on_stream(
        &self,
        src: DevicePtr,
        dst: &mut [u8],
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2HOnStream, site))?;
        mock_try!(Self::check_stream(&st, stream, "copy_d2h_on_stream", site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::CopyThenWait,
            Some(stream),
            "copy_d2h_on_stream",
            site
        ))?;
        let work = Work::D2H {
            src: src.0,
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        mock_try!(Self::exec(&mut st, &work, "copy_d2h_on_stream", site))
    }

    #[track_caller]
    fn stream_is_capturing(&self, stream: u64) -> bool {
        self.state
            .lock()
            .captures
            .iter()
            .any(|c| c.streams.contains(&stream))
    }

    #[track_caller]
    fn encode_tensor_map(
        &self,
        base: DevicePtr,
        desc: &crate::backend::TensorMapDesc,
    ) -> anyhow::Result<crate::backend::TensorMapImage> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::EncodeTensorMap, site))?;
        let invalid = |detail: String| MockError::Invalid {
            op: "encode_tensor_map",
            site,
            detail,
        };
        mock_try!(desc.validate(base.0).map_err(|e| invalid(e.to_string())))?;
        // The driver does not check that the map stays inside an allocation; the mock does,
        // so a map past its buffer is named where it is made, not where TMA reads it.
        mock_try!(st
            .mem
            .read(base.0, desc.span() as usize, "encode_tensor_map", site)
            .map(|_| ()))?;
        Ok(crate::backend::tensormap::mock_image(base.0, desc))
    }

    #[track_caller]
    fn debug_sync_kernels(&self) -> bool {
        self.cfg.debug_sync_kernels
    }

    #[track_caller]
    fn kernel_registry(&self) -> Option<Arc<KernelRegistry>> {
        Some(self.registry.clone())
    }

    #[track_caller]
    fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyH2DAsync, site))?;
        // The caller may drop `src` at once, so take the bytes now, as the CUDA backend stages.
        let work = Work::H2D {
            dst: dst.0,
            src: HostSrc::Copied(src.to_vec()),
        };
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::AsyncH2D,
            stream,
            work,
            "copy_h2d_async",
            site
        ))
    }

    #[track_caller]
    fn copy_h2d_async_retained(
        &self,
        src: &[u8],
        dst: DevicePtr,
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyH2DAsyncRetained, site))?;
        // A pinned source is read when the work runs, as the driver's DMA (or a graph node)
        // would read it; anything else is taken now.
        let addr = src.as_ptr() as usize;
        let hsrc = if st.mem.pinned_containing(addr, src.len()).is_some() {
            HostSrc::Pinned {
                addr,
                len: src.len(),
            }
        } else {
            HostSrc::Copied(src.to_vec())
        };
        let work = Work::H2D {
            dst: dst.0,
            src: hsrc,
        };
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::AsyncH2D,
            stream,
            work,
            "copy_h2d_async_retained",
            site
        ))
    }

    #[track_caller]
    fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2HAsync, site))?;
        let work = Work::D2H {
            src: src.0,
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        let captured = st.captures.iter().any(|c| c.streams.contains(&stream));
        if captured
            && st
                .mem
                .pinned_containing(dst.as_mut_ptr() as usize, dst.len())
                .is_none()
        {
            return mock_try!(Err(MockError::Invalid {
                op: "copy_d2h_async",
                site,
                detail: "a captured device-to-host copy must target pinned memory: the graph \
                         writes there at every launch"
                    .into(),
            }));
        }
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::StreamWork,
            stream,
            work,
            "copy_d2h_async",
            site
        ))
    }

    #[track_caller]
    fn copy_d2d_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2DAsync, site))?;
        let work = Work::D2D {
            src: src.0,
            dst: dst.0,
            len: bytes,
        };
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::StreamWork,
            stream,
            work,
            "copy_d2d_async",
            site
        ))
    }

    #[track_caller]
    fn copy_d2d_2d_async(
        &self,
        src: DevicePtr,
        src_pitch: usize,
        dst: DevicePtr,
        dst_pitch: usize,
        width_bytes: usize,
        height: usize,
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CopyD2D2DAsync, site))?;
        if height > 0 && (width_bytes > src_pitch || width_bytes > dst_pitch) {
            return mock_try!(Err(MockError::Invalid {
                op: "copy_d2d_2d_async",
                site,
                detail: format!(
                    "width {width_bytes} exceeds a pitch (src {src_pitch}, dst {dst_pitch})"
                ),
            }));
        }
        // One 2D copy is one operation: check every row before writing any.
        for row in 0..height {
            mock_try!(st.mem.locate(
                src.0 + (row * src_pitch) as u64,
                width_bytes,
                "copy_d2d_2d_async",
                site
            ))?;
            mock_try!(st.mem.locate(
                dst.0 + (row * dst_pitch) as u64,
                width_bytes,
                "copy_d2d_2d_async",
                site
            ))?;
        }
        mock_try!(Self::check_stream(&st, stream, "copy_d2d_2d_async", site))?;
        let into = mock_try!(Self::judge(
            &mut st,
            CaptureOp::StreamWork,
            Some(stream),
            "copy_d2d_2d_async",
            site
        ))?;
        for row in 0..height {
            let w = Work::D2D {
                src: src.0 + (row * src_pitch) as u64,
                dst: dst.0 + (row * dst_pitch) as u64,
                len: width_bytes,
            };
            match into {
                Some(ci) => st.captures[ci].work.push(w),
                None => mock_try!(Self::exec(&mut st, &w, "copy_d2d_2d_async", site))?,
            }
        }
        if let Some(ci) = into {
            Self::note_capture_op(&mut st, ci, stream);
        }
        Ok(())
    }

    #[track_caller]
    fn begin_capture(&self, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::BeginCapture, site))?;
        mock_try!(Self::check_stream(&st, stream, "begin_capture", site))?;
        // Against the captures already running (touching the legacy stream kills a blocking
        // one), then against the stream's own state.
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::BeginCapture,
            Some(stream),
            "begin_capture",
            site
        ))?;
        let relation = if stream == LEGACY_STREAM {
            Relation::Legacy
        } else if st.captures.iter().any(|c| c.streams.contains(&stream)) {
            Relation::Capturing
        } else {
            Relation::Other
        };
        let kind = st.streams[&stream];
        let rule = decide(
            CaptureOp::BeginCapture,
            CaptureContext {
                relation,
                kind,
                mode: self.cfg.capture_mode,
                same_thread: true,
            },
        );
        if let Verdict::Fails { .. } = rule.verdict {
            return mock_try!(Err(capture_err("begin_capture", site, rule)));
        }
        st.captures.push(Capture {
            origin: stream,
            streams: BTreeSet::from([stream]),
            unjoined: BTreeSet::new(),
            mode: self.cfg.capture_mode,
            kind,
            thread: std::thread::current().id(),
            work: Vec::new(),
            invalidated: None,
        });
        Ok(())
    }

    #[track_caller]
    fn end_capture(&self, stream: u64) -> anyhow::Result<GraphHandle> {
        mock_try!(self.end_capture_inner(stream, here()))
    }

    #[track_caller]
    fn launch_graph(&self, graph: GraphHandle, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::LaunchGraph, site))?;
        if !st.graphs.contains_key(&graph.0) {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "launch_graph",
                what: "graph",
                id: graph.0,
                site,
            }));
        }
        mock_try!(Self::submit(
            &mut st,
            CaptureOp::StreamWork,
            stream,
            Work::Graph(graph.0),
            "launch_graph",
            site
        ))
    }

    #[track_caller]
    fn destroy_graph(&self, graph: GraphHandle) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::DestroyGraph, site))?;
        match st.graphs.remove(&graph.0) {
            Some(_) => Ok(()),
            None => mock_try!(Err(MockError::UnknownHandle {
                op: "destroy_graph",
                what: "graph",
                id: graph.0,
                site,
            })),
        }
    }

    #[track_caller]
    fn abort_capture_if_active(&self, stream: u64) {
        let mut st = self.state.lock();
        if let Some(ci) = st.captures.iter().position(|c| c.streams.contains(&stream)) {
            let c = st.captures.remove(ci);
            for e in st.events.values_mut() {
                if e.in_capture.is_some_and(|(o, _, _)| o == c.origin) {
                    e.in_capture = None;
                }
            }
        }
    }

    #[track_caller]
    fn device_free_memory(&self) -> anyhow::Result<usize> {
        self.free_memory()
    }

    #[track_caller]
    fn live_alloc_count(&self) -> usize {
        self.state
            .lock()
            .mem
            .allocs
            .values()
            .filter(|a| matches!(a.storage, memory::Storage::Owned(_)))
            .count()
    }

    #[track_caller]
    fn create_stream(&self) -> anyhow::Result<u64> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CreateStream, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::HostOnly,
            None,
            "create_stream",
            site
        ))?;
        let s = st.next_stream;
        st.next_stream += 1;
        st.streams.insert(s, self.cfg.stream_kind);
        Ok(s)
    }

    #[track_caller]
    fn create_event(&self) -> anyhow::Result<u64> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::CreateEvent, site))?;
        let e = st.next_event;
        st.next_event += 1;
        st.events.insert(e, EventState::default());
        Ok(e)
    }

    #[track_caller]
    fn record_event(&self, event: u64, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::RecordEvent, site))?;
        if !st.events.contains_key(&event) {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "record_event",
                what: "event",
                id: event,
                site,
            }));
        }
        mock_try!(Self::check_stream(&st, stream, "record_event", site))?;
        let into = mock_try!(Self::judge(
            &mut st,
            CaptureOp::EventRecord,
            Some(stream),
            "record_event",
            site
        ))?;
        let in_capture = into.map(|ci| {
            let n = st.stream_ops.get(&stream).copied().unwrap_or(0);
            (st.captures[ci].origin, stream, n)
        });
        st.events.insert(event, EventState { in_capture });
        Ok(())
    }

    #[track_caller]
    fn stream_wait_event(&self, stream: u64, event: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::StreamWaitEvent, site))?;
        let Some(ev) = st.events.get(&event).copied() else {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "stream_wait_event",
                what: "event",
                id: event,
                site,
            }));
        };
        mock_try!(Self::check_stream(&st, stream, "stream_wait_event", site))?;
        let op = if ev.in_capture.is_some() {
            CaptureOp::WaitCapturedEvent
        } else {
            CaptureOp::WaitExternalEvent
        };
        let into = mock_try!(Self::judge(
            &mut st,
            op,
            Some(stream),
            "stream_wait_event",
            site
        ))?;
        if let (Some(ci), Some((_, rec_stream, ops_at_record))) = (into, ev.in_capture) {
            let c = &mut st.captures[ci];
            if c.streams.insert(stream) {
                // A fork: the stream now captures and must be joined back before the end.
                c.unjoined.insert(stream);
            }
            // The origin waiting on the tail of a forked stream joins that stream back.
            let now = st.stream_ops.get(&rec_stream).copied().unwrap_or(0);
            let c = &mut st.captures[ci];
            if stream == c.origin && rec_stream != c.origin && now == ops_at_record {
                c.unjoined.remove(&rec_stream);
            }
        }
        Ok(())
    }

    #[track_caller]
    fn event_synchronize(&self, event: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::EventSynchronize, site))?;
        let Some(ev) = st.events.get(&event).copied() else {
            return mock_try!(Err(MockError::UnknownHandle {
                op: "event_synchronize",
                what: "event",
                id: event,
                site,
            }));
        };
        let op = if ev.in_capture.is_some() {
            CaptureOp::SyncCapturedEvent
        } else {
            CaptureOp::SyncExternalEvent
        };
        let stream = ev.in_capture.map(|(_, s, _)| s);
        mock_try!(Self::judge(&mut st, op, stream, "event_synchronize", site))?;
        Ok(())
    }

    #[track_caller]
    fn destroy_event(&self, event: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::DestroyEvent, site))?;
        match st.events.remove(&event) {
            Some(_) => Ok(()),
            None => mock_try!(Err(MockError::UnknownHandle {
                op: "destroy_event",
                what: "event",
                id: event,
                site,
            })),
        }
    }

    #[track_caller]
    fn host_ptr_to_device(&self, host: *mut u8) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::HostPtrToDevice, site))?;
        mock_try!(st.mem.host_alias(host, site)).map(DevicePtr)
    }

    #[track_caller]
    fn alloc_host_pinned(&self, bytes: usize) -> anyhow::Result<*mut u8> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::AllocHostPinned, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::PinnedHost,
            None,
            "alloc_host_pinned",
            site
        ))?;
        if bytes > self.cfg.total_memory {
            return mock_try!(Err(MockError::OutOfMemory {
                op: "alloc_host_pinned",
                site,
                requested: bytes,
                live: 0,
                limit: self.cfg.total_memory,
            }));
        }
        mock_try!(st.mem.alloc_pinned(bytes, site))
    }

    #[track_caller]
    fn free_host_pinned(&self, ptr: *mut u8, bytes: usize) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::FreeHostPinned, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::PinnedHost,
            None,
            "free_host_pinned",
            site
        ))?;
        mock_try!(st.mem.free_pinned(ptr, bytes, site))
    }
}
