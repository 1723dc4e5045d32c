//! Flight checkpoints taken on the device, without stopping the engine.
//!
//! A checkpoint taken by the host (`RecordingBackend::checkpoint`) drains every stream and
//! reads whole buffers back: 0.1-0.76 s on an 8B step, paid by the engine. Here nothing on
//! the host waits for the device. At a step boundary outside any capture, the recorder:
//!
//! 1. launches `gather` (`ckpt_kernel.rs`) on the first engine stream the ending span queued
//!    work on, after an event from each other such stream: it hashes the 64 KiB chunks of
//!    the buffers written since the last checkpoint, and copies the chunks whose hash
//!    changed into a staging ring (device memory when it could be had at arming, else the
//!    pinned host ring itself);
//! 2. makes every other engine stream wait for that (`stream_wait_event`): nothing the engine
//!    enqueues after the boundary can overwrite a chunk before it is copied; the engine's
//!    device work waits for one pass over the written buffers, its host thread for nothing;
//! 3. on a stream of its own that the legacy stream does not wait for
//!    (`GpuBackend::create_private_stream`), copies the staging ring into pinned host memory
//!    (a copy engine's work: the SMs stay the engine's), then launches `done`, which writes
//!    the checkpoint's number into a host word.
//!
//! Buffers that blocking copies filled since the last checkpoint (a model's weights, whole
//! or an arena of tensors) are made of the copies' blobs, already recorded, and of the gaps
//! between them, which alone are copied; their chunks are only hashed.
//!
//! The recorder's thread (`worker`) watches that word, names the copied chunks by BLAKE3 and
//! writes the checkpoint's frames into its span, which no dump starts from until then
//! (`FlightStore::checkpoint_pending`). One checkpoint is on the device at a time: one that
//! falls due before the last is done waits for the next boundary. The host ring is consumed
//! into the store at each checkpoint, so a dump never reads the device, and after a sticky
//! fault it starts from the newest checkpoint that completed.
//!
//! A chunk that changed and does not fit in the ring (`GPUTAPE_FLIGHT_RING_MB`) is not taken:
//! that checkpoint is incomplete, and its chunk is taken at a later one. A buffer no one
//! wrote since it was taken is not read at all; one not yet taken whole (a model's weights,
//! just loaded) is taken a part of the ring at a time, so the first complete checkpoint
//! comes once they all went through, and until then a dump reaches back to the last one
//! that did.

mod worker;

use super::ckpt_kernel::{self as k, CHUNK, COMPARE, ENTRY_WORDS, FORCE, HASH_ONLY};
use super::flight::Shared;
use crate::backend::{DevicePtr, GpuBackend, KernelArg, KernelHandle};
use crate::trace::{BlobId, BufferId, SiteId};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

/// The ring's size when `GPUTAPE_FLIGHT_RING_MB` does not say: by estimate (not measured),
/// 8 decode steps of an 8B model at batch 16 touch a few hundred MB of 64 KiB chunks (a
/// chunk per KV page per layer, and the activations); and it is small beside an H200's
/// memory, taken at arming, before an engine reserves the rest.
pub const DEFAULT_RING_MB: u64 = 256;

/// Whether each device checkpoint's cost to the engine's thread is said on stderr, and
/// what the recorder's thread then spent on it (`GPUTAPE_FLIGHT_CKPT_TIMES=1`): for finding
/// where a checkpoint's time goes on a machine without a profiler.
pub(crate) fn say_times() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("GPUTAPE_FLIGHT_CKPT_TIMES").is_some_and(|v| v != "0"))
}

/// Table entries the first table holds; it doubles as needed.
const FIRST_TABLE: usize = 4096;

/// Host memory the driver pinned, with its device alias.
struct Region {
    host: *mut u8,
    len: usize,
    dev: DevicePtr,
}

// SAFETY: the region is plain bytes owned by the recorder; the engine thread writes the
// table and control words only while no checkpoint is on the device, and the worker reads
// them only while one is done and not yet consumed (`Watch::busy` hands them over).
unsafe impl Send for Region {}
// SAFETY: as above; every access goes through the hand-over.
unsafe impl Sync for Region {}

impl Region {
    fn new(gpu: &dyn GpuBackend, len: usize) -> anyhow::Result<Self> {
        let host = gpu.alloc_host_pinned(len)?;
        match gpu.host_ptr_to_device(host) {
            Ok(dev) => Ok(Region { host, len, dev }),
            Err(e) => {
                let _ = gpu.free_host_pinned(host, len);
                Err(e)
            }
        }
    }

    /// The `i`-th 8-byte word, as an atomic: the device writes these words.
    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(
            (i + 1) * 8 <= self.len,
            "word {i} of a {}-byte region",
            self.len
        );
        // SAFETY: in bounds (checked), 8-aligned (the driver's pinned memory is page-aligned),
        // and the region lives as long as `self`.
        unsafe { &*(self.host.add(i * 8) as *const AtomicU64) }
    }

    /// Write `words` from the region's start (the device reads them once launched).
    fn fill(&self, words: &[u64]) {
        assert!(
            words.len() * 8 <= self.len,
            "{} words into {} bytes",
            words.len(),
            self.len
        );
        // SAFETY: in bounds (checked); no checkpoint is on the device, so nothing else
        // reads or writes the region now; the launch that follows orders these writes
        // before the kernel's reads.
        unsafe {
            std::ptr::copy_nonoverlapping(words.as_ptr(), self.host as *mut u64, words.len());
        }
    }

    /// `len` bytes at `off`.
    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        assert!(
            off + len <= self.len,
            "{off}+{len} of a {}-byte region",
            self.len
        );
        // SAFETY: in bounds (checked); the device wrote these bytes before the checkpoint's
        // done word, which the caller has seen (acquire).
        unsafe { std::slice::from_raw_parts(self.host.add(off), len) }
    }
}

/// One chunk as the last checkpoint that took it saw it.
#[derive(Clone, Copy, Default)]
struct Chunk {
    hash: [u64; 2],
    /// Its bytes' blob (pinned in the store); `None`: not taken yet, or changed and not
    /// taken since.
    blob: Option<BlobId>,
}

/// A buffer's chunks, and the blob of the whole (pinned) while it is known: assembled from
/// the chunks once all are taken, or taken over from the snapshot at arming (or a host
/// checkpoint) for a buffer nobody wrote since, whose chunks are then hashed on the device
/// without being copied: a model's weights are never read again.
struct BufChunks {
    size: u64,
    chunks: Vec<Chunk>,
    whole: Option<BlobId>,
    /// Its chunks' hashes are known (set by any checkpoint that ran over them).
    hashed: bool,
    /// Chunks before this one were all taken when last looked at (`take`'s rolling).
    hint: usize,
}

/// What a table entry is of its buffer.
#[derive(Clone, Copy)]
enum Slot {
    /// Chunk `i`: hashed, and copied if it changed.
    Chunk(u32),
    /// A range between copies of a filled buffer: copied, named as a part of its whole.
    Gap,
}

/// A part of a buffer filled by copies, in order.
#[derive(Clone, Copy)]
enum Seg {
    /// A copy's bytes, in the store already.
    Known(BlobId),
    /// Bytes between copies: table entry `i`'s.
    Gap(usize),
}

/// A part of a filled buffer as `segments` finds it: a copy's blob, or a gap (offset,
/// length) the device must give.
enum Range {
    Known(BlobId),
    Gap(u64, u64),
}

/// The parts of a buffer of `size` bytes that copies filled at `ranges`: copies and the gaps
/// between them, each gap in pieces of at most a chunk. `None` where the ranges run past
/// its end.
fn segments(
    ranges: &std::collections::BTreeMap<u64, (u64, BlobId)>,
    size: u64,
) -> Option<Vec<Range>> {
    let mut out = Vec::new();
    let mut at = 0u64;
    let gap = |from: u64, to: u64, out: &mut Vec<Range>| {
        let mut o = from;
        while o < to {
            let l = (to - o).min(CHUNK);
            out.push(Range::Gap(o, l));
            o += l;
        }
    };
    for (&off, &(len, blob)) in ranges {
        let end = off.checked_add(len).filter(|e| *e <= size)?;
        gap(at, off, &mut out);
        out.push(Range::Known(blob));
        at = end;
    }
    gap(at, size, &mut out);
    Some(out)
}

/// What the worker and the engine thread share.
struct Watch {
    /// A checkpoint is on the device or being consumed: the next waits.
    busy: AtomicBool,
    /// The recorder is gone: the worker ends.
    gone: AtomicBool,
    chunks: parking_lot::Mutex<HashMap<BufferId, BufChunks>>,
}

/// A checkpoint on the device, as the worker consumes it.
struct Job {
    no: u64,
    span_no: u64,
    /// Each table entry's buffer, and what it is of it.
    entries: Vec<(BufferId, Slot)>,
    /// Buffers filled by copies since the last checkpoint: what makes each up, in order.
    fills: Vec<(BufferId, Vec<Seg>)>,
    /// Every live buffer: id, address, size, site.
    bufs: Vec<(BufferId, u64, u64, SiteId)>,
    /// Buffers freed since the last checkpoint: their blobs are let go.
    gone: Vec<BufChunks>,
    table: Arc<Region>,
    host: Arc<Region>,
    cap: u64,
}

/// A checkpoint's table before it goes to the device: the words the gather reads (eight per
/// entry) and, for the worker, what each entry is.
struct Plan {
    entries: Vec<(BufferId, Slot)>,
    words: Vec<u64>,
    fills: Vec<(BufferId, Vec<Seg>)>,
    bufs: Vec<(BufferId, u64, u64, SiteId)>,
    gone: Vec<BufChunks>,
}

/// The device side of a flight recorder's checkpoints: its stream, events, kernels and
/// memory, and the worker that consumes what they leave.
pub(crate) struct DeviceCkpt {
    stream: u64,
    ev_engine: u64,
    ev_done: u64,
    gather: KernelHandle,
    done: KernelHandle,
    cap: u64,
    /// Control words, then the host ring.
    host: Arc<Region>,
    table: Arc<Region>,
    /// Device counters (`ctr`), then the device staging ring if there is one.
    dev: DevicePtr,
    staging: DevicePtr,
    watch: Arc<Watch>,
    to_worker: mpsc::Sender<Job>,
    /// Joined at `release`: the worker reads memory the backend owns.
    worker: Option<std::thread::JoinHandle<()>>,
    next_no: u64,
}

/// Where the ring starts in the host region: after the control words.
const RING_AT: usize = 256;

/// Why the device checkpoints could not be set up (the host checkpoints are used instead).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A call of the backend failed: `what` it was for.
    #[error("device checkpoints: could not {what}: {source}")]
    Backend {
        /// What the call was for.
        what: &'static str,
        /// The backend's error.
        #[source]
        source: anyhow::Error,
    },
}

fn step<T>(what: &'static str, r: anyhow::Result<T>) -> Result<T, SetupError> {
    r.map_err(|source| SetupError::Backend { what, source })
}

impl DeviceCkpt {
    /// Set up on `gpu` (its module loaded, a stream, two events, a ring of `ring_mb` MiB in
    /// pinned host memory and, where it can be had, as much device memory for staging),
    /// with the worker consuming into `st`. At arming, before the engine has reserved the
    /// device, and before any capture.
    pub fn new(gpu: &dyn GpuBackend, st: &Shared, ring_mb: u64) -> Result<Self, SetupError> {
        let cap = ring_mb.max(1) << 20;
        step("load the checkpoint kernels", gpu.load_module(&k::module()))?;
        let gather = step("find the gather kernel", gpu.kernel(k::MODULE, k::GATHER))?;
        let done = step("find the done kernel", gpu.kernel(k::MODULE, k::DONE))?;
        // Its own stream must not be one the engine's blocking copies wait for (a blocking
        // stream does: the legacy stream waits for them all).
        let stream = step("create the checkpoint stream", gpu.create_private_stream())?;
        let ev_engine = step("create an event", gpu.create_event())?;
        let ev_done = step("create an event", gpu.create_event())?;
        let host = Arc::new(step(
            "pin the host ring",
            Region::new(gpu, RING_AT + cap as usize),
        )?);
        let table = Arc::new(step(
            "pin the chunk table",
            Region::new(gpu, FIRST_TABLE * ENTRY_WORDS * 8),
        )?);
        // Staging on the device lets the engine go on once chunks are copied at device
        // speed; without it the gather copies straight into the host ring, over the link.
        let (dev, staging) = match gpu.alloc(256 + cap as usize) {
            Ok(d) => (d, d.offset(256)),
            Err(_) => (
                step("allocate the device counters", gpu.alloc(256))?,
                host.dev.offset(RING_AT),
            ),
        };
        step("zero the device counters", gpu.memset(dev, 0, 256))?;
        let watch = Arc::new(Watch {
            busy: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            chunks: Default::default(),
        });
        let (to_worker, jobs) = mpsc::channel();
        let (w, s) = (watch.clone(), Arc::downgrade(st));
        let worker = step(
            "start its thread",
            std::thread::Builder::new()
                .name("gputape-checkpoints".into())
                .spawn(move || worker::run(jobs, w, s))
                .map_err(anyhow::Error::from),
        )?;
        Ok(DeviceCkpt {
            stream,
            ev_engine,
            ev_done,
            gather,
            done,
            cap,
            host,
            table,
            dev,
            staging,
            watch,
            to_worker,
            worker: Some(worker),
            next_no: 1,
        })
    }

    /// Wait until the checkpoint out, if any, has read the engine's buffers (its gather is
    /// done); an error (a dead context) ends the wait as well.
    pub fn wait_gather(&self, gpu: &dyn GpuBackend) {
        if self.busy() {
            let _ = gpu.event_synchronize(self.ev_done);
        }
    }

    /// Whether the last checkpoint is still on the device or being consumed.
    pub fn busy(&self) -> bool {
        self.watch.busy.load(Ordering::Acquire)
    }

    /// Take a checkpoint: `st` is locked by the caller, its new span begun (`pending`).
    /// `streams`: every engine stream, the legacy one included; `pending`: those the span
    /// just ended queued device work on; `written`: the buffers it may have written;
    /// `filled`: those blocking copies filled (`RecState::filled`).
    pub fn take(
        &mut self,
        gpu: &dyn GpuBackend,
        st: &mut super::state::RecState,
        streams: &[u64],
        pending: &[u64],
        written: &HashSet<BufferId>,
        filled: &HashMap<BufferId, std::collections::BTreeMap<u64, (u64, BlobId)>>,
    ) -> anyhow::Result<()> {
        let span_no = st.flight.as_deref().map_or(0, |f| f.span_no());
        let plan = self.plan(st, written, filled);
        let no = self.enqueue(gpu, streams, pending, &plan.words)?;
        self.watch.busy.store(true, Ordering::Release);
        let job = Job {
            no,
            span_no,
            entries: plan.entries,
            fills: plan.fills,
            bufs: plan.bufs,
            gone: plan.gone,
            table: self.table.clone(),
            host: self.host.clone(),
            cap: self.cap,
        };
        if self.to_worker.send(job).is_err() {
            self.watch.busy.store(false, Ordering::Release);
            anyhow::bail!("the checkpoint thread has stopped");
        }
        Ok(())
    }

    /// The gather's table for this checkpoint: every chunk of a written buffer (a hash tells
    /// which changed), the chunks not yet taken of the others (up to half the ring), and
    /// buffers filled by copies as their copies and the gaps between them.
    fn plan(
        &mut self,
        st: &mut super::state::RecState,
        written: &HashSet<BufferId>,
        filled: &HashMap<BufferId, std::collections::BTreeMap<u64, (u64, BlobId)>>,
    ) -> Plan {
        let bufs: Vec<(BufferId, u64, u64, SiteId)> = st
            .live_buffers()
            .into_iter()
            .map(|(id, p, size, site)| (id, p, size, st.site(site)))
            .collect();
        let mut entries: Vec<(BufferId, Slot)> = Vec::new();
        let mut words: Vec<u64> = Vec::new();
        let mut rolling = 0u64;
        let mut forced = 0u64;
        let known = std::mem::take(&mut st.since.checkpointed);
        let mut map = self.watch.chunks.lock();
        let live_ids: HashSet<BufferId> = bufs.iter().map(|b| b.0).collect();
        let gone_ids: Vec<BufferId> = map
            .keys()
            .filter(|b| !live_ids.contains(b))
            .copied()
            .collect();
        let gone: Vec<BufChunks> = gone_ids.iter().filter_map(|b| map.remove(b)).collect();
        let mut fills: Vec<(BufferId, Vec<Seg>)> = Vec::new();
        for &(id, addr, size, _) in &bufs {
            // Filled by copies and written by nothing else: its bytes are the copies' and,
            // between them, what the device holds (an arena's alignment gaps).
            let fill = filled
                .get(&id)
                .filter(|_| !written.contains(&id))
                .and_then(|r| segments(r, size));
            let all = written.contains(&id) || (filled.contains_key(&id) && fill.is_none());
            let e = map.entry(id).or_insert_with(|| {
                // Known whole since the last host snapshot and not written since: its blob
                // stands (pinned while the map holds it), and its chunks are only hashed.
                let whole = known
                    .get(&id)
                    .copied()
                    .filter(|_| !all)
                    .filter(|w| st.flight.as_deref_mut().is_some_and(|f| f.pin(*w, || None)));
                BufChunks {
                    size,
                    chunks: vec![Chunk::default(); size.div_ceil(CHUNK).max(1) as usize],
                    whole,
                    hashed: false,
                    hint: 0,
                }
            });
            if let Some(segs) = fill {
                // What was known of it goes; the copies and gaps make it whole again once
                // this checkpoint is consumed, and its chunks are hashed meanwhile.
                if let Some(f) = st.flight.as_deref_mut() {
                    for b in e
                        .whole
                        .take()
                        .into_iter()
                        .chain(e.chunks.iter_mut().filter_map(|c| c.blob.take()))
                    {
                        f.unpin(b);
                    }
                }
                e.hashed = false;
                e.hint = 0;
                let mut out = Vec::with_capacity(segs.len());
                for seg in segs {
                    match seg {
                        Range::Known(b) => out.push(Seg::Known(b)),
                        Range::Gap(off, len) => {
                            out.push(Seg::Gap(entries.len()));
                            entries.push((id, Slot::Gap));
                            words.extend([addr + off, len, 0, 0, 0, 0, 0, FORCE]);
                        }
                    }
                }
                for (i, c) in e.chunks.iter().enumerate() {
                    let off = i as u64 * CHUNK;
                    let len = (size - off.min(size)).min(CHUNK);
                    entries.push((id, Slot::Chunk(i as u32)));
                    words.extend([addr + off, len, c.hash[0], c.hash[1], 0, 0, 0, HASH_ONLY]);
                }
                fills.push((id, out));
                continue;
            }
            let seeding = !all && e.whole.is_some() && !e.hashed;
            if !all && !seeding && e.whole.is_some() {
                continue;
            }
            // Taking what was not taken yet, a part of the ring at a time, from where the
            // last checkpoint stopped: an 8B model's weights are 262,144 chunks, too many to
            // walk at every checkpoint while they go through.
            let rolling_only = !all && !seeding;
            if rolling_only && rolling + CHUNK > self.cap / 2 {
                continue;
            }
            let from = if rolling_only {
                e.hint.min(e.chunks.len())
            } else {
                0
            };
            if rolling_only {
                e.hint = from
                    + e.chunks[from..]
                        .iter()
                        .take_while(|c| c.blob.is_some())
                        .count();
            }
            let from = if rolling_only { e.hint } else { from };
            for (i, c) in e.chunks.iter().enumerate().skip(from) {
                if rolling_only && rolling + CHUNK > self.cap / 2 {
                    break;
                }
                let mode = if seeding {
                    HASH_ONLY
                } else if c.blob.is_none() {
                    FORCE
                } else if all {
                    COMPARE
                } else {
                    continue;
                };
                let off = i as u64 * CHUNK;
                let len = (size - off.min(size)).min(CHUNK);
                if mode == FORCE && !all {
                    if rolling + len > self.cap / 2 {
                        continue;
                    }
                    rolling += len;
                }
                if mode == FORCE && all {
                    // More than the ring holds would not be taken anyway: such chunks wait
                    // for a later checkpoint, and the table stays small (an 8B model's
                    // weights, written on the device, are 262,144 chunks: 45 ms to list).
                    if forced + len > self.cap {
                        continue;
                    }
                    forced += len;
                }
                entries.push((id, Slot::Chunk(i as u32)));
                words.extend([addr + off, len, c.hash[0], c.hash[1], 0, 0, 0, mode]);
            }
        }
        drop(map);
        Plan {
            entries,
            words,
            fills,
            bufs,
            gone,
        }
    }

    /// Put the table on the device and queue the checkpoint: the gather on a stream with
    /// work pending, the ring's copy to the host and the `done` kernel on the checkpoint's
    /// own stream. Returns the checkpoint's number.
    fn enqueue(
        &mut self,
        gpu: &dyn GpuBackend,
        streams: &[u64],
        pending: &[u64],
        words: &[u64],
    ) -> anyhow::Result<u64> {
        if words.len() * 8 > self.table.len {
            let want = (words.len() * 8).next_power_of_two();
            let t = Region::new(gpu, want)?;
            let old = std::mem::replace(&mut self.table, Arc::new(t));
            // No checkpoint is on the device (the caller checked `busy`): nothing reads it.
            if let Ok(r) = Arc::try_unwrap(old) {
                let _ = gpu.free_host_pinned(r.host, r.len);
            }
        }
        self.table.fill(words);
        let no = self.next_no;
        self.next_no += 1;
        self.host.word(1).store(no, Ordering::Relaxed);
        self.host.word(3).store(self.cap, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        let n = (words.len() / 8) as u64;
        anyhow::ensure!(
            n <= i32::MAX as u64,
            "{n} chunks are more than one launch of the gather kernel can take"
        );
        // The gather goes on a stream with work pending (no hop between streams there: the
        // engine's next kernel on it waits for the gather alone); the other such streams'
        // work is waited for; every stream the engine may use next waits for the gather.
        let main = pending.first().copied().unwrap_or(self.stream);
        for s in pending.iter().skip(1) {
            gpu.record_event(self.ev_engine, *s)?;
            gpu.stream_wait_event(main, self.ev_engine)?;
        }
        if n > 0 {
            gpu.launch_typed(
                self.gather,
                [n as u32, 1, 1],
                [k::BLOCK, 1, 1],
                0,
                main,
                &[
                    KernelArg::Buffer(self.table.dev),
                    KernelArg::Bytes(&n.to_le_bytes()),
                    KernelArg::Buffer(self.staging),
                    KernelArg::Bytes(&self.cap.to_le_bytes()),
                    KernelArg::Buffer(self.dev),
                ],
            )?;
        }
        gpu.record_event(self.ev_done, main)?;
        for s in streams.iter().chain([&self.stream]) {
            if *s != main {
                gpu.stream_wait_event(*s, self.ev_done)?;
            }
        }
        // What the gather can have used: every chunk it may copy, rounded as it reserves.
        let bound = entries_bound(words).min(self.cap) as usize;
        if self.staging != self.host.dev.offset(RING_AT) && bound > 0 {
            // SAFETY: the ring lies inside the pinned region (`RING_AT + cap` bytes), no
            // checkpoint is on the device and the worker reads the ring only after `done`,
            // which runs after this copy on the same stream; the region outlives the copy
            // (freed only when no checkpoint is out).
            let ring =
                unsafe { std::slice::from_raw_parts_mut(self.host.host.add(RING_AT), bound) };
            gpu.copy_d2h_async(self.staging, ring, self.stream)?;
        }
        gpu.launch_typed(
            self.done,
            [1, 1, 1],
            [1, 1, 1],
            0,
            self.stream,
            &[
                KernelArg::Buffer(self.dev),
                KernelArg::Buffer(self.host.dev),
            ],
        )?;
        Ok(no)
    }

    /// Let go of what can be let go: the worker ends; the device memory and pinned regions
    /// are freed unless a checkpoint may still be writing them (then they are left to the
    /// process's end rather than freed under the device's feet).
    pub fn release(mut self, gpu: &dyn GpuBackend) {
        self.watch.gone.store(true, Ordering::Release);
        // The worker may be reading the pinned memory, which goes with the backend: it ends
        // first (it naps at most a millisecond between looks).
        let (tx, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.to_worker, tx));
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
        if self.busy() {
            return;
        }
        let _ = gpu.free(self.dev);
        let _ = gpu.destroy_event(self.ev_engine);
        let _ = gpu.destroy_event(self.ev_done);
        for r in [self.host, self.table] {
            if let Ok(r) = Arc::try_unwrap(r) {
                let _ = gpu.free_host_pinned(r.host, r.len);
            }
        }
    }
}

/// The ring bytes a gather over table `words` can reserve at most: its chunks that may be
/// copied, each rounded up to 16 bytes.
fn entries_bound(words: &[u64]) -> u64 {
    words
        .chunks_exact(ENTRY_WORDS)
        .filter(|e| e[7] != HASH_ONLY)
        .map(|e| e[1].next_multiple_of(16))
        .sum()
}

#[cfg(test)]
mod tests;
