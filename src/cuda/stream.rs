//! Capture, graphs and events, for `CudaBackend`'s `GpuBackend` methods (the trait impl in
//! `backend.rs` calls each `NAME_impl` here): stream capture begun, ended into an executable
//! graph or aborted, graph launches (noted for the fault probe) and destruction, and events.
//! The `// SAFETY:` lines cite the trait's contract, as `backend.rs`'s module docs set out.

use super::backend::CudaBackend;
use super::driver::{self, st};
use super::fault_probe;
use crate::backend::{CaptureMode, GraphHandle};
use anyhow::Result;
use cudarc::driver::sys;
use smallvec::SmallVec;
use std::panic::Location;
use std::sync::atomic::Ordering;

impl CudaBackend {
    #[track_caller]
    pub(super) fn begin_capture_impl(&self, stream: u64) -> Result<()> {
        use sys::CUstreamCaptureMode as M;
        let mode = match self.cfg.capture_mode {
            CaptureMode::Global => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        };
        // SAFETY: the trait's contract: `stream` is one of this backend's streams.
        unsafe { driver::stream_begin_capture(st(stream), mode) }?;
        self.captures.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    #[track_caller]
    pub(super) fn end_capture_impl(&self, stream: u64) -> Result<GraphHandle> {
        // SAFETY: the trait's contract: `stream` is one of this backend's streams.
        let (g, r) = unsafe { driver::stream_end_capture(st(stream)) };
        let _ = self
            .captures
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if let Err(e) = r {
            if !g.is_null() {
                // SAFETY: the graph the failed end handed over, owned here and destroyed once.
                let _ = unsafe { driver::graph_destroy(g) };
            }
            return Err(e.into());
        }
        // SAFETY: `g` is the graph the capture just produced, owned here.
        let r = unsafe { driver::graph_instantiate(g, 0) };
        // SAFETY: as above; the executable graph does not need it, and it is destroyed once.
        let _ = unsafe { driver::graph_destroy(g) };
        let exec = r?;
        Ok(GraphHandle(exec as u64))
    }

    #[track_caller]
    pub(super) fn launch_graph_impl(&self, graph: GraphHandle, stream: u64) -> Result<()> {
        // SAFETY: the trait's contract: `graph` came from `end_capture` and is not destroyed,
        // `stream` is one of this backend's or 0.
        unsafe { driver::graph_launch(graph.0 as sys::CUgraphExec, st(stream)) }
            .map_err(|e| self.probe(e))?;
        // Its nodes are in flight too, unnamed: the probe then names no single launch.
        self.in_flight.lock().push(fault_probe::Launched {
            kernel: graph.0,
            graph: true,
            stream,
            site: Location::caller(),
            words: SmallVec::new(),
        });
        Ok(())
    }

    #[track_caller]
    pub(super) fn destroy_graph_impl(&self, graph: GraphHandle) -> Result<()> {
        // SAFETY: the trait's contract: `graph` came from `end_capture`, is destroyed once and
        // not launched afterwards.
        Ok(unsafe { driver::graph_exec_destroy(graph.0 as sys::CUgraphExec) }?)
    }

    #[track_caller]
    pub(super) fn abort_capture_if_active_impl(&self, stream: u64) {
        if self.is_capturing(stream) {
            // SAFETY: the trait's contract: `stream` is one of this backend's streams.
            let (g, _) = unsafe { driver::stream_end_capture(st(stream)) };
            let _ = self
                .captures
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            if !g.is_null() {
                // SAFETY: the graph the end handed over, owned here and destroyed once.
                let _ = unsafe { driver::graph_destroy(g) };
            }
        }
    }

    #[track_caller]
    pub(super) fn create_event_impl(&self) -> Result<u64> {
        let e = driver::event_create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)?;
        Ok(e as u64)
    }

    #[track_caller]
    pub(super) fn record_event_impl(&self, event: u64, stream: u64) -> Result<()> {
        // SAFETY: the trait's contract: `event` from `create_event` (of this backend, or of
        // another on this device's primary context: a joint replay's shared event, which that
        // context's streams may use), not destroyed; `stream` one of this backend's or 0.
        Ok(unsafe { driver::event_record(event as sys::CUevent, st(stream)) }?)
    }

    #[track_caller]
    pub(super) fn stream_wait_event_impl(&self, stream: u64, event: u64) -> Result<()> {
        // SAFETY: the trait's contract for `stream` and `event`, as in `record_event`.
        Ok(unsafe { driver::stream_wait_event(st(stream), event as sys::CUevent) }?)
    }

    #[track_caller]
    pub(super) fn event_synchronize_impl(&self, event: u64) -> Result<()> {
        // SAFETY: the trait's contract: `event` from `create_event`, not destroyed.
        Ok(unsafe { driver::event_synchronize(event as sys::CUevent) }
            .map_err(|e| self.probe(e))?)
    }

    #[track_caller]
    pub(super) fn destroy_event_impl(&self, event: u64) -> Result<()> {
        // SAFETY: the trait's contract: `event` from `create_event`, destroyed once and not
        // used afterwards.
        Ok(unsafe { driver::event_destroy(event as sys::CUevent) }?)
    }
}
