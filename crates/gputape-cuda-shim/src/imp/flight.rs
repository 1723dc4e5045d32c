//! The flight recorder of a driver-level program (`gputape run --flight DIR`, which sets
//! `GPUTAPE_SHIM_FLIGHT_DIR`): the same records the call log has, kept in memory and written
//! nowhere until the program faults, or (with `GPUTAPE_FLIGHT_HANG_S`) a host sync waits too
//! long. Then (once) the process's dump, `DIR/PID.gtshm`, is written, and `gputape run` turns
//! it into a trace that replays like any other.
//!
//! What a dump holds: every record that defines state later calls run against (allocations,
//! module images, kernel lookups, streams, events, tensor maps, graphs and everything their
//! captures recorded: `Rec::is_state`) for the process's whole life, and the most recent work (launches, copies with their bytes, memsets,
//! syncs) up to `GPUTAPE_FLIGHT_RING_MB` (default 256). When the work outgrew the ring the
//! oldest went first, a megabyte at a time; the dump says where (`Rec::Gap`), so a replay
//! knows that buffers written before the window start without their contents.
//!
//! Why no checkpoints of device memory, as the trait-level flight recorder takes: inside an
//! unmodified program the shim cannot know which bytes of the allocator's segments are live,
//! and reading back segments of gigabytes would stall the program it must not harm. A program
//! whose recent work fits the ring (the usual crash after a few steps, a short script) dumps a
//! complete recording; one that ran longer dumps its window, said.

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use gputape_shimlog::{Rec, Record};

use super::chunks::{self, CHUNK, Chunk};

/// The ring's size, in MiB.
pub const ENV_RING_MB: &str = "GPUTAPE_FLIGHT_RING_MB";
/// Dump at exit too, whether or not anything faulted (to keep a recording of a run that ended
/// badly without a driver fault, and for tests).
pub const ENV_AT_EXIT: &str = "GPUTAPE_SHIM_FLIGHT_AT_EXIT";
const DEFAULT_RING_MB: usize = 256;
/// Recent work and lifelong state, encoded, each in chunks: a buffer that only grows would
/// now and then copy everything it holds to grow (a stall of the program, at gigabytes).
///
/// `repr(C)`: what each work record reads (the newest chunk, what is held) first, in the
/// same cache lines as the log's own (`log::Log`).
#[repr(C)]
pub struct Ring {
    chunks: VecDeque<Chunk>,
    held: usize,
    cap: usize,
    /// Captures begun and not yet ended.
    capturing: u32,
    /// The thread whose `NodeWork` (or `GraphNode`) record came last: its next record is a
    /// node's work, kept for good (another thread's record between is not).
    node_next: Option<u32>,
    /// Work records dropped so far.
    pub dropped: u64,
    spare: Option<Chunk>,
    state: Vec<Chunk>,
}

impl Ring {
    /// A ring of `GPUTAPE_FLIGHT_RING_MB` (or the default).
    pub fn from_env() -> Ring {
        let mb = std::env::var(ENV_RING_MB)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&m| m > 0)
            .unwrap_or(DEFAULT_RING_MB);
        chunks::start();
        Ring {
            state: Vec::new(),
            chunks: VecDeque::new(),
            spare: None,
            held: 0,
            capturing: 0,
            node_next: None,
            cap: mb.saturating_mul(1 << 20),
            dropped: 0,
        }
    }

    /// The ring's size in MiB.
    pub fn cap_mb(&self) -> usize {
        self.cap >> 20
    }

    /// Keeps record `index`.
    pub fn push(&mut self, index: u64, r: &Record<'_>) {
        // What a capture records, or a graph node's record, runs at every launch of its
        // graph, for the process's life.
        // (State records, kept anyway, do not take a node's place: a stack's names may come
        // between a node's marker and its work.)
        let captured = self.capturing > 0 || (!r.call.is_state() && self.node_work(r.thread));
        match r.call {
            Rec::CaptureBegin { .. } if r.status == 0 => self.capturing += 1,
            Rec::CaptureEnd { .. } => self.capturing = self.capturing.saturating_sub(1),
            Rec::GraphNode { .. } | Rec::NodeWork { .. } => self.node_next = Some(r.thread),
            _ => {}
        }
        if r.call.is_state() || captured {
            self.keep_for_good(index, |b| gputape_shimlog::encode(r, b));
            return;
        }
        self.keep_recent(index, |b| gputape_shimlog::encode(r, b));
    }

    /// Whether `thread`'s record now is the work of the graph node it just marked (and it is
    /// no longer awaited).
    #[inline(always)]
    fn node_work(&mut self, thread: u32) -> bool {
        if self.node_next == Some(thread) {
            self.node_next = None;
            return true;
        }
        false
    }

    /// Keeps record `index`, which `enc` appends, for the life of the process.
    fn keep_for_good(&mut self, index: u64, enc: impl FnOnce(&mut Vec<u8>)) {
        if self.state.last().is_none_or(|c| c.buf.len() >= CHUNK) {
            self.state.push(chunks::take());
        }
        let c = self.state.last_mut().expect("a chunk was just ensured");
        c.at.push((index, c.buf.len()));
        enc(&mut c.buf);
    }

    /// Keeps work record `index` (a launch, a copy: not state, and neither begins nor ends a
    /// capture), which `enc` appends: while recent, or for good when a capture records it.
    #[inline(always)]
    pub fn push_work(&mut self, index: u64, thread: u32, enc: impl FnOnce(&mut Vec<u8>)) {
        if self.capturing > 0 || self.node_work(thread) {
            self.keep_for_good(index, enc);
        } else {
            self.keep_recent(index, enc);
        }
    }

    /// Keeps record `index`, which `enc` appends, while it is among the recent ones.
    /// (Inlined into each caller, with the rare turns out of line: a record's path is the
    /// cache lines it touches, `launch.rs`.)
    #[inline(always)]
    fn keep_recent(&mut self, index: u64, enc: impl FnOnce(&mut Vec<u8>)) {
        if self.chunks.back().is_none_or(|c| c.buf.len() >= CHUNK) {
            self.next_chunk();
        }
        let Some(c) = self.chunks.back_mut() else {
            return;
        };
        let o = c.buf.len();
        c.at.push((index, o));
        enc(&mut c.buf);
        self.held += c.buf.len() - o;
        if self.held > self.cap {
            self.drop_oldest();
        }
    }

    /// A new newest chunk (the spare one, or one the helper made ready).
    #[cold]
    #[inline(never)]
    fn next_chunk(&mut self) {
        let mut c = self.spare.take().unwrap_or_else(chunks::take);
        c.buf.clear();
        c.at.clear();
        self.chunks.push_back(c);
    }

    /// Drops the oldest chunks until what is held fits the ring again.
    #[cold]
    #[inline(never)]
    fn drop_oldest(&mut self) {
        // The newest chunk always stays, however large one record made it.
        while self.held > self.cap && self.chunks.len() > 1 {
            let old = self.chunks.pop_front().expect("more than one chunk");
            self.held -= old.buf.len();
            self.dropped += old.at.len() as u64;
            self.spare = Some(old);
        }
    }

    /// The dump: `header`, every kept record in index order with a `Gap` wherever records
    /// were dropped, then `tail` (the calls a hang left blocked, and the `Dump` record).
    pub fn dump(&self, header: &[u8], tail: &[Record<'_>]) -> Vec<u8> {
        let state = self.state.iter().flat_map(Chunk::records);
        let work = self.chunks.iter().flat_map(Chunk::records);
        let kept: usize = self.state.iter().map(|c| c.buf.len()).sum();
        let mut out = Vec::with_capacity(header.len() + kept + self.held + 256);
        out.extend_from_slice(header);
        let mut expect = 0u64;
        let mut emit = |out: &mut Vec<u8>, i: u64, bytes: &[u8]| {
            if i > expect {
                gap(out, i - expect);
            }
            let body = u32::from_le_bytes(bytes[..4].try_into().expect("a record's length"));
            out.extend_from_slice(&bytes[..4 + body as usize]);
            expect = i + 1;
        };
        let (mut s, mut w) = (state.peekable(), work.peekable());
        loop {
            let next = match (s.peek(), w.peek()) {
                (Some(a), Some(b)) => {
                    if a.0 < b.0 {
                        s.next()
                    } else {
                        w.next()
                    }
                }
                (Some(_), None) => s.next(),
                (None, Some(_)) => w.next(),
                (None, None) => break,
            };
            let (i, bytes) = next.expect("peeked");
            emit(&mut out, i, bytes);
        }
        for r in tail {
            gputape_shimlog::encode(r, &mut out);
        }
        out
    }
}

fn gap(out: &mut Vec<u8>, dropped: u64) {
    gputape_shimlog::encode(
        &Record {
            t_ns: 0,
            thread: 0,
            status: 0,
            stack: gputape_shimlog::NO_STACK,
            call: Rec::Gap { dropped },
        },
        out,
    );
}

/// A driver status after which the context is unusable (a fault of a kernel, or the device
/// lost): the moment a flight recorder exists for.
#[inline(always)]
pub fn is_fault(status: i32) -> bool {
    status != 0 && matches!(status, 700 | 702 | 710 | 714..=719 | 999)
}

// ---- hangs ----

/// Seconds a host sync may wait before the flight recorder dumps (fractions allowed; unset or
/// 0: never), the same variable the trait-level flight recorder reads.
pub const ENV_HANG_S: &str = "GPUTAPE_FLIGHT_HANG_S";

/// The blocking call a thread waits in, as its record would say.
#[derive(Clone, Copy)]
pub enum Blocked {
    /// `cuStreamSynchronize`.
    Stream(u64),
    /// `cuCtxSynchronize`.
    Ctx,
    /// `cuEventSynchronize`.
    Event(u64),
    /// A blocking `cuMemcpyDtoH`, `on` the stream it runs on.
    D2H {
        src: u64,
        dst: u64,
        len: u64,
        on: gputape_shimlog::On,
    },
}

impl Blocked {
    /// The record a hang's dump writes for it (with `STATUS_NOT_RETURNED`).
    pub fn rec(self) -> Rec<'static> {
        match self {
            Blocked::Stream(stream) => Rec::StreamSync { stream },
            Blocked::Ctx => Rec::CtxSync {},
            Blocked::Event(event) => Rec::EventSync { event },
            Blocked::D2H { src, dst, len, on } => Rec::CopyD2H {
                src,
                dst_host: dst,
                len,
                on,
                data: &[],
            },
        }
    }
}

/// Threads waiting in a blocking call: (thread, since, what, the stack it was called from).
static WAITING: Mutex<Vec<(u32, Instant, Blocked, u32)>> = Mutex::new(Vec::new());

/// The hang deadline, when a flight recording wants one.
fn hang_after() -> Option<Duration> {
    static AFTER: OnceLock<Option<Duration>> = OnceLock::new();
    *AFTER.get_or_init(|| {
        if !super::log::is_flight() {
            return None;
        }
        let s = std::env::var(ENV_HANG_S).ok()?.trim().parse::<f64>().ok()?;
        (s.is_finite() && s > 0.0).then(|| Duration::from_secs_f64(s.min(1e9)))
    })
}

/// While alive, the calling thread is waiting in `what`.
pub struct Waiting(u32);

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut w = WAITING.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = w.iter().rposition(|e| e.0 == self.0) {
            w.swap_remove(i);
        }
    }
}

/// Notes that this thread waits in `what` until the guard drops (nothing, and no cost beyond
/// one read, unless a flight recording has a hang deadline or peers: `peers.rs`); starts the
/// hang watcher once.
pub fn waiting(what: Blocked) -> Option<Waiting> {
    let after = hang_after();
    if after.is_none() && !super::peers::enabled() {
        return None;
    }
    if let Some(after) = after {
        static WATCHER: std::sync::Once = std::sync::Once::new();
        WATCHER.call_once(|| {
            let _ = std::thread::Builder::new()
                .name("gputape-hang".into())
                .spawn(move || watch(after));
        });
    }
    let tid = super::log::thread_id();
    let stack = super::log::stack_here();
    WAITING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((tid, Instant::now(), what, stack));
    Some(Waiting(tid))
}

/// The calls threads wait in now, the longest waiting first: (thread, since, what, stack).
fn waiting_now() -> Vec<(u32, Instant, Blocked, u32)> {
    let mut w = WAITING.lock().unwrap_or_else(|p| p.into_inner()).clone();
    w.sort_by_key(|e| e.1);
    w
}

/// The calls threads wait in now, the longest waiting first, as a dump writes them.
pub fn blocked_now() -> Vec<(u32, u32, Rec<'static>)> {
    as_blocked(&waiting_now())
}

/// Waiting calls as a dump writes them: (thread, stack, record).
fn as_blocked(w: &[(u32, Instant, Blocked, u32)]) -> Vec<(u32, u32, Rec<'static>)> {
    w.iter().map(|e| (e.0, e.3, e.2.rec())).collect()
}

/// The watcher: when some thread has waited longer than `after`, the process dumps (once), with
/// every waiting call as not returned.
fn watch(after: Duration) {
    let tick = (after / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
    loop {
        std::thread::sleep(tick);
        let now = Instant::now();
        let w = waiting_now();
        let Some(oldest) = w.first() else {
            continue;
        };
        let waited = now.duration_since(oldest.1);
        if waited < after {
            continue;
        }
        let blocked = as_blocked(&w);
        let name = oldest.2.rec().family();
        super::log::dump_watched(
            &format!(
                "{}{name} has not returned after {:.1} s ({ENV_HANG_S}); {} thread(s) waiting",
                gputape_shimlog::HANG_PREFIX,
                waited.as_secs_f64(),
                w.len()
            ),
            &blocked,
            true,
        );
        return;
    }
}
