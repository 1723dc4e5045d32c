//! Allocations, for the mock's `GpuBackend` methods (the trait impl in `backend.rs` calls each
//! `NAME_impl` here): device and managed memory against the configured total, frees (a dead
//! context's included), the sweep of what owners never released, and pinned host memory with
//! its device alias.

use super::*;

impl MockGpuBackend {
    #[track_caller]
    pub(super) fn alloc_impl(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Alloc, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::DeviceAlloc,
            None,
            "alloc",
            site
        ))?;
        if st
            .mem
            .live_bytes
            .checked_add(bytes)
            .is_none_or(|total| total > self.cfg.total_memory)
        {
            return mock_try!(Err(MockError::OutOfMemory {
                op: "alloc",
                site,
                requested: bytes,
                live: st.mem.live_bytes,
                limit: self.cfg.total_memory,
            }));
        }
        let base = mock_try!(st.mem.alloc("alloc", bytes, site))?;
        st.log(|| Executed::Alloc { base, size: bytes });
        Ok(DevicePtr(base))
    }

    #[track_caller]
    pub(super) fn alloc_managed_impl(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::AllocManaged, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::DeviceAlloc,
            None,
            "alloc_managed",
            site
        ))?;
        // Managed memory may oversubscribe the device, up to what the host could back.
        let limit = self.cfg.total_memory.saturating_mul(2);
        if st
            .mem
            .live_bytes
            .checked_add(bytes)
            .is_none_or(|total| total > limit)
        {
            return mock_try!(Err(MockError::OutOfMemory {
                op: "alloc_managed",
                site,
                requested: bytes,
                live: st.mem.live_bytes,
                limit,
            }));
        }
        let base = mock_try!(st.mem.alloc("alloc_managed", bytes, site))?;
        st.log(|| Executed::Alloc { base, size: bytes });
        Ok(DevicePtr(base))
    }

    #[track_caller]
    pub(super) fn free_impl(&self, ptr: DevicePtr) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        if st.dead.is_some() {
            // The driver fails every call on a dead context, frees included, and the memory
            // goes with the context: on a context already dead, the allocation goes.
            let _ = st.mem.free(ptr.0, site);
        }
        // A free synchronises the device, as `cuMemFree` does (chaos only).
        mock_try!(Self::chaos_wait(&mut st, Until::All))?;
        mock_try!(Self::tick(&mut st, CallKind::Free, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::DeviceFree,
            None,
            "free",
            site
        ))?;
        // A null free is accepted and does nothing, as the driver's (cuBLAS makes one when a
        // PyTorch program first multiplies: traces/python/h200_py_capture_item.gtape #5).
        if ptr.0 == 0 {
            return Ok(());
        }
        mock_try!(st.mem.free(ptr.0, site))?;
        st.log(|| Executed::Free { base: ptr.0 });
        Ok(())
    }

    #[track_caller]
    pub(super) fn sweep_unreleased_impl(&self) -> usize {
        let site = here();
        let mut st = self.state.lock();
        let _ = Self::chaos_wait(&mut st, Until::All);
        let live: Vec<(u64, Site, usize)> = st
            .mem
            .allocs
            .iter()
            .filter(|(_, a)| matches!(a.storage, memory::Storage::Owned(_)))
            .map(|(b, a)| (*b, a.site, a.size))
            .collect();
        let rows = by_site(live.iter().map(|(_, s, n)| (*s, *n)));
        if !live.is_empty() {
            // As on CUDA: after a sticky fault the owners' frees failed and the memory goes
            // with the context; one line says so.
            let line =
                crate::backend::ledger::sweep_line(&rows, st.dead.as_ref().map(|e| e.cuda_code()));
            tracing::warn!("{line}");
            st.last_sweep_line = Some(line);
        } else {
            st.last_sweep_line = None;
        }
        for (b, _, _) in &live {
            let _ = st.mem.free(*b, site);
        }
        st.last_sweep = rows;
        live.len()
    }

    #[track_caller]
    pub(super) fn host_ptr_to_device_impl(&self, host: *mut u8) -> anyhow::Result<DevicePtr> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::HostPtrToDevice, site))?;
        mock_try!(st.mem.host_alias(host, site)).map(DevicePtr)
    }

    #[track_caller]
    pub(super) fn alloc_host_pinned_impl(&self, bytes: usize) -> anyhow::Result<*mut u8> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::AllocHostPinned, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::PinnedHost,
            None,
            "alloc_host_pinned",
            site
        ))?;
        if bytes > self.cfg.total_memory {
            return mock_try!(Err(MockError::OutOfMemory {
                op: "alloc_host_pinned",
                site,
                requested: bytes,
                live: 0,
                limit: self.cfg.total_memory,
            }));
        }
        mock_try!(st.mem.alloc_pinned(bytes, site))
    }

    #[track_caller]
    pub(super) fn free_host_pinned_impl(&self, ptr: *mut u8, bytes: usize) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        // Queued copies may still read or write the region (chaos only).
        mock_try!(Self::chaos_wait(&mut st, Until::All))?;
        mock_try!(Self::tick(&mut st, CallKind::FreeHostPinned, site))?;
        mock_try!(Self::judge(
            &mut st,
            CaptureOp::PinnedHost,
            None,
            "free_host_pinned",
            site
        ))?;
        mock_try!(st.mem.free_pinned(ptr, bytes, site))
    }
}
