//! The flight recorder: always on, it keeps the last steps of a run in memory and writes them
//! out as a self-contained trace when something goes wrong.
//!
//! It is the recorder with a different store. Frames are encoded as for a file (the writer's
//! sink keeps nothing), then taken from the writer into the store, which lives in the
//! recorder's state under its one lock: a hot call takes no second lock. They are sorted by
//! what they are (`FrameClass`): definitions (header, sites, modules, kernels) are kept for the
//! whole run; blobs are kept by content hash for as long as a kept span names them; every
//! `checkpoint_every` steps a checkpoint of device state is taken (the buffers written since
//! the last checkpoint are read back, the others keep their blob: weights are read once) and a
//! new span of calls begins. Two spans are kept, so a dump always holds between one and two
//! checkpoint intervals of calls, from the older checkpoint on.
//!
//! A dump is an ordinary trace: the older checkpoint as its initial state, then the calls since.
//! Triggers: an error returned by any call (the first one; a dead context fails every later
//! call), a red-zone scan that found a band written, a panic (the hook `arm_panic_hook`
//! installs), SIGUSR1 (noticed at the next recorded call; arming a flight recorder replaces
//! any SIGUSR1 handler the engine had), or `RecordingBackend::flight_dump`. A graph captured
//! before the kept spans is not in a dump: a dump whose calls launch it does not replay.
//!
//! Calls are held as templates and a few bytes each (`ring`). What that costs a dump: a call
//! that returned `Ok(())` gets an End of duration 0 (its time is its Begin's); a hot call
//! another thread is inside while the dump is written reads as returned `Ok(())`, where a
//! full recording would show no End yet; and such calls are not waited for by `stop()`.

pub use super::flight_config::{FlightConfig, FlightHeld};
use super::ring::{self, Fast, Interned, Log, RawKey, Record, Templates, Writes};
use super::spill::Spill;
use super::state::RecState;
use crate::trace::{BlobId, FrameClass, GraphId, Sink, TraceError, TraceWriter};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// A checkpoint's frames and the calls after it.
struct Span {
    checkpoint: Vec<Vec<u8>>,
    log: Log,
    first_step: u64,
    /// Its checkpoint could not be completed: a dump cannot start from it.
    failed: bool,
    /// Its checkpoint is still being taken on the device (`device_ckpt.rs`): a dump cannot
    /// start from it until it is complete.
    pending: bool,
}

impl Span {
    fn after(prev: Option<&Span>, first_step: u64) -> Self {
        let (seq, t) = prev.map_or((u64::MAX, 0), |s| s.log.last());
        Span {
            checkpoint: Vec::new(),
            log: Log::after(seq, t),
            first_step,
            failed: false,
            pending: false,
        }
    }

    /// Whether a dump can start from its checkpoint.
    fn usable(&self) -> bool {
        !self.failed && !self.pending
    }
}

/// A blob's `last` while something outside the spans holds it (`FlightStore::pin`).
const PINNED: u64 = u64::MAX;

/// A blob's encoded frame, or how long it is in its spill file.
enum Held {
    Mem(Vec<u8>),
    Disk(usize),
}

/// What a dump is made of: in the recorder's state, so under its lock (the panic hook takes
/// that lock too).
pub(crate) struct FlightStore {
    pub cfg: FlightConfig,
    definitions: Vec<Vec<u8>>,
    /// Blob payloads (encoded frames) by id, with the span counter that last named each
    /// (`PINNED` while pinned).
    blobs: HashMap<BlobId, (Held, u64)>,
    /// The blobs each span named, so dropping a span looks only at those (a device
    /// checkpoint holds a blob per 64 KiB chunk: hundreds of thousands for an 8B model's
    /// weights, too many to walk at every checkpoint). A blob named again is listed again.
    named_in: std::collections::BTreeMap<u64, Vec<BlobId>>,
    /// How many holders pin each pinned blob (`pin`).
    pins: HashMap<BlobId, u32>,
    spill: Spill,
    /// The parts of each chunked blob in `blobs`, named again whenever it is.
    parts: HashMap<BlobId, Vec<BlobId>>,
    spans: VecDeque<Span>,
    /// Spans begun so far (the newest span's number).
    span_no: u64,
    /// The calls the kept spans name, each once.
    templates: Templates,
    /// The seq and slot of the call interned last (with its patch, if it was kept as a
    /// delta of that slot), for the fast path to learn.
    last_interned: Option<(u64, u32, Option<ring::Patch>)>,
    /// The template of the last call logged: a new call's base is guessed from it.
    prev_slot: Option<u32>,
    pub dumps: usize,
    pub steps: u64,
    /// A checkpoint's frames are being written (the snapshot at start, or `checkpoint`):
    /// Checkpoint-class frames go to it. Outside one, such frames (an allocation's address, a
    /// stream first seen mid-step) belong with the calls around them.
    pub in_checkpoint: bool,
    /// The engine marks its steps (`step_boundary`): host syncs no longer count as steps.
    pub marked_steps: bool,
    /// A checkpoint fell due while a stream captured: taken at the next boundary outside one.
    pub checkpoint_owed: bool,
    /// Checkpoints put off so far because a stream was capturing.
    pub deferred_checkpoints: u64,
    /// Step boundaries at which a checkpoint was owed but put off by the budget.
    pub budget_deferrals: u64,
    /// When the recorder was armed: the budget is a share of the time since.
    armed_at: std::time::Instant,
    /// What the checkpoints taken since arming cost, in all, as the budget counts it.
    spent: std::time::Duration,
    /// What they cost the threads that took them.
    host_time: std::time::Duration,
    /// What the last checkpoint cost, and its read rate (bytes a second) when it read
    /// enough to measure one: the budget's estimate of the next.
    last_cost: Option<(std::time::Duration, Option<f64>)>,
    /// The step clock (`step_ended`): the last step's end, the typical step (a moving
    /// average of those no checkpoint followed), and whether a device checkpoint followed
    /// the last one, to be priced by the next.
    last_step_end: Option<std::time::Instant>,
    typical_step: Option<f64>,
    device_checkpoint_to_price: bool,
    /// Checkpoints taken since the recorder was armed, the first (at arming) not counted.
    pub checkpoints: u64,
    /// Bytes those checkpoints read back.
    pub checkpoint_read_bytes: u64,
    /// Device checkpoints that could not take every changed chunk.
    pub incomplete_checkpoints: u64,
    /// Boundaries at which a due checkpoint waited for the one before it.
    pub busy_deferrals: u64,
    /// Checkpoints are taken on the device.
    pub device_checkpoints: bool,
    /// `checkpoint_read_bytes` when the last checkpoint was taken.
    read_when_taken: u64,
    /// What the recorder's own work got wrong (checkpoints, dumps), newest last, at most
    /// `MAX_FAILURES` kept; `failures` counts them all.
    failure_log: VecDeque<String>,
    failures: u64,
    /// The capture in progress, if one is: every call between a `begin_capture` and its
    /// `end_capture` (such calls skip the fast path, so each has its frames), and the blobs
    /// they name (host bytes it uploads).
    capture: Option<GraphKept>,
    /// Each live graph's capture (its first seq, its frames, the blobs they name), kept for
    /// as long as the graph lives: an engine captures once and launches for hours, and a
    /// dump that launches a graph captured before its kept steps must still define it.
    graphs: HashMap<GraphId, GraphKept>,
}

/// A graph's capture, as `FlightStore::graphs` keeps it.
#[derive(Default)]
struct GraphKept {
    /// The seq of its `begin_capture` (the first frame's).
    first_seq: u64,
    frames: Vec<Vec<u8>>,
    blobs: Vec<BlobId>,
}

/// The read rate a first checkpoint is estimated at (bytes a second): a device-to-host copy
/// into pageable memory, hashed, is about this on the H200's host (runs 45-46).
const DEFAULT_READ_RATE: f64 = 2e9;

/// Failures of the recorder's own work named in a dump; more are counted.
const MAX_FAILURES: usize = 8;

impl FlightStore {
    pub fn new(cfg: FlightConfig) -> Self {
        // Off: no blob is that large, so nothing is written and no file made.
        let spill = Spill::new(cfg.dir.clone(), cfg.spill_blobs_over.unwrap_or(usize::MAX));
        FlightStore {
            cfg,
            definitions: Vec::new(),
            blobs: HashMap::default(),
            named_in: Default::default(),
            pins: HashMap::default(),
            spill,
            parts: HashMap::default(),
            spans: VecDeque::from([Span::after(None, 0)]),
            span_no: 0,
            templates: Templates::default(),
            last_interned: None,
            prev_slot: None,
            dumps: 0,
            steps: 0,
            in_checkpoint: true,
            marked_steps: false,
            checkpoint_owed: false,
            deferred_checkpoints: 0,
            budget_deferrals: 0,
            armed_at: std::time::Instant::now(),
            spent: std::time::Duration::ZERO,
            host_time: std::time::Duration::ZERO,
            last_cost: None,
            last_step_end: None,
            typical_step: None,
            device_checkpoint_to_price: false,
            checkpoints: 0,
            checkpoint_read_bytes: 0,
            incomplete_checkpoints: 0,
            busy_deferrals: 0,
            device_checkpoints: false,
            read_when_taken: 0,
            failure_log: VecDeque::new(),
            failures: 0,
            capture: None,
            graphs: HashMap::default(),
        }
    }

    /// Blobs a live graph's capture names (and their parts): kept while the graph lives.
    fn graph_blobs(&self) -> rustc_hash::FxHashSet<BlobId> {
        let mut set = rustc_hash::FxHashSet::default();
        for g in self.graphs.values() {
            for b in &g.blobs {
                set.insert(*b);
                set.extend(self.parts.get(b).into_iter().flatten().copied());
            }
        }
        set
    }

    /// Whether a checkpoint owed now fits the budget: what checkpoints have cost since arming,
    /// plus this one's estimate, is at most the budget's share of the time since arming. So
    /// over any stretch from arming on, checkpoints take at most that share, the first one
    /// included (it reads every buffer the engine filled since arming: a 16 GB model's
    /// weights take seconds). The estimate is the last checkpoint's cost, or the bytes no
    /// checkpoint has read yet (`unread`) at the last measured read rate (at first, 2 GB/s),
    /// whichever is larger. A span grown past `max_span_calls` takes one regardless.
    pub fn checkpoint_fits(&self, unread: u64) -> bool {
        let Some(b) = self.cfg.budget else {
            return true;
        };
        if self
            .spans
            .back()
            .is_some_and(|s| s.log.calls() >= self.cfg.max_span_calls)
        {
            return true;
        }
        let (last, rate) = self.last_cost.unwrap_or_default();
        let by_bytes = unread as f64 / rate.unwrap_or(DEFAULT_READ_RATE);
        let estimate = last.as_secs_f64().max(by_bytes);
        self.spent.as_secs_f64() + estimate <= b * self.armed_at.elapsed().as_secs_f64()
    }

    /// A checkpoint was taken: it cost `cost`, and read what `checkpoint_read_bytes` grew by
    /// since the last one was taken.
    pub fn checkpoint_taken(&mut self, cost: std::time::Duration) {
        self.host_time += cost;
        let read = self.checkpoint_read_bytes - self.read_when_taken;
        self.read_when_taken = self.checkpoint_read_bytes;
        self.checkpoints += 1;
        self.spent += cost;
        // Below a mebibyte the time is the checkpoint's fixed cost, not a read rate.
        let rate = (read >= 1 << 20 && !cost.is_zero()).then(|| read as f64 / cost.as_secs_f64());
        let known = self.last_cost.and_then(|(_, r)| r);
        self.last_cost = Some((cost, rate.or(known)));
    }

    /// A device checkpoint was taken: what it cost the engine's thread (`host`) is only part
    /// of it (its launches; the engine's streams wait for its gather, the recorder's thread
    /// takes the lock), so it is priced by the step it falls in (`step_ended`).
    pub fn device_checkpoint_taken(&mut self, host: std::time::Duration) {
        self.checkpoints += 1;
        self.host_time += host;
        self.device_checkpoint_to_price = true;
    }

    /// A step ended now. A step a device checkpoint fell in is priced at what it took beyond
    /// the typical step (a moving average of the others): that is what the checkpoint cost
    /// the engine, whatever part of it was the host's, the device's or the lock's, and the
    /// budget counts it. On an 80 us step the launches alone were a fifth of it.
    pub fn step_ended(&mut self, now: std::time::Instant) {
        if let Some(prev) = self.last_step_end {
            let dt = now.saturating_duration_since(prev).as_secs_f64();
            match (self.device_checkpoint_to_price, self.typical_step) {
                (true, Some(t)) => {
                    let extra = std::time::Duration::from_secs_f64((dt - t).max(0.0));
                    self.spent += extra;
                    self.last_cost = Some((extra, None));
                }
                (true, None) => {}
                (false, t) => self.typical_step = Some(t.map_or(dt, |t| 0.9 * t + 0.1 * dt)),
            }
        }
        self.device_checkpoint_to_price = false;
        self.last_step_end = Some(now);
    }

    /// A capture begins: its calls' frames are kept with the graph it makes.
    pub fn capture_open(&mut self) {
        self.capture = Some(GraphKept::default());
    }

    /// The capture ended into graph `made`; `None`: it failed or was abandoned, and its
    /// frames go.
    pub fn capture_closed(&mut self, made: Option<GraphId>) {
        if let (Some(c), Some(id)) = (self.capture.take(), made) {
            if !c.frames.is_empty() {
                self.graphs.insert(id, c);
            }
        }
    }

    /// Each live graph's captured calls, as the payloads of their frames: what a launch of it
    /// can write is what they write.
    pub fn graph_frames(&self) -> impl Iterator<Item = (GraphId, &[Vec<u8>])> {
        self.graphs.iter().map(|(id, g)| (*id, g.frames.as_slice()))
    }

    /// Graph `id` was destroyed: no later call can launch it.
    pub fn graph_destroyed(&mut self, id: GraphId) {
        self.graphs.remove(&id);
    }

    /// The recorder's own work failed (`what`): kept for the next dump. True for the first
    /// failure, which is said on stderr once.
    pub fn note_failure(&mut self, what: String) -> bool {
        self.failures += 1;
        if self.failure_log.len() == MAX_FAILURES {
            self.failure_log.pop_front();
        }
        self.failure_log.push_back(what);
        self.failures == 1
    }

    /// The recorder's own failures, as a dump's reason states them (empty if none).
    pub fn failure_note(&self) -> String {
        if self.failures == 0 {
            return String::new();
        }
        let shown: Vec<&str> = self.failure_log.iter().map(String::as_str).collect();
        format!(
            "; the recorder's own work failed {} time(s) (last: {})",
            self.failures,
            shown.join("; ")
        )
    }

    /// A new checkpoint begins (its frames follow). Older spans go, with the blobs only they
    /// named, as long as a usable checkpoint is left before the new span: a dump needs one
    /// whole checkpoint and the calls after it, and the newest may still be on the device
    /// (`pending`) or have failed.
    pub fn begin_checkpoint(&mut self) {
        self.in_checkpoint = true;
        self.span_no += 1;
        let span = Span::after(self.spans.back(), self.steps);
        self.spans.push_back(span);
        let last_before_new = self.spans.len() - 1;
        let Some(keep_from) = (0..last_before_new).rev().find(|i| self.spans[*i].usable()) else {
            return;
        };
        if keep_from == 0 {
            return;
        }
        self.spans.drain(..keep_from);
        let oldest = self.span_no + 1 - self.spans.len() as u64;
        self.evict_before(oldest);
        self.templates.evict_before(oldest);
        self.last_interned = None;
    }

    /// Blobs no span from `oldest` on names, and nothing pins, go (from the spill file too).
    fn evict_before(&mut self, oldest: u64) {
        let keep = self.named_in.split_off(&oldest);
        let old = std::mem::replace(&mut self.named_in, keep);
        let graphs = self.graph_blobs();
        for id in old.into_values().flatten() {
            let stale = self
                .blobs
                .get(&id)
                .is_some_and(|(_, last)| *last < oldest && !graphs.contains(&id));
            if !stale {
                continue;
            }
            if let Some((Held::Disk(_), _)) = self.blobs.remove(&id) {
                self.spill.remove(id);
            }
            self.parts.remove(&id);
        }
    }

    /// Name blob `id` (held already) in span `no`, unless it is pinned.
    fn rename(&mut self, id: BlobId, no: u64) {
        if let Some(e) = self.blobs.get_mut(&id) {
            if e.1 != PINNED && e.1 != no {
                e.1 = no;
                self.named_in.entry(no).or_default().push(id);
            }
        }
    }

    /// Hold blob `id` (`payload`, its encoded frame, if it is not held yet) for as long as
    /// an unpin has not matched this pin: the device checkpoint's chunks are held so,
    /// however many checkpoints name them.
    /// A chunked blob's parts are pinned with it. False: not held, and no payload given.
    pub fn pin(&mut self, id: BlobId, payload: impl FnOnce() -> Option<Vec<u8>>) -> bool {
        if !self.blobs.contains_key(&id) {
            let Some(p) = payload() else { return false };
            self.hold(id, p, PINNED);
        }
        self.pin_held(id);
        true
    }

    /// `pin` of a blob held already (a missing part is left alone: the dump names it).
    fn pin_held(&mut self, id: BlobId) {
        if let Some(e) = self.blobs.get_mut(&id) {
            e.1 = PINNED;
        }
        *self.pins.entry(id).or_default() += 1;
        for p in self.parts.get(&id).cloned().unwrap_or_default() {
            self.pin_held(p);
        }
    }

    /// `pin` for a chunked blob of `parts` (each pinned by its holder).
    pub fn pin_chunked(&mut self, id: BlobId, len: u64, parts: &[BlobId]) {
        if !self.blobs.contains_key(&id) {
            let frame = crate::trace::Frame::Chunked {
                id,
                len,
                parts: parts.to_vec(),
            };
            self.parts.insert(id, parts.to_vec());
            let mut payload = Vec::new();
            if crate::trace::codec::append(&frame, &mut payload).is_err() {
                return;
            }
            self.pin(id, || Some(payload));
            return;
        }
        self.pin(id, || None);
    }

    /// Span `no`'s device checkpoint is done: its frames (`ok`), or it could not be (the
    /// ring was full, a frame would not encode) and no dump starts from it.
    pub fn checkpoint_frames(&mut self, no: u64, frames: Vec<Vec<u8>>, ok: bool) {
        let first = self.span_no + 1 - self.spans.len() as u64;
        if let Some(s) = no
            .checked_sub(first)
            .and_then(|i| self.spans.get_mut(i as usize))
        {
            if ok {
                s.checkpoint.extend(frames);
            }
        }
        self.device_checkpoint_done(no, ok);
    }

    /// One holder of blob `id` lets go: with the last, the blob is named by the current span
    /// (older checkpoints still name it) and goes with it.
    pub fn unpin(&mut self, id: BlobId) {
        for p in self.parts.get(&id).cloned().unwrap_or_default() {
            self.unpin(p);
        }
        let Some(n) = self.pins.get_mut(&id) else {
            return;
        };
        *n -= 1;
        if *n > 0 {
            return;
        }
        self.pins.remove(&id);
        let no = self.span_no;
        if let Some(e) = self.blobs.get_mut(&id) {
            e.1 = no;
            self.named_in.entry(no).or_default().push(id);
        }
    }

    /// The newest span's checkpoint is being taken on the device: no dump starts from it
    /// until `device_checkpoint_done`.
    pub fn checkpoint_pending(&mut self) {
        if let Some(s) = self.spans.back_mut() {
            s.pending = true;
        }
    }

    /// Span `no`'s device checkpoint is complete (`ok`), its frames written; or it could not
    /// be (the ring was full, the device failed) and no dump starts from it.
    pub fn device_checkpoint_done(&mut self, no: u64, ok: bool) {
        let first = self.span_no + 1 - self.spans.len() as u64;
        let Some(s) = no
            .checked_sub(first)
            .and_then(|i| self.spans.get_mut(i as usize))
        else {
            return;
        };
        s.pending = false;
        s.failed |= !ok;
    }

    /// The parts of chunked blob `id`, if it is one held here.
    pub fn parts_of(&self, id: &BlobId) -> Option<&[BlobId]> {
        self.parts.get(id).map(Vec::as_slice)
    }

    /// The number of the newest span (the one calls are logged into).
    pub fn span_no(&self) -> u64 {
        self.span_no
    }

    /// The checkpoint being written is complete (`ok`) or was abandoned half-way, in which
    /// case no dump starts from it.
    pub fn end_checkpoint(&mut self, ok: bool) {
        self.in_checkpoint = false;
        if let (false, Some(s)) = (ok, self.spans.back_mut()) {
            s.failed = true;
        }
    }

    /// Blob `id` is named by the current span; `frame` encodes it (only encoded if new). A
    /// chunked blob's parts are named with it.
    pub fn note_blob(&mut self, id: BlobId, frame: impl FnOnce() -> crate::trace::Frame) {
        if let Some(c) = self.capture.as_mut() {
            c.blobs.push(id);
        }
        let no = self.span_no;
        match self.blobs.contains_key(&id) {
            true => {
                self.rename(id, no);
                let parts = self.parts.get(&id).cloned().unwrap_or_default();
                for p in parts {
                    self.rename(p, no);
                }
            }
            false => {
                let mut payload = Vec::new();
                if crate::trace::codec::append(&frame(), &mut payload).is_ok() {
                    self.hold(id, payload, no);
                }
            }
        }
    }

    /// Keep new blob `id`, on disk if it is large enough and the write succeeds; gives the
    /// payload back when it went to disk.
    fn hold(&mut self, id: BlobId, payload: Vec<u8>, no: u64) -> Option<Vec<u8>> {
        if no != PINNED {
            self.named_in.entry(no).or_default().push(id);
        }
        if self.spill.put(id, &payload) {
            self.blobs.insert(id, (Held::Disk(payload.len()), no));
            return Some(payload);
        }
        self.blobs.insert(id, (Held::Mem(payload), no));
        None
    }

    /// `note_blob` for a part already encoded; gives the buffer back for reuse unless it now
    /// holds the blob in memory.
    pub fn note_blob_payload(&mut self, id: BlobId, payload: Vec<u8>) -> Option<Vec<u8>> {
        let no = self.span_no;
        match self.blobs.contains_key(&id) {
            true => {
                self.rename(id, no);
                Some(payload)
            }
            false => self.hold(id, payload, no),
        }
    }

    /// A chunked blob of `parts` (each noted already), named by the current span.
    pub fn note_chunked(&mut self, id: BlobId, len: u64, parts: Vec<BlobId>) {
        let frame = crate::trace::Frame::Chunked {
            id,
            len,
            parts: parts.clone(),
        };
        self.parts.insert(id, parts);
        self.note_blob(id, || frame);
    }

    /// The fast path: a call whose raw inputs `key` were seen since the recorder's maps last
    /// changed (`gen`) is logged as its template, assumed to return `Ok(())` (an error is
    /// kept as its own End record, which a dump prefers). `false`: take the slow path.
    #[inline]
    pub fn fast_call(&mut self, key: &RawKey, gen: u64, seq: u64, t_ns: u64) -> bool {
        let Some(span) = self.spans.back_mut() else {
            return false;
        };
        match self.templates.fast(key, gen, self.span_no) {
            Some(Fast::Slot(slot)) => {
                span.log.push_call(slot, seq, t_ns, true);
                self.prev_slot = Some(slot);
                true
            }
            Some(Fast::Delta {
                base,
                at,
                bytes,
                n,
                scalar,
            }) => {
                span.log
                    .push_delta(base, (seq, t_ns, true), (at, &bytes[..n], scalar));
                self.prev_slot = Some(base);
                true
            }
            None => false,
        }
    }

    /// `fast_call` for a copy of host bytes whose blob id is `id` (already noted).
    #[inline]
    pub fn fast_blob_call(
        &mut self,
        key: &RawKey,
        gen: u64,
        seq: u64,
        t_ns: u64,
        id: &BlobId,
    ) -> bool {
        let Some(span) = self.spans.back_mut() else {
            return false;
        };
        let Some(Fast::Delta {
            base, at, bytes, n, ..
        }) = self.templates.fast_blob(key, gen, self.span_no, &id.0)
        else {
            return false;
        };
        span.log
            .push_delta(base, (seq, t_ns, true), (at, &bytes[..n], true));
        self.prev_slot = Some(base);
        true
    }

    /// `learn` for a copy of host bytes that the slow path recorded with blob id `id`.
    pub fn learn_blob(&mut self, key: &RawKey, gen: u64, seq: u64, id: &BlobId) {
        if let Some((s, slot, patch)) = self.last_interned {
            if s == seq {
                self.templates.learn_blob(key, gen, (slot, patch), &id.0);
            }
        }
    }

    /// After the slow path recorded call `seq`: calls with raw inputs `key` are its template
    /// from now on.
    pub fn learn(&mut self, key: &RawKey, gen: u64, seq: u64) {
        if let Some((s, slot, patch)) = self.last_interned {
            if s == seq {
                self.templates.learn(key, gen, slot, patch);
            }
        }
    }

    /// A frame the recorder's writer wrote (`TraceWriter::take_last`): sorted by class into
    /// the store.
    pub fn take_frame(&mut self, class: FrameClass, payload: &[u8]) {
        if let (Some(c), FrameClass::Call) = (self.capture.as_mut(), class) {
            if c.frames.is_empty() {
                c.first_seq = ring::split(payload).map_or(0, |(seq, ..)| seq);
            }
            c.frames.push(payload.to_vec());
        }
        match class {
            FrameClass::Definition => self.definitions.push(payload.to_vec()),
            FrameClass::Checkpoint if self.in_checkpoint => {
                if let Some(s) = self.spans.back_mut() {
                    s.checkpoint.push(payload.to_vec());
                }
            }
            FrameClass::Checkpoint | FrameClass::Call => self.log_frame(payload),
        }
    }

    /// A call's frame from the recorder: a Begin becomes a template's call, an End saying
    /// `Ok(())` folds into its call when that is the newest, anything else is kept whole.
    fn log_frame(&mut self, payload: &[u8]) {
        let span_no = self.span_no;
        let Some(span) = self.spans.back_mut() else {
            return;
        };
        if let Some((seq, t_ns, head, call)) = ring::split(payload) {
            match self
                .templates
                .intern_or_delta(head, call, span_no, self.prev_slot)
            {
                Interned::Slot(slot) => {
                    span.log.push_call(slot, seq, t_ns, false);
                    self.last_interned = Some((seq, slot, None));
                    self.prev_slot = Some(slot);
                }
                Interned::Delta { base, at, bytes } => {
                    span.log
                        .push_delta(base, (seq, t_ns, false), (at, bytes, false));
                    // The fast path learns it as this delta of its base (a later layer's
                    // launch, as a patch of the first layer's).
                    self.last_interned = ring::Patch::new(at, bytes).map(|p| (seq, base, Some(p)));
                    self.prev_slot = Some(base);
                }
            }
            return;
        }
        if let Some((seq, true)) = crate::trace::codec::end_seq(payload) {
            if span.log.fold_ok(seq) {
                return;
            }
        }
        span.log.push_frame(payload);
    }

    /// What the calls of the span being recorded may have written: `compute` works out a
    /// call's writes from its Begin record (once per distinct call); `each` gets them all.
    pub fn span_writes(
        &mut self,
        mut compute: impl FnMut(&[u8]) -> Writes,
        mut each: impl FnMut(&Writes),
    ) {
        // Every Begin became a template or a delta of one (`log_frame`); a delta may change
        // what its call writes, so each is read on its own, unless only its scalars changed
        // (writes follow from buffer arguments and the kernel's access modes alone).
        let span_no = self.span_no;
        self.templates.writes_in(span_no, &mut compute, &mut each);
        let mut record = Vec::new();
        let logs = self.spans.back().into_iter();
        // A later layer's launch is the same patch of its template on every step: its
        // writes are worked out once.
        let mut seen =
            rustc_hash::FxHashSet::<(u32, usize, smallvec::SmallVec<[u8; 16]>)>::default();
        for patch in logs.flat_map(|s| s.log.rewrite_patches()) {
            if !seen.insert((patch.0, patch.1, patch.2.into())) {
                continue;
            }
            record.clear();
            if self
                .templates
                .append_begin_patched(patch, 0, 0, &mut record)
            {
                each(&compute(&record));
            }
        }
    }

    /// What is held, split as the memory bound is stated: the calls (templates and logs)
    /// against the device state they replay from (checkpoints, payloads, definitions).
    pub fn held(&self) -> FlightHeld {
        let log_bytes = self.spans.iter().map(|s| s.log.held_bytes()).sum::<usize>();
        let (in_memory, on_disk) = self.blobs.values().fold((0, 0), |(m, d), (h, _)| match h {
            Held::Mem(p) => (m + p.len(), d),
            Held::Disk(n) => (m, d + n),
        });
        FlightHeld {
            calls: self.held_calls(),
            call_bytes: self.templates.held_bytes() + log_bytes,
            log_bytes,
            spilled_bytes: on_disk,
            deferred_checkpoints: self.deferred_checkpoints,
            budget_deferrals: self.budget_deferrals,
            checkpoints: self.checkpoints,
            checkpoint_read_bytes: self.checkpoint_read_bytes,
            own_failures: self.failures,
            device_checkpoints: self.device_checkpoints,
            incomplete_checkpoints: self.incomplete_checkpoints,
            busy_deferrals: self.busy_deferrals,
            checkpoint_time: self.host_time,
            state_bytes: self.definitions.iter().map(Vec::len).sum::<usize>()
                + in_memory
                + self
                    .spans
                    .iter()
                    .map(|s| s.checkpoint.iter().map(Vec::len).sum::<usize>())
                    .sum::<usize>(),
        }
    }

    /// Calls held in the kept spans.
    pub fn held_calls(&self) -> usize {
        self.spans.iter().map(|s| s.log.calls()).sum::<usize>()
    }

    /// Write the kept spans as a trace to a new file in the dump directory. `open`: a call
    /// the dumping thread is inside (a panic in the wrapped backend), which gets no End;
    /// `in_flight`: every call begun and not returned (by seq, with its thread), stored with
    /// the reason.
    pub fn dump(
        &mut self,
        reason: &str,
        open: Option<u64>,
        in_flight: Vec<(u64, u16)>,
    ) -> Result<PathBuf, TraceError> {
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| TraceError::Io { what, path, source }
        };
        std::fs::create_dir_all(&self.cfg.dir)
            .map_err(io("create the directory of", &self.cfg.dir))?;
        self.dumps += 1;
        let path = self.cfg.dir.join(format!(
            "gputape-flight-{}-{}.gtape",
            std::process::id(),
            self.dumps
        ));
        let sink = crate::trace::MmapSink::create(&path)?;
        let mut w = TraceWriter::new(Box::new(sink)).map_err(io("write", &path))?;
        for d in &self.definitions {
            w.write_payload(FrameClass::Definition, d)?;
        }
        w.write(&crate::trace::Frame::Dumped(crate::trace::DumpInfo {
            reason: reason.to_string(),
            in_flight,
        }))?;
        let oldest = self.span_no + 1 - self.spans.len() as u64;
        let pinned = self.graph_blobs();
        for (id, (held, last)) in &self.blobs {
            if *last < oldest && !pinned.contains(id) {
                continue;
            }
            match held {
                Held::Mem(p) => w.write_payload(FrameClass::Definition, p)?,
                Held::Disk(_) => {
                    let s = &self.spill;
                    let p = s
                        .get(*id)
                        .map_err(io("read the spilled blob", &s.place()))?;
                    w.write_payload(FrameClass::Definition, &p)?;
                }
            }
        }
        // From the oldest span whose checkpoint is whole.
        let first = self.spans.iter().position(Span::usable).unwrap_or(0);
        if let Some(s) = self.spans.get(first) {
            for c in &s.checkpoint {
                w.write_payload(FrameClass::Checkpoint, c)?;
            }
        }
        let records = || self.spans.iter().skip(first).flat_map(|s| s.log.records());
        // Graphs captured before the first kept call, still alive: their captures come
        // first, so a launch of one replays (and a fault inside it is pinned to its node).
        let first_seq = records()
            .find_map(|r| match r {
                Record::Call { seq, .. } | Record::Delta { seq, .. } => Some(seq),
                Record::Frame(_) => None,
            })
            .unwrap_or(u64::MAX);
        let mut old_graphs: Vec<&GraphKept> = self
            .graphs
            .values()
            .filter(|g| g.first_seq < first_seq)
            .collect();
        old_graphs.sort_by_key(|g| g.first_seq);
        for g in old_graphs {
            for f in &g.frames {
                w.write_payload(FrameClass::Call, f)?;
            }
        }
        // Calls whose End was kept whole (a fast-path call that failed): no End is implied.
        let ended: rustc_hash::FxHashSet<u64> = records()
            .filter_map(|r| match r {
                Record::Frame(p) => crate::trace::codec::end_seq(p).map(|(seq, _)| seq),
                Record::Call { .. } | Record::Delta { .. } => None,
            })
            .collect();
        // A call that began before the checkpoint the dump starts from may end after it: its
        // End (and what its sync found) is left out with its Begin.
        let mut begun = rustc_hash::FxHashSet::default();
        let mut buf = Vec::with_capacity(256);
        let mut lost = 0usize;
        for r in records() {
            buf.clear();
            let (seq, ok, made) = match r {
                Record::Call {
                    slot,
                    seq,
                    t_ns,
                    ok,
                } => (
                    seq,
                    ok,
                    self.templates.append_begin(slot, seq, t_ns, &mut buf),
                ),
                Record::Delta {
                    slot,
                    seq,
                    t_ns,
                    ok,
                    at,
                    bytes,
                    ..
                } => {
                    let made =
                        self.templates
                            .append_begin_patched((slot, at, bytes), seq, t_ns, &mut buf);
                    (seq, ok, made)
                }
                Record::Frame(c) => {
                    let keep = match crate::trace::codec::decode(c) {
                        Ok(crate::trace::Frame::End(e)) => begun.contains(&e.seq),
                        Ok(crate::trace::Frame::D2HResult { seq, .. })
                        | Ok(crate::trace::Frame::SyncHashes { seq, .. }) => begun.contains(&seq),
                        _ => true,
                    };
                    if keep {
                        w.write_payload(FrameClass::Call, c)?;
                    }
                    continue;
                }
            };
            if !made {
                lost += 1;
                continue;
            }
            begun.insert(seq);
            w.write_payload(FrameClass::Call, &buf)?;
            if ok && !ended.contains(&seq) && open != Some(seq) {
                buf.clear();
                let unit = Ok(crate::trace::Value::Unit);
                crate::trace::codec::append_end(seq, 0, &unit, &mut buf)?;
                w.write_payload(FrameClass::Call, &buf)?;
            }
        }
        if lost > 0 {
            tracing::error!("gputape: flight recorder lost the template of {lost} kept calls");
        }
        w.write(&crate::trace::Frame::Stop)?;
        w.finish().map_err(io("finish", &path))?;
        tracing::warn!(
            "gputape: flight recorder dumped {} calls (steps {}..) to {} ({reason})",
            self.held_calls(),
            self.spans.front().map_or(0, |s| s.first_step),
            path.display()
        );
        Ok(path)
    }
}

/// The sink behind a flight recorder's writer: it keeps nothing, as the recorder takes each
/// frame from its writer into the store itself (under the one lock it holds anyway).
pub(crate) struct Discard;

impl Sink for Discard {
    /// Payloads only: a dump frames them again, checksums and all.
    fn checksums(&self) -> bool {
        false
    }

    fn write_all(&mut self, _bytes: &[u8]) -> std::io::Result<()> {
        Ok(())
    }

    fn write_classed(
        &mut self,
        _class: FrameClass,
        _header: &[u8],
        _payload: &[u8],
    ) -> std::io::Result<()> {
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

thread_local! {
    /// The fast-path call this thread is inside: its recorder's address and seq + 1 (0:
    /// none). A panic inside the wrapped backend dumps that call without an End.
    static OPEN: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// A recorder's state, shared with the panic hook.
pub(crate) type Shared = Arc<Mutex<RecState>>;

/// This thread is inside fast-path call `seq` of recorder `st`.
#[inline]
pub(crate) fn set_open(st: &Shared, seq: u64) {
    OPEN.with(|o| o.set((Arc::as_ptr(st) as usize, seq + 1)));
}

/// This thread left the fast-path call it was inside.
#[inline]
pub(crate) fn clear_open() {
    OPEN.with(|o| o.set((0, 0)));
}

/// The fast-path call of recorder `st` this thread is inside, if any.
pub(crate) fn open_call(st: &Shared) -> Option<u64> {
    let (p, s) = OPEN.with(|o| o.get());
    (p == Arc::as_ptr(st) as usize && s > 0).then(|| s - 1)
}

/// Flight recorders alive in this process, for the panic hook.
static ARMED: Mutex<Vec<Weak<Mutex<RecState>>>> = Mutex::new(Vec::new());
static HOOKED: AtomicBool = AtomicBool::new(false);
/// Set by SIGUSR1; the next recorded call dumps.
pub(crate) static SIGNALLED: AtomicBool = AtomicBool::new(false);

/// How long the panic hook waits for a recorder another thread is inside.
const HOOK_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Remember recorder `st` for the panic hook, and install the hook (once): a panic anywhere
/// in the process dumps every armed flight recorder before the previous hook runs.
pub(crate) fn arm(st: &Shared) {
    ARMED.lock().push(Arc::downgrade(st));
    if HOOKED.swap(true, Ordering::AcqRel) {
        return;
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let reason = format!("panic: {info}");
        for w in ARMED.lock().iter() {
            if let Some(st) = w.upgrade() {
                // A panic on a thread that holds the recorder's lock (inside the recorder
                // itself) cannot dump: it gives up after a while rather than deadlock.
                let open = open_call(&st);
                if let Some(mut st) = st.try_lock_for(HOOK_WAIT) {
                    trigger(&mut st, &reason, open);
                }
            }
        }
        previous(info);
    }));
    super::watch::start();
}

/// A trigger fired (`reason`): dump, unless this recorder has dumped as often as it may. A
/// dump that fails is the recorder's own failure, said once on stderr and counted.
pub(crate) fn trigger(st: &mut RecState, reason: &str, open: Option<u64>) {
    let Some(f) = st.flight.as_deref() else {
        return;
    };
    if f.dumps >= f.cfg.max_dumps {
        return;
    }
    if let Some(Err(e)) = st.flight_dump(reason, open) {
        let what = format!("could not dump ({reason}): {e}");
        tracing::error!("gputape: flight recorder: {what}");
        if let Some(f) = st.flight.as_deref_mut() {
            if f.note_failure(what.clone()) {
                eprintln!("gputape: flight recorder: {what}");
            }
        }
    }
}

/// Every armed flight recorder still alive, for the watcher thread.
pub(crate) fn armed() -> Vec<Shared> {
    ARMED.lock().iter().filter_map(Weak::upgrade).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A step a device checkpoint fell in is priced at what it took beyond the typical
    /// step, and the budget then holds the next checkpoint back for as long as that takes
    /// to be 2% of the time since arming.
    #[test]
    fn a_device_checkpoint_is_priced_by_the_step_it_fell_in() {
        let mut cfg = FlightConfig::new(std::env::temp_dir());
        cfg.budget = Some(0.02);
        let mut f = FlightStore::new(cfg);
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        for k in 0..10 {
            f.step_ended(ms(k));
        }
        assert_eq!(f.spent, Duration::ZERO);
        f.device_checkpoint_taken(Duration::from_micros(40));
        // The step it fell in took 4 ms against a typical 1 ms.
        f.step_ended(ms(13));
        let extra = f.spent.as_secs_f64();
        assert!((extra - 0.003).abs() < 1e-6, "{extra}");
        assert_eq!(f.held().checkpoint_time, Duration::from_micros(40));
        // Priced once; the next steps are typical again.
        f.step_ended(ms(14));
        assert!((f.spent.as_secs_f64() - extra).abs() < 1e-9);
        // 3 ms spent and 3 ms expected of the next: not before 300 ms after arming.
        assert!(!f.checkpoint_fits(0));
    }
}
