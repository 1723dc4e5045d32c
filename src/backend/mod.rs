//! The `GpuBackend` trait and the plain types it speaks in.
//!
//! Everything else in gputape is written against this trait: the mock and CUDA backends
//! implement it, the recorder wraps it, the replayer drives it. Method names, argument shapes
//! and contracts follow the engine trait gputape was built for, so a recorder can sit between
//! such an engine and its backend unnoticed.
//!
//! Every method carries `#[track_caller]`, on the declaration and on every impl: callers hold
//! `&dyn GpuBackend`, and only the declaration's attribute lets `Location::caller()` see through
//! the vtable to the line that made the call.

#![warn(missing_docs)]

mod boxed;
mod capture;
mod collective;
mod error;
pub mod image;
pub mod ledger;
mod module;
mod op_cache;
pub mod probe;
mod registry;
mod staging;
mod teardown;
pub mod tensormap;
mod types;

pub use capture::*;
pub use collective::{
    reduce_into, CollDtype, Collective, CommHandle, CommUniqueId, Exchange, Numbering, ReduceOp,
};
pub use error::{device_error, driver_code, DeviceError, FaultAlloc};
pub use module::{f32_bytes, HostBody, HostCtx, HostFault, KernelDesc, ModuleDesc};
pub use op_cache::OpCache;
pub use registry::{
    ElemType, KernelAudit, KernelInfo, KernelLookup, KernelRegistry, ModuleCode, ParamAccess,
    ParamInfo,
};
pub use staging::{cores, Staging, PARALLEL_FROM};
pub use teardown::{ReleaseFailure, Releases, TeardownError};
pub use tensormap::{TensorMapDesc, TensorMapDtype, TensorMapImage, TENSOR_MAP_BYTES};
pub use types::*;

use anyhow::Result;
use std::ffi::c_void;
use std::sync::Arc;

/// Something a model owns on the device, released explicitly at teardown.
pub trait ModelResource<G: ?Sized> {
    /// A human name for teardown reports and error attribution.
    fn label(&self) -> &'static str;
    /// Give back everything this owns. Idempotent: teardown calls it, a Drop backstop may call
    /// it again. A failed release does not stop the others: each is attempted once, and the
    /// failures come back together as a `TeardownError`.
    fn release(&mut self, gpu: &G) -> Result<()>;
}

/// The GPU as an inference engine sees it.
///
/// Streams, events and graphs are `u64` handles; stream `0` is the legacy NULL stream.
/// Synchronous copies and memsets (`copy_h2d`, `copy_d2h`, `copy_d2d`, `memset`) run on the
/// legacy stream and return when done.
pub trait GpuBackend: Send + Sync {
    /// Allocate `bytes` of device memory. Attributed to the caller's line in the ledger.
    #[track_caller]
    fn alloc(&self, bytes: usize) -> Result<DevicePtr>;

    /// Allocate managed (unified) memory: slower than device memory, but it can exceed the
    /// device's physical memory instead of failing.
    #[track_caller]
    fn alloc_managed(&self, bytes: usize) -> Result<DevicePtr>;

    /// Free an allocation by its base address.
    #[track_caller]
    fn free(&self, ptr: DevicePtr) -> Result<()>;

    /// Host to device, synchronous.
    #[track_caller]
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> Result<()>;

    /// Device to host, synchronous. Orders only against the legacy stream's work; use
    /// `copy_d2h_on_stream` to read what a kernel on another stream wrote.
    #[track_caller]
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()>;

    /// Device to device, synchronous.
    #[track_caller]
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> Result<()>;

    /// Launch a kernel. `params[i]` points at the i-th argument's value, laid out as the
    /// kernel declares it (the registry knows the layout).
    #[track_caller]
    fn launch(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        params: &mut [*mut c_void],
    ) -> Result<()>;

    /// Block the host until everything enqueued on `stream` has finished.
    #[track_caller]
    fn synchronize(&self, stream: u64) -> Result<()>;

    /// The stream this backend's work goes to unless told otherwise.
    #[track_caller]
    fn default_stream(&self) -> u64;

    /// Look up a loaded kernel. `#[track_caller]` so an unresolved lookup names the line that
    /// asked, which is what makes the failure actionable.
    #[track_caller]
    fn kernel(&self, module: &str, func_name: &str) -> Result<KernelHandle>;

    /// This backend's memoized handles and scratch. Required, so no backend can forget to give
    /// ops a place to cache what belongs to it.
    #[track_caller]
    fn op_cache(&self) -> &OpCache;

    /// Fill device memory with a byte, synchronously.
    #[track_caller]
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<()>;

    /// Fill device memory with a byte, enqueued on `stream`.
    #[track_caller]
    fn memset_async(&self, ptr: DevicePtr, value: u8, bytes: usize, stream: u64) -> Result<()>;

    /// Bytes of device memory in all, as the driver reports it (the mock: its configured
    /// size).
    #[track_caller]
    fn total_memory(&self) -> Result<usize>;

    /// Bytes an allocation can still get now: on CUDA the driver's free figure, or the host's
    /// `MemAvailable` where that is larger on an integrated GPU; on the mock the configured
    /// size less live bytes. What an engine sizes its KV cache from.
    #[track_caller]
    fn free_memory(&self) -> Result<usize>;

    /// Number of SMs, from the device. Callers resolve it once, not per launch.
    #[track_caller]
    fn sm_count(&self) -> Result<u32>;

    // ---- provided ----

    /// Teardown backstop: free every allocation nobody released and return how many there
    /// were. 0 for backends without a ledger.
    #[track_caller]
    fn sweep_unreleased(&self) -> usize {
        0
    }

    /// Live device bytes, for backends that keep a ledger.
    #[track_caller]
    fn live_bytes(&self) -> Option<usize> {
        None
    }

    /// Live memory by allocating call site, biggest first.
    #[track_caller]
    fn alloc_report(&self, _top_n: usize, _min_mb: usize) -> Option<String> {
        None
    }

    /// Synchronous device-to-host copy ordered after the work already on `stream`, so the
    /// bytes reflect kernels enqueued there. Default: synchronise the stream, then copy.
    #[track_caller]
    fn copy_d2h_on_stream(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
        self.synchronize(stream)?;
        self.copy_d2h(src, dst)
    }

    /// Launch with arguments that say what they are. Default: give every argument its own
    /// 8-byte-aligned slot and forward to `launch`.
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
        let mut slots = pack_args(args);
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| s.as_mut_ptr().cast::<c_void>())
            .collect();
        self.launch(func, grid, block, shared_mem, stream, &mut params)
    }

    /// The parameter layout of kernel `func` (each parameter's offset, size and access), for
    /// a recorder to record a raw `launch`'s arguments: a raw launch passes only pointers to
    /// values, and nothing but the backend knows how wide each is. gputape's backends answer
    /// from their kernel registries; a backend of your own should too. Default `None`: such a
    /// launch is recorded without its arguments, and a replay reports it as not run.
    #[track_caller]
    fn kernel_params(&self, _func: KernelHandle) -> Option<Vec<ParamInfo>> {
        None
    }

    /// Is `stream` inside an active capture? Code that might sync or read back must ask first:
    /// those calls poison a capture. Default false.
    #[track_caller]
    fn stream_is_capturing(&self, _stream: u64) -> bool {
        false
    }

    /// Read every red zone back; return how many were written. 0 without red zones.
    #[track_caller]
    fn scan_redzones(&self) -> Result<usize> {
        Ok(0)
    }

    /// Mark where step `step` of the engine begins (a decode step, a training iteration).
    /// Backends do nothing with it; a recorder writes it into the trace, so `show`, `replay
    /// --steps` and `analyze --steps` can find steps, and the flight recorder counts them.
    #[track_caller]
    fn step_boundary(&self, _step: u64) {}

    /// The guard bands the last `scan_redzones` found written, one per allocation, so a
    /// caller can tell one band written twice from two bands. Empty without red zones.
    #[track_caller]
    fn redzone_hits(&self) -> Vec<RedzoneHit> {
        Vec::new()
    }

    /// Encode a tensor map (the descriptor a TMA kernel takes by value) for the memory at
    /// `base`. Built through the backend so that a recorder knows which buffer the map's
    /// hidden address points into and a replay can encode it again where that buffer lives
    /// then. Backends without TMA refuse.
    #[track_caller]
    fn encode_tensor_map(&self, _base: DevicePtr, _desc: &TensorMapDesc) -> Result<TensorMapImage> {
        anyhow::bail!("this backend cannot encode tensor maps")
    }

    /// Refill red zones: the fill byte for creation indices in `[lo, hi)`, zero for the rest.
    /// Moves nothing, so bisection over the range keeps the heap layout identical.
    #[track_caller]
    fn poison_redzones(&self, _lo: usize, _hi: usize) -> Result<()> {
        Ok(())
    }

    /// Synchronise after every launch, so an asynchronous fault surfaces at its kernel.
    /// Decided once when the backend is built.
    #[track_caller]
    fn debug_sync_kernels(&self) -> bool {
        false
    }

    /// The registry of modules this backend loaded, where it has one.
    #[track_caller]
    fn kernel_registry(&self) -> Option<Arc<KernelRegistry>> {
        None
    }

    /// Load a module described as data (`ModuleDesc`): CUDA compiles its source, the mock
    /// registers its CPU bodies; both declare each kernel's parameter access, so a recording
    /// knows inputs from outputs. Not a recorded call: what a trace needs of a module (its
    /// code, its layouts) is written when a kernel of it is first looked up. A backend that
    /// loads its kernels its own way refuses.
    #[track_caller]
    fn load_module(&self, module: &ModuleDesc) -> Result<()> {
        anyhow::bail!(
            "this backend cannot load module {} from a description; load its kernels through the backend's own API",
            module.name
        )
    }

    /// Load a binary module image (a fatbin, cubin or PTX, as a program handed it to the
    /// driver; `image::image_kind` says which) under `name`, so that `kernel(name, symbol)`
    /// finds its kernels by their (mangled) symbols. What replays a driver-level recording
    /// (`gputape run -o`) needs. Not a recorded call. Default: refused (the mock has no CPU
    /// body for compiled code: such kernels are opaque there).
    #[track_caller]
    fn load_module_image(&self, name: &str, image: &[u8]) -> Result<()> {
        anyhow::bail!(
            "this backend cannot run compiled GPU code: module image {name} ({} bytes) is not loaded",
            image.len()
        )
    }

    /// Where module `module`'s variable `name` (a `__constant__` or `__device__` symbol) lies in
    /// this backend, and its size: what a driver-level recording's copies to such a table are
    /// replayed into. Not a recorded call. Default: refused (the mock loads no images).
    #[track_caller]
    fn module_global(&self, module: &str, name: &str) -> Result<(DevicePtr, u64)> {
        anyhow::bail!("this backend has no module variables (asked for {module}::{name})")
    }

    /// Launch `kernel` from now on in thread-block clusters of `dims` blocks (what a
    /// driver-level recording's `cuLaunchKernelEx` asked for; Hopper kernels built for
    /// clusters fault without). Not a recorded call. Default: refused.
    #[track_caller]
    fn set_kernel_cluster(&self, kernel: KernelHandle, dims: [u32; 3]) -> Result<()> {
        let _ = kernel;
        anyhow::bail!("this backend cannot launch in thread-block clusters (asked for {dims:?})")
    }

    /// Launch `kernel` from now on cooperatively (what a driver-level recording's
    /// `cuLaunchCooperativeKernel` did: every block resident at once, so a grid-wide sync
    /// returns; launched plainly, such a kernel can wait forever). Not a recorded call.
    /// Default: refused.
    #[track_caller]
    fn set_kernel_cooperative(&self, kernel: KernelHandle) -> Result<()> {
        let _ = kernel;
        anyhow::bail!("this backend cannot launch kernels cooperatively")
    }

    /// Async host-to-device copy whose source may be dropped or reused as soon as this returns.
    /// Default: the synchronous copy, which trivially keeps that promise.
    #[track_caller]
    fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, _stream: u64) -> Result<()> {
        self.copy_h2d(src, dst)
    }

    /// Async host-to-device copy whose source the caller keeps alive and unchanged until the
    /// next synchronisation of `stream`; in exchange, no implicit ordering is added.
    #[track_caller]
    fn copy_h2d_async_retained(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        self.copy_h2d_async(src, dst, stream)
    }

    /// Async device-to-host copy. `dst` must stay alive and unread until the next
    /// synchronisation of the stream.
    #[track_caller]
    fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], _stream: u64) -> Result<()> {
        self.copy_d2h(src, dst)
    }

    /// Device-to-device copy of `bytes`, enqueued on `stream`. Default: the synchronous copy.
    #[track_caller]
    fn copy_d2d_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        _stream: u64,
    ) -> Result<()> {
        self.copy_d2d(src, dst, bytes)
    }

    /// Pitched 2D device-to-device copy: `height` rows of `width_bytes`. Default: one
    /// `copy_d2d_async` per row.
    #[allow(clippy::too_many_arguments)]
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
        for row in 0..height {
            self.copy_d2d_async(
                src.offset(row * src_pitch),
                dst.offset(row * dst_pitch),
                width_bytes,
                stream,
            )?;
        }
        Ok(())
    }

    /// Start capturing `stream` into a graph. Not the legacy stream.
    #[track_caller]
    fn begin_capture(&self, _stream: u64) -> Result<()> {
        anyhow::bail!("graph capture is not supported by this backend")
    }

    /// End the capture and return an instantiated graph.
    #[track_caller]
    fn end_capture(&self, _stream: u64) -> Result<GraphHandle> {
        anyhow::bail!("graph capture is not supported by this backend")
    }

    /// Enqueue every node of a graph from `end_capture` on `stream`, as one launch. The graph
    /// stays valid for more launches until `destroy_graph`.
    #[track_caller]
    fn launch_graph(&self, _graph: GraphHandle, _stream: u64) -> Result<()> {
        anyhow::bail!("graph capture is not supported by this backend")
    }

    /// Release a graph from `end_capture`; it must not be launched afterwards.
    #[track_caller]
    fn destroy_graph(&self, _graph: GraphHandle) -> Result<()> {
        anyhow::bail!("graph capture is not supported by this backend")
    }

    /// If `stream` is mid-capture, end it and drop the partial graph, so an error path cannot
    /// leave the stream capturing forever. No-op otherwise.
    #[track_caller]
    fn abort_capture_if_active(&self, _stream: u64) {}

    /// Free device memory as the driver alone reports it. Default: `free_memory`.
    #[track_caller]
    fn device_free_memory(&self) -> Result<usize> {
        self.free_memory()
    }

    /// Live allocations, by count. 0 when untracked.
    #[track_caller]
    fn live_alloc_count(&self) -> usize {
        0
    }

    /// A new stream for work that may overlap the default stream's. On CUDA, blocking or
    /// non-blocking (against the legacy stream) as `CudaConfig::stream_kind` says.
    #[track_caller]
    fn create_stream(&self) -> Result<u64> {
        anyhow::bail!("streams are not supported by this backend")
    }

    /// Make this backend's context current on the calling thread.
    #[track_caller]
    fn bind_to_thread(&self) -> Result<()> {
        Ok(())
    }

    /// A stream for a tool's own work beside the engine's (the flight recorder's
    /// checkpoints): one that never waits for, nor holds up, the legacy stream's work, so an
    /// engine's blocking copies do not queue behind it. A tool inside a recorder calls the
    /// backend the recorder wraps, and nothing is recorded; called through a recorder, it is
    /// the default, a recorded `create_stream`. Default: `create_stream`.
    #[track_caller]
    fn create_private_stream(&self) -> Result<u64> {
        self.create_stream()
    }

    /// A new unique id for a communicator: rank 0 asks for one and hands it to every rank,
    /// which passes it to `comm_init`.
    #[track_caller]
    fn comm_unique_id(&self) -> Result<CommUniqueId> {
        anyhow::bail!("collectives are not supported by this backend")
    }

    /// Join communicator `id` as `rank` of `nranks`. Returns once every rank has joined (or
    /// fails, naming the ranks that did not, after the backend's deadline).
    #[track_caller]
    fn comm_init(&self, _id: CommUniqueId, _nranks: u32, _rank: u32) -> Result<CommHandle> {
        anyhow::bail!("collectives are not supported by this backend")
    }

    /// Collective `op` of `count` elements of `dtype` on `stream`, from `send` into `recv`
    /// (sizes by `Collective::send_bytes` and `recv_bytes`; a `Recv` has no send buffer and
    /// a `Send` no receive buffer: pass any pointer there). Every rank of `comm` must make the
    /// same group collectives in the same order; a `Send` is met by its peer's `Recv`, the
    /// k-th from one rank to another by the k-th the other receives from it, whatever the
    /// other ranks do meanwhile (as NCCL's are).
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    fn collective(
        &self,
        _comm: CommHandle,
        _op: Collective,
        _send: DevicePtr,
        _recv: DevicePtr,
        _count: u64,
        _dtype: CollDtype,
        _stream: u64,
    ) -> Result<()> {
        anyhow::bail!("collectives are not supported by this backend")
    }

    /// Leave communicator `comm`.
    #[track_caller]
    fn comm_destroy(&self, _comm: CommHandle) -> Result<()> {
        anyhow::bail!("collectives are not supported by this backend")
    }

    /// Open a group: the collectives this thread makes, on any communicator, until the
    /// matching `comm_group_end` are issued together there, as NCCL's `ncclGroupStart` and
    /// `ncclGroupEnd` do. A rank that sends to a peer and receives from it in one group waits
    /// for neither side alone: without a group, two ranks that each send first wait for each
    /// other for ever. Groups nest; the outermost end issues them.
    #[track_caller]
    fn comm_group_start(&self) -> Result<()> {
        anyhow::bail!("collectives are not supported by this backend")
    }

    /// Close the group `comm_group_start` opened (the outermost: issue its collectives).
    #[track_caller]
    fn comm_group_end(&self) -> Result<()> {
        anyhow::bail!("collectives are not supported by this backend")
    }

    /// A new event, for ordering streams (`record_event`, `stream_wait_event`) and for host
    /// waits. Timing is off: it is never used to measure. Backends of one device may be handed
    /// each other's events (a joint replay of processes that shared one through IPC): the CUDA
    /// backend's events are its device's primary context's, which every backend there uses.
    #[track_caller]
    fn create_event(&self) -> Result<u64> {
        anyhow::bail!("events are not supported by this backend")
    }

    /// Mark in `event` the point `stream` has reached: waits on it cover the work enqueued
    /// there so far. Recording again moves the mark.
    #[track_caller]
    fn record_event(&self, _event: u64, _stream: u64) -> Result<()> {
        anyhow::bail!("events are not supported by this backend")
    }

    /// Make `stream` wait on the device for `event`; the host does not block.
    #[track_caller]
    fn stream_wait_event(&self, _stream: u64, _event: u64) -> Result<()> {
        anyhow::bail!("events are not supported by this backend")
    }

    /// Block the host until the work recorded before `event` is done.
    #[track_caller]
    fn event_synchronize(&self, _event: u64) -> Result<()> {
        anyhow::bail!("events are not supported by this backend")
    }

    /// Release an event from `create_event`; it must not be used afterwards.
    #[track_caller]
    fn destroy_event(&self, _event: u64) -> Result<()> {
        anyhow::bail!("events are not supported by this backend")
    }

    /// The device-side alias of a pinned host pointer from `alloc_host_pinned`.
    #[track_caller]
    fn host_ptr_to_device(&self, _host: *mut u8) -> Result<DevicePtr> {
        anyhow::bail!("mapped host memory is not supported by this backend")
    }

    /// Page-locked host memory, zeroed (callers build slices over all of it, written or not).
    #[track_caller]
    fn alloc_host_pinned(&self, bytes: usize) -> Result<*mut u8> {
        let _ = bytes;
        anyhow::bail!("pinned host memory is not supported by this backend")
    }

    /// Release memory from `alloc_host_pinned`; `bytes` is the size it was asked for. No slice
    /// over it, nor an async copy reading or writing it, may outlive this call.
    #[track_caller]
    fn free_host_pinned(&self, ptr: *mut u8, bytes: usize) -> Result<()> {
        let _ = (ptr, bytes);
        anyhow::bail!("pinned host memory is not supported by this backend")
    }
}

/// `launch_typed`'s default packing: each argument in its own u64-aligned slot (wide enough for
/// by-value structs), buffers as their 8-byte address.
pub fn pack_args(args: &[KernelArg<'_>]) -> Vec<Vec<u64>> {
    args.iter()
        .map(|a| match a {
            KernelArg::Buffer(p) => vec![p.0],
            KernelArg::Bytes(b) => {
                let mut slot = vec![0u64; b.len().div_ceil(8).max(1)];
                for (i, byte) in b.iter().enumerate() {
                    slot[i / 8] |= (*byte as u64) << ((i % 8) * 8);
                }
                slot
            }
        })
        .collect()
}

/// The trait's methods by name, for failure injection and for grouping calls in reports.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum CallKind {
    /// [`GpuBackend::alloc`].
    Alloc,
    /// [`GpuBackend::alloc_managed`].
    AllocManaged,
    /// [`GpuBackend::free`].
    Free,
    /// [`GpuBackend::copy_h2d`].
    CopyH2D,
    /// [`GpuBackend::copy_d2h`].
    CopyD2H,
    /// [`GpuBackend::copy_d2d`].
    CopyD2D,
    /// [`GpuBackend::launch`].
    Launch,
    /// [`GpuBackend::launch_typed`].
    LaunchTyped,
    /// [`GpuBackend::synchronize`].
    Synchronize,
    /// [`GpuBackend::default_stream`].
    DefaultStream,
    /// [`GpuBackend::kernel`].
    Kernel,
    /// [`GpuBackend::op_cache`].
    OpCache,
    /// [`GpuBackend::memset`].
    Memset,
    /// [`GpuBackend::memset_async`].
    MemsetAsync,
    /// [`GpuBackend::total_memory`].
    TotalMemory,
    /// [`GpuBackend::free_memory`].
    FreeMemory,
    /// [`GpuBackend::sm_count`].
    SmCount,
    /// [`GpuBackend::sweep_unreleased`].
    SweepUnreleased,
    /// [`GpuBackend::live_bytes`].
    LiveBytes,
    /// [`GpuBackend::alloc_report`].
    AllocReport,
    /// [`GpuBackend::copy_d2h_on_stream`].
    CopyD2HOnStream,
    /// [`GpuBackend::stream_is_capturing`].
    StreamIsCapturing,
    /// [`GpuBackend::scan_redzones`].
    ScanRedzones,
    /// [`GpuBackend::poison_redzones`].
    PoisonRedzones,
    /// [`GpuBackend::debug_sync_kernels`].
    DebugSyncKernels,
    /// [`GpuBackend::kernel_registry`].
    KernelRegistry,
    /// [`GpuBackend::copy_h2d_async`].
    CopyH2DAsync,
    /// [`GpuBackend::copy_h2d_async_retained`].
    CopyH2DAsyncRetained,
    /// [`GpuBackend::copy_d2h_async`].
    CopyD2HAsync,
    /// [`GpuBackend::copy_d2d_async`].
    CopyD2DAsync,
    /// [`GpuBackend::copy_d2d_2d_async`].
    CopyD2D2DAsync,
    /// [`GpuBackend::begin_capture`].
    BeginCapture,
    /// [`GpuBackend::end_capture`].
    EndCapture,
    /// [`GpuBackend::launch_graph`].
    LaunchGraph,
    /// [`GpuBackend::destroy_graph`].
    DestroyGraph,
    /// [`GpuBackend::abort_capture_if_active`].
    AbortCaptureIfActive,
    /// [`GpuBackend::device_free_memory`].
    DeviceFreeMemory,
    /// [`GpuBackend::live_alloc_count`].
    LiveAllocCount,
    /// [`GpuBackend::create_stream`].
    CreateStream,
    /// [`GpuBackend::bind_to_thread`].
    BindToThread,
    /// [`GpuBackend::create_event`].
    CreateEvent,
    /// [`GpuBackend::record_event`].
    RecordEvent,
    /// [`GpuBackend::stream_wait_event`].
    StreamWaitEvent,
    /// [`GpuBackend::event_synchronize`].
    EventSynchronize,
    /// [`GpuBackend::destroy_event`].
    DestroyEvent,
    /// [`GpuBackend::host_ptr_to_device`].
    HostPtrToDevice,
    /// [`GpuBackend::alloc_host_pinned`].
    AllocHostPinned,
    /// [`GpuBackend::free_host_pinned`].
    FreeHostPinned,
    /// [`GpuBackend::redzone_hits`].
    RedzoneHits,
    /// [`GpuBackend::step_boundary`].
    StepBoundary,
    /// [`GpuBackend::encode_tensor_map`].
    EncodeTensorMap,
    /// [`GpuBackend::comm_unique_id`].
    CommUniqueId,
    /// [`GpuBackend::comm_init`].
    CommInit,
    /// [`GpuBackend::collective`].
    Collective,
    /// [`GpuBackend::comm_destroy`].
    CommDestroy,
    /// [`GpuBackend::comm_group_start`].
    CommGroupStart,
    /// [`GpuBackend::comm_group_end`].
    CommGroupEnd,
    /// No method: a driver call of a program recorded through the driver shim that gputape
    /// does not understand (`Call::Opaque`).
    Opaque,
    /// No method: a host function a program recorded through the driver shim queued on a
    /// stream (`Call::HostFunc`).
    HostFunc,
}

impl CallKind {
    /// The trait method's name.
    pub fn name(self) -> &'static str {
        use CallKind::*;
        match self {
            Alloc => "alloc",
            AllocManaged => "alloc_managed",
            Free => "free",
            CopyH2D => "copy_h2d",
            CopyD2H => "copy_d2h",
            CopyD2D => "copy_d2d",
            Launch => "launch",
            LaunchTyped => "launch_typed",
            Synchronize => "synchronize",
            DefaultStream => "default_stream",
            Kernel => "kernel",
            OpCache => "op_cache",
            Memset => "memset",
            MemsetAsync => "memset_async",
            TotalMemory => "total_memory",
            FreeMemory => "free_memory",
            SmCount => "sm_count",
            SweepUnreleased => "sweep_unreleased",
            LiveBytes => "live_bytes",
            AllocReport => "alloc_report",
            CopyD2HOnStream => "copy_d2h_on_stream",
            StreamIsCapturing => "stream_is_capturing",
            ScanRedzones => "scan_redzones",
            PoisonRedzones => "poison_redzones",
            DebugSyncKernels => "debug_sync_kernels",
            KernelRegistry => "kernel_registry",
            CopyH2DAsync => "copy_h2d_async",
            CopyH2DAsyncRetained => "copy_h2d_async_retained",
            CopyD2HAsync => "copy_d2h_async",
            CopyD2DAsync => "copy_d2d_async",
            CopyD2D2DAsync => "copy_d2d_2d_async",
            BeginCapture => "begin_capture",
            EndCapture => "end_capture",
            LaunchGraph => "launch_graph",
            DestroyGraph => "destroy_graph",
            AbortCaptureIfActive => "abort_capture_if_active",
            DeviceFreeMemory => "device_free_memory",
            LiveAllocCount => "live_alloc_count",
            CreateStream => "create_stream",
            BindToThread => "bind_to_thread",
            CreateEvent => "create_event",
            RecordEvent => "record_event",
            StreamWaitEvent => "stream_wait_event",
            EventSynchronize => "event_synchronize",
            DestroyEvent => "destroy_event",
            HostPtrToDevice => "host_ptr_to_device",
            AllocHostPinned => "alloc_host_pinned",
            FreeHostPinned => "free_host_pinned",
            RedzoneHits => "redzone_hits",
            StepBoundary => "step_boundary",
            EncodeTensorMap => "encode_tensor_map",
            CommUniqueId => "comm_unique_id",
            CommInit => "comm_init",
            Collective => "collective",
            CommDestroy => "comm_destroy",
            CommGroupStart => "comm_group_start",
            CommGroupEnd => "comm_group_end",
            Opaque => "driver_call",
            HostFunc => "host_func",
        }
    }
}
