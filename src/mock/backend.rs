//! The mock's `GpuBackend` implementation: each trait method as the driver behaves, over the
//! state, memory and work executor in `state.rs`, `memory.rs` and `exec.rs` (capture judged by
//! the rule table in `capture.rs`, faults raised at launch and reported by the next call that
//! waits). The queries are answered here; every other method's body is `NAME_impl` in the room
//! for its concern: `alloc.rs` (allocations, pinned host memory, the sweep), `copy.rs` (copies
//! and memsets), `launch.rs` (kernels, launches, modules, tensor maps) and `stream.rs`
//! (streams, events, capture and graphs).

use super::*;
use crate::backend::{CollDtype, Collective, CommHandle, CommUniqueId};

impl GpuBackend for MockGpuBackend {
    #[track_caller]
    fn alloc(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        self.alloc_impl(bytes)
    }

    #[track_caller]
    fn alloc_managed(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        self.alloc_managed_impl(bytes)
    }

    #[track_caller]
    fn free(&self, ptr: DevicePtr) -> anyhow::Result<()> {
        self.free_impl(ptr)
    }

    #[track_caller]
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> anyhow::Result<()> {
        self.copy_h2d_impl(src, dst)
    }

    #[track_caller]
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> anyhow::Result<()> {
        self.copy_d2h_impl(src, dst)
    }

    #[track_caller]
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> anyhow::Result<()> {
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
    ) -> anyhow::Result<()> {
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
    ) -> anyhow::Result<()> {
        self.launch_typed_impl(func, grid, block, shared_mem, stream, args)
    }

    #[track_caller]
    fn synchronize(&self, stream: u64) -> anyhow::Result<()> {
        self.synchronize_impl(stream)
    }

    #[track_caller]
    fn default_stream(&self) -> u64 {
        self.default_stream
    }

    #[track_caller]
    fn kernel(&self, module: &str, func_name: &str) -> anyhow::Result<KernelHandle> {
        self.kernel_impl(module, func_name)
    }

    #[track_caller]
    fn op_cache(&self) -> &OpCache {
        &self.op_cache
    }

    #[track_caller]
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> anyhow::Result<()> {
        self.memset_impl(ptr, value, bytes)
    }

    #[track_caller]
    fn memset_async(
        &self,
        ptr: DevicePtr,
        value: u8,
        bytes: usize,
        stream: u64,
    ) -> anyhow::Result<()> {
        self.memset_async_impl(ptr, value, bytes, stream)
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
        self.sweep_unreleased_impl()
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
        self.copy_d2h_on_stream_impl(src, dst, stream)
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
        self.encode_tensor_map_impl(base, desc)
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
    fn load_module(&self, module: &crate::backend::ModuleDesc) -> anyhow::Result<()> {
        self.load_module_impl(module)
    }

    #[track_caller]
    fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, stream: u64) -> anyhow::Result<()> {
        self.copy_h2d_async_impl(src, dst, stream)
    }

    #[track_caller]
    fn copy_h2d_async_retained(
        &self,
        src: &[u8],
        dst: DevicePtr,
        stream: u64,
    ) -> anyhow::Result<()> {
        self.copy_h2d_async_retained_impl(src, dst, stream)
    }

    #[track_caller]
    fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> anyhow::Result<()> {
        self.copy_d2h_async_impl(src, dst, stream)
    }

    #[track_caller]
    fn copy_d2d_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: u64,
    ) -> anyhow::Result<()> {
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
    ) -> anyhow::Result<()> {
        self.copy_d2d_2d_async_impl(src, src_pitch, dst, dst_pitch, width_bytes, height, stream)
    }

    #[track_caller]
    fn begin_capture(&self, stream: u64) -> anyhow::Result<()> {
        self.begin_capture_impl(stream)
    }

    #[track_caller]
    fn end_capture(&self, stream: u64) -> anyhow::Result<GraphHandle> {
        mock_try!(self.end_capture_inner(stream, here()))
    }

    #[track_caller]
    fn launch_graph(&self, graph: GraphHandle, stream: u64) -> anyhow::Result<()> {
        self.launch_graph_impl(graph, stream)
    }

    #[track_caller]
    fn destroy_graph(&self, graph: GraphHandle) -> anyhow::Result<()> {
        self.destroy_graph_impl(graph)
    }

    #[track_caller]
    fn abort_capture_if_active(&self, stream: u64) {
        self.abort_capture_if_active_impl(stream)
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
        self.create_stream_impl()
    }

    #[track_caller]
    fn create_private_stream(&self) -> anyhow::Result<u64> {
        self.create_stream_of(crate::backend::StreamKind::NonBlocking)
    }

    fn comm_unique_id(&self) -> anyhow::Result<CommUniqueId> {
        self.comm_unique_id_impl()
    }

    #[track_caller]
    fn comm_init(&self, id: CommUniqueId, nranks: u32, rank: u32) -> anyhow::Result<CommHandle> {
        self.comm_init_impl(id, nranks, rank)
    }

    #[track_caller]
    fn collective(
        &self,
        comm: CommHandle,
        op: Collective,
        send: DevicePtr,
        recv: DevicePtr,
        count: u64,
        dtype: CollDtype,
        stream: u64,
    ) -> anyhow::Result<()> {
        self.collective_impl(comm, op, send, recv, count, dtype, stream)
    }

    #[track_caller]
    fn comm_destroy(&self, comm: CommHandle) -> anyhow::Result<()> {
        self.comm_destroy_impl(comm)
    }

    #[track_caller]
    fn comm_group_start(&self) -> anyhow::Result<()> {
        self.comm_group_start_impl()
    }

    #[track_caller]
    fn comm_group_end(&self) -> anyhow::Result<()> {
        self.comm_group_end_impl()
    }

    #[track_caller]
    fn create_event(&self) -> anyhow::Result<u64> {
        self.create_event_impl()
    }

    #[track_caller]
    fn record_event(&self, event: u64, stream: u64) -> anyhow::Result<()> {
        self.record_event_impl(event, stream)
    }

    #[track_caller]
    fn stream_wait_event(&self, stream: u64, event: u64) -> anyhow::Result<()> {
        self.stream_wait_event_impl(stream, event)
    }

    #[track_caller]
    fn event_synchronize(&self, event: u64) -> anyhow::Result<()> {
        self.event_synchronize_impl(event)
    }

    #[track_caller]
    fn destroy_event(&self, event: u64) -> anyhow::Result<()> {
        self.destroy_event_impl(event)
    }

    #[track_caller]
    fn host_ptr_to_device(&self, host: *mut u8) -> anyhow::Result<DevicePtr> {
        self.host_ptr_to_device_impl(host)
    }

    #[track_caller]
    fn alloc_host_pinned(&self, bytes: usize) -> anyhow::Result<*mut u8> {
        self.alloc_host_pinned_impl(bytes)
    }

    #[track_caller]
    fn free_host_pinned(&self, ptr: *mut u8, bytes: usize) -> anyhow::Result<()> {
        self.free_host_pinned_impl(ptr, bytes)
    }
}
