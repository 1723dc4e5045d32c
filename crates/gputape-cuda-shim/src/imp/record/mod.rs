//! The recording hooks (`gputape run -o`): with the call log wanted (`log::wanted`), the entry
//! points below get a hook of their real signature in `DISPATCH`, which calls the driver's
//! function and then logs the call with its result. Hooks are generic over the entry point's
//! index, so one hook serves every variant of a call (`_v2`, `_ptsz`, `_ptds`) and calls that
//! same variant's driver function.
//!
//! Every other entry point that changes what the device holds or runs (`changes_device`) is
//! logged by name, as opaque, through `opaque_entry`, before it is forwarded: a replay says
//! exactly what it could not do. Queries (attributes, versions, occupancy) are not logged.
//!
//! What the hooks keep between calls: the bytes of an async device-to-host copy are read at
//! the first successful host sync that must have completed it (its stream's, the context's,
//! an event recorded after it on its stream), and logged then as `D2HBytes`; parameter
//! layouts are asked of the driver once per function.
//!
//! The hooks live in rooms by what they record: `memory`, `transfers` (copies and memsets),
//! `modules`, `launches`, `tensor_maps`, `contexts`, `streams` (streams, events, syncs),
//! `graphs` (capture and graphs), `ipc` (memory shared between processes through IPC
//! handles) and `shareable` (through the virtual memory API's shareable handles); what they share,
//! and the table of them, is here.

mod contexts;
mod graphs;
mod ipc;
mod launches;
mod memory;
mod modules;
mod shareable;
mod streams;
mod tensor_maps;
mod transfers;

use core::ffi::c_int;
use std::collections::HashMap;
use std::sync::Mutex;

use gputape_shimlog::Rec;

use super::copies::{
    copy_2d, copy_2d_async, copy_3d, copy_3d_async, copy_3d_batch, copy_3d_batch_v2,
    copy_3d_with_attrs, copy_any, copy_any_async, copy_batch, copy_batch_v2, copy_peer,
    copy_peer_async, copy_with_attrs,
};
use super::log;
use super::nodes::{
    add_child_node, add_event_node, add_host_node, add_kernel_node, add_memcpy_node,
    add_memset_node, add_node, add_node_v2, clone, destroy_node, exec_set_child_node,
    exec_set_event_node, exec_set_host_node, exec_set_kernel_node, exec_set_memcpy_node,
    exec_set_memset_node, exec_set_node, exec_update, set_enabled, set_event_node, set_host_node,
    set_kernel_node, set_memcpy_node, set_memset_node, set_node,
};
use super::table::{NAMES, entry, real};
use contexts::{ctx_create, primary_ctx_retain};
use graphs::{
    begin_capture, end_capture, exchange_capture_mode, graph_destroy, graph_exec_destroy,
    graph_instantiate, graph_launch, graph_upload,
};
use ipc::{ipc_close_mem_handle, ipc_get_handle, ipc_open_event_handle, ipc_open_mem_handle};
use launches::{launch, launch_cooperative, launch_ex};
use memory::{
    address_range, address_reserve, host_alloc, host_alloc_flags, host_device_pointer, host_free,
    host_register, host_unregister, mem_alloc, mem_alloc_async, mem_alloc_managed, mem_alloc_pitch,
    mem_alloc_pool_async, mem_free, mem_free_async, mem_map,
};
use modules::{
    get_function, get_global, kernel_get_function, library_get_module, library_load_data,
    library_load_file, module_load_data, module_load_data_ex, module_load_file, module_unload,
};
use shareable::{export_shareable, import_shareable, mem_release, set_access};
use streams::{
    ctx_sync, ctx_sync_v2, event_create, event_destroy, event_query, event_record,
    event_record_flags, event_sync, host_func, host_func_flags, stream_create, stream_create_prio,
    stream_destroy, stream_query, stream_sync, stream_wait_event,
};
use tensor_maps::tensor_map_tiled;
use transfers::{
    batch_mem_op, d2d, d2d_async, d2h, d2h_async, h2d, h2d_async, memset, memset_async,
    wait_value32, wait_value64, write_value32, write_value64,
};

/// The streams a call runs on, as logged: the other rooms', and `copies.rs`'s.
pub(super) use streams::function_name as host_function_name;
pub(super) use transfers::{async_on, blocking, stream_of};

pub(super) type R = c_int;

/// The driver's function of entry point `I`, as the signature `F`.
///
/// # Safety
/// `F` is the C signature of entry point `I` (a stub that ignores its arguments also fits).
pub(super) unsafe fn real_at<F: Copy>(i: usize) -> F {
    let p = real(i);
    debug_assert_eq!(size_of::<F>(), size_of::<*mut ()>());
    // SAFETY: `F` is a function pointer type of entry point `i`'s signature (the contract);
    // `p` is the driver's function for it, or a stub.
    unsafe { core::mem::transmute_copy::<*mut (), F>(&p) }
}

/// `cuDriverGetVersion`, for the log's header (0 when it fails).
pub fn driver_version() -> i32 {
    type F = unsafe extern "C" fn(*mut c_int) -> R;
    let mut v: c_int = 0;
    // SAFETY: cuDriverGetVersion's signature; a valid out-pointer.
    let r = unsafe { real_at::<F>(entry("cuDriverGetVersion"))(&mut v) };
    if r == 0 { v } else { 0 }
}

/// What the hooks remember between calls.
#[derive(Default)]
pub(super) struct Pending {
    /// Async device-to-host copies not yet read: (log index, host destination, bytes, stream).
    pub(super) copies: Vec<(u64, usize, usize, u64)>,
    /// Each event's last record: (its stream, the log index of that record).
    events: HashMap<u64, (u64, u64)>,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

pub(super) fn with_pending<T>(f: impl FnOnce(&mut Pending) -> T) -> T {
    let mut g = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Pending::default))
}

/// Which async copies a successful sync has completed.
enum Done {
    /// Everything (a context sync).
    All,
    /// Those on this stream.
    Stream(u64),
    /// Those on `stream` logged before `before`.
    Before { stream: u64, before: u64 },
}

/// Reads and logs the bytes of the async copies `done` completed (a blocking sync then writes
/// the log out; a query leaves that to the next sync).
fn settle(done: Done) {
    let ready: Vec<(u64, usize, usize, u64)> = with_pending(|p| {
        let (now, later) = p.copies.drain(..).partition(|&(i, _, _, s)| match done {
            Done::All => true,
            Done::Stream(st) => same_stream(s, st),
            Done::Before { stream, before } => same_stream(s, stream) && i < before,
        });
        p.copies = later;
        now
    });
    for (copy, dst, len, _) in ready {
        // SAFETY: the program handed the driver `len` writable bytes at `dst` for this copy,
        // which the sync just completed; the program has not had them back to free yet.
        let data = unsafe { core::slice::from_raw_parts(dst as *const u8, len) };
        log::write(0, Rec::D2HBytes { copy, data });
    }
}

/// The legacy stream (0 and `CU_STREAM_LEGACY`, 1) and the per-thread one (2) are told apart
/// from created streams only; a sync of any of them settles copies on any of them.
fn same_stream(a: u64, b: u64) -> bool {
    a == b || (a <= 2 && b <= 2)
}

// ---- opaque calls ----

/// Logs entry point `i` by name, as opaque; `opaque_entry` calls it before forwarding.
pub extern "C" fn note_opaque(i: usize) {
    if let Some(name) = NAMES.get(i) {
        log::write(
            gputape_shimlog::STATUS_UNKNOWN,
            Rec::Opaque {
                name: name.as_bytes(),
            },
        );
    }
}

// ---- the table ----

pub use gputape_shimlog::entry::Kind;

/// How entry point `i`'s calls are treated when recording.
pub fn kind_of(i: usize) -> Kind {
    NAMES
        .get(i)
        .map_or(Kind::Forwarded, |n| gputape_shimlog::entry::kind(n))
}

/// The recording hook of entry point `i`, when the call log is wanted: a hook of its own for
/// the calls understood, `opaque` for the other calls that change the device.
pub fn hook_for(i: usize, opaque: *mut ()) -> Option<*mut ()> {
    if !log::wanted() {
        return None;
    }
    match kind_of(i) {
        Kind::Recorded => own_hook(i),
        Kind::Opaque => Some(opaque),
        Kind::Forwarded => None,
    }
}

macro_rules! hooks {
    ($($name:literal => $f:ident $(<$($g:literal),*>)?,)*) => {
        /// The entry points with a hook below, in its order: `gputape_shimlog::entry::RECORDED`
        /// must name the same ones (the test `hooked_entry_points_are_the_recorded_ones`).
        #[cfg(test)]
        const HOOKED: &[&str] = &[$($name),*];

        /// The hook of its own entry point `i` has, if the recording understands it.
        fn own_hook(i: usize) -> Option<*mut ()> {
            $(
                if i == const { entry($name) } {
                    return Some($f::<{ entry($name) } $($(, $g)*)?> as *mut ());
                }
            )*
            None
        }
    };
}

hooks! {
    "cuMemAlloc_v2" => mem_alloc,
    "cuMemAllocManaged" => mem_alloc_managed,
    "cuMemAllocPitch_v2" => mem_alloc_pitch,
    "cuMemFree_v2" => mem_free,
    "cuMemAllocAsync" => mem_alloc_async,
    "cuMemAllocAsync_ptsz" => mem_alloc_async,
    "cuMemAllocFromPoolAsync" => mem_alloc_pool_async,
    "cuMemAllocFromPoolAsync_ptsz" => mem_alloc_pool_async,
    "cuMemFreeAsync" => mem_free_async,
    "cuMemFreeAsync_ptsz" => mem_free_async,
    "cuMemAddressReserve" => address_reserve,
    "cuMemAddressFree" => address_range<false>,
    "cuMemMap" => mem_map,
    "cuMemUnmap" => address_range<true>,
    "cuMemRelease" => mem_release,
    "cuMemSetAccess" => set_access,
    "cuMemExportToShareableHandle" => export_shareable,
    "cuMemImportFromShareableHandle" => import_shareable,
    "cuMemAllocHost_v2" => host_alloc,
    "cuMemHostAlloc" => host_alloc_flags,
    "cuMemFreeHost" => host_free,
    "cuMemHostRegister" => host_register,
    "cuMemHostRegister_v2" => host_register,
    "cuMemHostUnregister" => host_unregister,
    "cuMemHostGetDevicePointer_v2" => host_device_pointer,
    "cuMemcpyHtoD_v2" => h2d,
    "cuMemcpyHtoD_v2_ptds" => h2d,
    "cuMemcpyHtoDAsync_v2" => h2d_async,
    "cuMemcpyHtoDAsync_v2_ptsz" => h2d_async,
    "cuMemcpyDtoH_v2" => d2h,
    "cuMemcpyDtoH_v2_ptds" => d2h,
    "cuMemcpyDtoHAsync_v2" => d2h_async,
    "cuMemcpyDtoHAsync_v2_ptsz" => d2h_async,
    "cuMemcpyDtoD_v2" => d2d,
    "cuMemcpyDtoD_v2_ptds" => d2d,
    "cuMemcpyDtoDAsync_v2" => d2d_async,
    "cuMemcpyDtoDAsync_v2_ptsz" => d2d_async,
    "cuMemcpy2D_v2" => copy_2d,
    "cuMemcpy2D_v2_ptds" => copy_2d,
    "cuMemcpy2DUnaligned_v2" => copy_2d,
    "cuMemcpy2DUnaligned_v2_ptds" => copy_2d,
    "cuMemcpy2DAsync_v2" => copy_2d_async,
    "cuMemcpy2DAsync_v2_ptsz" => copy_2d_async,
    "cuMemcpy3D_v2" => copy_3d,
    "cuMemcpy3D_v2_ptds" => copy_3d,
    "cuMemcpy3DAsync_v2" => copy_3d_async,
    "cuMemcpy3DAsync_v2_ptsz" => copy_3d_async,
    "cuMemcpy" => copy_any,
    "cuMemcpy_ptds" => copy_any,
    "cuMemcpyAsync" => copy_any_async,
    "cuMemcpyAsync_ptsz" => copy_any_async,
    "cuMemcpyPeer" => copy_peer,
    "cuMemcpyPeer_ptds" => copy_peer,
    "cuMemcpyPeerAsync" => copy_peer_async,
    "cuMemcpyPeerAsync_ptsz" => copy_peer_async,
    "cuMemcpyWithAttributesAsync" => copy_with_attrs,
    "cuMemcpyWithAttributesAsync_ptsz" => copy_with_attrs,
    "cuMemcpyBatchAsync" => copy_batch,
    "cuMemcpyBatchAsync_ptsz" => copy_batch,
    "cuMemcpyBatchAsync_v2" => copy_batch_v2,
    "cuMemcpyBatchAsync_v2_ptsz" => copy_batch_v2,
    "cuMemcpy3DBatchAsync" => copy_3d_batch,
    "cuMemcpy3DBatchAsync_ptsz" => copy_3d_batch,
    "cuMemcpy3DBatchAsync_v2" => copy_3d_batch_v2,
    "cuMemcpy3DBatchAsync_v2_ptsz" => copy_3d_batch_v2,
    "cuMemcpy3DWithAttributesAsync" => copy_3d_with_attrs,
    "cuMemcpy3DWithAttributesAsync_ptsz" => copy_3d_with_attrs,
    "cuMemsetD8_v2" => memset<1>,
    "cuMemsetD8_v2_ptds" => memset<1>,
    "cuMemsetD16_v2" => memset<2>,
    "cuMemsetD16_v2_ptds" => memset<2>,
    "cuMemsetD32_v2" => memset<4>,
    "cuMemsetD32_v2_ptds" => memset<4>,
    "cuMemsetD8Async" => memset_async<1>,
    "cuMemsetD8Async_ptsz" => memset_async<1>,
    "cuMemsetD16Async" => memset_async<2>,
    "cuMemsetD16Async_ptsz" => memset_async<2>,
    "cuMemsetD32Async" => memset_async<4>,
    "cuMemsetD32Async_ptsz" => memset_async<4>,
    "cuModuleLoadData" => module_load_data,
    "cuModuleLoadFatBinary" => module_load_data,
    "cuModuleLoadDataEx" => module_load_data_ex,
    "cuModuleLoad" => module_load_file,
    "cuLibraryLoadData" => library_load_data,
    "cuLibraryLoadFromFile" => library_load_file,
    "cuModuleUnload" => module_unload<false>,
    "cuLibraryUnload" => module_unload<true>,
    "cuModuleGetFunction" => get_function<false>,
    "cuLibraryGetKernel" => get_function<true>,
    "cuKernelGetFunction" => kernel_get_function,
    "cuModuleGetGlobal_v2" => get_global<false>,
    "cuLibraryGetGlobal" => get_global<true>,
    "cuLibraryGetModule" => library_get_module,
    "cuLaunchKernel" => launch,
    "cuLaunchKernel_ptsz" => launch,
    "cuLaunchKernelEx" => launch_ex,
    "cuLaunchKernelEx_ptsz" => launch_ex,
    "cuLaunchCooperativeKernel" => launch_cooperative,
    "cuLaunchCooperativeKernel_ptsz" => launch_cooperative,
    "cuLaunchHostFunc" => host_func,
    "cuLaunchHostFunc_ptsz" => host_func,
    "cuLaunchHostFunc_v2" => host_func_flags,
    "cuLaunchHostFunc_v2_ptsz" => host_func_flags,
    "cuStreamAddCallback" => host_func_flags,
    "cuStreamAddCallback_ptsz" => host_func_flags,
    "cuTensorMapEncodeTiled" => tensor_map_tiled,
    "cuDevicePrimaryCtxRetain" => primary_ctx_retain,
    "cuCtxCreate_v2" => ctx_create,
    "cuStreamCreate" => stream_create,
    "cuStreamCreateWithPriority" => stream_create_prio,
    "cuStreamDestroy_v2" => stream_destroy,
    "cuEventCreate" => event_create,
    "cuEventDestroy_v2" => event_destroy,
    "cuEventRecord" => event_record,
    "cuEventRecord_ptsz" => event_record,
    "cuEventRecordWithFlags" => event_record_flags,
    "cuEventRecordWithFlags_ptsz" => event_record_flags,
    "cuStreamWaitEvent" => stream_wait_event,
    "cuStreamWaitEvent_ptsz" => stream_wait_event,
    "cuEventSynchronize" => event_sync,
    "cuEventQuery" => event_query,
    "cuStreamSynchronize" => stream_sync,
    "cuStreamSynchronize_ptsz" => stream_sync,
    "cuStreamQuery" => stream_query,
    "cuStreamQuery_ptsz" => stream_query,
    "cuCtxSynchronize" => ctx_sync,
    "cuCtxSynchronize_v2" => ctx_sync_v2,
    "cuStreamBeginCapture" => begin_capture<false>,
    "cuStreamBeginCapture_ptsz" => begin_capture<false>,
    "cuStreamBeginCapture_v2" => begin_capture<true>,
    "cuStreamBeginCapture_v2_ptsz" => begin_capture<true>,
    "cuThreadExchangeStreamCaptureMode" => exchange_capture_mode,
    "cuStreamWriteValue32" => write_value32,
    "cuStreamWriteValue32_ptsz" => write_value32,
    "cuStreamWriteValue32_v2" => write_value32,
    "cuStreamWriteValue32_v2_ptsz" => write_value32,
    "cuStreamWriteValue64" => write_value64,
    "cuStreamWriteValue64_ptsz" => write_value64,
    "cuStreamWriteValue64_v2" => write_value64,
    "cuStreamWriteValue64_v2_ptsz" => write_value64,
    "cuStreamWaitValue32" => wait_value32,
    "cuStreamWaitValue32_ptsz" => wait_value32,
    "cuStreamWaitValue32_v2" => wait_value32,
    "cuStreamWaitValue32_v2_ptsz" => wait_value32,
    "cuStreamWaitValue64" => wait_value64,
    "cuStreamWaitValue64_ptsz" => wait_value64,
    "cuStreamWaitValue64_v2" => wait_value64,
    "cuStreamWaitValue64_v2_ptsz" => wait_value64,
    "cuStreamBatchMemOp" => batch_mem_op,
    "cuStreamBatchMemOp_ptsz" => batch_mem_op,
    "cuStreamBatchMemOp_v2" => batch_mem_op,
    "cuStreamBatchMemOp_v2_ptsz" => batch_mem_op,
    "cuStreamEndCapture" => end_capture,
    "cuStreamEndCapture_ptsz" => end_capture,
    "cuGraphInstantiate" => graph_instantiate,
    "cuGraphInstantiate_v2" => graph_instantiate,
    "cuGraphInstantiateWithFlags" => graph_instantiate,
    "cuGraphInstantiateWithParams" => graph_instantiate,
    "cuGraphInstantiateWithParams_ptsz" => graph_instantiate,
    "cuGraphLaunch" => graph_launch,
    "cuGraphLaunch_ptsz" => graph_launch,
    "cuGraphUpload" => graph_upload,
    "cuGraphUpload_ptsz" => graph_upload,
    "cuGraphAddKernelNode" => add_kernel_node<false>,
    "cuGraphAddKernelNode_v2" => add_kernel_node<true>,
    "cuGraphAddMemsetNode" => add_memset_node,
    "cuGraphAddMemcpyNode" => add_memcpy_node,
    "cuGraphAddNode" => add_node,
    "cuGraphAddNode_v2" => add_node_v2,
    "cuGraphAddHostNode" => add_host_node,
    "cuGraphAddChildGraphNode" => add_child_node,
    "cuGraphDestroyNode" => destroy_node,
    "cuGraphExecChildGraphNodeSetParams" => exec_set_child_node,
    "cuGraphAddEventRecordNode" => add_event_node<false>,
    "cuGraphAddEventWaitNode" => add_event_node<true>,
    "cuGraphEventRecordNodeSetEvent" => set_event_node<false>,
    "cuGraphEventWaitNodeSetEvent" => set_event_node<true>,
    "cuGraphExecEventRecordNodeSetEvent" => exec_set_event_node<false>,
    "cuGraphExecEventWaitNodeSetEvent" => exec_set_event_node<true>,
    "cuGraphKernelNodeSetParams" => set_kernel_node<false>,
    "cuGraphKernelNodeSetParams_v2" => set_kernel_node<true>,
    "cuGraphExecKernelNodeSetParams" => exec_set_kernel_node<false>,
    "cuGraphExecKernelNodeSetParams_v2" => exec_set_kernel_node<true>,
    "cuGraphMemsetNodeSetParams" => set_memset_node,
    "cuGraphExecMemsetNodeSetParams" => exec_set_memset_node,
    "cuGraphMemcpyNodeSetParams" => set_memcpy_node,
    "cuGraphExecMemcpyNodeSetParams" => exec_set_memcpy_node,
    "cuGraphHostNodeSetParams" => set_host_node,
    "cuGraphExecHostNodeSetParams" => exec_set_host_node,
    "cuGraphNodeSetParams" => set_node,
    "cuGraphExecNodeSetParams" => exec_set_node,
    "cuGraphClone" => clone,
    "cuGraphExecUpdate" => exec_update,
    "cuGraphExecUpdate_v2" => exec_update,
    "cuGraphNodeSetEnabled" => set_enabled,
    "cuIpcGetMemHandle" => ipc_get_handle<false>,
    "cuIpcOpenMemHandle" => ipc_open_mem_handle,
    "cuIpcOpenMemHandle_v2" => ipc_open_mem_handle,
    "cuIpcCloseMemHandle" => ipc_close_mem_handle,
    "cuIpcGetEventHandle" => ipc_get_handle<true>,
    "cuIpcOpenEventHandle" => ipc_open_event_handle,
    "cuGraphExecDestroy" => graph_exec_destroy,
    "cuGraphDestroy" => graph_destroy,
}

#[cfg(test)]
mod tests {
    /// The shim's hooks and the table gputape documents (`gputape_shimlog::entry`) name the
    /// same entry points: a hook added without its line there (or the other way) fails here.
    #[test]
    fn hooked_entry_points_are_the_recorded_ones() {
        let mut hooked = super::HOOKED.to_vec();
        hooked.sort();
        let mut recorded = gputape_shimlog::entry::RECORDED.to_vec();
        recorded.sort();
        assert_eq!(hooked, recorded);
    }
}
