//! `CudaBackend`: the struct, its construction and drop, and the `GpuBackend` trait on the CUDA
//! driver. Every driver call goes through `cuda/driver.rs`; the rooms beside this one hold
//! what the trait methods call into (`config`, `module`, `vmm`, `redzone`, `staging`).
//!
//! The trait is safe and takes handles and addresses as plain integers, so the `// SAFETY:`
//! lines at the driver calls here cite **the trait's contract**: a `DevicePtr` names memory of
//! this backend that the caller may use over the length given; a stream is one of this
//! backend's, or 0; an event, graph or kernel handle is one this backend handed out and the
//! caller has not destroyed; host memory a call leaves a copy reading or writing stays alive
//! until the stream's next synchronisation (the trait docs of each such method). These are the
//! callers' promises, not checks: the driver refuses many violations with an error, not all.

use super::config::CudaConfig;
use super::driver::{self, dp, st};
use super::fault_probe;
use super::redzone::{RedZone, RedzoneViolation};
use super::staging::Staging;
use super::watchdog;
use crate::backend::ledger::{by_site, SiteTotal};
use crate::backend::{
    CaptureMode, DeviceError, DevicePtr, GpuBackend, GraphHandle, KernelArg, KernelHandle,
    KernelRegistry, OpCache, Site, StreamKind,
};
use anyhow::Result;
use cudarc::driver::sys;
use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    fn settled_all(&self) {
        if self.cfg.stream_kind == StreamKind::Blocking {
            self.in_flight.lock().retire_all();
        }
    }

    /// A sticky fault's error, with what the fault probe can say of it (the first time only:
    /// every later call fails with the same code and would repeat it).
    fn probe(&self, e: DeviceError) -> DeviceError {
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
        let site = Location::caller();
        let idx = self.alloc_seq.fetch_add(1, Ordering::Relaxed);
        let pad = self.redzone_pad(idx);
        let p = driver::mem_alloc(bytes + pad).map_err(|e| {
            e.with(format!(
                "{bytes} bytes for {}",
                crate::backend::site_string(site)
            ))
        })?;
        if pad > 0 {
            // SAFETY: `p` is the `bytes + pad`-byte allocation just made, not yet in the ledger.
            unsafe { self.guard(p, bytes, pad, idx, site) }?;
        }
        self.ledger.lock().insert(p, AllocRecord { bytes, site });
        Ok(DevicePtr(p))
    }

    #[track_caller]
    fn alloc_managed(&self, bytes: usize) -> Result<DevicePtr> {
        let site = Location::caller();
        self.alloc_seq.fetch_add(1, Ordering::Relaxed);
        let p =
            driver::mem_alloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32)?;
        self.ledger.lock().insert(p, AllocRecord { bytes, site });
        Ok(DevicePtr(p))
    }

    #[track_caller]
    fn free(&self, ptr: DevicePtr) -> Result<()> {
        let site = Location::caller();
        if self.placed.lock().remove(&ptr.0) {
            // Fixed-address memory stays mapped until the backend drops.
            self.ledger.lock().remove(&ptr.0);
            return Ok(());
        }
        // SAFETY: the trait's contract: `ptr` is an allocation of this backend that the caller
        // is done with (an address that is not one the driver refuses).
        unsafe { driver::mem_free(dp(ptr)) }.map_err(|e| {
            self.probe(e).with(format!(
                "{ptr} freed at {}",
                crate::backend::site_string(site)
            ))
        })?;
        self.ledger.lock().remove(&ptr.0);
        if self.cfg.redzone.bytes > 0 {
            self.redzones.lock().retain(|z| z.user_ptr != ptr.0);
        }
        Ok(())
    }

    #[track_caller]
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
        // SAFETY: the trait's contract: `dst` is this backend's memory over `src.len()` bytes.
        unsafe { driver::memcpy_htod(dp(dst), src) }.map_err(|e| self.probe(e))?;
        self.settled_all();
        Ok(())
    }

    #[track_caller]
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        // SAFETY: the trait's contract: `src` is this backend's memory over `dst.len()` bytes.
        unsafe { driver::memcpy_dtoh(dst, dp(src)) }.map_err(|e| self.probe(e))?;
        self.settled_all();
        Ok(())
    }

    #[track_caller]
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> Result<()> {
        // Synchronous only with respect to the host for most sizes: nothing retires here.
        // SAFETY: the trait's contract: both are this backend's memory over `bytes` bytes.
        Ok(unsafe { driver::memcpy_dtod(dp(dst), dp(src), bytes) }.map_err(|e| self.probe(e))?)
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
        if self.launches_programmatically(func) {
            // SAFETY: the trait's contract: `func` is a kernel of this backend, `stream` one of
            // its streams or 0, and `params[i]` points at the i-th argument's value.
            unsafe { self.launch_programmatic(func, grid, block, shared_mem, stream, params) }
                .map_err(|e| match e.downcast::<DeviceError>() {
                    Ok(d) => anyhow::Error::from(self.probe(d)),
                    Err(e) => e,
                })?;
        } else {
            // SAFETY: as above, the trait's contract for `func`, `stream` and `params`.
            unsafe {
                driver::launch_kernel(
                    func.0 as sys::CUfunction,
                    grid,
                    block,
                    shared_mem,
                    st(stream),
                    params,
                )
            }
            .map_err(|e| self.probe(e))?;
        }
        let mut words = SmallVec::new();
        if let Some(mask) = self.word_params.read().get(&func.0) {
            for (p, _) in params.iter().zip(mask).filter(|(_, w)| **w).take(8) {
                // SAFETY: launch's contract: params[i] points at the i-th parameter's value,
                // which the driver's layout says is 8 bytes.
                words.push(unsafe { (*p as *const u64).read_unaligned() });
            }
        }
        if self.captures.load(Ordering::Relaxed) == 0 || !self.is_capturing(stream) {
            self.in_flight.lock().push(fault_probe::Launched {
                kernel: func.0,
                graph: false,
                stream,
                site: Location::caller(),
                words,
            });
        }
        if self.cfg.debug_sync_kernels {
            self.sync_stream(stream)?;
        }
        Ok(())
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
        // Pack on the stack: every argument gets whole 8-byte slots.
        let mut slots: SmallVec<[u64; 24]> = SmallVec::new();
        let mut starts: SmallVec<[usize; 16]> = SmallVec::new();
        for a in args {
            starts.push(slots.len());
            match a {
                KernelArg::Buffer(p) => slots.push(p.0),
                KernelArg::Bytes(b) => {
                    for chunk in b.chunks(8) {
                        let mut w = [0u8; 8];
                        w[..chunk.len()].copy_from_slice(chunk);
                        slots.push(u64::from_le_bytes(w));
                    }
                    if b.is_empty() {
                        slots.push(0);
                    }
                }
            }
        }
        let base = slots.as_mut_ptr();
        let mut params: SmallVec<[*mut c_void; 16]> = starts
            .iter()
            // SAFETY: each start indexes into `slots`, which is not resized after this point.
            .map(|&i| unsafe { base.add(i) }.cast::<c_void>())
            .collect();
        self.launch(func, grid, block, shared_mem, stream, &mut params)
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
        // SAFETY: the trait's contract: `ptr` is this backend's memory over `bytes` bytes.
        unsafe { driver::memset_d8(dp(ptr), value, bytes) }.map_err(|e| self.probe(e))?;
        self.settled_all();
        Ok(())
    }

    #[track_caller]
    fn memset_async(&self, ptr: DevicePtr, value: u8, bytes: usize, stream: u64) -> Result<()> {
        // SAFETY: the trait's contract: `ptr` over `bytes` bytes, and `stream`.
        Ok(unsafe { driver::memset_d8_async(dp(ptr), value, bytes, st(stream)) }?)
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
        use crate::backend::TensorMapDtype as D;
        use sys::CUtensorMapDataType as T;
        let site = crate::backend::site_string(Location::caller());
        desc.validate(base.0)
            .map_err(|e| anyhow::anyhow!("encode_tensor_map at {site}: {e}"))?;
        let dtype = match desc.dtype {
            D::U8 => T::CU_TENSOR_MAP_DATA_TYPE_UINT8,
            D::U16 => T::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            D::U32 => T::CU_TENSOR_MAP_DATA_TYPE_UINT32,
            D::I32 => T::CU_TENSOR_MAP_DATA_TYPE_INT32,
            D::U64 => T::CU_TENSOR_MAP_DATA_TYPE_UINT64,
            D::I64 => T::CU_TENSOR_MAP_DATA_TYPE_INT64,
            D::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            D::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            D::F64 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
            D::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        };
        let unsupported = |what: &str, v: u32| {
            anyhow::anyhow!("encode_tensor_map at {site}: {what} {v} is not supported here")
        };
        use sys::CUtensorMapFloatOOBfill as O;
        use sys::CUtensorMapInterleave as I;
        use sys::CUtensorMapL2promotion as L;
        use sys::CUtensorMapSwizzle as S;
        let interleave = match desc.interleave {
            0 => I::CU_TENSOR_MAP_INTERLEAVE_NONE,
            1 => I::CU_TENSOR_MAP_INTERLEAVE_16B,
            2 => I::CU_TENSOR_MAP_INTERLEAVE_32B,
            v => return Err(unsupported("interleave", v)),
        };
        let swizzle = match desc.swizzle {
            0 => S::CU_TENSOR_MAP_SWIZZLE_NONE,
            1 => S::CU_TENSOR_MAP_SWIZZLE_32B,
            2 => S::CU_TENSOR_MAP_SWIZZLE_64B,
            3 => S::CU_TENSOR_MAP_SWIZZLE_128B,
            v => return Err(unsupported("swizzle", v)),
        };
        let l2 = match desc.l2_promotion {
            0 => L::CU_TENSOR_MAP_L2_PROMOTION_NONE,
            1 => L::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
            2 => L::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            3 => L::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            v => return Err(unsupported("L2 promotion", v)),
        };
        let oob = match desc.oob_fill {
            0 => O::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            1 => O::CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
            v => return Err(unsupported("out-of-bounds fill", v)),
        };
        // SAFETY: `desc.validate` passed above, so `dims`, `box_dims` and `element_strides`
        // hold `rank` entries and `strides` `rank - 1`.
        let map = unsafe {
            driver::tensor_map_encode_tiled(
                dtype,
                desc.rank() as u32,
                base.0 as *mut c_void,
                &desc.dims,
                &desc.strides,
                &desc.box_dims,
                &desc.element_strides,
                interleave,
                swizzle,
                l2,
                oob,
            )
        }
        .map_err(|e| e.with(format!("a tensor map at {site}")))?;
        let mut img = [0u8; crate::backend::TENSOR_MAP_BYTES];
        for (chunk, word) in img.chunks_exact_mut(8).zip(map.opaque) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        Ok(img)
    }

    #[track_caller]
    fn sweep_unreleased(&self) -> usize {
        let outstanding: Vec<(u64, AllocRecord)> = self.ledger.lock().drain().collect();
        let mut zones = self.redzones.lock();
        let mut placed = self.placed.lock();
        // After a sticky fault every free fails with the fault's code: the memory goes with the
        // context, so that is one line, not one per allocation.
        let mut gone: Option<u32> = None;
        for (p, _) in &outstanding {
            if placed.remove(p) {
                continue;
            }
            // Straight to the driver: the ledger is drained, and one failure must not stop the
            // rest of the sweep.
            // SAFETY: `p` was in the ledger, so it is a live `cuMemAlloc`/`cuMemAllocManaged`
            // allocation of this backend (placed ones were skipped above); drained from the
            // ledger, it is freed once, and its owner never released it, so no one uses it.
            if let Err(e) = unsafe { driver::mem_free(*p) } {
                // A dead context (a sticky fault), or one already torn down (4, 709): every
                // free fails the same way, said once below.
                if e.is_sticky() || matches!(e.code, 4 | 709) {
                    gone.get_or_insert(e.code);
                } else {
                    tracing::warn!("sweep: {e} for {p:#x}");
                }
            }
            zones.retain(|z| z.user_ptr != *p);
        }
        if !outstanding.is_empty() {
            let rows = by_site(outstanding.iter().map(|(_, r)| (r.site, r.bytes)));
            tracing::warn!("{}", crate::backend::ledger::sweep_line(&rows, gone));
        }
        outstanding.len()
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
        // SAFETY: the trait's contract for `src` over `dst.len()` bytes and `stream`; `dst` is
        // borrowed until the stream is synchronised just below, so it outlives the copy.
        unsafe {
            driver::memcpy_dtoh_async(dst.as_mut_ptr().cast(), dp(src), dst.len(), st(stream))
        }?;
        self.sync_stream(stream)
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
    fn kernel_registry(&self) -> Option<Arc<KernelRegistry>> {
        Some(self.registry.clone())
    }

    #[track_caller]
    fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        self.stage_h2d(src, dst, stream, Location::caller())
    }

    #[track_caller]
    fn copy_h2d_async_retained(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        // SAFETY: the trait's contract for `dst` over `src.len()` bytes and `stream`, and this
        // method's: the caller keeps `src` alive and unchanged until `stream` next synchronises.
        Ok(unsafe {
            driver::memcpy_htod_async(dp(dst), src.as_ptr().cast(), src.len(), st(stream))
        }?)
    }

    #[track_caller]
    fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
        // SAFETY: the trait's contract for `src` over `dst.len()` bytes and `stream`, and this
        // method's: `dst` stays alive and unread until `stream` next synchronises.
        Ok(unsafe {
            driver::memcpy_dtoh_async(dst.as_mut_ptr().cast(), dp(src), dst.len(), st(stream))
        }?)
    }

    #[track_caller]
    fn copy_d2d_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: u64,
    ) -> Result<()> {
        // SAFETY: the trait's contract: both are this backend's memory over `bytes` bytes, and
        // `stream` one of its streams or 0.
        Ok(unsafe { driver::memcpy_dtod_async(dp(dst), dp(src), bytes, st(stream)) }?)
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
        let p = sys::CUDA_MEMCPY2D_st {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: dp(src),
            srcArray: std::ptr::null_mut(),
            srcPitch: src_pitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dp(dst),
            dstArray: std::ptr::null_mut(),
            dstPitch: dst_pitch,
            WidthInBytes: width_bytes,
            Height: height,
        };
        // SAFETY: both sides are device memory (the host and array pointers are null), this
        // backend's over `height` rows of their pitches by the trait's contract, as is `stream`.
        Ok(unsafe { driver::memcpy_2d_async(&p, st(stream)) }?)
    }

    #[track_caller]
    fn begin_capture(&self, stream: u64) -> Result<()> {
        use sys::CUstreamCaptureMode as M;
        let mode = match self.cfg.capture_mode {
            CaptureMode::Global => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        };
        // SAFETY: the trait's contract: `stream` is one of this backend's streams.
        unsafe { driver::stream_begin_capture(st(stream), mode) }?;
        self.captures.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    #[track_caller]
    fn end_capture(&self, stream: u64) -> Result<GraphHandle> {
        // SAFETY: the trait's contract: `stream` is one of this backend's streams.
        let (g, r) = unsafe { driver::stream_end_capture(st(stream)) };
        let _ = self
            .captures
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if let Err(e) = r {
            if !g.is_null() {
                // SAFETY: the graph the failed end handed over, owned here and destroyed once.
                let _ = unsafe { driver::graph_destroy(g) };
            }
            return Err(e.into());
        }
        // SAFETY: `g` is the graph the capture just produced, owned here.
        let r = unsafe { driver::graph_instantiate(g, 0) };
        // SAFETY: as above; the executable graph does not need it, and it is destroyed once.
        let _ = unsafe { driver::graph_destroy(g) };
        let exec = r?;
        Ok(GraphHandle(exec as u64))
    }

    #[track_caller]
    fn launch_graph(&self, graph: GraphHandle, stream: u64) -> Result<()> {
        // SAFETY: the trait's contract: `graph` came from `end_capture` and is not destroyed,
        // `stream` is one of this backend's or 0.
        unsafe { driver::graph_launch(graph.0 as sys::CUgraphExec, st(stream)) }
            .map_err(|e| self.probe(e))?;
        // Its nodes are in flight too, unnamed: the probe then names no single launch.
        self.in_flight.lock().push(fault_probe::Launched {
            kernel: graph.0,
            graph: true,
            stream,
            site: Location::caller(),
            words: SmallVec::new(),
        });
        Ok(())
    }

    #[track_caller]
    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        // SAFETY: the trait's contract: `graph` came from `end_capture`, is destroyed once and
        // not launched afterwards.
        Ok(unsafe { driver::graph_exec_destroy(graph.0 as sys::CUgraphExec) }?)
    }

    #[track_caller]
    fn abort_capture_if_active(&self, stream: u64) {
        if self.is_capturing(stream) {
            // SAFETY: the trait's contract: `stream` is one of this backend's streams.
            let (g, _) = unsafe { driver::stream_end_capture(st(stream)) };
            let _ = self
                .captures
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            if !g.is_null() {
                // SAFETY: the graph the end handed over, owned here and destroyed once.
                let _ = unsafe { driver::graph_destroy(g) };
            }
        }
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
    fn bind_to_thread(&self) -> Result<()> {
        // SAFETY: `self.ctx` is this backend's primary context, retained until drop.
        Ok(unsafe { driver::ctx_set_current(self.ctx as sys::CUcontext) }?)
    }

    #[track_caller]
    fn create_event(&self) -> Result<u64> {
        let e = driver::event_create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)?;
        Ok(e as u64)
    }

    #[track_caller]
    fn record_event(&self, event: u64, stream: u64) -> Result<()> {
        // SAFETY: the trait's contract: `event` from `create_event`, not destroyed; `stream`
        // one of this backend's or 0.
        Ok(unsafe { driver::event_record(event as sys::CUevent, st(stream)) }?)
    }

    #[track_caller]
    fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        // SAFETY: the trait's contract for `stream` and `event`, as in `record_event`.
        Ok(unsafe { driver::stream_wait_event(st(stream), event as sys::CUevent) }?)
    }

    #[track_caller]
    fn event_synchronize(&self, event: u64) -> Result<()> {
        // SAFETY: the trait's contract: `event` from `create_event`, not destroyed.
        Ok(unsafe { driver::event_synchronize(event as sys::CUevent) }
            .map_err(|e| self.probe(e))?)
    }

    #[track_caller]
    fn destroy_event(&self, event: u64) -> Result<()> {
        // SAFETY: the trait's contract: `event` from `create_event`, destroyed once and not
        // used afterwards.
        Ok(unsafe { driver::event_destroy(event as sys::CUevent) }?)
    }

    #[track_caller]
    fn host_ptr_to_device(&self, host: *mut u8) -> Result<DevicePtr> {
        let p = driver::mem_host_get_device_pointer(host.cast())?;
        Ok(DevicePtr(p))
    }

    #[track_caller]
    fn alloc_host_pinned(&self, bytes: usize) -> Result<*mut u8> {
        let p = driver::mem_alloc_host(bytes.max(1))?;
        // SAFETY: the driver just returned `bytes` of page-locked memory at `p`. The trait
        // promises zeroed memory; cuMemAllocHost does not zero.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
        Ok(p.cast())
    }

    #[track_caller]
    fn free_host_pinned(&self, ptr: *mut u8, _bytes: usize) -> Result<()> {
        // SAFETY: the trait's contract: `ptr` came from `alloc_host_pinned`, is freed once, and
        // no slice over it, nor copy reading it, outlives this call.
        Ok(unsafe { driver::mem_free_host(ptr.cast()) }?)
    }
}
