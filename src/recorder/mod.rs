//! `RecordingBackend<B>`: wraps any backend, forwards every call unchanged, and writes the
//! trace.
//!
//! Each call is written twice: a `Begin` frame before the wrapped backend runs it
//! (record-before-execute: a call that kills the process is still in the trace) and an `End`
//! frame with its result after. Before `start()` only the ledger of live allocations and the
//! handle maps are kept, so `start()` can snapshot a running engine's memory and later calls
//! can name every buffer.

#![warn(missing_docs)]

mod blob_out;
mod call;
mod checkpoint;
mod ckpt_kernel;
mod comm;
mod device_ckpt;
mod flight;
mod flight_budget;
mod flight_config;
mod forward;
mod ids;
mod peers;
mod ring;
mod settle;
mod snapshot;
mod spill;
mod state;
mod watch;
mod writes;

pub use snapshot::compressed_if_it_pays;

pub use flight::{FlightConfig, FlightHeld};

use crate::backend::{
    DevicePtr, GpuBackend, GraphHandle, KernelArg, KernelHandle, KernelRegistry, OpCache,
    ParamAccess,
};
use crate::trace::*;
use anyhow::Result;
use call::{FastExtra, SyncScope};
use parking_lot::Mutex;
pub(crate) use state::Addrs;
use state::{Pending, RecState};
use std::ffi::c_void;
use std::panic::Location;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Why the recorder could not start, stop, or write its trace.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// `start` was called while a recording segment was already running.
    #[error("recording already started")]
    AlreadyStarted,
    /// `start` was called for a new segment, but there is no sink to write it to.
    #[error("no destination for another recording segment (a recorder made with `new` writes one trace; use `with_sinks` or `to_file` to record again)")]
    Finished,
    /// A flight recorder operation was asked of a recorder that is not one.
    #[error("this recorder is not a flight recorder")]
    NotFlight,
    /// `stop` was called with no recording running.
    #[error("not recording: stop without start")]
    NotRecording,
    /// `from_env` found neither GPUTAPE_RECORD nor GPUTAPE_FLIGHT.
    #[error("nowhere to record: set GPUTAPE_RECORD=PATH or GPUTAPE_FLIGHT=DIR")]
    NoDestination,
    /// The flight recorder could not write its dump.
    #[error("the flight recorder could not write its dump: {0}")]
    Dump(TraceError),
    /// A live buffer could not be read back for the initial state (or a flight checkpoint).
    #[error("could not snapshot buffer {buf} ({bytes} bytes) at start")]
    Snapshot {
        /// The buffer that could not be read.
        buf: BufferId,
        /// Its size, in bytes.
        bytes: u64,
        /// The wrapped backend's error.
        #[source]
        source: anyhow::Error,
    },
    /// A stream could not be synchronised before the snapshot of device memory.
    #[error("could not synchronise stream {stream} before the snapshot")]
    Drain {
        /// The wrapped backend's handle of the stream (0: the legacy default stream).
        stream: u64,
        /// The wrapped backend's error.
        #[source]
        source: anyhow::Error,
    },
    /// `start` was called while a stream captures: its snapshot would sync and read back,
    /// which invalidates the capture. Start again once the capture has ended.
    #[error("cannot start recording while stream {stream} is capturing a graph (the snapshot would sync and invalidate the capture)")]
    Capturing {
        /// The wrapped backend's handle of the capturing stream.
        stream: u64,
    },
    /// A checkpoint on the device could not be set going (a launch, an event): that
    /// checkpoint is not used; a dump starts from the one before.
    #[error("could not take a checkpoint on the device: {0}")]
    DeviceCheckpoint(anyhow::Error),
    /// The trace could not be created or written.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// Writing the trace failed while recording: recording stopped at that call (the message says
    /// which); the calls before it are kept.
    #[error("{0}")]
    WriteFailed(String),
    /// The trace could not be finished and closed at `stop`.
    #[error("could not close the trace: {0}")]
    Close(std::io::Error),
}

/// What the trace's header says about the backend being recorded.
#[derive(Clone, Debug)]
pub struct BackendDesc {
    /// Which backend was recorded (`cuda`, `mock`, ...), as the header names it.
    pub kind: String,
    /// Which device of the host was recorded (its ordinal, 0 for the first).
    pub device_ordinal: u32,
    /// The device's name as the driver reports it, when known.
    pub device_name: Option<String>,
    /// The driver version as CUDA reports it (12040 for 12.4), when known.
    pub driver_version: Option<i32>,
}

impl BackendDesc {
    /// A backend of kind `kind` on device 0, with no name or driver version.
    pub fn new(kind: &str) -> Self {
        BackendDesc {
            kind: kind.to_string(),
            device_ordinal: 0,
            device_name: None,
            driver_version: None,
        }
    }
}

/// What a stopped recording wrote.
#[derive(Clone, Debug)]
pub struct RecordStats {
    /// Calls recorded in the segment (their seqs run from 0 to `calls - 1`).
    pub calls: u64,
    /// Size of the trace written, in bytes, its file header included.
    pub bytes: u64,
}

/// Wraps a backend: forwards every call to it unchanged and, while recording, writes each call and
/// its result into a trace.
pub struct RecordingBackend<B: GpuBackend> {
    inner: B,
    on: AtomicBool,
    /// Shared with the panic hook (a flight recorder dumps from it).
    st: flight::Shared,
    desc: BackendDesc,
    op_cache: OpCache,
    /// Call times come from the TSC where it is invariant (quanta falls back to the OS clock
    /// where it is not): two clock reads per call through the vDSO were a tenth of a recorded
    /// event's cost.
    clock: quanta::Clock,
    epoch: u64,
    /// The wall time of `epoch`, in nanoseconds since the Unix epoch (`Frame::Clock`).
    epoch_unix_ns: u64,
    registry: Option<Arc<KernelRegistry>>,
    started: AtomicBool,
    hash_syncs: AtomicBool,
    /// Where the next segment's trace goes, once the current one is stopped.
    sinks: Mutex<Option<SinkFactory>>,
    /// Segments begun so far.
    segments: std::sync::atomic::AtomicU32,
    /// Made by `from_env` with neither variable set: nothing may be recorded.
    no_destination: AtomicBool,
    /// A flight recorder's checkpoints on the device, when the backend can take them.
    device_ckpt: Mutex<Option<device_ckpt::DeviceCkpt>>,
    /// Set by `flight`: calls that change nothing a replay or an analysis reads (`op_cache`,
    /// which an engine asks for before each cached launch) are forwarded and not kept. On the
    /// built-in decode step they were a third of the flight recorder's own time (65 of 134
    /// calls a step); a full recording keeps them, as it keeps every call.
    flight_mode: AtomicBool,
}

/// Makes the sink of segment `n` (0 for the first) of a recorder that records more than once.
pub type SinkFactory = Box<dyn FnMut(u32) -> Result<Box<dyn Sink>, RecordError> + Send>;

/// Segment `n`'s file: `path` for the first, then `stem-2.ext`, `stem-3.ext`, ...
pub fn segment_path(path: &Path, n: u32) -> std::path::PathBuf {
    if n == 0 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(e) => format!("{stem}-{}.{}", n + 1, e.to_string_lossy()),
        None => format!("{stem}-{}", n + 1),
    };
    path.with_file_name(name)
}

/// How long `stop` waits for calls other threads are inside.
pub const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl<B: GpuBackend> RecordingBackend<B> {
    /// Wrap `inner`, writing to `sink` once `start` is called.
    pub fn new(inner: B, sink: Box<dyn Sink>, desc: BackendDesc) -> Result<Self, RecordError> {
        let writer = TraceWriter::new(sink).map_err(|e| {
            RecordError::Trace(TraceError::Io {
                what: "write header of",
                path: "<trace sink>".into(),
                source: e,
            })
        })?;
        let default_stream = inner.default_stream();
        let registry = inner.kernel_registry();
        let clock = quanta::Clock::new();
        Ok(RecordingBackend {
            st: Arc::new(Mutex::new(RecState::new(writer, default_stream))),
            inner,
            on: AtomicBool::new(false),
            desc,
            op_cache: OpCache::new(),
            epoch: clock.raw(),
            epoch_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            clock,
            registry,
            started: AtomicBool::new(false),
            hash_syncs: AtomicBool::new(false),
            sinks: Mutex::new(None),
            segments: std::sync::atomic::AtomicU32::new(0),
            no_destination: AtomicBool::new(false),
            device_ckpt: Mutex::new(None),
            flight_mode: AtomicBool::new(false),
        })
    }

    /// Wrap `inner`; each recording segment (each `start` .. `stop`) writes to the sink
    /// `sinks` makes for it, so recording can be started and stopped any number of times and
    /// each segment is a complete trace with its own initial state.
    pub fn with_sinks(
        inner: B,
        mut sinks: SinkFactory,
        desc: BackendDesc,
    ) -> Result<Self, RecordError> {
        let first = sinks(0)?;
        let rec = Self::new(inner, first, desc)?;
        *rec.sinks.lock() = Some(sinks);
        Ok(rec)
    }

    /// Wrap `inner`, recording into a file at `path` (created now, written through a map, at
    /// `path.partial` until `stop`). Later segments go to `stem-2.ext`, `stem-3.ext`, ...
    pub fn to_file(inner: B, path: &Path, desc: BackendDesc) -> Result<Self, RecordError> {
        let path = path.to_path_buf();
        Self::with_sinks(
            inner,
            Box::new(move |n| Ok(Box::new(MmapSink::create(&segment_path(&path, n))?))),
            desc,
        )
    }

    /// Wrap `inner` as a flight recorder: recording from now on into memory, keeping the last
    /// steps and dumping them as a trace into `cfg.dir` when a call fails, a red zone is found
    /// written, the process panics, SIGUSR1 arrives, or `flight_dump` is called.
    pub fn flight(inner: B, mut cfg: FlightConfig, desc: BackendDesc) -> Result<Self, RecordError> {
        cfg.checkpoint_every = cfg.checkpoint_every.max(1);
        let device = cfg.device_checkpoints.then_some(cfg.ring_mb);
        let rec = Self::new(inner, Box::new(flight::Discard), desc)?;
        rec.flight_mode.store(true, Ordering::Relaxed);
        {
            let mut st = rec.st.lock();
            st.flight = Some(Box::new(flight::FlightStore::new(cfg)));
            if let Some(w) = st.writer.as_mut() {
                w.keep_last();
            }
        }
        flight::arm(&rec.st);
        rec.start()?;
        // The snapshot `start` took is the first checkpoint; what follows are calls.
        if let Some(f) = rec.st.lock().flight.as_deref_mut() {
            f.end_checkpoint(true);
        }
        if let Some(ring_mb) = device {
            rec.arm_device_checkpoints(ring_mb);
        }
        Ok(rec)
    }

    /// Set up checkpoints on the device (`device_ckpt.rs`), now, before the engine reserves
    /// the device and before any capture; where the backend cannot, checkpoints stay the
    /// host's, and `flight_held` says so.
    fn arm_device_checkpoints(&self, ring_mb: u64) {
        match device_ckpt::DeviceCkpt::new(&self.inner, &self.st, ring_mb) {
            Ok(d) => {
                *self.device_ckpt.lock() = Some(d);
                if let Some(f) = self.st.lock().flight.as_deref_mut() {
                    f.device_checkpoints = true;
                }
            }
            Err(e) => tracing::info!(
                "gputape: flight recorder: checkpoints drain the streams on this backend ({e})"
            ),
        }
    }

    /// Wait (up to `timeout`) until no checkpoint is on the device or being consumed, so a
    /// dump requested now starts from the newest. True if none is. Never calls the device:
    /// after a fault the device will not finish one, and this returns false.
    pub fn flight_settle(&self, timeout: std::time::Duration) -> bool {
        let t0 = std::time::Instant::now();
        loop {
            let busy = self.device_ckpt.lock().as_ref().is_some_and(|d| d.busy());
            if !busy {
                return true;
            }
            if t0.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    /// The one line an engine adds: wrap its backend, with what to do read from the
    /// environment, so recording is turned on without rebuilding.
    ///
    /// - `GPUTAPE_RECORD=PATH`: record everything from now on into `PATH` (more segments, if
    ///   the engine stops and starts the recorder, beside it).
    /// - `GPUTAPE_FLIGHT=DIR`: arm the flight recorder, dumping into `DIR`
    ///   (`GPUTAPE_FLIGHT_STEPS`: steps between checkpoints, default 8;
    ///   `GPUTAPE_FLIGHT_MAX_DUMPS`: default 1; `GPUTAPE_FLIGHT_SPILL_MB`: blobs this large
    ///   are kept on disk beside the dumps, default 1, 0 keeps them in memory).
    /// - neither: calls pass through and nothing is written; `start` fails, as there is
    ///   nowhere to write.
    pub fn from_env(inner: B, desc: BackendDesc) -> Result<Self, RecordError> {
        if let Some(path) = std::env::var_os("GPUTAPE_RECORD") {
            let rec = Self::to_file(inner, Path::new(&path), desc)?;
            if let Some(dir) = std::env::var_os("GPUTAPE_BLOBS") {
                rec.blob_store(dir);
            }
            rec.start()?;
            return Ok(rec);
        }
        if let Some(dir) = std::env::var_os("GPUTAPE_FLIGHT") {
            return Self::flight(inner, FlightConfig::from_env(dir), desc);
        }
        let rec = Self::new(inner, Box::new(VecSink::default()), desc)?;
        rec.no_destination.store(true, Ordering::Release);
        Ok(rec)
    }

    /// Write what the flight recorder holds now, as a trace; returns its path.
    pub fn flight_dump(&self, reason: &str) -> Result<std::path::PathBuf, RecordError> {
        // Asked for, not forced by a fault: a checkpoint still being consumed is let finish
        // (briefly; a dead device never finishes one), so the dump starts from the newest.
        self.flight_settle(std::time::Duration::from_millis(100));
        let open = flight::open_call(&self.st);
        let mut st = self.st.lock();
        st.flight_dump(reason, open)
            .ok_or(RecordError::NotFlight)?
            .map_err(RecordError::Dump)
    }

    /// What the flight recorder holds (memory bound, benchmarks); `None` when it is off.
    pub fn flight_held(&self) -> Option<FlightHeld> {
        Some(self.st.lock().flight.as_deref()?.held())
    }

    /// The wrapped backend. Calls made on it directly are not recorded.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Run `f`, whose calls on this thread are the tool's own, not the engine's: recorded
    /// (a replay needs them: a red-zone scan is the evidence of an overrun) but under sites
    /// marked `trace::TOOL_SITE`, which the analyses leave out, so a tool that drives an engine
    /// (the CLI's `record`) does not show up in the engine's capture verdicts at its own line.
    /// Other threads' calls meanwhile stay the engine's.
    pub fn tools_own<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        /// Puts the previous owner back however `f` ends.
        struct Restore<'a>(
            &'a parking_lot::Mutex<RecState>,
            Option<std::thread::ThreadId>,
        );
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.lock().tool_thread = self.1;
            }
        }
        let before = self
            .st
            .lock()
            .tool_thread
            .replace(std::thread::current().id());
        let _restore = Restore(&self.st, before);
        f(self)
    }

    /// After every host sync, hash every live buffer into the trace. Costly (it reads all of
    /// device memory back at each sync), so off by default; it lets a replay name the first sync
    /// at which a buffer went wrong.
    pub fn hash_at_syncs(&self, on: bool) {
        self.hash_syncs.store(on, Ordering::Relaxed);
        self.st.lock().sync_writes.on = on;
    }

    /// Put large blobs (a part of a buffer's contents, 64 KiB or more) into the shared blob
    /// store at `dir` instead of the trace: a second recording of the same weights stores them
    /// no more, and each trace names its store (a reader may be pointed elsewhere with
    /// `--blobs`). Applies from the next `start`; a flight recorder's dumps stay whole.
    pub fn blob_store(&self, dir: impl Into<std::path::PathBuf>) {
        self.st.lock().store = Some(dir.into());
    }

    /// Whether calls are being recorded now (between `start` and `stop`).
    pub fn is_recording(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Begin recording: header, the modules and kernels known so far, the resources that
    /// already exist, and the contents of every live allocation as the initial state.
    pub fn start(&self) -> Result<(), RecordError> {
        if self.no_destination.load(Ordering::Acquire) {
            return Err(RecordError::NoDestination);
        }
        if self.started.swap(true, Ordering::AcqRel) {
            return Err(RecordError::AlreadyStarted);
        }
        let segment = self.segments.fetch_add(1, Ordering::AcqRel);
        if self.st.lock().writer.is_none() {
            // A later segment: its own sink, and everything it names defined again.
            let made = match self.sinks.lock().as_mut() {
                Some(make) => make(segment),
                None => Err(RecordError::Finished),
            };
            let writer = made.and_then(|sink| {
                TraceWriter::new(sink).map_err(|e| {
                    RecordError::Trace(TraceError::Io {
                        what: "write header of",
                        path: "<trace sink>".into(),
                        source: e,
                    })
                })
            });
            match writer {
                Ok(w) => self.st.lock().new_segment(w),
                Err(e) => {
                    self.started.store(false, Ordering::Release);
                    self.segments.fetch_sub(1, Ordering::AcqRel);
                    return Err(e);
                }
            }
        }
        if let Some(stream) = self.capturing_stream() {
            self.started.store(false, Ordering::Release);
            return Err(RecordError::Capturing { stream });
        }
        if let Err(e) = self.drain() {
            self.started.store(false, Ordering::Release);
            return Err(e);
        }
        let mut st = self.st.lock();
        st.recording = true;
        st.segment = segment;
        if let Err(e) = self.snapshot(&mut st) {
            // Not a trace: the writer goes (a file stays at its `.partial` name), and the
            // recorder can be started again.
            st.recording = false;
            st.writer = None;
            self.started.store(false, Ordering::Release);
            return Err(e);
        }
        st.flush();
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    /// The start of a segment: header, modules and kernels, resources, initial state.
    fn snapshot(&self, st: &mut RecState) -> Result<(), RecordError> {
        let header = TraceHeader {
            format: FORMAT_VERSION,
            min_reader: MIN_READER_VERSION,
            gputape: env!("CARGO_PKG_VERSION").to_string(),
            backend: self.desc.kind.clone(),
            device_ordinal: self.desc.device_ordinal,
            device_name: self.desc.device_name.clone(),
            sm_count: self.inner.sm_count().ok(),
            total_memory: self.inner.total_memory().ok().map(|m| m as u64),
            driver_version: self.desc.driver_version,
        };
        st.emit(&Frame::Header(header));
        st.emit(&Frame::Provenance(crate::trace::Provenance::now()));
        st.emit(&Frame::Clock {
            epoch_unix_ns: self.epoch_unix_ns,
        });
        if let Some(dir) = &st.store {
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            st.emit(&Frame::BlobStore {
                dir: dir.to_string_lossy().into_owned(),
            });
        }
        // Resources that exist already, in id order so the frames are deterministic.
        self.emit_resources(st);
        let mut kernels: Vec<(KernelId, u64, Option<crate::backend::KernelInfo>)> = st
            .kernels
            .iter()
            .map(|(h, k)| (k.id, *h, k.info.clone()))
            .collect();
        kernels.sort_by_key(|(id, _, _)| *id);
        for (id, h, looked_up) in kernels {
            let info = self
                .registry
                .as_ref()
                .and_then(|r| r.kernel_by_handle(KernelHandle(h)))
                .or(looked_up);
            st.write_kernel(id, info, self.registry.as_deref());
        }
        // The initial state, in creation order.
        self.snapshot_buffers(st, false)
    }

    /// Stop recording and close the trace. The wrapped backend keeps working. Calls other
    /// threads are inside are waited for (up to `STOP_WAIT`), so their End frames are in the
    /// trace; one still running after that is left open in a trace that says it was stopped
    /// (the reader tells "in flight at stop" from "the process died here").
    pub fn stop(&self) -> Result<RecordStats, RecordError> {
        self.on.store(false, Ordering::Release);
        let t0 = std::time::Instant::now();
        let mut st = self.st.lock();
        while st.in_flight > 0 && t0.elapsed() < STOP_WAIT {
            drop(st);
            std::thread::sleep(std::time::Duration::from_micros(200));
            st = self.st.lock();
        }
        // A segment whose writes failed is still closed here (its error returned below).
        if st.writer.is_none() {
            return Err(RecordError::NotRecording);
        }
        st.emit(&Frame::Stop);
        st.recording = false;
        let mut w = st.writer.take().expect("checked");
        // The next `start` begins a new segment.
        self.started.store(false, Ordering::Release);
        w.finish().map_err(RecordError::Close)?;
        if let Some(e) = st.write_error.clone() {
            return Err(RecordError::WriteFailed(e));
        }
        Ok(RecordStats {
            calls: st.seq,
            bytes: w.bytes_written,
        })
    }

    /// Dump the flight recorder for `reason`, unless it has dumped as often as it may.
    fn flight_trigger(&self, st: &mut RecState, reason: &str) {
        let open = flight::open_call(&self.st);
        flight::trigger(st, reason, open);
    }

    /// Adopt frames for the streams, events and pinned regions that exist now.
    fn emit_resources(&self, st: &mut RecState) {
        let mut streams: Vec<(StreamId, u64)> = st.streams.iter().map(|(r, i)| (*i, *r)).collect();
        streams.sort();
        for (id, raw) in streams {
            let is_default = raw == st.default_stream;
            st.emit(&Frame::Adopt(Adopted::Stream { id, is_default }));
        }
        let mut events: Vec<EventId> = st.events.ids().collect();
        events.sort();
        for id in events {
            st.emit(&Frame::Adopt(Adopted::Event { id }));
        }
        let hosts: Vec<(HostId, usize)> = st.hosts.values().copied().collect();
        for (id, len) in hosts {
            st.emit(&Frame::Adopt(Adopted::Host {
                id,
                bytes: len as u64,
            }));
        }
        for f in comm::comm_frames(st) {
            st.emit(&f);
        }
    }

    /// Start now, stop when the guard drops.
    pub fn scope(&self) -> Result<RecordGuard<'_, B>, RecordError> {
        self.start()?;
        Ok(RecordGuard { rec: self })
    }
}

/// A raw launch parameter as the trace records it: a pointer-sized parameter that is declared a
/// pointer, or that points into a live buffer, becomes an address; anything else its bytes.
///
/// # Safety
/// `p` points at a readable value of `info.size` bytes (launch's contract for its params).
unsafe fn raw_param_arg<'a>(
    addrs: &Addrs<'_>,
    p: *mut c_void,
    info: &crate::backend::ParamInfo,
) -> ArgRef<'a> {
    // SAFETY: the caller's contract.
    let raw = unsafe { std::slice::from_raw_parts(p as *const u8, info.size as usize) };
    if info.size == 8 && info.access != ParamAccess::Value {
        let v = u64::from_le_bytes(raw.try_into().expect("8 bytes"));
        let a = addrs.addr(v);
        if info.access.is_pointer() || matches!(a, DevAddr::Buf { .. }) {
            return ArgRef::Buf(a);
        }
    }
    ArgRef::Val(raw)
}

/// A raw launch's parameters as typed arguments, when its layout has a tensor-map-sized
/// parameter and this recorder has seen tensor maps encoded (`None` otherwise: the hot path).
/// A pointer-sized parameter becomes a buffer as `raw_param_arg` decides.
///
/// # Safety
/// `params[i]` points at a readable value of the layout's i-th parameter size (launch's
/// contract for its params).
unsafe fn raw_launch_with_tensor_maps<'a>(
    st: &RecState,
    func: u64,
    params: &'a [*mut c_void],
) -> Option<Vec<KernelArg<'a>>> {
    use crate::backend::TENSOR_MAP_BYTES;
    if st.tensor_maps.is_empty() {
        return None;
    }
    let layout = st.kernels.get(&func)?.params.as_deref()?;
    if !layout.iter().any(|p| p.size as usize == TENSOR_MAP_BYTES) {
        return None;
    }
    Some(
        params
            .iter()
            .zip(layout)
            .map(|(p, info)| {
                // SAFETY: the caller's contract.
                let raw =
                    unsafe { std::slice::from_raw_parts(*p as *const u8, info.size as usize) };
                if info.size == 8 && info.access != ParamAccess::Value {
                    let v = u64::from_le_bytes(raw.try_into().expect("8 bytes"));
                    if info.access.is_pointer() || matches!(st.addr(v), DevAddr::Buf { .. }) {
                        return KernelArg::Buffer(DevicePtr(v));
                    }
                }
                KernelArg::Bytes(raw)
            })
            .collect(),
    )
}

/// The base of the pinned region holding host address `p` (or `p` itself if none does).
fn region(st: &RecState, p: usize) -> usize {
    match st.hosts.range(..=p).next_back() {
        Some((&base, &(_, len))) if p < base + len.max(1) => base,
        _ => p,
    }
}

/// The device checkpoints' memory and events go back to the backend with the recorder (or
/// are left to the process's end while the device may still write them).
impl<B: GpuBackend> Drop for RecordingBackend<B> {
    fn drop(&mut self) {
        if let Some(d) = self.device_ckpt.get_mut().take() {
            d.release(&self.inner);
        }
    }
}

/// Stops the recording when dropped.
pub struct RecordGuard<'a, B: GpuBackend> {
    rec: &'a RecordingBackend<B>,
}

impl<B: GpuBackend> RecordGuard<'_, B> {
    /// Stop the recording now and return what it wrote; dropping the guard stops it too, but can
    /// only log an error.
    pub fn stop(self) -> Result<RecordStats, RecordError> {
        let r = self.rec.stop();
        std::mem::forget(self);
        r
    }
}

impl<B: GpuBackend> Drop for RecordGuard<'_, B> {
    fn drop(&mut self) {
        if let Err(e) = self.rec.stop() {
            tracing::error!("gputape: stopping the recording failed: {e}");
        }
    }
}

/// A checkpoint names a blob it kept from the last one: the flight store has it, since that
/// checkpoint's span is still kept. Should it not, an empty blob under the wrong id would be
/// caught by the reader's hash check rather than replayed.
fn unreachable_blob(id: BlobId) -> Frame {
    tracing::error!("gputape: flight recorder lost blob {id} of a kept checkpoint");
    Frame::Blob {
        id,
        len: 0,
        zstd: false,
        data: Vec::new(),
    }
}
