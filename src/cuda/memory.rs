//! Memory, for `CudaBackend`'s `GpuBackend` methods (the trait impl in `backend.rs` calls each
//! `NAME_impl` here): allocations into the ledger (with red zones when configured), frees, the
//! sweep of what owners never released, copies and memsets, and pinned host memory. The
//! `// SAFETY:` lines cite the trait's contract, as `backend.rs`'s module docs set out.

use super::backend::{AllocRecord, CudaBackend};
use super::driver::{self, dp, st};
use crate::backend::ledger::by_site;
use crate::backend::DevicePtr;
use anyhow::Result;
use cudarc::driver::sys;
use std::panic::Location;
use std::sync::atomic::Ordering;

impl CudaBackend {
    #[track_caller]
    pub(super) fn alloc_impl(&self, bytes: usize) -> Result<DevicePtr> {
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
    pub(super) fn alloc_managed_impl(&self, bytes: usize) -> Result<DevicePtr> {
        let site = Location::caller();
        self.alloc_seq.fetch_add(1, Ordering::Relaxed);
        let p =
            driver::mem_alloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32)?;
        self.ledger.lock().insert(p, AllocRecord { bytes, site });
        Ok(DevicePtr(p))
    }

    #[track_caller]
    pub(super) fn free_impl(&self, ptr: DevicePtr) -> Result<()> {
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
    pub(super) fn sweep_unreleased_impl(&self) -> usize {
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
    pub(super) fn copy_h2d_impl(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
        // SAFETY: the trait's contract: `dst` is this backend's memory over `src.len()` bytes.
        unsafe { driver::memcpy_htod(dp(dst), src) }.map_err(|e| self.probe(e))?;
        self.settled_all();
        Ok(())
    }

    #[track_caller]
    pub(super) fn copy_d2h_impl(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        // SAFETY: the trait's contract: `src` is this backend's memory over `dst.len()` bytes.
        unsafe { driver::memcpy_dtoh(dst, dp(src)) }.map_err(|e| self.probe(e))?;
        self.settled_all();
        Ok(())
    }

    #[track_caller]
    pub(super) fn copy_d2d_impl(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> Result<()> {
        // Synchronous only with respect to the host for most sizes: nothing retires here.
        // SAFETY: the trait's contract: both are this backend's memory over `bytes` bytes.
        Ok(unsafe { driver::memcpy_dtod(dp(dst), dp(src), bytes) }.map_err(|e| self.probe(e))?)
    }

    #[track_caller]
    pub(super) fn memset_impl(&self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: the trait's contract: `ptr` is this backend's memory over `bytes` bytes.
        unsafe { driver::memset_d8(dp(ptr), value, bytes) }.map_err(|e| self.probe(e))?;
        self.settled_all();
        Ok(())
    }

    #[track_caller]
    pub(super) fn memset_async_impl(
        &self,
        ptr: DevicePtr,
        value: u8,
        bytes: usize,
        stream: u64,
    ) -> Result<()> {
        // SAFETY: the trait's contract: `ptr` over `bytes` bytes, and `stream`.
        Ok(unsafe { driver::memset_d8_async(dp(ptr), value, bytes, st(stream)) }?)
    }

    #[track_caller]
    pub(super) fn copy_d2h_on_stream_impl(
        &self,
        src: DevicePtr,
        dst: &mut [u8],
        stream: u64,
    ) -> Result<()> {
        // SAFETY: the trait's contract for `src` over `dst.len()` bytes and `stream`; `dst` is
        // borrowed until the stream is synchronised just below, so it outlives the copy.
        unsafe {
            driver::memcpy_dtoh_async(dst.as_mut_ptr().cast(), dp(src), dst.len(), st(stream))
        }?;
        self.sync_stream(stream)
    }

    #[track_caller]
    pub(super) fn copy_h2d_async_retained_impl(
        &self,
        src: &[u8],
        dst: DevicePtr,
        stream: u64,
    ) -> Result<()> {
        // SAFETY: the trait's contract for `dst` over `src.len()` bytes and `stream`, and this
        // method's: the caller keeps `src` alive and unchanged until `stream` next synchronises.
        Ok(unsafe {
            driver::memcpy_htod_async(dp(dst), src.as_ptr().cast(), src.len(), st(stream))
        }?)
    }

    #[track_caller]
    pub(super) fn copy_d2h_async_impl(
        &self,
        src: DevicePtr,
        dst: &mut [u8],
        stream: u64,
    ) -> Result<()> {
        // SAFETY: the trait's contract for `src` over `dst.len()` bytes and `stream`, and this
        // method's: `dst` stays alive and unread until `stream` next synchronises.
        Ok(unsafe {
            driver::memcpy_dtoh_async(dst.as_mut_ptr().cast(), dp(src), dst.len(), st(stream))
        }?)
    }

    #[track_caller]
    pub(super) fn copy_d2d_async_impl(
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
    #[allow(clippy::too_many_arguments)] // the trait method's own arguments, one for one
    pub(super) fn copy_d2d_2d_async_impl(
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
    pub(super) fn host_ptr_to_device_impl(&self, host: *mut u8) -> Result<DevicePtr> {
        let p = driver::mem_host_get_device_pointer(host.cast())?;
        Ok(DevicePtr(p))
    }

    #[track_caller]
    pub(super) fn alloc_host_pinned_impl(&self, bytes: usize) -> Result<*mut u8> {
        let p = driver::mem_alloc_host(bytes.max(1))?;
        // SAFETY: the driver just returned `bytes` of page-locked memory at `p`. The trait
        // promises zeroed memory; cuMemAllocHost does not zero.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
        Ok(p.cast())
    }

    #[track_caller]
    pub(super) fn free_host_pinned_impl(&self, ptr: *mut u8, _bytes: usize) -> Result<()> {
        // SAFETY: the trait's contract: `ptr` came from `alloc_host_pinned`, is freed once, and
        // no slice over it, nor copy reading it, outlives this call.
        Ok(unsafe { driver::mem_free_host(ptr.cast()) }?)
    }
}
