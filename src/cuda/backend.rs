//! `CudaBackend`: the struct, its construction and drop, and the `GpuBackend` trait on the CUDA
//! driver. Every driver call goes through `cuda/driver.rs`; the rooms beside this one hold
//! what the trait methods call into (`config`, `module`, `vmm`, `redzone`, `staging`), and the
//! bodies of the trait's methods by concern, each `NAME_impl`: `memory.rs` (allocations, frees,
//! the sweep, copies, memsets, pinned host memory), `launch.rs` (launches, tensor maps) and
//! `stream.rs` (capture, graphs, events). Queries and one-line forwards stay here.
//!
//! The trait is safe and takes handles and addresses as plain integers, so the `// SAFETY:`
//! lines at the driver calls here and in those rooms cite **the trait's contract**: a `DevicePtr` names memory of
//! this backend that the caller may use over the length given; a stream is one of this
//! backend's, or 0; an event, graph or kernel handle is one this backend handed out and the
//! caller has not destroyed; host memory a call leaves a copy reading or writing stays alive
//! until the stream's next synchronisation (the trait docs of each such method). These are the
//! callers' promises, not checks: the driver refuses many violations with an error, not all.

use super::config::CudaConfig;
use super::driver;
use super::fault_probe;
use super::nccl;
use super::redzone::{RedZone, RedzoneViolation};
use super::staging::Staging;
use super::watchdog;
use crate::backend::ledger::{by_site, SiteTotal};
use crate::backend::{
    DeviceError, DevicePtr, GpuBackend, GraphHandle, KernelArg, KernelHandle, KernelRegistry,
    OpCache, Site, StreamKind,
};
use anyhow::Result;
use cudarc::driver::sys;
use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::Location;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// One live allocation in the ledger.
pub(super) struct AllocRecord {
    pub(super) bytes: usize,
    pub(super) site: Site,
}

/// The CUDA backend. See the module docs.
pub struct CudaBackend {
    pub(super) cfg: CudaConfig,
    pub(super) ctx: u64,
    pub(super) device: i32,
    pub(super) default_stream: u64,
    pub(super) sm_count: u32,
    pub(super) integrated: bool,
    pub(super) compute_capability: (i32, i32),
    pub(super) registry: Arc<KernelRegistry>,
    pub(super) modules: Mutex<HashMap<String, u64>>,
    /// Modules a reload under the same name replaced: kept loaded until drop, since a kernel
    /// handle into one may still be held and launched.
    pub(super) retired_modules: Mutex<Vec<u64>>,
    pub(super) functions: RwLock<HashMap<(String, String), u64>>,
    /// (module, kernel) whose PTX waits on its grid dependency, found at module load.
    pub(super) waiting_entries: Mutex<std::collections::HashSet<(String, String)>>,
    /// Those kernels' handles, once looked up: the launches `cfg.pdl` applies to.
    pub(super) pdl_functions: RwLock<std::collections::HashSet<u64>>,
    pub(super) ledger: Mutex<HashMap<u64, AllocRecord>>,
    pub(super) alloc_seq: AtomicUsize,
    pub(super) redzones: Mutex<Vec<RedZone>>,
    pub(super) last_violations: Mutex<Vec<RedzoneViolation>>,
    pub(super) streams: Mutex<Vec<u64>>,
    pub(super) staging: Mutex<Staging>,
    /// Granularity-sized chunks mapped at fixed addresses (`place_at`): chunk base -> handle.
    pub(super) fixed: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// Buffers handed out by `place_at` (freed by unmapping at drop, not by cuMemFree).
    pub(super) placed: Mutex<std::collections::HashSet<u64>>,
    pub(super) op_cache: OpCache,
    /// The OOM watchdog, when this backend started it (`cfg.oom_watchdog_mb`).
    pub(super) watchdog: Option<watchdog::WatchdogHandle>,
    /// Launches not yet known finished, for the fault probe.
    pub(super) in_flight: Mutex<fault_probe::InFlight>,
    /// What the first sticky fault's probe found.
    pub(super) probed: Mutex<Option<fault_probe::FaultProbe>>,
    /// Captures begun through this backend and not yet ended: while there are any, a launch
    /// on a capturing stream is a graph node, not work in flight.
    pub(super) captures: AtomicUsize,
    /// Which parameters of each kernel are pointer-sized (from the driver's layout), so a launch
    /// keeps those words for the probe without reading past a smaller parameter.
    pub(super) word_params: RwLock<HashMap<u64, SmallVec<[bool; 16]>>>,
    /// The dynamic shared memory each function was allowed past the 48 KiB default, so a
    /// launch that asks for more (a driver-level recording's cuBLAS kernels did, through a
    /// `cuFuncSetAttribute` of their own) raises it first.
    pub(super) smem_allowed: RwLock<HashMap<u64, u32>>,
    /// How a recording launched each function beyond its grid (`set_kernel_cluster`,
    /// `set_kernel_cooperative`): one map, so a launch asks once.
    pub(super) recorded_launch: RwLock<HashMap<u64, RecordedLaunch>>,
}

/// What a driver-level recording's launches of one function asked for, which a replay's
/// launches must ask for too.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RecordedLaunch {
    /// The thread-block cluster shape, when one was asked for.
    pub cluster: Option<[u32; 3]>,
    /// Launched cooperatively (every block resident at once).
    pub cooperative: bool,
}

// SAFETY: the raw pointers inside (`Staging`'s pinned regions) are only touched under their
// mutex, and every driver handle is usable from any thread once the context is current.
unsafe impl Send for CudaBackend {}
// SAFETY: as above; all interior mutability is behind locks or atomics.
unsafe impl Sync for CudaBackend {}

/// Free and total memory of device `ordinal` as the driver reports them, without a backend:
/// for a launcher deciding what fits before it builds one, and for the OOM watchdog's thread.
/// The device's primary context is retained and made current on this thread for the query
/// only (whatever was current before is current again after).
pub fn device_memory(ordinal: usize) -> Result<(usize, usize)> {
    if !super::driver_present() {
        return Err(super::ProbeError::NoDriver.into());
    }
    driver::init()?;
    let device = driver::device_get(ordinal as i32)?;
    let ctx = driver::device_primary_ctx_retain(device)?;
    let r = (|| {
        // SAFETY: `ctx` was retained just above and is released only after this closure.
        unsafe { driver::ctx_push_current(ctx) }?;
        let q = driver::mem_get_info();
        let _ = driver::ctx_pop_current();
        q
    })();
    let r = r.map_err(anyhow::Error::from);
    // SAFETY: gives up the retain taken above; nothing of `ctx` is used after it.
    let _ = unsafe { driver::device_primary_ctx_release(device) };
    r
}

/// Free memory of device `ordinal` as the watchdog should see it: the driver's figure, or host
/// `MemAvailable` on an integrated device (never on a guess: an unknown device counts as
/// discrete). `None` when the driver does not answer.
pub fn polled_free_memory(ordinal: usize) -> Option<usize> {
    let (free, _) = device_memory(ordinal).ok()?;
    let integrated = (|| {
        let device = driver::device_get(ordinal as i32).ok()?;
        let v = driver::device_get_attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_INTEGRATED,
            device,
        )
        .ok()?;
        Some(v != 0)
    })();
    Some(watchdog::polled_free_bytes(
        free,
        watchdog::mem_available(),
        integrated,
    ))
}

impl CudaBackend {
    /// Open device `cfg.ordinal` through its primary context.
    pub fn new(cfg: CudaConfig) -> Result<Self> {
        if !super::driver_present() {
            return Err(super::ProbeError::NoDriver.into());
        }
        driver::init()?;
        let device = driver::device_get(cfg.ordinal as i32)?;
        let ctx = driver::device_primary_ctx_retain(device)?;
        // SAFETY: `ctx` was retained just above; the backend releases it only at drop.
        unsafe { driver::ctx_set_current(ctx) }?;
        let attr = |a| -> Result<i32> { Ok(driver::device_get_attribute(a, device)?) };
        use sys::CUdevice_attribute as A;
        let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let integrated = attr(A::CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0;
        let cc = (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let staging = Staging::new(cfg.staging_bytes, cfg.capture_staging_bytes)?;
        let mut b = CudaBackend {
            ctx: ctx as u64,
            device,
            default_stream: 0,
            sm_count,
            integrated,
            compute_capability: cc,
            registry: Arc::new(KernelRegistry::new()),
            modules: Mutex::new(HashMap::new()),
            retired_modules: Mutex::new(Vec::new()),
            functions: RwLock::new(HashMap::new()),
            waiting_entries: Mutex::new(Default::default()),
            pdl_functions: RwLock::new(Default::default()),
            ledger: Mutex::new(HashMap::new()),
            alloc_seq: AtomicUsize::new(0),
            redzones: Mutex::new(Vec::new()),
            last_violations: Mutex::new(Vec::new()),
            streams: Mutex::new(Vec::new()),
            staging: Mutex::new(staging),
            fixed: Mutex::new(Default::default()),
            placed: Mutex::new(Default::default()),
            op_cache: OpCache::new(),
            watchdog: None,
            in_flight: Mutex::new(Default::default()),
            probed: Mutex::new(None),
            captures: AtomicUsize::new(0),
            word_params: RwLock::new(HashMap::new()),
            smem_allowed: RwLock::new(HashMap::new()),
            recorded_launch: RwLock::new(HashMap::new()),
            cfg,
        };
        b.default_stream = b.new_stream()?;
        if let Some(mb) = b.cfg.oom_watchdog_mb {
            let ordinal = b.cfg.ordinal;
            b.watchdog = watchdog::spawn_oom_watchdog(
                mb,
                b.cfg.oom_watchdog_interval,
                move || polled_free_memory(ordinal),
                watchdog::OnTrip::Exit,
            );
        }
        tracing::info!(
            "CudaBackend on device {} ({} SMs, cc {}.{}, {})",
            b.cfg.ordinal,
            sm_count,
            cc.0,
            cc.1,
            if integrated { "integrated" } else { "discrete" }
        );
        Ok(b)
    }

    pub fn config(&self) -> &CudaConfig {
        &self.cfg
    }

    pub fn device_ordinal(&self) -> i32 {
        self.device
    }

    fn new_stream(&self) -> Result<u64> {
        let flags = match self.cfg.stream_kind {
            StreamKind::Blocking => sys::CUstream_flags::CU_STREAM_DEFAULT,
            StreamKind::NonBlocking => sys::CUstream_flags::CU_STREAM_NON_BLOCKING,
        } as u32;
        let s = driver::stream_create(flags)?;
        self.streams.lock().push(s as u64);
        Ok(s as u64)
    }

    /// Live allocations by site, biggest first.
    pub fn live_by_site(&self) -> Vec<SiteTotal> {
        by_site(self.ledger.lock().values().map(|r| (r.site, r.bytes)))
    }

    fn mem_info(&self) -> Result<(usize, usize)> {
        Ok(driver::mem_get_info()?)
    }

    pub(super) fn sync_stream(&self, stream: u64) -> Result<()> {
        // SAFETY: `stream` is one of this backend's or 0 (the trait's contract).
        unsafe { driver::stream_synchronize(stream as sys::CUstream) }
            .map_err(|e| self.probe(e))?;
        self.in_flight.lock().retire_stream(stream);
        Ok(())
    }

    /// A synchronous copy or memset finished: on blocking streams (the default), everything
    /// issued before it has too.
    pub(super) fn settled_all(&self) {
        if self.cfg.stream_kind == StreamKind::Blocking {
            self.in_flight.lock().retire_all();
        }
    }

    /// A sticky fault's error, with what the fault probe can say of it (the first time only:
    /// every later call fails with the same code and would repeat it).
    pub(super) fn probe(&self, e: DeviceError) -> DeviceError {
        if !e.is_sticky() {
            return e;
        }
        let mut probed = self.probed.lock();
        if probed.is_some() {
            return e;
        }
        let ledger = self.ledger.lock();
        let p = fault_probe::probe(
            e.code,
            self.in_flight.lock().snapshot(),
            |k| {
                self.registry
                    .kernel_by_handle(KernelHandle(k))
                    .map(|i| format!("{}::{}", i.module, i.name))
            },
            |w| {
                ledger
                    .iter()
                    .find(|(base, r)| w >= **base && w < **base + r.bytes.max(1) as u64)
                    .map(|(base, r)| (*base, r.bytes, r.site))
            },
        );
        drop(ledger);
        let kernel = p.culprit().map(|c| c.kernel.clone());
        let e = e.with(p.summary()).with_kernel(kernel);
        *probed = Some(p);
        e
    }

    /// What the probe found at this backend's first sticky fault: the launches in flight then
    /// and the allocations their arguments lie in (`None` before any).
    pub fn fault_probe(&self) -> Option<fault_probe::FaultProbe> {
        self.probed.lock().clone()
    }

    pub(super) fn is_capturing(&self, stream: u64) -> bool {
        // SAFETY: `stream` is a stream handle (or 0, the legacy stream): the trait's contract.
        let r = unsafe { driver::stream_is_capturing(stream as sys::CUstream) };
        matches!(r, Ok(s) if s != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // SAFETY: make this backend's context current on the dropping thread before releasing;
        // it is retained until the last line below.
        let _ = unsafe { driver::ctx_set_current(self.ctx as sys::CUcontext) };
        let swept = self.sweep_unreleased();
        if swept > 0 {
            tracing::warn!(
                "CudaBackend dropped with {swept} allocation(s) no owner released (an abandoned \
                 load, or an owner that never registered)"
            );
        }
        self.staging.get_mut().release();
        // SAFETY: the backend is being dropped: no buffer of `place_at` is used after this.
        unsafe { self.release_fixed() };
        for s in self.streams.get_mut().drain(..) {
            // SAFETY: a stream this backend created, drained here so destroyed once; nothing
            // issues work after drop.
            let _ = unsafe { driver::stream_destroy(s as sys::CUstream) };
        }
        let retired: Vec<u64> = self.retired_modules.get_mut().drain(..).collect();
        for m in self
            .modules
            .get_mut()
            .drain()
            .map(|(_, m)| m)
            .chain(retired)
        {
            // SAFETY: a module this backend loaded, drained here so unloaded once; no kernel
            // of it is launched after drop.
            let _ = unsafe { driver::module_unload(m as sys::CUmodule) };
        }
        // SAFETY: gives up the retain `new` took; nothing of the context is used after it.
        let _ = unsafe { driver::device_primary_ctx_release(self.device) };
    }
}

impl GpuBackend for CudaBackend {
    #[track_caller]
    fn alloc(&self, bytes: usize) -> Result<DevicePtr> {
        self.alloc_impl(bytes)
    }

    #[track_caller]
    fn alloc_managed(&self, bytes: usize) -> Result<DevicePtr> {
        self.alloc_managed_impl(bytes)
    }

    #[track_caller]
    fn free(&self, ptr: DevicePtr) -> Result<()> {
        self.free_impl(ptr)
    }

    #[track_caller]
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
        self.copy_h2d_impl(src, dst)
    }

    #[track_caller]
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        self.copy_d2h_impl(src, dst)
    }

    #[track_caller]
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> Result<()> {
        self.copy_d2d_impl(src, dst, bytes)
    }

    #[track_caller]
    fn launch(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.launch_impl(func, grid, block, shared_mem, stream, params)
    }
    #[track_caller]
    fn launch_typed(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        self.launch_typed_impl(func, grid, block, shared_mem, stream, args)
    }

    #[track_caller]
    fn synchronize(&self, stream: u64) -> Result<()> {
        self.sync_stream(stream)
    }

    #[track_caller]
    fn default_stream(&self) -> u64 {
        self.default_stream
    }

    #[track_caller]
    fn kernel(&self, module: &str, func_name: &str) -> Result<KernelHandle> {
        self.look_up_kernel(module, func_name, Location::caller())
    }

    #[track_caller]
    fn op_cache(&self) -> &OpCache {
        &self.op_cache
    }

    #[track_caller]
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        self.memset_impl(ptr, value, bytes)
    }

    #[track_caller]
    fn memset_async(&self, ptr: DevicePtr, value: u8, bytes: usize, stream: u64) -> Result<()> {
        self.memset_async_impl(ptr, value, bytes, stream)
    }

    #[track_caller]
    fn total_memory(&self) -> Result<usize> {
        Ok(self.mem_info()?.1)
    }

    #[track_caller]
    fn free_memory(&self) -> Result<usize> {
        let (free, _) = self.mem_info()?;
        Ok(watchdog::effective_free_bytes(
            free,
            watchdog::mem_available(),
            self.integrated,
        ))
    }

    #[track_caller]
    fn sm_count(&self) -> Result<u32> {
        Ok(self.sm_count)
    }

    #[track_caller]
    fn encode_tensor_map(
        &self,
        base: DevicePtr,
        desc: &crate::backend::TensorMapDesc,
    ) -> Result<crate::backend::TensorMapImage> {
        self.encode_tensor_map_impl(base, desc)
    }

    #[track_caller]
    fn sweep_unreleased(&self) -> usize {
        self.sweep_unreleased_impl()
    }

    #[track_caller]
    fn live_bytes(&self) -> Option<usize> {
        Some(self.ledger.lock().values().map(|r| r.bytes).sum())
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
    fn copy_d2h_on_stream(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
        self.copy_d2h_on_stream_impl(src, dst, stream)
    }

    #[track_caller]
    fn stream_is_capturing(&self, stream: u64) -> bool {
        self.is_capturing(stream)
    }

    #[track_caller]
    fn scan_redzones(&self) -> Result<usize> {
        self.scan_guard_bands()
    }

    #[track_caller]
    fn redzone_hits(&self) -> Vec<crate::backend::RedzoneHit> {
        self.guard_band_hits()
    }

    #[track_caller]
    fn poison_redzones(&self, lo: usize, hi: usize) -> Result<()> {
        self.poison_guard_bands(lo, hi)
    }

    #[track_caller]
    fn debug_sync_kernels(&self) -> bool {
        self.cfg.debug_sync_kernels
    }

    /// NVRTC compiles the source for this device; each kernel's declared access goes into
    /// the registry (the driver reports only parameter sizes). CPU bodies are not used here.
    #[track_caller]
    fn load_module(&self, module: &crate::backend::ModuleDesc) -> Result<()> {
        self.load_module_desc(module)
    }

    #[track_caller]
    fn load_module_image(&self, name: &str, image: &[u8]) -> Result<()> {
        self.load_image(name, image)
    }

    #[track_caller]
    fn module_global(&self, module: &str, name: &str) -> Result<(DevicePtr, u64)> {
        self.global(module, name)
    }

    #[track_caller]
    fn set_kernel_cluster(&self, kernel: KernelHandle, dims: [u32; 3]) -> Result<()> {
        anyhow::ensure!(
            dims.iter().all(|d| *d >= 1) && dims.iter().map(|d| *d as u64).product::<u64>() <= 16,
            "a thread-block cluster of {dims:?} blocks is not one the device launches"
        );
        self.recorded_launch
            .write()
            .entry(kernel.0)
            .or_default()
            .cluster = Some(dims);
        Ok(())
    }

    #[track_caller]
    fn set_kernel_cooperative(&self, kernel: KernelHandle) -> Result<()> {
        self.recorded_launch
            .write()
            .entry(kernel.0)
            .or_default()
            .cooperative = true;
        Ok(())
    }

    #[track_caller]
    fn kernel_registry(&self) -> Option<Arc<KernelRegistry>> {
        Some(self.registry.clone())
    }

    #[track_caller]
    fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        self.stage_h2d(src, dst, stream, Location::caller())
    }

    #[track_caller]
    fn copy_h2d_async_retained(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        self.copy_h2d_async_retained_impl(src, dst, stream)
    }

    #[track_caller]
    fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
        self.copy_d2h_async_impl(src, dst, stream)
    }

    #[track_caller]
    fn copy_d2d_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: u64,
    ) -> Result<()> {
        self.copy_d2d_async_impl(src, dst, bytes, stream)
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
    ) -> Result<()> {
        self.copy_d2d_2d_async_impl(src, src_pitch, dst, dst_pitch, width_bytes, height, stream)
    }

    #[track_caller]
    fn begin_capture(&self, stream: u64) -> Result<()> {
        self.begin_capture_impl(stream)
    }

    #[track_caller]
    fn end_capture(&self, stream: u64) -> Result<GraphHandle> {
        self.end_capture_impl(stream)
    }

    #[track_caller]
    fn launch_graph(&self, graph: GraphHandle, stream: u64) -> Result<()> {
        self.launch_graph_impl(graph, stream)
    }

    #[track_caller]
    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        self.destroy_graph_impl(graph)
    }

    #[track_caller]
    fn abort_capture_if_active(&self, stream: u64) {
        self.abort_capture_if_active_impl(stream)
    }

    #[track_caller]
    fn device_free_memory(&self) -> Result<usize> {
        Ok(self.mem_info()?.0)
    }

    #[track_caller]
    fn live_alloc_count(&self) -> usize {
        self.ledger.lock().len()
    }

    #[track_caller]
    fn create_stream(&self) -> Result<u64> {
        self.new_stream()
    }

    #[track_caller]
    fn create_private_stream(&self) -> Result<u64> {
        let s = driver::stream_create(sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)?;
        self.streams.lock().push(s as u64);
        Ok(s as u64)
    }

    #[track_caller]
    fn comm_unique_id(&self) -> Result<crate::backend::CommUniqueId> {
        nccl::unique_id()
    }

    #[track_caller]
    fn comm_init(
        &self,
        id: crate::backend::CommUniqueId,
        nranks: u32,
        rank: u32,
    ) -> Result<crate::backend::CommHandle> {
        // NCCL makes the communicator on the calling thread's current context: this one.
        self.bind_to_thread()?;
        nccl::init(id, nranks, rank)
    }

    #[track_caller]
    fn collective(
        &self,
        comm: crate::backend::CommHandle,
        op: crate::backend::Collective,
        send: DevicePtr,
        recv: DevicePtr,
        count: u64,
        dtype: crate::backend::CollDtype,
        stream: u64,
    ) -> Result<()> {
        // SAFETY: the trait's contract: `comm` from this backend's `comm_init`, `stream` one of
        // its streams, and buffers of the sizes the collective names.
        unsafe { nccl::collective(comm, op, send, recv, count, dtype, stream) }
    }

    #[track_caller]
    fn comm_destroy(&self, comm: crate::backend::CommHandle) -> Result<()> {
        // SAFETY: the trait's contract: `comm` from `comm_init`, used no more.
        unsafe { nccl::destroy(comm) }
    }

    #[track_caller]
    fn comm_group_start(&self) -> Result<()> {
        nccl::group_start()
    }

    #[track_caller]
    fn comm_group_end(&self) -> Result<()> {
        nccl::group_end()
    }

    #[track_caller]
    fn bind_to_thread(&self) -> Result<()> {
        // SAFETY: `self.ctx` is this backend's primary context, retained until drop.
        Ok(unsafe { driver::ctx_set_current(self.ctx as sys::CUcontext) }?)
    }

    #[track_caller]
    fn create_event(&self) -> Result<u64> {
        self.create_event_impl()
    }

    #[track_caller]
    fn record_event(&self, event: u64, stream: u64) -> Result<()> {
        self.record_event_impl(event, stream)
    }

    #[track_caller]
    fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        self.stream_wait_event_impl(stream, event)
    }

    #[track_caller]
    fn event_synchronize(&self, event: u64) -> Result<()> {
        self.event_synchronize_impl(event)
    }

    #[track_caller]
    fn destroy_event(&self, event: u64) -> Result<()> {
        self.destroy_event_impl(event)
    }

    #[track_caller]
    fn host_ptr_to_device(&self, host: *mut u8) -> Result<DevicePtr> {
        self.host_ptr_to_device_impl(host)
    }

    #[track_caller]
    fn alloc_host_pinned(&self, bytes: usize) -> Result<*mut u8> {
        self.alloc_host_pinned_impl(bytes)
    }

    #[track_caller]
    fn free_host_pinned(&self, ptr: *mut u8, _bytes: usize) -> Result<()> {
        self.free_host_pinned_impl(ptr, _bytes)
    }
}
