//! Every trait method, through the recorder and back: each `CallKind` is forwarded to the
//! wrapped backend, written into the trace, and (unless it is a query with nothing to redo)
//! issued again by the replayer. A new trait method that any of the three forgets fails here;
//! a new `CallKind` that this test forgets does not compile (`every_kind_is_listed`).

use anyhow::Result;
use gputape::backend::*;
use gputape::mock::MockGpuBackend;
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::{Trace, VecSink};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::ffi::c_void;
use std::path::Path;
use std::sync::Arc;

/// A backend that forwards every method to `inner` and notes which were called: the kind of
/// forwarding decorator the recorder is, written out method by method.
struct Counting {
    inner: MockGpuBackend,
    seen: Mutex<BTreeSet<CallKind>>,
}

impl Counting {
    fn new() -> Self {
        let inner = MockGpuBackend::default();
        gputape::workloads::load_kernels(&inner).expect("load module blas");
        Counting {
            inner,
            seen: Mutex::new(BTreeSet::new()),
        }
    }
    fn saw(&self, k: CallKind) {
        self.seen.lock().insert(k);
    }
    fn take(&self) -> BTreeSet<CallKind> {
        std::mem::take(&mut *self.seen.lock())
    }
}

impl GpuBackend for Counting {
    #[track_caller]
    fn alloc(&self, bytes: usize) -> Result<DevicePtr> {
        self.saw(CallKind::Alloc);
        self.inner.alloc(bytes)
    }

    #[track_caller]
    fn alloc_managed(&self, bytes: usize) -> Result<DevicePtr> {
        self.saw(CallKind::AllocManaged);
        self.inner.alloc_managed(bytes)
    }

    #[track_caller]
    fn free(&self, ptr: DevicePtr) -> Result<()> {
        self.saw(CallKind::Free);
        self.inner.free(ptr)
    }

    #[track_caller]
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
        self.saw(CallKind::CopyH2D);
        self.inner.copy_h2d(src, dst)
    }

    #[track_caller]
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        self.saw(CallKind::CopyD2H);
        self.inner.copy_d2h(src, dst)
    }

    #[track_caller]
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> Result<()> {
        self.saw(CallKind::CopyD2D);
        self.inner.copy_d2d(src, dst, bytes)
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
        self.saw(CallKind::Launch);
        self.inner
            .launch(func, grid, block, shared_mem, stream, params)
    }

    #[track_caller]
    fn synchronize(&self, stream: u64) -> Result<()> {
        self.saw(CallKind::Synchronize);
        self.inner.synchronize(stream)
    }

    #[track_caller]
    fn default_stream(&self) -> u64 {
        self.saw(CallKind::DefaultStream);
        self.inner.default_stream()
    }

    #[track_caller]
    fn kernel(&self, module: &str, func_name: &str) -> Result<KernelHandle> {
        self.saw(CallKind::Kernel);
        self.inner.kernel(module, func_name)
    }

    #[track_caller]
    fn op_cache(&self) -> &OpCache {
        self.saw(CallKind::OpCache);
        self.inner.op_cache()
    }

    #[track_caller]
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        self.saw(CallKind::Memset);
        self.inner.memset(ptr, value, bytes)
    }

    #[track_caller]
    fn memset_async(&self, ptr: DevicePtr, value: u8, bytes: usize, stream: u64) -> Result<()> {
        self.saw(CallKind::MemsetAsync);
        self.inner.memset_async(ptr, value, bytes, stream)
    }

    #[track_caller]
    fn total_memory(&self) -> Result<usize> {
        self.saw(CallKind::TotalMemory);
        self.inner.total_memory()
    }

    #[track_caller]
    fn free_memory(&self) -> Result<usize> {
        self.saw(CallKind::FreeMemory);
        self.inner.free_memory()
    }

    #[track_caller]
    fn sm_count(&self) -> Result<u32> {
        self.saw(CallKind::SmCount);
        self.inner.sm_count()
    }

    #[track_caller]
    fn sweep_unreleased(&self) -> usize {
        self.saw(CallKind::SweepUnreleased);
        self.inner.sweep_unreleased()
    }

    #[track_caller]
    fn live_bytes(&self) -> Option<usize> {
        self.saw(CallKind::LiveBytes);
        self.inner.live_bytes()
    }

    #[track_caller]
    fn alloc_report(&self, top_n: usize, min_mb: usize) -> Option<String> {
        self.saw(CallKind::AllocReport);
        self.inner.alloc_report(top_n, min_mb)
    }

    #[track_caller]
    fn copy_d2h_on_stream(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
        self.saw(CallKind::CopyD2HOnStream);
        self.inner.copy_d2h_on_stream(src, dst, stream)
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
        self.saw(CallKind::LaunchTyped);
        self.inner
            .launch_typed(func, grid, block, shared_mem, stream, args)
    }

    #[track_caller]
    fn stream_is_capturing(&self, stream: u64) -> bool {
        self.saw(CallKind::StreamIsCapturing);
        self.inner.stream_is_capturing(stream)
    }

    #[track_caller]
    fn scan_redzones(&self) -> Result<usize> {
        self.saw(CallKind::ScanRedzones);
        self.inner.scan_redzones()
    }

    #[track_caller]
    fn step_boundary(&self, step: u64) {
        self.saw(CallKind::StepBoundary);
        self.inner.step_boundary(step)
    }

    #[track_caller]
    fn redzone_hits(&self) -> Vec<RedzoneHit> {
        self.saw(CallKind::RedzoneHits);
        self.inner.redzone_hits()
    }

    #[track_caller]
    fn encode_tensor_map(&self, base: DevicePtr, desc: &TensorMapDesc) -> Result<TensorMapImage> {
        self.saw(CallKind::EncodeTensorMap);
        self.inner.encode_tensor_map(base, desc)
    }

    #[track_caller]
    fn poison_redzones(&self, lo: usize, hi: usize) -> Result<()> {
        self.saw(CallKind::PoisonRedzones);
        self.inner.poison_redzones(lo, hi)
    }

    #[track_caller]
    fn debug_sync_kernels(&self) -> bool {
        self.saw(CallKind::DebugSyncKernels);
        self.inner.debug_sync_kernels()
    }

    #[track_caller]
    fn kernel_registry(&self) -> Option<Arc<KernelRegistry>> {
        self.saw(CallKind::KernelRegistry);
        self.inner.kernel_registry()
    }

    #[track_caller]
    fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        self.saw(CallKind::CopyH2DAsync);
        self.inner.copy_h2d_async(src, dst, stream)
    }

    #[track_caller]
    fn copy_h2d_async_retained(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
        self.saw(CallKind::CopyH2DAsyncRetained);
        self.inner.copy_h2d_async_retained(src, dst, stream)
    }

    #[track_caller]
    fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
        self.saw(CallKind::CopyD2HAsync);
        self.inner.copy_d2h_async(src, dst, stream)
    }

    #[track_caller]
    fn copy_d2d_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: u64,
    ) -> Result<()> {
        self.saw(CallKind::CopyD2DAsync);
        self.inner.copy_d2d_async(src, dst, bytes, stream)
    }

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
        self.saw(CallKind::CopyD2D2DAsync);
        self.inner
            .copy_d2d_2d_async(src, src_pitch, dst, dst_pitch, width_bytes, height, stream)
    }

    #[track_caller]
    fn begin_capture(&self, stream: u64) -> Result<()> {
        self.saw(CallKind::BeginCapture);
        self.inner.begin_capture(stream)
    }

    #[track_caller]
    fn end_capture(&self, stream: u64) -> Result<GraphHandle> {
        self.saw(CallKind::EndCapture);
        self.inner.end_capture(stream)
    }

    #[track_caller]
    fn launch_graph(&self, graph: GraphHandle, stream: u64) -> Result<()> {
        self.saw(CallKind::LaunchGraph);
        self.inner.launch_graph(graph, stream)
    }

    #[track_caller]
    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        self.saw(CallKind::DestroyGraph);
        self.inner.destroy_graph(graph)
    }

    #[track_caller]
    fn abort_capture_if_active(&self, stream: u64) {
        self.saw(CallKind::AbortCaptureIfActive);
        self.inner.abort_capture_if_active(stream)
    }

    #[track_caller]
    fn device_free_memory(&self) -> Result<usize> {
        self.saw(CallKind::DeviceFreeMemory);
        self.inner.device_free_memory()
    }

    #[track_caller]
    fn live_alloc_count(&self) -> usize {
        self.saw(CallKind::LiveAllocCount);
        self.inner.live_alloc_count()
    }

    #[track_caller]
    fn create_stream(&self) -> Result<u64> {
        self.saw(CallKind::CreateStream);
        self.inner.create_stream()
    }

    #[track_caller]
    fn bind_to_thread(&self) -> Result<()> {
        self.saw(CallKind::BindToThread);
        self.inner.bind_to_thread()
    }

    #[track_caller]
    fn create_event(&self) -> Result<u64> {
        self.saw(CallKind::CreateEvent);
        self.inner.create_event()
    }

    fn comm_unique_id(&self) -> Result<CommUniqueId> {
        self.saw(CallKind::CommUniqueId);
        self.inner.comm_unique_id()
    }

    fn comm_init(&self, id: CommUniqueId, nranks: u32, rank: u32) -> Result<CommHandle> {
        self.saw(CallKind::CommInit);
        self.inner.comm_init(id, nranks, rank)
    }

    fn collective(
        &self,
        comm: CommHandle,
        op: Collective,
        send: DevicePtr,
        recv: DevicePtr,
        count: u64,
        dtype: CollDtype,
        stream: u64,
    ) -> Result<()> {
        self.saw(CallKind::Collective);
        self.inner
            .collective(comm, op, send, recv, count, dtype, stream)
    }

    fn comm_destroy(&self, comm: CommHandle) -> Result<()> {
        self.saw(CallKind::CommDestroy);
        self.inner.comm_destroy(comm)
    }

    fn comm_group_start(&self) -> Result<()> {
        self.saw(CallKind::CommGroupStart);
        self.inner.comm_group_start()
    }

    fn comm_group_end(&self) -> Result<()> {
        self.saw(CallKind::CommGroupEnd);
        self.inner.comm_group_end()
    }

    #[track_caller]
    fn record_event(&self, event: u64, stream: u64) -> Result<()> {
        self.saw(CallKind::RecordEvent);
        self.inner.record_event(event, stream)
    }

    #[track_caller]
    fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        self.saw(CallKind::StreamWaitEvent);
        self.inner.stream_wait_event(stream, event)
    }

    #[track_caller]
    fn event_synchronize(&self, event: u64) -> Result<()> {
        self.saw(CallKind::EventSynchronize);
        self.inner.event_synchronize(event)
    }

    #[track_caller]
    fn destroy_event(&self, event: u64) -> Result<()> {
        self.saw(CallKind::DestroyEvent);
        self.inner.destroy_event(event)
    }

    #[track_caller]
    fn host_ptr_to_device(&self, host: *mut u8) -> Result<DevicePtr> {
        self.saw(CallKind::HostPtrToDevice);
        self.inner.host_ptr_to_device(host)
    }

    #[track_caller]
    fn alloc_host_pinned(&self, bytes: usize) -> Result<*mut u8> {
        self.saw(CallKind::AllocHostPinned);
        self.inner.alloc_host_pinned(bytes)
    }

    #[track_caller]
    fn free_host_pinned(&self, ptr: *mut u8, bytes: usize) -> Result<()> {
        self.saw(CallKind::FreeHostPinned);
        self.inner.free_host_pinned(ptr, bytes)
    }
}

const ALL: [CallKind; 57] = [
    CallKind::Alloc,
    CallKind::AllocManaged,
    CallKind::Free,
    CallKind::CopyH2D,
    CallKind::CopyD2H,
    CallKind::CopyD2D,
    CallKind::Launch,
    CallKind::Synchronize,
    CallKind::DefaultStream,
    CallKind::Kernel,
    CallKind::OpCache,
    CallKind::Memset,
    CallKind::MemsetAsync,
    CallKind::TotalMemory,
    CallKind::FreeMemory,
    CallKind::SmCount,
    CallKind::SweepUnreleased,
    CallKind::LiveBytes,
    CallKind::AllocReport,
    CallKind::CopyD2HOnStream,
    CallKind::LaunchTyped,
    CallKind::StreamIsCapturing,
    CallKind::ScanRedzones,
    CallKind::StepBoundary,
    CallKind::RedzoneHits,
    CallKind::PoisonRedzones,
    CallKind::DebugSyncKernels,
    CallKind::KernelRegistry,
    CallKind::CopyH2DAsync,
    CallKind::CopyH2DAsyncRetained,
    CallKind::CopyD2HAsync,
    CallKind::CopyD2DAsync,
    CallKind::CopyD2D2DAsync,
    CallKind::BeginCapture,
    CallKind::EndCapture,
    CallKind::LaunchGraph,
    CallKind::DestroyGraph,
    CallKind::AbortCaptureIfActive,
    CallKind::DeviceFreeMemory,
    CallKind::LiveAllocCount,
    CallKind::CreateStream,
    CallKind::BindToThread,
    CallKind::CreateEvent,
    CallKind::RecordEvent,
    CallKind::StreamWaitEvent,
    CallKind::EventSynchronize,
    CallKind::DestroyEvent,
    CallKind::HostPtrToDevice,
    CallKind::AllocHostPinned,
    CallKind::FreeHostPinned,
    CallKind::EncodeTensorMap,
    CallKind::CommUniqueId,
    CallKind::CommInit,
    CallKind::Collective,
    CallKind::CommDestroy,
    CallKind::CommGroupStart,
    CallKind::CommGroupEnd,
];

/// Fails to compile when a `CallKind` is added: then add it to `ALL` and to the scenario.
#[allow(dead_code)]
fn every_kind_is_listed(k: CallKind) {
    match k {
        CallKind::Alloc => (),
        CallKind::AllocManaged => (),
        CallKind::Free => (),
        CallKind::CopyH2D => (),
        CallKind::CopyD2H => (),
        CallKind::CopyD2D => (),
        CallKind::Launch => (),
        CallKind::Synchronize => (),
        CallKind::DefaultStream => (),
        CallKind::Kernel => (),
        CallKind::OpCache => (),
        CallKind::Memset => (),
        CallKind::MemsetAsync => (),
        CallKind::TotalMemory => (),
        CallKind::FreeMemory => (),
        CallKind::SmCount => (),
        CallKind::SweepUnreleased => (),
        CallKind::LiveBytes => (),
        CallKind::AllocReport => (),
        CallKind::CopyD2HOnStream => (),
        CallKind::LaunchTyped => (),
        CallKind::StreamIsCapturing => (),
        CallKind::ScanRedzones => (),
        CallKind::StepBoundary => (),
        CallKind::RedzoneHits => (),
        CallKind::PoisonRedzones => (),
        CallKind::DebugSyncKernels => (),
        CallKind::KernelRegistry => (),
        CallKind::CopyH2DAsync => (),
        CallKind::CopyH2DAsyncRetained => (),
        CallKind::CopyD2HAsync => (),
        CallKind::CopyD2DAsync => (),
        CallKind::CopyD2D2DAsync => (),
        CallKind::BeginCapture => (),
        CallKind::EndCapture => (),
        CallKind::LaunchGraph => (),
        CallKind::DestroyGraph => (),
        CallKind::AbortCaptureIfActive => (),
        CallKind::DeviceFreeMemory => (),
        CallKind::LiveAllocCount => (),
        CallKind::CreateStream => (),
        CallKind::BindToThread => (),
        CallKind::CreateEvent => (),
        CallKind::RecordEvent => (),
        CallKind::StreamWaitEvent => (),
        CallKind::EventSynchronize => (),
        CallKind::DestroyEvent => (),
        CallKind::HostPtrToDevice => (),
        CallKind::AllocHostPinned => (),
        CallKind::FreeHostPinned => (),
        CallKind::EncodeTensorMap => (),
        CallKind::CommUniqueId => (),
        CallKind::CommInit => (),
        CallKind::Collective => (),
        CallKind::CommDestroy => (),
        CallKind::CommGroupStart => (),
        CallKind::CommGroupEnd => (),
        // No trait method: a driver call the shim's recording did not understand (tests/run.rs).
        CallKind::Opaque => (),
        // No trait method: a host function the shim recorded (tests/run.rs).
        CallKind::HostFunc => (),
    }
}

/// Kinds the recorder answers itself: its op cache is its own, so what ops cache through it
/// (kernel handles, scratch buffers made through it) is recorded like any other call.
const NOT_FORWARDED: [CallKind; 1] = [CallKind::OpCache];

/// Kinds the replayer does not issue again, with why: queries and accessors change nothing
/// on the device; a raw `launch` is issued as `launch_typed` (the trace knows its arguments).
const NOT_REPLAYED: [CallKind; 15] = [
    CallKind::Launch,
    CallKind::DefaultStream,
    CallKind::OpCache,
    CallKind::TotalMemory,
    CallKind::FreeMemory,
    CallKind::SmCount,
    CallKind::LiveBytes,
    CallKind::AllocReport,
    CallKind::StreamIsCapturing,
    CallKind::DebugSyncKernels,
    CallKind::KernelRegistry,
    CallKind::DeviceFreeMemory,
    CallKind::LiveAllocCount,
    CallKind::RedzoneHits,
    CallKind::StepBoundary,
];

/// One call of every trait method.
fn every_method(g: &dyn GpuBackend) {
    let n = 64u32;
    let bytes = n as usize * 4;
    let s = g.create_stream().unwrap();
    let e = g.create_event().unwrap();
    let x = g.alloc(bytes).unwrap();
    let y = g.alloc_managed(bytes).unwrap();
    let z = g.alloc(bytes).unwrap();
    g.copy_h2d(&vec![1u8; bytes], x).unwrap();
    g.memset(y, 0, bytes).unwrap();
    g.memset_async(z, 0, bytes, s).unwrap();
    g.copy_d2d(x, z, bytes).unwrap();
    let k = g.kernel("blas", "saxpy").unwrap();
    let (mut px, mut py, mut pn, mut pa) = (x.0, y.0, n, 1.0f32);
    let mut params = [
        (&mut px as *mut u64).cast::<c_void>(),
        (&mut py as *mut u64).cast(),
        (&mut pn as *mut u32).cast(),
        (&mut pa as *mut f32).cast(),
    ];
    g.launch(k, [1, 1, 1], [64, 1, 1], 0, s, &mut params)
        .unwrap();
    gputape::workloads::saxpy(g, x, y, n, 2.0, s).unwrap();
    g.synchronize(s).unwrap();
    let _ = g.default_stream();
    let _ = g.op_cache();
    let _ = g.total_memory();
    let _ = g.free_memory();
    let _ = g.sm_count();
    let _ = g.live_bytes();
    let _ = g.alloc_report(3, 0);
    let mut out = vec![0u8; bytes];
    g.copy_d2h(y, &mut out).unwrap();
    g.copy_d2h_on_stream(y, &mut out, s).unwrap();
    let _ = g.stream_is_capturing(s);
    g.step_boundary(1);
    g.poison_redzones(0, 0).unwrap();
    let _ = g.scan_redzones().unwrap();
    let _ = g.redzone_hits();
    let _ = g
        .encode_tensor_map(
            x,
            &TensorMapDesc::tiled_2d(TensorMapDtype::F32, 1, 64, 1, 32),
        )
        .unwrap();
    let _ = g.debug_sync_kernels();
    let _ = g.kernel_registry();
    let pinned = g.alloc_host_pinned(bytes).unwrap();
    // SAFETY: `pinned` is `bytes` of pinned memory from alloc_host_pinned, freed below.
    let host = unsafe { std::slice::from_raw_parts_mut(pinned, bytes) };
    g.copy_h2d_async(&vec![2u8; bytes], z, s).unwrap();
    host.fill(3);
    g.copy_h2d_async_retained(host, z, s).unwrap();
    g.synchronize(s).unwrap();
    g.copy_d2h_async(z, host, s).unwrap();
    g.copy_d2d_async(x, z, bytes, s).unwrap();
    g.copy_d2d_2d_async(x, 64, z, 64, 32, 4, s).unwrap();
    g.record_event(e, s).unwrap();
    g.stream_wait_event(g.default_stream(), e).unwrap();
    g.event_synchronize(e).unwrap();
    g.synchronize(s).unwrap();
    let _ = g.host_ptr_to_device(pinned).unwrap();
    g.begin_capture(s).unwrap();
    gputape::workloads::saxpy(g, x, z, n, 1.0, s).unwrap();
    let graph = g.end_capture(s).unwrap();
    g.launch_graph(graph, s).unwrap();
    g.synchronize(s).unwrap();
    g.destroy_graph(graph).unwrap();
    g.abort_capture_if_active(s);
    let _ = g.device_free_memory();
    let _ = g.live_alloc_count();
    g.bind_to_thread().unwrap();
    // A communicator of one rank: its collectives replay alone.
    let id = g.comm_unique_id().unwrap();
    let comm = g.comm_init(id, 1, 0).unwrap();
    g.comm_group_start().unwrap();
    g.collective(
        comm,
        Collective::AllReduce(ReduceOp::Sum),
        x,
        z,
        n as u64,
        CollDtype::F32,
        s,
    )
    .unwrap();
    g.comm_group_end().unwrap();
    g.comm_destroy(comm).unwrap();
    g.destroy_event(e).unwrap();
    g.free_host_pinned(pinned, bytes).unwrap();
    g.free(x).unwrap();
    g.free(y).unwrap();
    // z is left for the sweep.
    let _ = g.sweep_unreleased();
}

#[test]
fn every_call_kind_is_forwarded_recorded_and_replayed() {
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let rec =
        RecordingBackend::new(Counting::new(), Box::new(sink), BackendDesc::new("mock")).unwrap();
    rec.start().unwrap();
    rec.inner().take();
    every_method(&rec);
    let forwarded = rec.inner().take();
    rec.stop().unwrap();
    let all: BTreeSet<CallKind> = ALL.into_iter().collect();
    let missing: Vec<_> = all
        .difference(&forwarded)
        .filter(|k| !NOT_FORWARDED.contains(k))
        .collect();
    assert!(
        missing.is_empty(),
        "not forwarded to the wrapped backend: {missing:?}"
    );

    let t = Trace::from_bytes(Path::new("every"), &buf.lock()).unwrap();
    let recorded: BTreeSet<CallKind> = t.calls.iter().map(|c| c.call.kind()).collect();
    let missing: Vec<_> = all.difference(&recorded).collect();
    assert!(missing.is_empty(), "not in the trace: {missing:?}");

    let replay = Counting::new();
    let r = Replayer::new(&t)
        .run(&replay, &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(r.divergence.is_none(), "{}", r.summary());
    let replayed = replay.take();
    let expected: BTreeSet<CallKind> = all
        .iter()
        .copied()
        .filter(|k| !NOT_REPLAYED.contains(k))
        .collect();
    let missing: Vec<_> = expected.difference(&replayed).collect();
    assert!(
        missing.is_empty(),
        "not issued by the replayer: {missing:?}"
    );
}

/// `Box<B>` and `Arc<B>` forward every method to `B`, provided ones included: the CLI opens its
/// backend as an `Arc<dyn GpuBackend>`, and an inherited default there would hide the
/// backend's own method.
#[test]
fn box_and_arc_forward_every_call_kind() {
    let counting = Arc::new(Counting::new());
    let boxed: Box<dyn GpuBackend> = Box::new(counting.clone() as Arc<dyn GpuBackend>);
    every_method(&boxed);
    let forwarded = counting.take();
    let all: BTreeSet<CallKind> = ALL.into_iter().collect();
    let missing: Vec<_> = all.difference(&forwarded).collect();
    assert!(
        missing.is_empty(),
        "not forwarded through Box<Arc<dyn>>: {missing:?}"
    );
}

/// A replay that stops inside a capture (here: a captured call names a buffer the trace never
/// made) leaves the backend as it found it: the capture is ended before the teardown frees,
/// which the driver (and the mock, in global mode) refuses while a stream captures.
#[test]
fn a_replay_stopped_inside_a_capture_frees_what_it_made() {
    use gputape::trace::{BufferId, Call, DevAddr};
    let m = MockGpuBackend::default();
    gputape::workloads::load_kernels(&m).unwrap();
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap();
    rec.start().unwrap();
    let s = rec.create_stream().unwrap();
    let n = 256u32;
    let (x, z) = (rec.alloc(1024).unwrap(), rec.alloc(1024).unwrap());
    rec.begin_capture(s).unwrap();
    gputape::workloads::saxpy(&rec, x, z, n, 1.0, s).unwrap();
    let g = rec.end_capture(s).unwrap();
    rec.destroy_graph(g).unwrap();
    rec.free(x).unwrap();
    rec.free(z).unwrap();
    rec.stop().unwrap();
    drop(rec);
    let mut t = Trace::from_bytes(Path::new("capture"), &buf.lock()).unwrap();
    let begin = t
        .calls
        .iter()
        .position(|c| matches!(c.call, Call::BeginCapture { .. }))
        .unwrap();
    t.calls[begin + 1].call = Call::Free {
        ptr: DevAddr::Buf {
            buf: BufferId(9999),
            off: 0,
        },
    };
    let replay = MockGpuBackend::default();
    gputape::workloads::load_kernels(&replay).unwrap();
    let r = Replayer::new(&t).run(&replay, &ReplayOptions::default(), None, |_| {});
    let stopped = match &r {
        Err(e) => format!("{e:#}"),
        Ok(rep) => rep.summary(),
    };
    assert!(
        r.is_err() || r.as_ref().is_ok_and(|r| r.divergence.is_some()),
        "{stopped}"
    );
    assert_eq!(replay.live_alloc_count(), 0, "{stopped}");
}
