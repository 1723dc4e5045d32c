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
//! checkpoint intervals of calls, from the older checkpoint on; more while the newest
//! checkpoint is still on the device (`device_ckpt`) or could not be completed.
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

mod blobs;
mod dump;

use super::flight_budget::Budget;
pub use super::flight_config::{FlightConfig, FlightHeld};
use super::ring::{self, Fast, Interned, Log, RawKey, Record, Templates, Writes};
use super::spill::Spill;
use super::state::RecState;
use crate::trace::{BlobId, FrameClass, GraphId, Sink};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
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
    /// The blobs in `blobs` held under a provisional id (`BlobId::quick`, or chunked of such
    /// parts): a dump renames them.
    provisional: rustc_hash::FxHashSet<BlobId>,
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
    /// What checkpoints may cost, and have.
    pub budget: Budget,
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
            provisional: Default::default(),
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
            budget: Budget::new(),
            checkpoints: 0,
            checkpoint_read_bytes: 0,
            incomplete_checkpoints: 0,
            busy_deferrals: 0,
            device_checkpoints: false,
            failure_log: VecDeque::new(),
            failures: 0,
            capture: None,
            graphs: HashMap::default(),
        }
    }

    /// Whether a checkpoint owed now fits the budget (`Budget::fits`; `unread`: bytes no
    /// checkpoint has read). A span grown past `max_span_calls` takes one regardless.
    pub fn checkpoint_fits(&self, unread: u64) -> bool {
        let Some(share) = self.cfg.budget else {
            return true;
        };
        if self
            .spans
            .back()
            .is_some_and(|s| s.log.calls() >= self.cfg.max_span_calls)
        {
            return true;
        }
        self.budget.fits(share, unread)
    }

    /// A checkpoint was taken, costing the thread that took it `cost`: a host checkpoint is
    /// priced at that, a device checkpoint by the step it fell in.
    pub fn checkpoint_taken(&mut self, cost: std::time::Duration) {
        self.checkpoints += 1;
        if self.device_checkpoints {
            self.budget.device_checkpoint(cost);
        } else {
            self.budget
                .host_checkpoint(cost, self.checkpoint_read_bytes);
        }
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

    /// Span `no`'s device checkpoint is done: its frames (`ok`), or it could not be (the
    /// ring was full, a frame would not encode, a launch failed) and no dump starts from it.
    pub fn checkpoint_frames(&mut self, no: u64, frames: Vec<Vec<u8>>, ok: bool) {
        let first = self.span_no + 1 - self.spans.len() as u64;
        let Some(s) = no
            .checked_sub(first)
            .and_then(|i| self.spans.get_mut(i as usize))
        else {
            return;
        };
        if ok {
            s.checkpoint.extend(frames);
        }
        s.pending = false;
        s.failed |= !ok;
    }

    /// The newest span's checkpoint is being taken on the device: no dump starts from it
    /// until `checkpoint_frames`.
    pub fn checkpoint_pending(&mut self) {
        if let Some(s) = self.spans.back_mut() {
            s.pending = true;
        }
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
        self.templates
            .entry_writes_in(span_no, &mut compute, &mut each);
        let mut record = Vec::new();
        let logs = self.spans.back().into_iter();
        // A later layer's launch is the same patch of its template on every step: its
        // writes are worked out once.
        let mut seen =
            rustc_hash::FxHashSet::<(u32, usize, smallvec::SmallVec<[u8; 16]>)>::default();
        for patch in logs.flat_map(|s| s.log.rewrite_patches()) {
            // An upload's delta is its new data (the fill was noted as it was made), a step
            // marker's its number: neither need be read.
            if self.templates.deltas_write_nothing(patch.0) {
                continue;
            }
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
            checkpoint_time: self.budget.host_time,
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
        st.own_failure(format!("could not dump ({reason}): {e}"));
    }
}

/// Every armed flight recorder still alive, for the watcher thread.
pub(crate) fn armed() -> Vec<Shared> {
    ARMED.lock().iter().filter_map(Weak::upgrade).collect()
}
