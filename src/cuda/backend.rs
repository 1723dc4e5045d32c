//! `CudaBackend`: the trait on the CUDA driver API, through cudarc's dynamically loaded `sys`
//! layer.

use super::error::check;
use super::watchdog;
use crate::backend::ledger::{by_site, SiteTotal};
use crate::backend::{
    CaptureMode, DeviceError, DevicePtr, GpuBackend, GraphHandle, KernelArg, KernelHandle,
    KernelInfo, KernelRegistry, ModuleCode, OpCache, ParamAccess, ParamInfo, Site, StreamKind,
};
use anyhow::Result;
use cudarc::driver::sys;
use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_void, CString};
use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Red-zone settings: guard bands after allocations, to catch kernels that write past the end
/// of a buffer (which CUDA itself does not notice when the neighbour is another allocation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedzoneConfig {
    /// Guard band size in bytes, rounded up to 16; 0 disables red zones.
    pub bytes: usize,
    /// Guard only allocations whose creation index is at least this (weights come first and are
    /// read-only to kernels, so skipping them keeps the cost down).
    pub min_idx: usize,
    /// Log a backtrace when the allocation with this creation index is made, so a bisected
    /// index becomes a source line.
    pub trace_idx: Option<usize>,
    /// The fill byte. Running twice with different fills separates out-of-bounds reads (the
    /// results change) from writes (the scan reports them).
    pub fill: u8,
}

impl RedzoneConfig {
    /// From `GPUTAPE_REDZONE`, `GPUTAPE_REDZONE_MIN_IDX`, `GPUTAPE_REDZONE_TRACE_IDX` and
    /// `GPUTAPE_REDZONE_FILL`, read once when a backend is built.
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Self {
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<usize>().ok());
        RedzoneConfig {
            bytes: num("GPUTAPE_REDZONE").map_or(0, |n| n.next_multiple_of(16)),
            min_idx: num("GPUTAPE_REDZONE_MIN_IDX").unwrap_or(0),
            trace_idx: num("GPUTAPE_REDZONE_TRACE_IDX"),
            fill: get("GPUTAPE_REDZONE_FILL")
                .and_then(|v| v.trim().parse::<u8>().ok())
                .unwrap_or(0xEE),
        }
    }
}

#[derive(Clone, Debug)]
pub struct CudaConfig {
    pub ordinal: usize,
    /// The mode `begin_capture` passes to `cuStreamBeginCapture`.
    pub capture_mode: CaptureMode,
    /// Flags of every stream this backend creates, the default stream included.
    pub stream_kind: StreamKind,
    pub redzone: RedzoneConfig,
    /// `GPUTAPE_DEBUG_SYNC_KERNELS=1`: synchronise after every launch.
    pub debug_sync_kernels: bool,
    /// Pinned staging ring for `copy_h2d_async`.
    pub staging_bytes: usize,
    /// Pinned arena for `copy_h2d_async` sources captured into graphs (kept until drop).
    pub capture_staging_bytes: usize,
    /// Programmatic dependent launch: launch every kernel whose PTX waits on its grid
    /// dependency (`griddepcontrol.wait`) with programmatic stream serialization, so that it may
    /// start while the kernel before it finishes. Kernels without the wait are launched the
    /// ordinary way: for them an early start would be a race. Off by default (an engine's
    /// kernels decide whether they are written for it); `GPUTAPE_PDL=1` or `replay --pdl`.
    pub pdl: bool,
    /// Start the OOM watchdog with this threshold in MiB (`GPUTAPE_OOM_WATCHDOG_MB`): three
    /// readings in a row of less free device memory than this end the process. One per
    /// process: the first backend asked starts it, and it stops when that backend is dropped.
    pub oom_watchdog_mb: Option<usize>,
    /// How often the watchdog reads free memory (`GPUTAPE_OOM_WATCHDOG_MS`, default 1000).
    pub oom_watchdog_interval: std::time::Duration,
}

impl CudaConfig {
    pub fn from_env(ordinal: usize) -> Self {
        CudaConfig {
            ordinal,
            capture_mode: CaptureMode::Global,
            stream_kind: StreamKind::Blocking,
            redzone: RedzoneConfig::from_env(),
            debug_sync_kernels: std::env::var("GPUTAPE_DEBUG_SYNC_KERNELS").as_deref() == Ok("1"),
            staging_bytes: 8 << 20,
            capture_staging_bytes: 4 << 20,
            pdl: std::env::var("GPUTAPE_PDL").as_deref() == Ok("1"),
            oom_watchdog_mb: env_num("GPUTAPE_OOM_WATCHDOG_MB"),
            oom_watchdog_interval: std::time::Duration::from_millis(
                env_num("GPUTAPE_OOM_WATCHDOG_MS").unwrap_or(1000) as u64,
            ),
        }
    }
}

fn env_num(k: &str) -> Option<usize> {
    std::env::var(k).ok().and_then(|v| v.trim().parse().ok())
}

struct AllocRecord {
    bytes: usize,
    site: Site,
}

#[derive(Clone, Copy)]
struct RedZone {
    user_ptr: u64,
    user_bytes: usize,
    pad: usize,
    idx: usize,
    site: Site,
}

/// One guard band found written by `scan_redzones`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedzoneViolation {
    /// The allocation's device address.
    pub base: u64,
    pub alloc_idx: usize,
    pub user_bytes: usize,
    /// First and last changed byte, as offsets past the end of the allocation.
    pub first: usize,
    pub last: usize,
    pub changed: usize,
    pub site: String,
}

/// Pinned memory that `copy_h2d_async` copies sources into, so the caller may drop them at
/// once even though the DMA happens later. Regions are reused once the event recorded after
/// their copy has completed.
struct Staging {
    base: *mut u8,
    cap: usize,
    head: usize,
    inflight: VecDeque<(usize, usize, u64)>,
    spare_events: Vec<u64>,
    /// Sources captured into graphs: never reused (a graph reads them at every launch).
    capture_base: *mut u8,
    capture_cap: usize,
    capture_head: usize,
}

/// The CUDA backend. See the module docs.
pub struct CudaBackend {
    cfg: CudaConfig,
    ctx: u64,
    device: i32,
    default_stream: u64,
    sm_count: u32,
    integrated: bool,
    compute_capability: (i32, i32),
    registry: Arc<KernelRegistry>,
    modules: Mutex<HashMap<String, u64>>,
    functions: RwLock<HashMap<(String, String), u64>>,
    /// (module, kernel) whose PTX waits on its grid dependency, found at module load.
    waiting_entries: Mutex<std::collections::HashSet<(String, String)>>,
    /// Those kernels' handles, once looked up: the launches `cfg.pdl` applies to.
    pdl_functions: RwLock<std::collections::HashSet<u64>>,
    ledger: Mutex<HashMap<u64, AllocRecord>>,
    alloc_seq: AtomicUsize,
    redzones: Mutex<Vec<RedZone>>,
    last_violations: Mutex<Vec<RedzoneViolation>>,
    streams: Mutex<Vec<u64>>,
    staging: Mutex<Staging>,
    /// Granularity-sized chunks mapped at fixed addresses (`place_at`): chunk base -> handle.
    fixed: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// Buffers handed out by `place_at` (freed by unmapping at drop, not by cuMemFree).
    placed: Mutex<std::collections::HashSet<u64>>,
    op_cache: OpCache,
    /// The OOM watchdog, when this backend started it (`cfg.oom_watchdog_mb`).
    watchdog: Option<watchdog::WatchdogHandle>,
    /// Launches not yet known finished, for the fault probe.
    in_flight: Mutex<super::fault_probe::InFlight>,
    /// What the first sticky fault's probe found.
    probed: Mutex<Option<super::fault_probe::FaultProbe>>,
    /// Captures begun through this backend and not yet ended: while there are any, a launch
    /// on a capturing stream is a graph node, not work in flight.
    captures: AtomicUsize,
    /// Which parameters of each kernel are pointer-sized (from the driver's layout), so a launch
    /// keeps those words for the probe without reading past a smaller parameter.
    word_params: RwLock<HashMap<u64, SmallVec<[bool; 16]>>>,
}

// SAFETY: the raw pointers inside (`Staging`'s pinned regions) are only touched under their
// mutex, and every driver handle is usable from any thread once the context is current.
unsafe impl Send for CudaBackend {}
// SAFETY: as above; all interior mutability is behind locks or atomics.
unsafe impl Sync for CudaBackend {}

macro_rules! cu {
    ($call:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: each argument is a live driver handle owned by this backend, a device address
        // the caller passed (the driver validates it), or a pointer to a local that outlives
        // the call; the context is current on this thread (construction or bind_to_thread).
        let r = unsafe { sys::$call($($arg),*) };
        check(stringify!($call), r)
    }};
}

/// Free and total memory of device `ordinal` as the driver reports them, without a backend:
/// for a launcher deciding what fits before it builds one, and for the OOM watchdog's thread.
/// The device's primary context is retained and made current on this thread for the query
/// only (whatever was current before is current again after).
pub fn device_memory(ordinal: usize) -> Result<(usize, usize)> {
    if !super::driver_present() {
        return Err(super::ProbeError::NoDriver.into());
    }
    cu!(cuInit(0))?;
    let mut device = 0i32;
    cu!(cuDeviceGet(&mut device, ordinal as i32))?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    cu!(cuDevicePrimaryCtxRetain(&mut ctx, device))?;
    let r = (|| {
        cu!(cuCtxPushCurrent_v2(ctx))?;
        let (mut free, mut total) = (0usize, 0usize);
        let q = cu!(cuMemGetInfo_v2(&mut free, &mut total));
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        let _ = cu!(cuCtxPopCurrent_v2(&mut popped));
        q.map(|()| (free, total))
    })();
    let r = r.map_err(anyhow::Error::from);
    let _ = cu!(cuDevicePrimaryCtxRelease_v2(device));
    r
}

/// Free memory of device `ordinal` as the watchdog should see it: the driver's figure, or host
/// `MemAvailable` on an integrated device (never on a guess: an unknown device counts as
/// discrete). `None` when the driver does not answer.
pub fn polled_free_memory(ordinal: usize) -> Option<usize> {
    let (free, _) = device_memory(ordinal).ok()?;
    let integrated = (|| {
        let mut device = 0i32;
        cu!(cuDeviceGet(&mut device, ordinal as i32)).ok()?;
        let mut v = 0i32;
        cu!(cuDeviceGetAttribute(
            &mut v,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_INTEGRATED,
            device
        ))
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
        cu!(cuInit(0))?;
        let mut device = 0i32;
        cu!(cuDeviceGet(&mut device, cfg.ordinal as i32))?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        cu!(cuDevicePrimaryCtxRetain(&mut ctx, device))?;
        cu!(cuCtxSetCurrent(ctx))?;
        let attr = |a| -> Result<i32> {
            let mut v = 0i32;
            cu!(cuDeviceGetAttribute(&mut v, a, device))?;
            Ok(v)
        };
        use sys::CUdevice_attribute as A;
        let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let integrated = attr(A::CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0;
        let cc = (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let mut staging_base: *mut c_void = std::ptr::null_mut();
        cu!(cuMemAllocHost_v2(&mut staging_base, cfg.staging_bytes))?;
        let mut capture_base: *mut c_void = std::ptr::null_mut();
        cu!(cuMemAllocHost_v2(
            &mut capture_base,
            cfg.capture_staging_bytes
        ))?;
        let mut b = CudaBackend {
            ctx: ctx as u64,
            device,
            default_stream: 0,
            sm_count,
            integrated,
            compute_capability: cc,
            registry: Arc::new(KernelRegistry::new()),
            modules: Mutex::new(HashMap::new()),
            functions: RwLock::new(HashMap::new()),
            waiting_entries: Mutex::new(Default::default()),
            pdl_functions: RwLock::new(Default::default()),
            ledger: Mutex::new(HashMap::new()),
            alloc_seq: AtomicUsize::new(0),
            redzones: Mutex::new(Vec::new()),
            last_violations: Mutex::new(Vec::new()),
            streams: Mutex::new(Vec::new()),
            staging: Mutex::new(Staging {
                base: staging_base.cast(),
                cap: cfg.staging_bytes,
                head: 0,
                inflight: VecDeque::new(),
                spare_events: Vec::new(),
                capture_base: capture_base.cast(),
                capture_cap: cfg.capture_staging_bytes,
                capture_head: 0,
            }),
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
        let mut s: sys::CUstream = std::ptr::null_mut();
        cu!(cuStreamCreate(&mut s, flags))?;
        self.streams.lock().push(s as u64);
        Ok(s as u64)
    }

    /// Load a module from PTX text. `source` is kept with it when known, so a recorder can
    /// embed the code that ran.
    pub fn load_ptx(&self, name: &str, ptx: &str, source: Option<&str>) -> Result<()> {
        let c = CString::new(ptx).map_err(|_| anyhow::anyhow!("PTX of {name} contains a NUL"))?;
        let mut m: sys::CUmodule = std::ptr::null_mut();
        cu!(cuModuleLoadData(&mut m, c.as_ptr().cast()))
            .map_err(|e| e.with(format!("module {name}")))?;
        if let Some(old) = self.modules.lock().insert(name.to_string(), m as u64) {
            let _ = cu!(cuModuleUnload(old as sys::CUmodule));
            let mut pdl = self.pdl_functions.write();
            self.functions.write().retain(|(mname, _), f| {
                let keep = mname != name;
                if !keep {
                    pdl.remove(f);
                }
                keep
            });
        }
        {
            let mut waiting = self.waiting_entries.lock();
            waiting.retain(|(mname, _)| mname != name);
            for entry in entries_waiting_on_grid(ptx) {
                waiting.insert((name.to_string(), entry.to_string()));
            }
        }
        self.registry.add_module(ModuleCode {
            name: name.to_string(),
            source: source.map(str::to_string),
            ptx: Some(ptx.to_string()),
        });
        Ok(())
    }

    /// Compile CUDA C with NVRTC for this device and load it. FMA contraction is off, so the
    /// kernels do the same roundings as their CPU twins on the mock.
    pub fn load_source(&self, name: &str, source: &str) -> Result<()> {
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![format!(
                "--gpu-architecture=compute_{}{}",
                self.compute_capability.0, self.compute_capability.1
            )],
            name: Some(format!("{name}.cu")),
            fmad: Some(false),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, opts)
            .map_err(|e| anyhow::anyhow!("NVRTC could not compile module {name}: {e:?}"))?;
        self.load_ptx(name, &ptx.to_src(), Some(source))
    }

    /// Whether `launch` starts this kernel with programmatic dependent launch (`cfg.pdl` is on
    /// and its PTX waits on its grid dependency).
    pub fn launches_programmatically(&self, k: KernelHandle) -> bool {
        self.cfg.pdl && self.pdl_functions.read().contains(&k.0)
    }

    /// (kernels `launch` starts with programmatic dependent launch, kernels looked up).
    pub fn programmatic_kernels(&self) -> (usize, usize) {
        let looked_up = self.functions.read().len();
        let pdl = if self.cfg.pdl {
            self.pdl_functions.read().len()
        } else {
            0
        };
        (pdl, looked_up)
    }

    /// `cuLaunchKernelEx` with programmatic stream serialization allowed: the kernel may begin
    /// while its predecessor in the stream runs, and waits for it in `griddepcontrol.wait`.
    fn launch_programmatic(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        // SAFETY: a plain C struct and union; all-zero is a valid value (id 0 is "ignore").
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid[0],
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block[0],
            blockDimY: block[1],
            blockDimZ: block[2],
            sharedMemBytes: shared_mem,
            hStream: st(stream),
            attrs: &mut attr,
            numAttrs: 1,
        };
        cu!(cuLaunchKernelEx(
            &config,
            func.0 as sys::CUfunction,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        ))?;
        Ok(())
    }

    /// Each parameter's offset and size, from the driver.
    fn param_layout(f: u64) -> Vec<ParamInfo> {
        let mut out = Vec::new();
        for i in 0.. {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: `f` is a CUfunction from cuModuleGetFunction on a loaded module; the
            // out-pointers are locals. Past the last parameter the driver returns an error.
            let r =
                unsafe { sys::cuFuncGetParamInfo(f as sys::CUfunction, i, &mut off, &mut size) };
            if r != sys::CUresult::CUDA_SUCCESS {
                break;
            }
            out.push(ParamInfo {
                offset: off as u32,
                size: size as u32,
                access: ParamAccess::Unknown,
            });
        }
        out
    }

    fn vmm_prop(&self) -> sys::CUmemAllocationProp {
        // SAFETY: a plain C struct; all-zero is a valid value for every field (the enums' zero
        // variants exist, the pointer is null), and the fields that matter are set below.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.device;
        prop
    }

    /// Allocate `bytes` at exactly `addr`, reserving and mapping the driver's virtual address
    /// range there (granularity-sized chunks, shared by buffers that share one). For replaying
    /// traces whose buffers hold device addresses. Fails, naming the address, when the range is
    /// taken in this process.
    #[track_caller]
    pub fn place_at(&self, addr: u64, bytes: usize) -> Result<DevicePtr> {
        let prop = self.vmm_prop();
        let mut gran = 0usize;
        cu!(cuMemGetAllocationGranularity(
            &mut gran,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
        ))?;
        let g = gran as u64;
        let (lo, hi) = (addr / g * g, (addr + bytes.max(1) as u64).div_ceil(g) * g);
        let mut fixed = self.fixed.lock();
        let mut chunk = lo;
        while chunk < hi {
            if let std::collections::btree_map::Entry::Vacant(slot) = fixed.entry(chunk) {
                let mut got: sys::CUdeviceptr = 0;
                cu!(cuMemAddressReserve(&mut got, gran, gran, chunk, 0))
                    .map_err(|e| e.with(format!("reserving {chunk:#x}")))?;
                if got != chunk {
                    let _ = cu!(cuMemAddressFree(got, gran));
                    anyhow::bail!(
                        "cannot replay at the recorded address {addr:#x}: the driver will not reserve {chunk:#x} in this process (offered {got:#x})"
                    );
                }
                let mut h: sys::CUmemGenericAllocationHandle = 0;
                if let Err(e) = cu!(cuMemCreate(&mut h, gran, &prop, 0)) {
                    let _ = cu!(cuMemAddressFree(chunk, gran));
                    return Err(e.into());
                }
                let access = sys::CUmemAccessDesc {
                    location: prop.location,
                    flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                };
                let mapped = cu!(cuMemMap(chunk, gran, 0, h, 0))
                    .and_then(|_| cu!(cuMemSetAccess(chunk, gran, &access, 1)));
                if let Err(e) = mapped {
                    let _ = cu!(cuMemUnmap(chunk, gran));
                    let _ = cu!(cuMemRelease(h));
                    let _ = cu!(cuMemAddressFree(chunk, gran));
                    return Err(e.into());
                }
                slot.insert(h);
            }
            chunk += g;
        }
        self.placed.lock().insert(addr);
        self.ledger.lock().insert(
            addr,
            AllocRecord {
                bytes,
                site: Location::caller(),
            },
        );
        Ok(DevicePtr(addr))
    }

    /// What the last `scan_redzones` found.
    pub fn last_redzone_violations(&self) -> Vec<RedzoneViolation> {
        self.last_violations.lock().clone()
    }

    /// Live allocations by site, biggest first.
    pub fn live_by_site(&self) -> Vec<SiteTotal> {
        by_site(self.ledger.lock().values().map(|r| (r.site, r.bytes)))
    }

    fn mem_info(&self) -> Result<(usize, usize)> {
        let (mut free, mut total) = (0usize, 0usize);
        cu!(cuMemGetInfo_v2(&mut free, &mut total))?;
        Ok((free, total))
    }

    fn sync_stream(&self, stream: u64) -> Result<()> {
        cu!(cuStreamSynchronize(stream as sys::CUstream)).map_err(|e| self.probe(e))?;
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
        let p = super::fault_probe::probe(
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
    pub fn fault_probe(&self) -> Option<super::fault_probe::FaultProbe> {
        self.probed.lock().clone()
    }

    fn is_capturing(&self, stream: u64) -> bool {
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: `stream` is a stream handle (or 0, the legacy stream); `st` is a local.
        let r = unsafe { sys::cuStreamIsCapturing(stream as sys::CUstream, &mut st) };
        r == sys::CUresult::CUDA_SUCCESS
            && st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // SAFETY: make this backend's context current on the dropping thread before releasing.
        let _ = unsafe { sys::cuCtxSetCurrent(self.ctx as sys::CUcontext) };
        let swept = self.sweep_unreleased();
        if swept > 0 {
            tracing::warn!(
                "CudaBackend dropped with {swept} allocation(s) no owner released (an abandoned \
                 load, or an owner that never registered)"
            );
        }
        let st = self.staging.get_mut();
        for (_, _, ev) in st.inflight.drain(..) {
            let _ = cu!(cuEventSynchronize(ev as sys::CUevent));
            let _ = cu!(cuEventDestroy_v2(ev as sys::CUevent));
        }
        for ev in st.spare_events.drain(..) {
            let _ = cu!(cuEventDestroy_v2(ev as sys::CUevent));
        }
        let _ = cu!(cuMemFreeHost(st.base.cast()));
        let _ = cu!(cuMemFreeHost(st.capture_base.cast()));
        let gran = {
            let prop = self.vmm_prop();
            let mut g = 0usize;
            let _ = cu!(cuMemGetAllocationGranularity(
                &mut g,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
            ));
            g
        };
        for (chunk, h) in std::mem::take(self.fixed.get_mut()) {
            let _ = cu!(cuMemUnmap(chunk, gran));
            let _ = cu!(cuMemRelease(h));
            let _ = cu!(cuMemAddressFree(chunk, gran));
        }
        for s in self.streams.get_mut().drain(..) {
            let _ = cu!(cuStreamDestroy_v2(s as sys::CUstream));
        }
        for (_, m) in self.modules.get_mut().drain() {
            let _ = cu!(cuModuleUnload(m as sys::CUmodule));
        }
        let _ = cu!(cuDevicePrimaryCtxRelease_v2(self.device));
    }
}

fn dp(p: DevicePtr) -> sys::CUdeviceptr {
    p.0 as sys::CUdeviceptr
}

fn st(s: u64) -> sys::CUstream {
    s as sys::CUstream
}

impl GpuBackend for CudaBackend {
    #[track_caller]
    fn alloc(&self, bytes: usize) -> Result<DevicePtr> {
        let site = Location::caller();
        let idx = self.alloc_seq.fetch_add(1, Ordering::Relaxed);
        let rz = &self.cfg.redzone;
        let pad = if rz.bytes > 0 && idx >= rz.min_idx {
            rz.bytes
        } else {
            0
        };
        let mut p: sys::CUdeviceptr = 0;
        cu!(cuMemAlloc_v2(&mut p, bytes + pad)).map_err(|e| {
            e.with(format!(
                "{bytes} bytes for {}",
                crate::backend::site_string(site)
            ))
        })?;
        if pad > 0 {
            if let Err(e) = cu!(cuMemsetD8_v2(p + bytes as u64, rz.fill, pad)) {
                let _ = cu!(cuMemFree_v2(p));
                return Err(e.into());
            }
            self.redzones.lock().push(RedZone {
                user_ptr: p,
                user_bytes: bytes,
                pad,
                idx,
                site,
            });
            if rz.trace_idx == Some(idx) {
                tracing::warn!(
                    "red-zone trace: allocation #{idx} ({bytes} bytes) at {}\n{}",
                    crate::backend::site_string(site),
                    std::backtrace::Backtrace::force_capture()
                );
            }
        }
        self.ledger.lock().insert(p, AllocRecord { bytes, site });
        Ok(DevicePtr(p))
    }

    #[track_caller]
    fn alloc_managed(&self, bytes: usize) -> Result<DevicePtr> {
        let site = Location::caller();
        self.alloc_seq.fetch_add(1, Ordering::Relaxed);
        let mut p: sys::CUdeviceptr = 0;
        cu!(cuMemAllocManaged(
            &mut p,
            bytes,
            sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32
        ))?;
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
        cu!(cuMemFree_v2(dp(ptr))).map_err(|e| {
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
        cu!(cuMemcpyHtoD_v2(dp(dst), src.as_ptr().cast(), src.len())).map_err(|e| self.probe(e))?;
        self.settled_all();
        Ok(())
    }

    #[track_caller]
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        cu!(cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), dp(src), dst.len()))
            .map_err(|e| self.probe(e))?;
        self.settled_all();
        Ok(())
    }

    #[track_caller]
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> Result<()> {
        // Synchronous only with respect to the host for most sizes: nothing retires here.
        Ok(cu!(cuMemcpyDtoD_v2(dp(dst), dp(src), bytes)).map_err(|e| self.probe(e))?)
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
            self.launch_programmatic(func, grid, block, shared_mem, stream, params)
                .map_err(|e| match e.downcast::<DeviceError>() {
                    Ok(d) => anyhow::Error::from(self.probe(d)),
                    Err(e) => e,
                })?;
        } else {
            cu!(cuLaunchKernel(
                func.0 as sys::CUfunction,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem,
                st(stream),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            ))
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
            self.in_flight.lock().push(super::fault_probe::Launched {
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
        let key = (module.to_string(), func_name.to_string());
        if let Some(f) = self.functions.read().get(&key) {
            return Ok(KernelHandle(*f));
        }
        let site = crate::backend::site_string(Location::caller());
        let unresolved = |why: String| {
            self.registry
                .note_lookup(module, func_name, site.clone(), Some(why));
        };
        let Some(m) = self.modules.lock().get(module).copied() else {
            unresolved(format!("module {module} is not loaded"));
            anyhow::bail!(
                "kernel {module}::{func_name} looked up at {site}: module {module} is not loaded"
            );
        };
        let name = CString::new(func_name)?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        if let Err(e) = cu!(cuModuleGetFunction(
            &mut f,
            m as sys::CUmodule,
            name.as_ptr()
        )) {
            unresolved(format!("module {module} has no kernel {func_name} ({e})"));
            return Err(e
                .with(format!("{module}::{func_name}, looked up at {site}"))
                .into());
        }
        self.registry
            .note_lookup(module, func_name, site.clone(), None);
        let handle = KernelHandle(f as u64);
        let params = Self::param_layout(f as u64);
        self.word_params
            .write()
            .insert(f as u64, params.iter().map(|p| p.size == 8).collect());
        self.registry.add_kernel(
            handle,
            KernelInfo {
                module: module.to_string(),
                name: func_name.to_string(),
                params,
            },
        );
        if self.waiting_entries.lock().contains(&key) {
            self.pdl_functions.write().insert(f as u64);
        }
        self.functions.write().insert(key, f as u64);
        Ok(handle)
    }

    #[track_caller]
    fn op_cache(&self) -> &OpCache {
        &self.op_cache
    }

    #[track_caller]
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        cu!(cuMemsetD8_v2(dp(ptr), value, bytes)).map_err(|e| self.probe(e))?;
        self.settled_all();
        Ok(())
    }

    #[track_caller]
    fn memset_async(&self, ptr: DevicePtr, value: u8, bytes: usize, stream: u64) -> Result<()> {
        Ok(cu!(cuMemsetD8Async(dp(ptr), value, bytes, st(stream)))?)
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
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        cu!(cuTensorMapEncodeTiled(
            &mut map,
            dtype,
            desc.rank() as u32,
            base.0 as *mut c_void,
            desc.dims.as_ptr(),
            desc.strides.as_ptr(),
            desc.box_dims.as_ptr(),
            desc.element_strides.as_ptr(),
            interleave,
            swizzle,
            l2,
            oob
        ))
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
            if let Err(e) = cu!(cuMemFree_v2(*p)) {
                if e.is_sticky() {
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
        cu!(cuMemcpyDtoHAsync_v2(
            dst.as_mut_ptr().cast(),
            dp(src),
            dst.len(),
            st(stream)
        ))?;
        self.sync_stream(stream)
    }

    #[track_caller]
    fn stream_is_capturing(&self, stream: u64) -> bool {
        self.is_capturing(stream)
    }

    #[track_caller]
    fn scan_redzones(&self) -> Result<usize> {
        let fill = self.cfg.redzone.fill;
        let zones: Vec<RedZone> = self.redzones.lock().clone();
        let mut bad = Vec::new();
        let mut host = Vec::new();
        for z in &zones {
            host.clear();
            host.resize(z.pad, 0);
            let end = z.user_ptr + z.user_bytes as u64;
            cu!(cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), end, z.pad))?;
            let Some(first) = host.iter().position(|b| *b != fill) else {
                continue;
            };
            let last = host.iter().rposition(|b| *b != fill).unwrap_or(first);
            let v = RedzoneViolation {
                base: z.user_ptr,
                alloc_idx: z.idx,
                user_bytes: z.user_bytes,
                first,
                last,
                changed: host.iter().filter(|b| **b != fill).count(),
                site: crate::backend::site_string(z.site),
            };
            tracing::error!(
                "red zone written: allocation #{} ({} bytes, from {}): bytes {}..={} past its end \
                 changed ({} of {}), first value {:#04x}",
                v.alloc_idx,
                v.user_bytes,
                v.site,
                v.first,
                v.last,
                v.changed,
                z.pad,
                host[first]
            );
            bad.push(v);
            // Refill, so a repeat offender is reported once per scan.
            cu!(cuMemsetD8_v2(end, fill, z.pad))?;
        }
        let n = bad.len();
        *self.last_violations.lock() = bad;
        Ok(n)
    }

    #[track_caller]
    fn redzone_hits(&self) -> Vec<crate::backend::RedzoneHit> {
        self.last_violations
            .lock()
            .iter()
            .map(|v| crate::backend::RedzoneHit {
                base: DevicePtr(v.base),
                first: v.first,
                last: v.last,
            })
            .collect()
    }

    #[track_caller]
    fn poison_redzones(&self, lo: usize, hi: usize) -> Result<()> {
        let zones: Vec<RedZone> = self.redzones.lock().clone();
        for z in &zones {
            let v = if (lo..hi).contains(&z.idx) {
                0xEE
            } else {
                0x00
            };
            cu!(cuMemsetD8_v2(z.user_ptr + z.user_bytes as u64, v, z.pad))?;
        }
        Ok(())
    }

    #[track_caller]
    fn debug_sync_kernels(&self) -> bool {
        self.cfg.debug_sync_kernels
    }

    /// NVRTC compiles the source for this device; each kernel's declared access goes into
    /// the registry (the driver reports only parameter sizes). CPU bodies are not used here.
    #[track_caller]
    fn load_module(&self, module: &crate::backend::ModuleDesc) -> Result<()> {
        let Some(src) = &module.source else {
            anyhow::bail!("module {} has no CUDA source to compile", module.name)
        };
        self.load_source(&module.name, src)?;
        for k in &module.kernels {
            self.registry
                .declare_access(&module.name, &k.name, &k.params);
        }
        Ok(())
    }

    #[track_caller]
    fn kernel_registry(&self) -> Option<Arc<KernelRegistry>> {
        Some(self.registry.clone())
    }

    #[track_caller]
    fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        let len = src.len();
        if len == 0 {
            return Ok(());
        }
        let mut s = self.staging.lock();
        if self.is_capturing(stream) {
            // A graph reads its memcpy source at every launch: give the bytes a home that is
            // never reused, so each launch copies what was captured.
            let start = s.capture_head.next_multiple_of(256);
            if start + len > s.capture_cap {
                anyhow::bail!(
                    "copy_h2d_async at {} inside a capture: capture staging exhausted ({} of {} bytes used, {len} more needed)",
                    crate::backend::site_string(Location::caller()),
                    s.capture_head,
                    s.capture_cap
                );
            }
            // SAFETY: [start, start+len) lies inside the capture arena (checked above), which
            // is pinned memory owned by this backend and disjoint from `src`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), s.capture_base.add(start), len) };
            s.capture_head = start + len;
            let from = s.capture_base as usize + start;
            return Ok(cu!(cuMemcpyHtoDAsync_v2(
                dp(dst),
                from as *const c_void,
                len,
                st(stream)
            ))?);
        }
        if len > s.cap / 2 {
            // Too big to stage: copy and wait, which keeps the promise the slow way.
            cu!(cuMemcpyHtoDAsync_v2(
                dp(dst),
                src.as_ptr().cast(),
                len,
                st(stream)
            ))?;
            return self.sync_stream(stream);
        }
        let mut start = s.head.next_multiple_of(256);
        if start + len > s.cap {
            start = 0;
        }
        // Wait for every in-flight copy whose staging bytes we are about to overwrite.
        let mut i = 0;
        while i < s.inflight.len() {
            let (a, b, ev) = s.inflight[i];
            if a < start + len && start < b {
                cu!(cuEventSynchronize(ev as sys::CUevent))?;
                s.inflight.remove(i);
                s.spare_events.push(ev);
            } else {
                i += 1;
            }
        }
        // SAFETY: [start, start+len) is inside the staging ring (len <= cap/2, start+len <=
        // cap), no in-flight copy reads it any more (waited above), and `src` is the caller's.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), s.base.add(start), len) };
        let from = s.base as usize + start;
        cu!(cuMemcpyHtoDAsync_v2(
            dp(dst),
            from as *const c_void,
            len,
            st(stream)
        ))?;
        let ev = match s.spare_events.pop() {
            Some(e) => e,
            None => {
                let mut e: sys::CUevent = std::ptr::null_mut();
                cu!(cuEventCreate(
                    &mut e,
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
                ))?;
                e as u64
            }
        };
        cu!(cuEventRecord(ev as sys::CUevent, st(stream)))?;
        s.inflight.push_back((start, start + len, ev));
        s.head = start + len;
        Ok(())
    }

    #[track_caller]
    fn copy_h2d_async_retained(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        Ok(cu!(cuMemcpyHtoDAsync_v2(
            dp(dst),
            src.as_ptr().cast(),
            src.len(),
            st(stream)
        ))?)
    }

    #[track_caller]
    fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
        Ok(cu!(cuMemcpyDtoHAsync_v2(
            dst.as_mut_ptr().cast(),
            dp(src),
            dst.len(),
            st(stream)
        ))?)
    }

    #[track_caller]
    fn copy_d2d_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: u64,
    ) -> Result<()> {
        Ok(cu!(cuMemcpyDtoDAsync_v2(
            dp(dst),
            dp(src),
            bytes,
            st(stream)
        ))?)
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
        Ok(cu!(cuMemcpy2DAsync_v2(&p, st(stream)))?)
    }

    #[track_caller]
    fn begin_capture(&self, stream: u64) -> Result<()> {
        use sys::CUstreamCaptureMode as M;
        let mode = match self.cfg.capture_mode {
            CaptureMode::Global => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        };
        cu!(cuStreamBeginCapture_v2(st(stream), mode))?;
        self.captures.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    #[track_caller]
    fn end_capture(&self, stream: u64) -> Result<GraphHandle> {
        let mut g: sys::CUgraph = std::ptr::null_mut();
        let r = cu!(cuStreamEndCapture(st(stream), &mut g));
        let _ = self
            .captures
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if let Err(e) = r {
            if !g.is_null() {
                let _ = cu!(cuGraphDestroy(g));
            }
            return Err(e.into());
        }
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        let r = cu!(cuGraphInstantiateWithFlags(&mut exec, g, 0));
        let _ = cu!(cuGraphDestroy(g));
        r?;
        Ok(GraphHandle(exec as u64))
    }

    #[track_caller]
    fn launch_graph(&self, graph: GraphHandle, stream: u64) -> Result<()> {
        cu!(cuGraphLaunch(graph.0 as sys::CUgraphExec, st(stream))).map_err(|e| self.probe(e))?;
        // Its nodes are in flight too, unnamed: the probe then names no single launch.
        self.in_flight.lock().push(super::fault_probe::Launched {
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
        Ok(cu!(cuGraphExecDestroy(graph.0 as sys::CUgraphExec))?)
    }

    #[track_caller]
    fn abort_capture_if_active(&self, stream: u64) {
        if self.is_capturing(stream) {
            let mut g: sys::CUgraph = std::ptr::null_mut();
            let _ = cu!(cuStreamEndCapture(st(stream), &mut g));
            let _ = self
                .captures
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            if !g.is_null() {
                let _ = cu!(cuGraphDestroy(g));
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
        Ok(cu!(cuCtxSetCurrent(self.ctx as sys::CUcontext))?)
    }

    #[track_caller]
    fn create_event(&self) -> Result<u64> {
        let mut e: sys::CUevent = std::ptr::null_mut();
        cu!(cuEventCreate(
            &mut e,
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
        ))?;
        Ok(e as u64)
    }

    #[track_caller]
    fn record_event(&self, event: u64, stream: u64) -> Result<()> {
        Ok(cu!(cuEventRecord(event as sys::CUevent, st(stream)))?)
    }

    #[track_caller]
    fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        Ok(cu!(cuStreamWaitEvent(
            st(stream),
            event as sys::CUevent,
            0
        ))?)
    }

    #[track_caller]
    fn event_synchronize(&self, event: u64) -> Result<()> {
        Ok(cu!(cuEventSynchronize(event as sys::CUevent)).map_err(|e| self.probe(e))?)
    }

    #[track_caller]
    fn destroy_event(&self, event: u64) -> Result<()> {
        Ok(cu!(cuEventDestroy_v2(event as sys::CUevent))?)
    }

    #[track_caller]
    fn host_ptr_to_device(&self, host: *mut u8) -> Result<DevicePtr> {
        let mut p: sys::CUdeviceptr = 0;
        cu!(cuMemHostGetDevicePointer_v2(&mut p, host.cast(), 0))?;
        Ok(DevicePtr(p))
    }

    #[track_caller]
    fn alloc_host_pinned(&self, bytes: usize) -> Result<*mut u8> {
        let mut p: *mut c_void = std::ptr::null_mut();
        cu!(cuMemAllocHost_v2(&mut p, bytes.max(1)))?;
        // SAFETY: the driver just returned `bytes` of page-locked memory at `p`. The trait
        // promises zeroed memory; cuMemAllocHost does not zero.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
        Ok(p.cast())
    }

    #[track_caller]
    fn free_host_pinned(&self, ptr: *mut u8, _bytes: usize) -> Result<()> {
        Ok(cu!(cuMemFreeHost(ptr.cast()))?)
    }
}

/// The kernels (`.entry` names) of a PTX module whose bodies contain `griddepcontrol.wait`: the
/// ones written to be launched with programmatic dependent launch. A device function that
/// waits is inlined into its kernels at `-O3`, which is how the model's kernels get it.
pub(crate) fn entries_waiting_on_grid(ptx: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        let after = &rest[at + ".entry ".len()..];
        let name = after
            .split(|c: char| c == '(' || c.is_whitespace())
            .next()
            .unwrap_or("");
        let body_end = after.find(".entry ").unwrap_or(after.len());
        if after[..body_end].contains("griddepcontrol.wait") && !name.is_empty() {
            out.push(name);
        }
        rest = &after[body_end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::entries_waiting_on_grid;

    #[test]
    fn finds_the_kernels_that_wait_on_their_grid_dependency() {
        let ptx = "
.version 8.8
.target sm_90
.address_size 64
.visible .entry first(
	.param .u64 first_param_0
)
{
	griddepcontrol.launch_dependents;
	griddepcontrol.wait;
	ret;
}
.visible .entry second(
	.param .u64 second_param_0
)
{
	ret;
}
.visible .entry third()
{
	griddepcontrol.wait;
}
";
        assert_eq!(entries_waiting_on_grid(ptx), ["first", "third"]);
        assert!(entries_waiting_on_grid("").is_empty());
        assert!(entries_waiting_on_grid(".entry").is_empty());
    }
}
