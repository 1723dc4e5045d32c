//! Red zones: guard bands after allocations, filled at `alloc`, scanned and poisoned on
//! request, to catch kernels that write past the end of a buffer. Its own room because it is a
//! debugging aid with its own records, touched by `alloc` and `free` only at the edges.

use super::backend::CudaBackend;
use super::driver;
use crate::backend::{DevicePtr, Site};
use anyhow::Result;

#[derive(Clone, Copy)]
pub(super) struct RedZone {
    pub(super) user_ptr: u64,
    pub(super) user_bytes: usize,
    pub(super) pad: usize,
    pub(super) idx: usize,
    pub(super) site: Site,
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

impl CudaBackend {
    /// The guard band for allocation number `idx`: `cfg.redzone.bytes`, or 0 when red zones
    /// are off or `idx` is below `min_idx`.
    pub(super) fn redzone_pad(&self, idx: usize) -> usize {
        let rz = &self.cfg.redzone;
        if rz.bytes > 0 && idx >= rz.min_idx {
            rz.bytes
        } else {
            0
        }
    }

    /// Fill the `pad` bytes after a fresh `bytes`-byte allocation at `p` (made `bytes + pad`
    /// long) and record them; on failure the allocation is freed. Logs a backtrace when `idx` is
    /// `cfg.redzone.trace_idx`.
    ///
    /// # Safety
    /// `p` is an allocation of `bytes + pad` bytes from `driver::mem_alloc`, handed to no one
    /// yet.
    pub(super) unsafe fn guard(
        &self,
        p: u64,
        bytes: usize,
        pad: usize,
        idx: usize,
        site: Site,
    ) -> Result<()> {
        let rz = &self.cfg.redzone;
        // SAFETY: `p` is a fresh allocation of `bytes + pad` bytes (this function's caller's
        // obligation), so its last `pad` bytes are this backend's own.
        if let Err(e) = unsafe { driver::memset_d8(p + bytes as u64, rz.fill, pad) } {
            // SAFETY: `p` was allocated just now and handed to no one (as above).
            let _ = unsafe { driver::mem_free(p) };
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
        Ok(())
    }

    /// `GpuBackend::scan_redzones`: read every guard band back, report the written ones and
    /// refill them.
    pub(super) fn scan_guard_bands(&self) -> Result<usize> {
        let fill = self.cfg.redzone.fill;
        let zones: Vec<RedZone> = self.redzones.lock().clone();
        let mut bad = Vec::new();
        let mut host = Vec::new();
        for z in &zones {
            host.clear();
            host.resize(z.pad, 0);
            let end = z.user_ptr + z.user_bytes as u64;
            // SAFETY: `[end, end + pad)` is the guard band of an allocation of this backend,
            // live while its record is in `redzones` (a free racing with this scan would be the
            // caller freeing a buffer in use); no Rust reference covers it; `host` is `pad`
            // bytes long.
            unsafe { driver::memcpy_dtoh(&mut host, end) }?;
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
            // SAFETY: the same guard band, this backend's own memory.
            unsafe { driver::memset_d8(end, fill, z.pad) }?;
        }
        let n = bad.len();
        *self.last_violations.lock() = bad;
        Ok(n)
    }

    /// `GpuBackend::redzone_hits`: what the last scan found, as the trait reports it.
    pub(super) fn guard_band_hits(&self) -> Vec<crate::backend::RedzoneHit> {
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

    /// `GpuBackend::poison_redzones`: fill the guard bands of allocations `lo..hi` with `0xEE`
    /// and every other with zeros.
    pub(super) fn poison_guard_bands(&self, lo: usize, hi: usize) -> Result<()> {
        let zones: Vec<RedZone> = self.redzones.lock().clone();
        for z in &zones {
            let v = if (lo..hi).contains(&z.idx) {
                0xEE
            } else {
                0x00
            };
            // SAFETY: `[user_ptr + user_bytes, + pad)` is the guard band of an allocation of
            // this backend, live while its record is in `redzones`, as in the scan.
            unsafe { driver::memset_d8(z.user_ptr + z.user_bytes as u64, v, z.pad) }?;
        }
        Ok(())
    }

    /// What the last `scan_redzones` found.
    pub fn last_redzone_violations(&self) -> Vec<RedzoneViolation> {
        self.last_violations.lock().clone()
    }
}
