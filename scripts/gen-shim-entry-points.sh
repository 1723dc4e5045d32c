#!/usr/bin/env bash
# Regenerate crates/gputape-cuda-shim/src/entry_points.txt: the names of every CUDA driver
# entry point the shim exports (one forwarder each, made by the crate's build.rs from this list;
# the build reads only the checked-in list, never cudarc's files). Run it after a cudarc upgrade
# and commit the list. The names come from:
#   1. cudarc's bindgen'd driver module (every `pub fn cu*` / `pub unsafe fn cu*`, all CUDA
#      versions it binds, so names a newer or older driver has are kept too);
#   2. the unversioned names of its `_v2`/`_v3`/`_v4` functions (`cuMemAlloc` beside
#      `cuMemAlloc_v2`): older binaries import them, and the driver still exports them;
#   3. the per-thread default stream variants (`_ptds` for synchronous calls, `_ptsz` for calls
#      that take a stream), which cuda.h selects under `CUDA_API_PER_THREAD_DEFAULT_STREAM`
#      and cuGetProcAddress hands out for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM; only
#      those whose base name is in the list from 1 and 2;
#   4. the graphics interop and profiler entry points (cudaGL.h, cudaEGL.h, cudaVDPAU.h,
#      cudaProfiler.h) that cudarc does not bind, and cuda.h's NvSciSync query (the CUDA 13
#      runtime asks cuGetProcAddress for it at start: run 61 saw it unmapped).
# A name the real driver lacks costs nothing: its forwarder returns CUDA_ERROR_NOT_FOUND (500).
set -euo pipefail
cd "$(dirname "$0")/.."
out=crates/gputape-cuda-shim/src/entry_points.txt
src=${CUDARC_DRIVER_SYS:-$(ls -d ~/.cargo/registry/src/*/cudarc-0.19*/src/driver/sys/mod.rs | sort -V | tail -1)}
[ -f "$src" ] || { echo "cudarc's driver sys module not found (set CUDARC_DRIVER_SYS)" >&2; exit 2; }
export LC_ALL=C
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. cudarc.
grep -oE '^[[:space:]]*pub (unsafe )?fn cu[A-Za-z0-9_]*' "$src" | grep -oE 'cu[A-Za-z0-9_]*$' \
    | sort -u >"$tmp/cudarc"
# 2. Unversioned names of versioned entry points.
sed -nE 's/^(cu[A-Za-z0-9]+)_v[0-9]+$/\1/p' "$tmp/cudarc" | sort -u >"$tmp/legacy"
# 4. Interop and profiler entry points.
cat >"$tmp/interop" <<'EOF'
cuGLCtxCreate
cuGLCtxCreate_v2
cuGLGetDevices
cuGLGetDevices_v2
cuGLInit
cuGLMapBufferObject
cuGLMapBufferObjectAsync
cuGLMapBufferObjectAsync_v2
cuGLMapBufferObject_v2
cuGLRegisterBufferObject
cuGLSetBufferObjectMapFlags
cuGLUnmapBufferObject
cuGLUnmapBufferObjectAsync
cuGLUnregisterBufferObject
cuGraphicsGLRegisterBuffer
cuGraphicsGLRegisterImage
cuEGLStreamConsumerAcquireFrame
cuEGLStreamConsumerConnect
cuEGLStreamConsumerConnectWithFlags
cuEGLStreamConsumerDisconnect
cuEGLStreamConsumerReleaseFrame
cuEGLStreamProducerConnect
cuEGLStreamProducerDisconnect
cuEGLStreamProducerPresentFrame
cuEGLStreamProducerReturnFrame
cuEventCreateFromEGLSync
cuGraphicsEGLRegisterImage
cuGraphicsResourceGetMappedEglFrame
cuGraphicsVDPAURegisterOutputSurface
cuGraphicsVDPAURegisterVideoSurface
cuVDPAUCtxCreate
cuVDPAUCtxCreate_v2
cuVDPAUGetDevice
cuProfilerInitialize
cuProfilerStart
cuProfilerStop
cuDeviceGetNvSciSyncAttributes
EOF
sort -u "$tmp/cudarc" "$tmp/legacy" "$tmp/interop" >"$tmp/base"

# 3. Per-thread default stream variants: `name suffix`, kept where `name` is known.
cat >"$tmp/perthread" <<'EOF'
cuMemcpy ptds
cuMemcpyPeer ptds
cuMemcpy3DPeer ptds
cuMemcpyHtoD_v2 ptds
cuMemcpyDtoH_v2 ptds
cuMemcpyDtoD_v2 ptds
cuMemcpyDtoA_v2 ptds
cuMemcpyAtoD_v2 ptds
cuMemcpyHtoA_v2 ptds
cuMemcpyAtoH_v2 ptds
cuMemcpyAtoA_v2 ptds
cuMemcpy2D_v2 ptds
cuMemcpy2DUnaligned_v2 ptds
cuMemcpy3D_v2 ptds
cuMemsetD8_v2 ptds
cuMemsetD16_v2 ptds
cuMemsetD32_v2 ptds
cuMemsetD2D8_v2 ptds
cuMemsetD2D16_v2 ptds
cuMemsetD2D32_v2 ptds
cuGLMapBufferObject_v2 ptds
cuMemcpyAsync ptsz
cuMemcpyPeerAsync ptsz
cuMemcpy3DPeerAsync ptsz
cuMemcpyHtoAAsync_v2 ptsz
cuMemcpyAtoHAsync_v2 ptsz
cuMemcpyHtoDAsync_v2 ptsz
cuMemcpyDtoHAsync_v2 ptsz
cuMemcpyDtoDAsync_v2 ptsz
cuMemcpy2DAsync_v2 ptsz
cuMemcpy3DAsync_v2 ptsz
cuMemcpyBatchAsync ptsz
cuMemcpyBatchAsync_v2 ptsz
cuMemcpy3DBatchAsync ptsz
cuMemcpy3DBatchAsync_v2 ptsz
cuMemcpyWithAttributesAsync ptsz
cuMemcpy3DWithAttributesAsync ptsz
cuMemPrefetchAsync ptsz
cuMemPrefetchAsync_v2 ptsz
cuMemPrefetchBatchAsync ptsz
cuMemDiscardBatchAsync ptsz
cuMemDiscardAndPrefetchBatchAsync ptsz
cuMemsetD8Async ptsz
cuMemsetD16Async ptsz
cuMemsetD32Async ptsz
cuMemsetD2D8Async ptsz
cuMemsetD2D16Async ptsz
cuMemsetD2D32Async ptsz
cuMemMapArrayAsync ptsz
cuMemFreeAsync ptsz
cuMemAllocAsync ptsz
cuMemAllocFromPoolAsync ptsz
cuStreamGetPriority ptsz
cuStreamGetId ptsz
cuStreamGetFlags ptsz
cuStreamGetDevice ptsz
cuStreamGetCtx ptsz
cuStreamGetCtx_v2 ptsz
cuStreamWaitEvent ptsz
cuStreamBeginCapture ptsz
cuStreamBeginCapture_v2 ptsz
cuStreamBeginCaptureToGraph ptsz
cuStreamEndCapture ptsz
cuStreamIsCapturing ptsz
cuStreamGetCaptureInfo ptsz
cuStreamGetCaptureInfo_v2 ptsz
cuStreamGetCaptureInfo_v3 ptsz
cuStreamUpdateCaptureDependencies ptsz
cuStreamUpdateCaptureDependencies_v2 ptsz
cuStreamAddCallback ptsz
cuStreamAttachMemAsync ptsz
cuStreamQuery ptsz
cuStreamSynchronize ptsz
cuStreamCopyAttributes ptsz
cuStreamGetAttribute ptsz
cuStreamSetAttribute ptsz
cuStreamWriteValue32 ptsz
cuStreamWaitValue32 ptsz
cuStreamWriteValue64 ptsz
cuStreamWaitValue64 ptsz
cuStreamBatchMemOp ptsz
cuStreamWriteValue32_v2 ptsz
cuStreamWaitValue32_v2 ptsz
cuStreamWriteValue64_v2 ptsz
cuStreamWaitValue64_v2 ptsz
cuStreamBatchMemOp_v2 ptsz
cuEventRecord ptsz
cuEventRecordWithFlags ptsz
cuLaunchKernel ptsz
cuLaunchKernelEx ptsz
cuLaunchCooperativeKernel ptsz
cuLaunchHostFunc ptsz
cuLaunchHostFunc_v2 ptsz
cuSignalExternalSemaphoresAsync ptsz
cuWaitExternalSemaphoresAsync ptsz
cuGraphInstantiateWithParams ptsz
cuGraphUpload ptsz
cuGraphLaunch ptsz
cuGraphicsMapResources ptsz
cuGraphicsUnmapResources ptsz
cuGLMapBufferObjectAsync_v2 ptsz
EOF
while read -r name suffix; do
    if grep -qx "$name" "$tmp/base"; then echo "${name}_$suffix"; else echo "unknown base $name" >&2; exit 1; fi
done <"$tmp/perthread" >"$tmp/pt"

{
    echo "# Every CUDA driver entry point gputape's libcuda.so.1 exports, one name a line, sorted."
    echo "# Generated by scripts/gen-shim-entry-points.sh from $(basename "$(dirname "$(dirname "$(dirname "$(dirname "$src")")")")")"
    echo "# (plus legacy unversioned names, per-thread stream variants, interop); do not edit by hand."
    sort -u "$tmp/base" "$tmp/pt"
} >"$out"
echo "$out: $(grep -vc '^#' "$out") entry points ($(wc -l <"$tmp/cudarc") from cudarc, $(comm -13 "$tmp/cudarc" "$tmp/legacy" | wc -l) legacy, $(wc -l <"$tmp/pt") per-thread, $(comm -13 "$tmp/cudarc" <(sort "$tmp/interop") | wc -l) interop)"
