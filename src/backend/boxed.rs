//! `Box<B>` and `Arc<B>` are backends when `B` is: the CLI opens whichever backend `--on`
//! names as one `Arc<dyn GpuBackend>`, and the recorder, replayer and model take it like any
//! other.
//!
//! Every method is forwarded, provided ones included: an inherited default here would hide
//! the boxed backend's own implementation. A new trait method is added here too (the
//! how-to in ARCHITECTURE.md says so; `tests/every_call.rs` records through a box).

use super::*;

macro_rules! forward_through {
    ($ptr:ident) => {
        impl<B: GpuBackend + ?Sized> GpuBackend for $ptr<B> {
            #[track_caller]
            fn alloc(&self, bytes: usize) -> Result<DevicePtr> {
                (**self).alloc(bytes)
            }

            #[track_caller]
            fn alloc_managed(&self, bytes: usize) -> Result<DevicePtr> {
                (**self).alloc_managed(bytes)
            }

            #[track_caller]
            fn free(&self, ptr: DevicePtr) -> Result<()> {
                (**self).free(ptr)
            }

            #[track_caller]
            fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
                (**self).copy_h2d(src, dst)
            }

            #[track_caller]
            fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
                (**self).copy_d2h(src, dst)
            }

            #[track_caller]
            fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> Result<()> {
                (**self).copy_d2d(src, dst, bytes)
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
                (**self).launch(func, grid, block, shared_mem, stream, params)
            }

            #[track_caller]
            fn synchronize(&self, stream: u64) -> Result<()> {
                (**self).synchronize(stream)
            }

            #[track_caller]
            fn default_stream(&self) -> u64 {
                (**self).default_stream()
            }

            #[track_caller]
            fn kernel(&self, module: &str, func_name: &str) -> Result<KernelHandle> {
                (**self).kernel(module, func_name)
            }

            #[track_caller]
            fn op_cache(&self) -> &OpCache {
                (**self).op_cache()
            }

            #[track_caller]
            fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<()> {
                (**self).memset(ptr, value, bytes)
            }

            #[track_caller]
            fn memset_async(
                &self,
                ptr: DevicePtr,
                value: u8,
                bytes: usize,
                stream: u64,
            ) -> Result<()> {
                (**self).memset_async(ptr, value, bytes, stream)
            }

            #[track_caller]
            fn total_memory(&self) -> Result<usize> {
                (**self).total_memory()
            }

            #[track_caller]
            fn free_memory(&self) -> Result<usize> {
                (**self).free_memory()
            }

            #[track_caller]
            fn sm_count(&self) -> Result<u32> {
                (**self).sm_count()
            }

            #[track_caller]
            fn sweep_unreleased(&self) -> usize {
                (**self).sweep_unreleased()
            }

            #[track_caller]
            fn live_bytes(&self) -> Option<usize> {
                (**self).live_bytes()
            }

            #[track_caller]
            fn alloc_report(&self, top_n: usize, min_mb: usize) -> Option<String> {
                (**self).alloc_report(top_n, min_mb)
            }

            #[track_caller]
            fn copy_d2h_on_stream(
                &self,
                src: DevicePtr,
                dst: &mut [u8],
                stream: u64,
            ) -> Result<()> {
                (**self).copy_d2h_on_stream(src, dst, stream)
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
                (**self).launch_typed(func, grid, block, shared_mem, stream, args)
            }

            #[track_caller]
            fn stream_is_capturing(&self, stream: u64) -> bool {
                (**self).stream_is_capturing(stream)
            }

            #[track_caller]
            fn kernel_params(&self, func: KernelHandle) -> Option<Vec<ParamInfo>> {
                (**self).kernel_params(func)
            }

            #[track_caller]
            fn scan_redzones(&self) -> Result<usize> {
                (**self).scan_redzones()
            }

            #[track_caller]
            fn step_boundary(&self, step: u64) {
                (**self).step_boundary(step)
            }

            #[track_caller]
            fn redzone_hits(&self) -> Vec<RedzoneHit> {
                (**self).redzone_hits()
            }

            #[track_caller]
            fn encode_tensor_map(
                &self,
                base: DevicePtr,
                desc: &TensorMapDesc,
            ) -> Result<TensorMapImage> {
                (**self).encode_tensor_map(base, desc)
            }

            #[track_caller]
            fn poison_redzones(&self, lo: usize, hi: usize) -> Result<()> {
                (**self).poison_redzones(lo, hi)
            }

            #[track_caller]
            fn debug_sync_kernels(&self) -> bool {
                (**self).debug_sync_kernels()
            }

            #[track_caller]
            fn kernel_registry(&self) -> Option<Arc<KernelRegistry>> {
                (**self).kernel_registry()
            }

            #[track_caller]
            fn load_module(&self, module: &ModuleDesc) -> Result<()> {
                (**self).load_module(module)
            }

            #[track_caller]
            fn load_module_image(&self, name: &str, image: &[u8]) -> Result<()> {
                (**self).load_module_image(name, image)
            }

            #[track_caller]
            fn set_kernel_cluster(&self, kernel: KernelHandle, dims: [u32; 3]) -> Result<()> {
                (**self).set_kernel_cluster(kernel, dims)
            }

            #[track_caller]
            fn set_kernel_cooperative(&self, kernel: KernelHandle) -> Result<()> {
                (**self).set_kernel_cooperative(kernel)
            }

            #[track_caller]
            fn module_global(&self, module: &str, name: &str) -> Result<(DevicePtr, u64)> {
                (**self).module_global(module, name)
            }

            #[track_caller]
            fn copy_h2d_async(&self, src: &[u8], dst: DevicePtr, stream: u64) -> Result<()> {
                (**self).copy_h2d_async(src, dst, stream)
            }

            #[track_caller]
            fn copy_h2d_async_retained(
                &self,
                src: &[u8],
                dst: DevicePtr,
                stream: u64,
            ) -> Result<()> {
                (**self).copy_h2d_async_retained(src, dst, stream)
            }

            #[track_caller]
            fn copy_d2h_async(&self, src: DevicePtr, dst: &mut [u8], stream: u64) -> Result<()> {
                (**self).copy_d2h_async(src, dst, stream)
            }

            #[track_caller]
            fn copy_d2d_async(
                &self,
                src: DevicePtr,
                dst: DevicePtr,
                bytes: usize,
                stream: u64,
            ) -> Result<()> {
                (**self).copy_d2d_async(src, dst, bytes, stream)
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
                (**self).copy_d2d_2d_async(
                    src,
                    src_pitch,
                    dst,
                    dst_pitch,
                    width_bytes,
                    height,
                    stream,
                )
            }

            #[track_caller]
            fn begin_capture(&self, stream: u64) -> Result<()> {
                (**self).begin_capture(stream)
            }

            #[track_caller]
            fn end_capture(&self, stream: u64) -> Result<GraphHandle> {
                (**self).end_capture(stream)
            }

            #[track_caller]
            fn launch_graph(&self, graph: GraphHandle, stream: u64) -> Result<()> {
                (**self).launch_graph(graph, stream)
            }

            #[track_caller]
            fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
                (**self).destroy_graph(graph)
            }

            #[track_caller]
            fn abort_capture_if_active(&self, stream: u64) {
                (**self).abort_capture_if_active(stream)
            }

            #[track_caller]
            fn device_free_memory(&self) -> Result<usize> {
                (**self).device_free_memory()
            }

            #[track_caller]
            fn live_alloc_count(&self) -> usize {
                (**self).live_alloc_count()
            }

            #[track_caller]
            fn create_stream(&self) -> Result<u64> {
                (**self).create_stream()
            }

            #[track_caller]
            fn bind_to_thread(&self) -> Result<()> {
                (**self).bind_to_thread()
            }

            #[track_caller]
            fn create_private_stream(&self) -> Result<u64> {
                (**self).create_private_stream()
            }

            #[track_caller]
            fn comm_unique_id(&self) -> Result<CommUniqueId> {
                (**self).comm_unique_id()
            }

            #[track_caller]
            fn comm_init(&self, id: CommUniqueId, nranks: u32, rank: u32) -> Result<CommHandle> {
                (**self).comm_init(id, nranks, rank)
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
            ) -> Result<()> {
                (**self).collective(comm, op, send, recv, count, dtype, stream)
            }

            #[track_caller]
            fn comm_destroy(&self, comm: CommHandle) -> Result<()> {
                (**self).comm_destroy(comm)
            }

            #[track_caller]
            fn comm_group_start(&self) -> Result<()> {
                (**self).comm_group_start()
            }

            #[track_caller]
            fn comm_group_end(&self) -> Result<()> {
                (**self).comm_group_end()
            }

            #[track_caller]
            fn create_event(&self) -> Result<u64> {
                (**self).create_event()
            }

            #[track_caller]
            fn record_event(&self, event: u64, stream: u64) -> Result<()> {
                (**self).record_event(event, stream)
            }

            #[track_caller]
            fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
                (**self).stream_wait_event(stream, event)
            }

            #[track_caller]
            fn event_synchronize(&self, event: u64) -> Result<()> {
                (**self).event_synchronize(event)
            }

            #[track_caller]
            fn destroy_event(&self, event: u64) -> Result<()> {
                (**self).destroy_event(event)
            }

            #[track_caller]
            fn host_ptr_to_device(&self, host: *mut u8) -> Result<DevicePtr> {
                (**self).host_ptr_to_device(host)
            }

            #[track_caller]
            fn alloc_host_pinned(&self, bytes: usize) -> Result<*mut u8> {
                (**self).alloc_host_pinned(bytes)
            }

            #[track_caller]
            fn free_host_pinned(&self, ptr: *mut u8, bytes: usize) -> Result<()> {
                (**self).free_host_pinned(ptr, bytes)
            }
        }
    };
}

forward_through!(Box);
forward_through!(Arc);
