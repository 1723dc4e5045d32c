//! The chaos executor (`MockConfig::chaos`), in a room of its own because it is the one place
//! the mock stops running work at submission: wrong numbers that come and go (a missing event
//! between two streams, a kernel reading memory nobody wrote) are hidden by an executor that
//! runs everything in call order on zero-filled memory, so under chaos:
//!
//! - Work submitted to a stream other than the legacy one is queued on that stream instead of
//!   run. Queued work runs when something forces it, in an order a seeded RNG picks among the
//!   queue heads that are ready: a host wait (`synchronize`, a synchronous copy or memset, which
//!   run on the legacy stream and so wait for the blocking streams, `copy_d2h_on_stream`,
//!   `event_synchronize`, a free, which synchronises the device as `cuMemFree` does), an event
//!   a stream waits on (a `Wait` item in the waiting stream's queue, ready once the recording
//!   stream has run everything queued before the record), or the RNG deciding to run something
//!   early. Legacy-stream work runs at once, after every blocking stream's queue, as the legacy
//!   stream's implicit synchronisation orders it. Same-stream order always holds.
//! - Device memory a fresh allocation returns holds `POISON` (NaN in f32, f16 and bf16) until
//!   written, and an async host-to-device copy's destination holds it from when its stream
//!   reaches the copy until the copy runs.
//!
//! A program whose streams are ordered by events and syncs computes the same bytes with and
//! without chaos; one with a missing dependency may see its consumer run before its producer.
//! The schedule is a function of the seed and the calls made: the same program with the same
//! seed runs the same way.

use super::exec::{HostSrc, Work};
use super::exec_log::Executed;
use super::memory::Storage;
use super::state::State;
use super::{MockError, MockGpuBackend, R};
use crate::backend::{Site, StreamKind, LEGACY_STREAM};
use std::collections::{BTreeMap, VecDeque};

/// The byte fresh device memory holds under chaos until something writes it: `0xFF` bytes
/// read as NaN in f32, f16 and bf16, and as -1 in signed integers.
pub const POISON: u8 = 0xFF;

/// One entry of a stream's queue.
pub(crate) enum Item {
    /// Device work, run as the eager mock would have run it at submission.
    Run {
        work: Work,
        name: &'static str,
        site: Site,
    },
    /// The bytes an async upload will write are undefined from when its stream reaches it
    /// until it runs: poisoned here, written by the `Run` that follows.
    Poison { dst: u64, len: usize },
    /// Wait until `stream` has run its first `upto` items (event `event` recorded there).
    Wait { stream: u64, upto: u64, event: u64 },
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    /// Items ever queued here; an event recorded on the stream marks this count.
    submitted: u64,
    /// Items run; `submitted - done` are in `items`.
    done: u64,
}

/// What a host-side wait waits for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Until {
    /// Everything queued on the stream.
    Stream(u64),
    /// The stream's first `n` items: an event recorded there.
    Mark(u64, u64),
    /// Every blocking stream's queue: what work on the legacy stream implicitly waits for.
    Blocking,
    /// Every queue: a device-wide synchronisation.
    All,
}

/// The scheduler's state: the seeded RNG and each stream's queue.
pub(crate) struct Chaos {
    rng: u64,
    queues: BTreeMap<u64, Queue>,
}

impl Chaos {
    pub fn new(seed: u64) -> Chaos {
        Chaos {
            rng: seed,
            queues: BTreeMap::new(),
        }
    }

    /// splitmix64: small, fast, and the same sequence on every platform.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next() % n == 0
    }

    fn done(&self, s: u64) -> u64 {
        self.queues.get(&s).map_or(0, |q| q.done)
    }

    /// What an event recorded on `s` now waits for: everything queued there so far.
    pub fn mark(&self, s: u64) -> u64 {
        self.queues.get(&s).map_or(0, |q| q.submitted)
    }

    fn push(&mut self, s: u64, item: Item) {
        let q = self.queues.entry(s).or_default();
        q.items.push_back(item);
        q.submitted += 1;
    }

    /// Items queued and not run, on every stream.
    pub fn pending(&self) -> usize {
        self.queues.values().map(|q| q.items.len()).sum()
    }

    /// The stream a waiting head points at, when what it waits for has not run yet.
    fn blocked_on(&self, s: u64) -> Option<(u64, u64)> {
        match self.queues.get(&s)?.items.front()? {
            Item::Wait { stream, upto, .. } if self.done(*stream) < *upto => Some((*stream, *upto)),
            _ => None,
        }
    }

    fn ready(&self, s: u64) -> bool {
        self.queues.get(&s).is_some_and(|q| !q.items.is_empty()) && self.blocked_on(s).is_none()
    }

    /// Streams whose head could run now, in stream order.
    fn ready_streams(&self) -> Vec<u64> {
        self.queues
            .keys()
            .copied()
            .filter(|s| self.ready(*s))
            .collect()
    }

    fn pop(&mut self, s: u64) -> Option<Item> {
        let q = self.queues.get_mut(&s)?;
        let item = q.items.pop_front()?;
        q.done += 1;
        Some(item)
    }
}

impl MockGpuBackend {
    /// Device work on `stream`, outside any capture: run now (without chaos, or on the legacy
    /// stream after the blocking streams' queues), else queued on the stream.
    pub(super) fn dispatch(
        st: &mut State,
        stream: u64,
        work: Work,
        name: &'static str,
        site: Site,
    ) -> R<()> {
        if st.chaos.is_none() {
            return Self::exec(st, stream, &work, name, site);
        }
        if stream == LEGACY_STREAM {
            Self::chaos_wait(st, Until::Blocking)?;
            return Self::exec(st, stream, &work, name, site);
        }
        if let Work::D2H { dst, len, .. } = &work {
            if st.mem.pinned_containing(*dst, *len).is_none() {
                // Into pageable memory the driver copies synchronously, after the stream's
                // earlier work: the caller's buffer need not outlive the call.
                Self::chaos_wait(st, Until::Stream(stream))?;
                return Self::exec(st, stream, &work, name, site);
            }
        }
        // Ranges are checked now, as the eager mock checks them at the call.
        Self::validate(st, &work, name, site)?;
        let c = st.chaos.as_mut().expect("chaos is on");
        if let Work::H2D { dst, src } = &work {
            let len = match src {
                HostSrc::Pinned { len, .. } => *len,
                HostSrc::Copied(v) => v.len(),
            };
            c.push(stream, Item::Poison { dst: *dst, len });
        }
        let launch = matches!(work, Work::Launch { .. } | Work::Graph(_));
        c.push(stream, Item::Run { work, name, site });
        if launch && !st.async_faults {
            // `debug_sync_kernels`: each launch is waited for, so its fault is its own.
            return Self::chaos_wait(st, Until::Stream(stream));
        }
        Self::chaos_early(st)
    }

    /// The RNG may run a few ready items at once: work starts whenever the device gets to
    /// it, not only when the host waits.
    fn chaos_early(st: &mut State) -> R<()> {
        let Some(c) = st.chaos.as_mut() else {
            return Ok(());
        };
        if !c.one_in(4) {
            return Ok(());
        }
        let n = 1 + c.below(2);
        for _ in 0..n {
            let c = st.chaos.as_mut().expect("chaos is on");
            let ready = c.ready_streams();
            if ready.is_empty() {
                break;
            }
            let s = ready[c.below(ready.len())];
            Self::run_head(st, s)?;
        }
        Ok(())
    }

    /// An event recorded on `stream` outside a capture: what a wait on it waits for. On the
    /// legacy stream the record follows every blocking stream's queued work, which runs now.
    pub(super) fn chaos_record(st: &mut State, stream: u64) -> R<Option<(u64, u64)>> {
        if st.chaos.is_none() {
            return Ok(None);
        }
        if stream == LEGACY_STREAM {
            Self::chaos_wait(st, Until::Blocking)?;
        }
        let c = st.chaos.as_ref().expect("chaos is on");
        Ok(Some((stream, c.mark(stream))))
    }

    /// `stream` waits for an event recorded at `at`: later work queued there runs after it.
    /// The legacy stream runs its work at once, so it waits now.
    /// Whether the wait was queued (its `Item::Wait` logs it when the stream reaches it).
    pub(super) fn chaos_stream_wait(
        st: &mut State,
        stream: u64,
        event: u64,
        at: (u64, u64),
    ) -> R<bool> {
        if st.chaos.is_none() || at.0 == stream {
            return Ok(false);
        }
        if stream == LEGACY_STREAM {
            Self::chaos_wait(st, Until::Mark(at.0, at.1))?;
            return Ok(false);
        }
        let c = st.chaos.as_mut().expect("chaos is on");
        c.push(
            stream,
            Item::Wait {
                stream: at.0,
                upto: at.1,
                event,
            },
        );
        Ok(true)
    }

    /// An event recorded on `stream` at `at` (chaos's mark, if any) goes into the execution
    /// log when the stream has run what was queued before it: now, or as its queue gets there.
    pub(super) fn log_record(st: &mut State, event: u64, stream: u64, at: Option<(u64, u64)>) {
        if st.exec_log.is_none() {
            return;
        }
        match (at, st.chaos.as_ref()) {
            (Some((s, upto)), Some(c)) if c.done(s) < upto => {
                st.records_due.push((s, upto, event));
            }
            _ => st.log(|| Executed::Recorded { event, stream }),
        }
    }

    /// Log the events recorded on `s` whose place in its queue has been reached.
    fn log_records_reached(st: &mut State, s: u64) {
        let Some(done) = st.chaos.as_ref().map(|c| c.done(s)) else {
            return;
        };
        let mut i = 0;
        while i < st.records_due.len() {
            let (rs, upto, event) = st.records_due[i];
            if rs == s && done >= upto {
                st.records_due.remove(i);
                st.log(|| Executed::Recorded { event, stream: s });
            } else {
                i += 1;
            }
        }
    }

    /// The host waits: run queued work until `until` holds, in an order the RNG picks among
    /// the ready heads of the streams waited for (and, now and then, of any stream: work the
    /// device had got to anyway). A head waiting for an event adds its recording stream to
    /// what must run. Nothing runs once the context is dead.
    pub(super) fn chaos_wait(st: &mut State, until: Until) -> R<()> {
        let Some(c) = st.chaos.as_ref() else {
            return Ok(());
        };
        if st.dead.is_some() {
            return Ok(());
        }
        let until = match until {
            // The legacy stream's own work has run; it waits for the blocking streams'.
            Until::Stream(LEGACY_STREAM) => Until::Blocking,
            u => u,
        };
        let mut goals: BTreeMap<u64, u64> = match until {
            Until::Stream(s) => BTreeMap::from([(s, c.mark(s))]),
            Until::Mark(s, n) => BTreeMap::from([(s, n)]),
            Until::Blocking => c
                .queues
                .iter()
                .filter(|(s, _)| {
                    **s != LEGACY_STREAM && st.streams.get(*s) == Some(&StreamKind::Blocking)
                })
                .map(|(s, q)| (*s, q.submitted))
                .collect(),
            Until::All => c.queues.iter().map(|(s, q)| (*s, q.submitted)).collect(),
        };
        loop {
            let c = st.chaos.as_mut().expect("chaos is on");
            goals.retain(|s, n| c.done(*s) < *n);
            if goals.is_empty() {
                return Ok(());
            }
            let mut candidates = Vec::new();
            let mut grew = false;
            let heads: Vec<(u64, Option<(u64, u64)>)> =
                goals.keys().map(|s| (*s, c.blocked_on(*s))).collect();
            for (s, blocked) in heads {
                match blocked {
                    Some((on, upto)) => {
                        let g = goals.entry(on).or_insert(0);
                        if *g < upto {
                            *g = upto;
                            grew = true;
                        }
                    }
                    None => candidates.push(s),
                }
            }
            if candidates.is_empty() {
                if grew {
                    continue;
                }
                // Waits only ever point at work queued before them, so some head is always
                // ready; should that ever fail, the wait ends rather than spins.
                return Err(MockError::Invalid {
                    op: "chaos scheduler",
                    site: std::panic::Location::caller(),
                    detail: "every stream waited for is blocked on another".into(),
                });
            }
            let s = if c.one_in(4) {
                let any = c.ready_streams();
                any[c.below(any.len())]
            } else {
                candidates[c.below(candidates.len())]
            };
            Self::run_head(st, s)?;
        }
    }

    /// Run the head of `s`'s queue. An error its work meets is raised as a kernel fault is
    /// (reported by the next call that waits; nothing after it runs), since the call that
    /// queued it has returned; with `debug_sync_kernels` it is returned.
    fn run_head(st: &mut State, s: u64) -> R<()> {
        let Some(item) = st.chaos.as_mut().and_then(|c| c.pop(s)) else {
            return Ok(());
        };
        let r = Self::run_item(st, s, item);
        Self::log_records_reached(st, s);
        r
    }

    fn run_item(st: &mut State, s: u64, item: Item) -> R<()> {
        match item {
            Item::Run { work, name, site } => match Self::exec(st, s, &work, name, site) {
                Ok(()) => Ok(()),
                Err(e) if st.dead.is_some() => Err(e),
                Err(e) => {
                    st.raised.get_or_insert(e);
                    Ok(())
                }
            },
            Item::Poison { dst, len } => {
                if st.raised.is_none() {
                    poison(st, dst, len);
                }
                Ok(())
            }
            Item::Wait { event, .. } => {
                st.log(|| Executed::Waited { stream: s, event });
                Ok(())
            }
        }
    }
}

/// Fill `[dst, dst + len)` with `POISON` where it is device memory (a pinned region's device
/// alias is host memory: left as it is).
fn poison(st: &mut State, dst: u64, len: usize) {
    let Ok((base, _)) = st
        .mem
        .locate(dst, len, "poison", std::panic::Location::caller())
    else {
        return;
    };
    if !matches!(st.mem.allocs[&base].storage, Storage::Owned(_)) {
        return;
    }
    if let Ok(b) = st
        .mem
        .write(dst, len, "poison", std::panic::Location::caller())
    {
        b.fill(POISON);
    }
}
