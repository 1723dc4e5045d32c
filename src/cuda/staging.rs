//! The pinned staging ring behind `copy_h2d_async`, and the arena for sources captured into
//! graphs. Its own room because it is the one place host memory outlives the call that filled
//! it: the ring's bookkeeping (regions in flight, their events) is what keeps that sound.

use super::backend::CudaBackend;
use super::driver::{self, dp, st};
use crate::backend::{DevicePtr, Site};
use anyhow::Result;
use cudarc::driver::sys;
use std::collections::VecDeque;
use std::ffi::c_void;

/// Regions of the ring kept in flight before the oldest is let go as soon as its copy is done.
const INFLIGHT_MAX: usize = 256;

/// Pinned memory that `copy_h2d_async` copies sources into, so the caller may drop them at
/// once even though the DMA happens later. Regions are reused once the event recorded after
/// their copy has completed.
pub(super) struct Staging {
    base: *mut u8,
    cap: usize,
    head: usize,
    /// Where the ring's current lap starts, counted over every lap: a region's place in
    /// this count orders it against every other, so the regions a new copy must wait for are
    /// always the oldest ones, at the front of `inflight`.
    lap_base: u64,
    /// Regions not yet known reusable, oldest first: (start, end) in the lap count, and the
    /// event recorded after the copy out of them. Before, a region stayed here until its
    /// bytes were reused, a lap later, and every copy looked through all of them: an engine
    /// uploading one token a step had 32768 of them in an 8 MiB ring, and its upload cost
    /// grew by the step.
    inflight: VecDeque<(u64, u64, u64)>,
    spare_events: Vec<u64>,
    /// Sources captured into graphs: never reused (a graph reads them at every launch).
    capture_base: *mut u8,
    capture_cap: usize,
    capture_head: usize,
}

impl Staging {
    /// The ring (`cap` bytes) and the capture arena (`capture_cap` bytes), pinned.
    pub(super) fn new(cap: usize, capture_cap: usize) -> Result<Self> {
        let base = driver::mem_alloc_host(cap)?;
        let capture_base = driver::mem_alloc_host(capture_cap)?;
        Ok(Staging {
            base: base.cast(),
            cap,
            head: 0,
            lap_base: 0,
            inflight: VecDeque::new(),
            spare_events: Vec::new(),
            capture_base: capture_base.cast(),
            capture_cap,
            capture_head: 0,
        })
    }

    /// Wait for every copy still reading the ring, destroy the events and free both regions:
    /// for drop. Afterwards both have no room (capacity 0), so a later `copy_h2d_async` copies
    /// directly and a captured one fails, and neither touches the freed memory.
    pub(super) fn release(&mut self) {
        self.cap = 0;
        self.head = 0;
        self.lap_base = 0;
        self.capture_cap = 0;
        self.capture_head = 0;
        for (_, _, ev) in self.inflight.drain(..) {
            // SAFETY: `ev` is an event this ring created and still owns; drained here, it is
            // waited on and destroyed once.
            unsafe {
                let _ = driver::event_synchronize(ev as sys::CUevent);
                let _ = driver::event_destroy(ev as sys::CUevent);
            }
        }
        for ev in self.spare_events.drain(..) {
            // SAFETY: as above, a spare event of this ring's, destroyed once.
            let _ = unsafe { driver::event_destroy(ev as sys::CUevent) };
        }
        for p in [&mut self.base, &mut self.capture_base] {
            let p = std::mem::replace(p, std::ptr::null_mut());
            if !p.is_null() {
                // SAFETY: `p` came from `mem_alloc_host` in `new` and is nulled here, so it is
                // freed once; no copy reads it any more (the ring's were waited on above; a
                // captured graph reading the arena must not outlive its backend).
                let _ = unsafe { driver::mem_free_host(p.cast()) };
            }
        }
    }
}

impl CudaBackend {
    /// `GpuBackend::copy_h2d_async` called from `caller`: copy `src` into pinned memory of the
    /// ring (or, inside a capture, of the arena) and the DMA from there, so `src` may go at once.
    pub(super) fn stage_h2d(
        &self,
        src: &[u8],
        dst: DevicePtr,
        stream: u64,
        caller: Site,
    ) -> Result<()> {
        let len = src.len();
        if len == 0 {
            return Ok(());
        }
        let mut s = self.staging.lock();
        if self.is_capturing(stream) {
            // A graph reads its memcpy source at every launch: give the bytes a home that is
            // never reused, so each launch copies what was captured.
            let start = s.capture_head.next_multiple_of(256);
            if start + len > s.capture_cap {
                anyhow::bail!(
                    "copy_h2d_async at {} inside a capture: capture staging exhausted ({} of {} bytes used, {len} more needed)",
                    crate::backend::site_string(caller),
                    s.capture_head,
                    s.capture_cap
                );
            }
            // SAFETY: [start, start+len) lies inside the capture arena (checked above), which
            // is pinned memory owned by this backend and disjoint from `src`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), s.capture_base.add(start), len) };
            s.capture_head = start + len;
            let from = s.capture_base as usize + start;
            // SAFETY: the source is `len` bytes of the arena, never reused or freed while the
            // backend lives; `dst` and `stream` come under the GpuBackend contract (this
            // backend's memory over `len` bytes, one of its streams or 0).
            return Ok(unsafe {
                driver::memcpy_htod_async(dp(dst), from as *const c_void, len, st(stream))
            }?);
        }
        if len > s.cap / 2 {
            // Too big to stage: copy and wait, which keeps the promise the slow way.
            // SAFETY: `src` is borrowed until the stream is synchronised just below, so it
            // outlives the copy; `dst` and `stream` come under the GpuBackend contract.
            unsafe { driver::memcpy_htod_async(dp(dst), src.as_ptr().cast(), len, st(stream)) }?;
            return self.sync_stream(stream);
        }
        let mut start = s.head.next_multiple_of(256);
        if start + len > s.cap {
            start = 0;
            s.lap_base += s.cap as u64;
        }
        // Wait for every in-flight copy whose staging bytes we are about to overwrite: those
        // from the last lap that begin before this region ends, a lap on. Regions are handed
        // out in order, so they are a prefix of `inflight` (a region further back, skipped
        // over by a wrap, is waited for here too, which is merely early). Past
        // `INFLIGHT_MAX` regions, the oldest is let go once its copy is done (asked, never
        // waited for: an engine with many uploads a step must not gain a host sync): the
        // events stay few, and finding what to wait for costs no scan.
        let end = s.lap_base + (start + len) as u64;
        while let Some(&(a, _, ev)) = s.inflight.front() {
            if a + s.cap as u64 >= end {
                // SAFETY: `ev` is an event this ring created and still owns.
                if s.inflight.len() < INFLIGHT_MAX
                    || !unsafe { driver::event_done(ev as sys::CUevent) }?
                {
                    break;
                }
            } else {
                // SAFETY: as above.
                unsafe { driver::event_synchronize(ev as sys::CUevent) }?;
            }
            s.inflight.pop_front();
            s.spare_events.push(ev);
        }
        // SAFETY: [start, start+len) is inside the staging ring (len <= cap/2, start+len <=
        // cap), no in-flight copy reads it any more (waited above), and `src` is the caller's.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), s.base.add(start), len) };
        let from = s.base as usize + start;
        // SAFETY: the source is `len` bytes of the ring, not overwritten until the event
        // recorded after this copy has completed (the wait above) and freed only at drop after
        // waiting on it; `dst` and `stream` come under the GpuBackend contract.
        unsafe { driver::memcpy_htod_async(dp(dst), from as *const c_void, len, st(stream)) }?;
        let ev = match s.spare_events.pop() {
            Some(e) => e,
            None => {
                driver::event_create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)? as u64
            }
        };
        // SAFETY: `ev` is an event of this ring's (spare or just created); `stream` comes under
        // the GpuBackend contract.
        unsafe { driver::event_record(ev as sys::CUevent, st(stream)) }?;
        let at = s.lap_base + start as u64;
        s.inflight.push_back((at, at + len as u64, ev));
        s.head = start + len;
        Ok(())
    }
}
