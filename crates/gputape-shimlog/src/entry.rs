//! How `gputape run` treats each CUDA driver entry point, in one place for the shim (which
//! acts on it) and gputape (which documents it: `gputape reference` writes the table of every
//! entry point the shim exports, and `gputape run` names the calls a replay will skip).

/// How a recording treats an entry point's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A hook of its own logs each call with its arguments and result: a replay makes it.
    Recorded,
    /// Logged by name only: it changes what the device holds or runs in a way the recording
    /// does not understand, so a replay skips it and says so.
    Opaque,
    /// Forwarded and counted only: a query, or bookkeeping a replay does not need.
    Forwarded,
}

/// The entry points the shim has a recording hook of its own for (the shim's test holds its
/// hook table to this list, name for name).
pub const RECORDED: &[&str] = &[
    "cuMemAlloc_v2",
    "cuMemAllocManaged",
    "cuMemAllocPitch_v2",
    "cuMemFree_v2",
    "cuMemAllocAsync",
    "cuMemAllocAsync_ptsz",
    "cuMemAllocFromPoolAsync",
    "cuMemAllocFromPoolAsync_ptsz",
    "cuMemFreeAsync",
    "cuMemFreeAsync_ptsz",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemAllocHost_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemHostGetDevicePointer_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoD_v2_ptds",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyHtoDAsync_v2_ptsz",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoH_v2_ptds",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoHAsync_v2_ptsz",
    "cuMemcpyDtoD_v2",
    "cuMemcpyDtoD_v2_ptds",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyDtoDAsync_v2_ptsz",
    "cuMemcpy2D_v2",
    "cuMemcpy2D_v2_ptds",
    "cuMemcpy2DUnaligned_v2",
    "cuMemcpy2DUnaligned_v2_ptds",
    "cuMemcpy2DAsync_v2",
    "cuMemcpy2DAsync_v2_ptsz",
    "cuMemcpy3D_v2",
    "cuMemcpy3D_v2_ptds",
    "cuMemcpy3DAsync_v2",
    "cuMemcpy3DAsync_v2_ptsz",
    "cuMemcpy",
    "cuMemcpy_ptds",
    "cuMemcpyAsync",
    "cuMemcpyAsync_ptsz",
    "cuMemcpyPeer",
    "cuMemcpyPeer_ptds",
    "cuMemcpyPeerAsync",
    "cuMemcpyPeerAsync_ptsz",
    "cuMemcpyWithAttributesAsync",
    "cuMemcpyWithAttributesAsync_ptsz",
    "cuMemcpyBatchAsync",
    "cuMemcpyBatchAsync_ptsz",
    "cuMemcpyBatchAsync_v2",
    "cuMemcpyBatchAsync_v2_ptsz",
    "cuMemsetD8_v2",
    "cuMemsetD8_v2_ptds",
    "cuMemsetD16_v2",
    "cuMemsetD16_v2_ptds",
    "cuMemsetD32_v2",
    "cuMemsetD32_v2_ptds",
    "cuMemsetD8Async",
    "cuMemsetD8Async_ptsz",
    "cuMemsetD16Async",
    "cuMemsetD16Async_ptsz",
    "cuMemsetD32Async",
    "cuMemsetD32Async_ptsz",
    "cuModuleLoadData",
    "cuModuleLoadFatBinary",
    "cuModuleLoadDataEx",
    "cuModuleLoad",
    "cuLibraryLoadData",
    "cuLibraryLoadFromFile",
    "cuModuleUnload",
    "cuLibraryUnload",
    "cuModuleGetFunction",
    "cuLibraryGetKernel",
    "cuKernelGetFunction",
    "cuModuleGetGlobal_v2",
    "cuLibraryGetGlobal",
    "cuLibraryGetModule",
    "cuLaunchKernel",
    "cuLaunchKernel_ptsz",
    "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel_ptsz",
    "cuLaunchHostFunc",
    "cuLaunchHostFunc_ptsz",
    "cuLaunchHostFunc_v2",
    "cuLaunchHostFunc_v2_ptsz",
    "cuStreamAddCallback",
    "cuStreamAddCallback_ptsz",
    "cuTensorMapEncodeTiled",
    "cuDevicePrimaryCtxRetain",
    "cuCtxCreate_v2",
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventRecord_ptsz",
    "cuEventRecordWithFlags",
    "cuEventRecordWithFlags_ptsz",
    "cuStreamWaitEvent",
    "cuStreamWaitEvent_ptsz",
    "cuEventSynchronize",
    "cuEventQuery",
    "cuStreamSynchronize",
    "cuStreamSynchronize_ptsz",
    "cuStreamQuery",
    "cuStreamQuery_ptsz",
    "cuCtxSynchronize",
    "cuCtxSynchronize_v2",
    "cuStreamBeginCapture",
    "cuStreamBeginCapture_ptsz",
    "cuStreamBeginCapture_v2",
    "cuStreamBeginCapture_v2_ptsz",
    "cuThreadExchangeStreamCaptureMode",
    "cuStreamWriteValue32",
    "cuStreamWriteValue32_ptsz",
    "cuStreamWriteValue32_v2",
    "cuStreamWriteValue32_v2_ptsz",
    "cuStreamWriteValue64",
    "cuStreamWriteValue64_ptsz",
    "cuStreamWriteValue64_v2",
    "cuStreamWriteValue64_v2_ptsz",
    "cuStreamEndCapture",
    "cuStreamEndCapture_ptsz",
    "cuGraphInstantiate",
    "cuGraphInstantiate_v2",
    "cuGraphInstantiateWithFlags",
    "cuGraphInstantiateWithParams",
    "cuGraphInstantiateWithParams_ptsz",
    "cuGraphLaunch",
    "cuGraphLaunch_ptsz",
    "cuGraphUpload",
    "cuGraphUpload_ptsz",
    "cuGraphAddKernelNode",
    "cuGraphAddKernelNode_v2",
    "cuGraphAddMemsetNode",
    "cuGraphAddMemcpyNode",
    "cuGraphAddNode",
    "cuGraphAddNode_v2",
    "cuGraphAddHostNode",
    "cuGraphAddChildGraphNode",
    "cuGraphKernelNodeSetParams",
    "cuGraphKernelNodeSetParams_v2",
    "cuGraphExecKernelNodeSetParams",
    "cuGraphExecKernelNodeSetParams_v2",
    "cuGraphMemsetNodeSetParams",
    "cuGraphExecMemsetNodeSetParams",
    "cuGraphMemcpyNodeSetParams",
    "cuGraphExecMemcpyNodeSetParams",
    "cuGraphHostNodeSetParams",
    "cuGraphExecHostNodeSetParams",
    "cuGraphNodeSetParams",
    "cuGraphExecNodeSetParams",
    "cuGraphClone",
    "cuGraphExecUpdate",
    "cuGraphExecUpdate_v2",
    "cuGraphNodeSetEnabled",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
];

/// How calls of entry point `name` are recorded.
pub fn kind(name: &str) -> Kind {
    if RECORDED.contains(&name) {
        Kind::Recorded
    } else if changes_device(name) {
        Kind::Opaque
    } else {
        Kind::Forwarded
    }
}

/// Whether a call of `name` (one the hooks do not take) changes what the device holds or
/// runs, and so is logged as opaque.
pub fn changes_device(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "cuMemcpy",
        "cuMemset",
        "cuMemAlloc",
        "cuMemFree",
        // cuMemCreate, cuMemRelease and cuMemSetAccess are not here: physical handles and
        // access rights say nothing a replay needs beyond the reservations and maps logged.
        "cuMemMap",
        "cuMemUnmap",
        "cuMemAddressReserve",
        "cuMemPool",
        "cuMemPrefetch",
        "cuMemAdvise",
        "cuMemDiscard",
        "cuLaunch",
        "cuGraphLaunch",
        "cuGraphInstantiate",
        "cuGraphExec",
        "cuGraphUpload",
        // Nodes the recording does not understand (events, allocations, memory operations,
        // external semaphores), new parameters for them, and a node removed from a graph;
        // kernel, copy, memset, host and child-graph nodes are hooked.
        "cuGraphAddEvent",
        "cuGraphEventRecordNodeSetEvent",
        "cuGraphEventWaitNodeSetEvent",
        "cuGraphBatchMemOpNodeSetParams",
        "cuGraphExternalSemaphoresSignalNodeSetParams",
        "cuGraphExternalSemaphoresWaitNodeSetParams",
        "cuGraphDestroyNode",
        "cuGraphAddMem",
        "cuGraphAddBatchMemOpNode",
        "cuGraphAddExternalSemaphores",
        "cuStreamBeginCapture",
        "cuStreamEndCapture",
        "cuStreamWriteValue",
        "cuStreamWaitValue",
        "cuStreamBatchMemOp",
        "cuStreamAttach",
        "cuStreamCopyAttributes",
        "cuStreamSetAttribute",
        "cuTensorMapEncode",
        "cuTensorMapReplace",
        "cuModuleLoad",
        "cuLibraryLoad",
        "cuModuleGetGlobal",
        "cuLibraryGetGlobal",
        "cuLibraryGetManaged",
        "cuImportExternal",
        "cuSignalExternal",
        "cuWaitExternal",
        "cuIpc",
        "cuCtxSetCurrent",
        "cuCtxPushCurrent",
        "cuCtxPopCurrent",
        "cuCtxCreate",
        "cuCtxDestroy",
        "cuFuncSetAttribute",
        "cuKernelSetAttribute",
        "cuFuncSetCache",
        "cuFuncSetShared",
        "cuCtxSetLimit",
        "cuCtxResetPersistingL2Cache",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_hooks_and_the_prefixes() {
        assert_eq!(kind("cuLaunchKernel"), Kind::Recorded);
        assert_eq!(kind("cuStreamWaitValue32"), Kind::Opaque);
        assert_eq!(kind("cuDeviceGetAttribute"), Kind::Forwarded);
        let mut sorted = RECORDED.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), RECORDED.len(), "a name listed twice");
    }
}
