//! Memory at fixed addresses through the driver's virtual memory management (`place_at`), for
//! replaying traces whose buffers hold device addresses. Its own room because it is the one
//! allocator here that reserves, maps and unmaps address ranges instead of calling `cuMemAlloc`.

use super::backend::{AllocRecord, CudaBackend};
use super::driver;
use crate::backend::DevicePtr;
use anyhow::Result;
use cudarc::driver::sys;
use std::panic::Location;

impl CudaBackend {
    pub(super) fn vmm_prop(&self) -> sys::CUmemAllocationProp {
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
        // SAFETY: `prop` is from `vmm_prop`, whose one pointer is null.
        let gran = unsafe {
            driver::mem_get_allocation_granularity(
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        }?;
        let g = gran as u64;
        let (lo, hi) = (addr / g * g, (addr + bytes.max(1) as u64).div_ceil(g) * g);
        let mut fixed = self.fixed.lock();
        let mut chunk = lo;
        while chunk < hi {
            if let std::collections::btree_map::Entry::Vacant(slot) = fixed.entry(chunk) {
                let got = driver::mem_address_reserve(gran, gran, chunk)
                    .map_err(|e| e.with(format!("reserving {chunk:#x}")))?;
                if got != chunk {
                    // SAFETY: `got` is the reservation just made, used by nothing.
                    let _ = unsafe { driver::mem_address_free(got, gran) };
                    anyhow::bail!(
                        "cannot replay at the recorded address {addr:#x}: the driver will not reserve {chunk:#x} in this process (offered {got:#x})"
                    );
                }
                // SAFETY: `prop` is from `vmm_prop`, whose one pointer is null.
                let h = match unsafe { driver::mem_create(gran, &prop) } {
                    Ok(h) => h,
                    Err(e) => {
                        // SAFETY: `chunk` is the reservation just made, used by nothing.
                        let _ = unsafe { driver::mem_address_free(chunk, gran) };
                        return Err(e.into());
                    }
                };
                let access = sys::CUmemAccessDesc {
                    location: prop.location,
                    flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                };
                // SAFETY: `chunk` is this backend's fresh reservation of `gran` bytes, not
                // mapped yet (its slot in `fixed` is vacant); `h` is the `gran`-byte handle just
                // created. Access is set only once the map succeeded.
                let mapped = unsafe { driver::mem_map(chunk, gran, h) }
                    .and_then(|_| unsafe { driver::mem_set_access(chunk, gran, &access) });
                if let Err(e) = mapped {
                    // SAFETY: the range, its handle and its reservation were made just above
                    // and handed to no one; each is undone once. (The unmap is for a map that
                    // succeeded before the access failed; after a failed map it has nothing to
                    // undo and the driver refuses it.)
                    unsafe {
                        let _ = driver::mem_unmap(chunk, gran);
                        let _ = driver::mem_release(h);
                        let _ = driver::mem_address_free(chunk, gran);
                    }
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

    /// Unmap and release every fixed-address chunk, and free its reservation: for drop.
    ///
    /// # Safety
    /// No buffer of `place_at` is used afterwards.
    pub(super) unsafe fn release_fixed(&mut self) {
        let gran = {
            let prop = self.vmm_prop();
            // SAFETY: `prop` is from `vmm_prop`, whose one pointer is null.
            unsafe {
                driver::mem_get_allocation_granularity(
                    &prop,
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            }
            .unwrap_or(0)
        };
        for (chunk, h) in std::mem::take(self.fixed.get_mut()) {
            // SAFETY: each entry of `fixed` is a chunk `place_at` reserved and mapped with
            // handle `h`, taken out of the map here so it is undone once; that nothing uses it
            // afterwards is this function's caller's obligation.
            unsafe {
                let _ = driver::mem_unmap(chunk, gran);
                let _ = driver::mem_release(h);
                let _ = driver::mem_address_free(chunk, gran);
            }
        }
    }
}
