//! Memory and events that processes shared through CUDA IPC handles (or, for memory, the
//! virtual memory API's shareable handles), replayed together (`replay_ranks`): each buffer a
//! trace opened is the buffer another trace of the set exported under the same handle, not a
//! copy of what it held when opened, and each event it opened is
//! the exporter's event. Both replays then use one piece of memory (one event), as the
//! processes did, so what one writes the other reads, and what one records the other waits for.
//!
//! That needs the two replays to address one memory: ranks on one CUDA device (one primary
//! context, so one address space, whose events any of its streams may wait for), or one mock
//! backend. The caller says which ranks do (`spaces`); a handle opened in another space is
//! replayed as when alone, with a note.
//!
//! The processes ordered their use of the memory themselves (a pipe, a socket, a barrier),
//! which no trace holds. Their calls' wall times do (`Trace::clock_epoch_ns`): while every
//! rank that shares has a clock, a rank issues a call only once each other rank has
//! returned from every call it began earlier. A rank that has been inside one call for
//! `STUCK` (a sync waiting for work another rank queues later, say) is passed over, or the
//! two would wait for each other. Without clocks only the handing over is ordered: an
//! opener waits until the exporter's replay reaches the place it took the handle.
//!
//! The board the ranks share (`Sharing`, `RankShare`) comes first; the replay's side of it
//! (`Replayer::share_step`, what each call of a sharing rank does) last. One room: both halves
//! are the one protocol.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::state::{sync_all, State};
use super::{ReplayError, ReplayReport, Replayer};
use crate::backend::{DevicePtr, GpuBackend};
use crate::trace::{Call, CallRecord, DevAddr, ShareSide, SharedId, Trace, Value};

/// How long a rank waits for another rank's turn or buffer before its replay fails.
const PATIENCE: Duration = Duration::from_secs(120);
/// A rank inside one call this long is taken to wait on something another rank does later.
const STUCK: Duration = Duration::from_millis(2000);

/// What the ranks of one joint replay share: the exported buffers, and where each rank is.
#[derive(Default)]
pub struct Sharing {
    board: Mutex<Board>,
    changed: Condvar,
}

#[derive(Default)]
struct Board {
    /// Each exported buffer or event, by slot: its exporter's rank and id, and what it is in
    /// the exporter's replay once handed over.
    slots: Vec<Slot>,
    /// Each rank's place, by rank.
    places: Vec<Place>,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    rank: usize,
    what: SharedId,
    state: SlotState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Waiting,
    Ready(Handed),
    /// The exporter's replay ended (or failed) without handing it over.
    Gone,
}

/// What an exporting rank's replay hands over: where its buffer is and how long, or its event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handed {
    /// A buffer at this address, this many bytes long.
    Buffer(DevicePtr, u64),
    /// An event, as its backend names it.
    Event(u64),
}

/// Where a rank's replay is: the wall time of the next call it will issue (`u64::MAX` once
/// ended, `None` for a rank without a clock), and since when it is inside a call.
#[derive(Clone, Copy, Debug, Default)]
struct Place {
    next: Option<u64>,
    inside: Option<Instant>,
}

/// One rank's part in a joint replay (`ReplayOptions::share`).
#[derive(Clone)]
pub struct RankShare {
    sharing: Arc<Sharing>,
    rank: usize,
    /// What this rank hands over before the call of each number: (buffer or event, slot).
    exports: BTreeMap<u64, Vec<(SharedId, usize)>>,
    /// What this rank opens, with its slot.
    opens: HashMap<SharedId, usize>,
    /// The wall time of the trace's time 0, when every sharing rank has a clock.
    epoch: Option<u64>,
}

impl std::fmt::Debug for RankShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankShare")
            .field("rank", &self.rank)
            .field("exports", &self.exports)
            .field("opens", &self.opens)
            .field("epoch", &self.epoch)
            .finish()
    }
}

/// A joint replay's sharing, worked out before it begins.
#[derive(Debug, Default)]
pub struct SharePlan {
    /// Each rank's part (`None`: it shares nothing with the others).
    pub ranks: Vec<Option<RankShare>>,
    /// Calls each rank leaves out, with why: the uploads of what an opened buffer held when
    /// opened, which the exporter's replay makes.
    pub skip: Vec<BTreeMap<u64, String>>,
    /// What could not be paired, and why, by rank.
    pub notes: Vec<Vec<String>>,
}

impl std::fmt::Debug for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sharing")
    }
}

/// How an opened buffer or event that is not paired replays: as when its trace replays alone.
fn alone(what: &SharedId) -> &'static str {
    match what {
        SharedId::Buffer(_) | SharedId::Memory(_) => "replayed with the bytes it held when opened",
        SharedId::Event(_) => "replayed as an event of its own, which only this rank records",
    }
}

/// Pairs every buffer or event a trace opened with the one another trace exported under the
/// same handle, where both ranks address one memory (`spaces[i] == spaces[j]`).
pub fn plan(traces: &[&Trace], spaces: &[usize]) -> SharePlan {
    let n = traces.len();
    let mut out = SharePlan {
        ranks: vec![None; n],
        skip: vec![BTreeMap::new(); n],
        notes: vec![Vec::new(); n],
    };
    let mut slots: Vec<Slot> = Vec::new();
    let mut exports: Vec<BTreeMap<u64, Vec<(SharedId, usize)>>> = vec![BTreeMap::new(); n];
    let mut opens: Vec<HashMap<SharedId, usize>> = vec![HashMap::new(); n];
    let same_kind = |a: &SharedId, b: &SharedId| {
        matches!(
            (a, b),
            (SharedId::Buffer(_), SharedId::Buffer(_))
                | (SharedId::Memory(_), SharedId::Memory(_))
                | (SharedId::Event(_), SharedId::Event(_))
        )
    };
    for (i, t) in traces.iter().enumerate() {
        for (buf, share) in &t.shared {
            let ShareSide::Opened { fill } = share.side else {
                continue;
            };
            let exporter = traces.iter().enumerate().find_map(|(j, u)| {
                (j != i)
                    .then(|| {
                        u.shared.iter().find_map(|(b, s)| match s.side {
                            ShareSide::Exported { at }
                                if s.handle == share.handle && same_kind(b, buf) =>
                            {
                                Some((j, *b, at))
                            }
                            _ => None,
                        })
                    })
                    .flatten()
            });
            let Some((j, ebuf, at)) = exporter else {
                out.notes[i].push(format!(
                    "{buf} was opened through its {}, which no trace of the set exported: {}",
                    buf.through(),
                    alone(buf)
                ));
                continue;
            };
            if spaces.get(i) != spaces.get(j) {
                out.notes[i].push(format!(
                    "{buf} is rank {j}'s {ebuf}, which this replay keeps in another memory (another device, or a mock of its own): {}",
                    alone(buf)
                ));
                continue;
            }
            let slot = match slots.iter().position(|s| s.rank == j && s.what == ebuf) {
                Some(s) => s,
                None => {
                    slots.push(Slot {
                        rank: j,
                        what: ebuf,
                        state: SlotState::Waiting,
                    });
                    exports[j]
                        .entry(at)
                        .or_default()
                        .push((ebuf, slots.len() - 1));
                    slots.len() - 1
                }
            };
            opens[i].insert(*buf, slot);
            if let Some(f) = fill {
                out.skip[i].insert(
                    f,
                    format!("#{f}, the upload of what {buf} held when opened (rank {j}'s replay makes those bytes)"),
                );
            }
        }
    }
    let sharing_ranks: Vec<usize> = (0..n)
        .filter(|&i| !exports[i].is_empty() || !opens[i].is_empty())
        .collect();
    if sharing_ranks.is_empty() {
        return out;
    }
    let clocked = sharing_ranks
        .iter()
        .all(|&i| traces[i].clock_epoch_ns.is_some());
    let sharing = Arc::new(Sharing {
        board: Mutex::new(Board {
            places: (0..n)
                .map(|i| Place {
                    next: (clocked && sharing_ranks.contains(&i)).then_some(0),
                    inside: None,
                })
                .collect(),
            slots,
        }),
        changed: Condvar::new(),
    });
    for &i in &sharing_ranks {
        out.ranks[i] = Some(RankShare {
            sharing: sharing.clone(),
            rank: i,
            exports: std::mem::take(&mut exports[i]),
            opens: std::mem::take(&mut opens[i]),
            epoch: traces[i].clock_epoch_ns.filter(|_| clocked),
        });
    }
    out
}

/// Why a rank could not go on sharing: said as the replay's error.
pub type Stalled = String;

impl RankShare {
    fn board(&self) -> MutexGuard<'_, Board> {
        self.sharing.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for another rank's change to the board (or a tenth of a second, to look at the
    /// clock again: a rank stuck in a call changes nothing), no later than `deadline`.
    fn wait<'a>(&'a self, b: MutexGuard<'a, Board>, deadline: Instant) -> MutexGuard<'a, Board> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.sharing
            .changed
            .wait_timeout(b, left.min(Duration::from_millis(100)))
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    /// How many buffers and events this rank opens of another's.
    pub fn opens(&self) -> usize {
        self.opens.len()
    }

    /// The slot of `what` when this rank opens it.
    pub fn opened(&self, what: SharedId) -> Option<usize> {
        self.opens.get(&what).copied()
    }

    /// Whose `slot` is: the exporting rank and its buffer or event.
    pub fn owner(&self, slot: usize) -> Option<(usize, SharedId)> {
        self.board().slots.get(slot).map(|s| (s.rank, s.what))
    }

    /// What this rank hands over before call `seq`.
    pub fn exports_at(&self, seq: u64) -> &[(SharedId, usize)] {
        self.exports.get(&seq).map_or(&[], Vec::as_slice)
    }

    /// What is handed over after the last call (the handle taken at the trace's end).
    pub fn exports_after(&self, last: u64) -> Vec<(SharedId, usize)> {
        self.exports
            .range(last.saturating_add(1)..)
            .flat_map(|(_, v)| v.iter().copied())
            .collect()
    }

    /// Hands `slot`'s buffer or event over: what it is in this rank's replay.
    pub fn hand_over(&self, slot: usize, handed: Handed) {
        if let Some(s) = self.board().slots.get_mut(slot) {
            s.state = SlotState::Ready(handed);
        }
        self.sharing.changed.notify_all();
    }

    /// Waits until `slot`'s exporter has handed it over: what it is, or why not.
    pub fn take(&self, slot: usize) -> Result<Handed, Stalled> {
        let deadline = Instant::now() + PATIENCE;
        let mut b = self.board();
        loop {
            let Some(s) = b.slots.get(slot).copied() else {
                return Err(format!("no shared buffer {slot}"));
            };
            match s.state {
                SlotState::Ready(h) => return Ok(h),
                SlotState::Gone => {
                    return Err(format!(
                        "rank {}'s replay ended before it reached the place its {} was shared",
                        s.rank, s.what
                    ))
                }
                SlotState::Waiting => {}
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "waited {PATIENCE:?} for rank {}'s replay to share its {}",
                    s.rank, s.what
                ));
            }
            b = self.wait(b, deadline);
        }
    }

    /// Before issuing a call recorded at `t_ns`: waits until every other rank with a clock
    /// has returned from each call it began before then (or sat inside one for `STUCK`), then
    /// marks this rank inside the call.
    pub fn turn(&self, t_ns: u64) -> Result<(), Stalled> {
        let Some(epoch) = self.epoch else {
            return Ok(());
        };
        let at = epoch.saturating_add(t_ns);
        let deadline = Instant::now() + PATIENCE;
        let mut b = self.board();
        if let Some(p) = b.places.get_mut(self.rank) {
            p.next = Some(at);
        }
        self.sharing.changed.notify_all();
        loop {
            let now = Instant::now();
            let behind = b.places.iter().enumerate().find(|(r, p)| {
                let earlier = match p.next {
                    Some(n) => n < at || (n == at && *r < self.rank),
                    None => false,
                };
                // A rank inside one call for `STUCK` is passed over (it waits on this one).
                let stuck = p
                    .inside
                    .is_some_and(|since| now.duration_since(since) >= STUCK);
                *r != self.rank && earlier && !stuck
            });
            let Some((r, _)) = behind else {
                break;
            };
            if now >= deadline {
                return Err(format!(
                    "waited {PATIENCE:?} for rank {r}'s replay to reach this call's recorded time"
                ));
            }
            b = self.wait(b, deadline);
        }
        if let Some(p) = b.places.get_mut(self.rank) {
            p.inside = Some(Instant::now());
        }
        Ok(())
    }

    /// After a call returned: this rank is between calls again.
    pub fn returned(&self) {
        if self.epoch.is_none() {
            return;
        }
        if let Some(p) = self.board().places.get_mut(self.rank) {
            p.inside = None;
        }
        self.sharing.changed.notify_all();
    }

    /// This rank's replay is over (done or failed): nobody waits for it any more, and what
    /// it never handed over is gone.
    pub fn ended(&self) {
        {
            let mut b = self.board();
            if let Some(p) = b.places.get_mut(self.rank) {
                p.next = p.next.map(|_| u64::MAX);
                p.inside = None;
            }
            for s in b.slots.iter_mut() {
                if s.rank == self.rank && s.state == SlotState::Waiting {
                    s.state = SlotState::Gone;
                }
            }
        }
        self.sharing.changed.notify_all();
    }
}

/// Ends a rank's part in a joint replay when its replay ends, however it ends (a `Drop`, so a
/// replay that fails in its setup releases the ranks waiting on it too).
pub(super) struct Ended<'a>(&'a RankShare);

impl<'a> Ended<'a> {
    pub(super) fn new(sh: &'a RankShare) -> Self {
        Ended(sh)
    }
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.ended();
    }
}

/// A sharing rank's replay at one of its calls: its part, its backend, and whether a capture
/// is open (no sync may end it).
#[derive(Clone, Copy)]
pub(super) struct Turn<'a> {
    pub share: &'a RankShare,
    pub gpu: &'a dyn GpuBackend,
    pub capturing: bool,
}

/// The replay's side of a joint replay: what each call of a sharing rank does beside (or
/// instead of) being issued.
impl Replayer<'_> {
    /// A joint replay's part in call `c` (`shared.rs`): what this rank hands over before it,
    /// its turn by the recorded clocks, and an opened buffer's or event's open or close, which
    /// are another rank's memory or event bound or let go here rather than calls to make. True
    /// when `c` was such an open or close: nothing more to do for it.
    pub(super) fn share_step(
        &self,
        at: Turn<'_>,
        st: &mut State,
        c: &CallRecord,
        report: &mut ReplayReport,
    ) -> Result<bool, ReplayError> {
        let sh = at.share;
        for &(what, slot) in sh.exports_at(c.seq) {
            self.hand_over(at, st, what, slot, Some(c.seq))?;
        }
        let stalled = |cause: String| ReplayError::Setup {
            what: format!("call #{} of a joint replay", c.seq),
            cause,
        };
        sh.turn(c.t_ns).map_err(stalled)?;
        let opened: &[SharedId] = match (&c.call, &c.ret) {
            (Call::Alloc { .. }, Some(Ok(Value::Buffer(id)))) => {
                &[SharedId::Buffer(*id), SharedId::Memory(*id)]
            }
            (Call::CreateEvent, Some(Ok(Value::Event(id)))) => &[SharedId::Event(*id)],
            _ => &[],
        };
        if let Some((what, slot)) = opened.iter().find_map(|&w| sh.opened(w).map(|s| (w, s))) {
            let handed = sh.take(slot).map_err(stalled)?;
            let (rank, theirs) = sh.owner(slot).unwrap_or((usize::MAX, what));
            match (what, handed, &c.call) {
                (
                    SharedId::Buffer(id) | SharedId::Memory(id),
                    Handed::Buffer(ptr, have),
                    Call::Alloc { bytes },
                ) => {
                    if have < *bytes {
                        return Err(stalled(format!(
                            "{id} was opened {bytes} bytes long; rank {rank}'s {theirs} is {have}"
                        )));
                    }
                    st.bufs.insert(id, (ptr, *bytes));
                    st.borrowed.insert(id);
                }
                (SharedId::Event(id), Handed::Event(e), _) => {
                    st.events.insert(id, e);
                    st.borrowed_events.insert(id);
                }
                _ => {
                    return Err(stalled(format!(
                        "{what} was opened from rank {rank}'s {theirs}, which is of another kind"
                    )))
                }
            }
            report.shared.push(format!(
                "{what} (#{}) is rank {rank}'s {theirs}, opened from its {}",
                c.seq,
                what.through()
            ));
            report.calls += 1;
            return Ok(true);
        }
        // Closing what another rank shared: that rank's, not this replay's to free.
        let closed = match &c.call {
            Call::Free {
                ptr: DevAddr::Buf { buf, off: 0 },
            } if st.borrowed.remove(buf) => {
                if let Some((ptr, _)) = st.bufs.remove(buf) {
                    st.freed.insert(*buf, ptr);
                }
                true
            }
            Call::DestroyEvent { event } if st.borrowed_events.remove(event) => {
                st.events.remove(event);
                true
            }
            _ => false,
        };
        if closed {
            report.calls += 1;
        }
        Ok(closed)
    }

    /// Hands this rank's `what` over to the ranks that open it (before call `at`, or after the
    /// last): once the device finished what was queued, as the process had to make sure
    /// before it passed the handle on (not while a capture is open: a sync would end it).
    pub(super) fn hand_over(
        &self,
        on: Turn<'_>,
        st: &State,
        what: SharedId,
        slot: usize,
        at: Option<u64>,
    ) -> Result<(), ReplayError> {
        let place = || match at {
            Some(a) => format!("sharing {what} before call #{a}"),
            None => format!("sharing {what} after the last call"),
        };
        if !on.capturing {
            sync_all(on.gpu, st).map_err(|e| ReplayError::Setup {
                what: place(),
                cause: format!("waiting for the device: {e:#}"),
            })?;
        }
        let handed = match what {
            SharedId::Buffer(b) | SharedId::Memory(b) => {
                st.bufs.get(&b).map(|&(ptr, n)| Handed::Buffer(ptr, n))
            }
            SharedId::Event(e) => st.events.get(&e).map(|&h| Handed::Event(h)),
        };
        let Some(handed) = handed else {
            return Err(ReplayError::Setup {
                what: place(),
                cause: "it is not live in this replay".into(),
            });
        };
        on.share.hand_over(slot, handed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{BufferId, EventId, Share};

    fn buf(b: u32) -> SharedId {
        SharedId::Buffer(BufferId(b))
    }

    fn trace(epoch: Option<u64>, shared: Vec<(SharedId, ShareSide)>) -> Trace {
        Trace {
            clock_epoch_ns: epoch,
            shared: shared
                .into_iter()
                .map(|(what, side)| {
                    let handle = vec![7; 64];
                    (what, Share { handle, side })
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn an_opened_buffer_pairs_with_the_export_of_its_handle_in_one_space_only() {
        let exporter = trace(Some(0), vec![(buf(1), ShareSide::Exported { at: 3 })]);
        let opener = trace(Some(5), vec![(buf(4), ShareSide::Opened { fill: Some(2) })]);
        let p = plan(&[&exporter, &opener], &[0, 0]);
        let (e, o) = (p.ranks[0].as_ref().unwrap(), p.ranks[1].as_ref().unwrap());
        assert_eq!(e.exports_at(3), &[(buf(1), 0)]);
        assert_eq!(o.opened(buf(4)), Some(0));
        assert_eq!(p.skip[1].keys().copied().collect::<Vec<_>>(), [2]);
        // An event opened under the same bytes is no buffer: not paired with one.
        let event = SharedId::Event(EventId(2));
        let event_opener = trace(Some(5), vec![(event, ShareSide::Opened { fill: None })]);
        let p = plan(&[&exporter, &event_opener], &[0, 0]);
        assert!(p.ranks.iter().all(Option::is_none));
        assert!(
            p.notes[1][0].contains("no trace of the set exported"),
            "{:?}",
            p.notes
        );
        // Another device: nothing paired, the upload kept, and why said.
        let p = plan(&[&exporter, &opener], &[0, 1]);
        assert!(p.ranks.iter().all(Option::is_none));
        assert!(p.skip[1].is_empty());
        assert!(p.notes[1][0].contains("another memory"), "{:?}", p.notes);
    }

    #[test]
    fn an_opener_waits_for_the_hand_over_and_hears_when_the_exporter_ended_without_it() {
        let exporter = trace(None, vec![(buf(1), ShareSide::Exported { at: 3 })]);
        let opener = trace(None, vec![(buf(4), ShareSide::Opened { fill: None })]);
        let p = plan(&[&exporter, &opener], &[0, 0]);
        let (e, o) = (p.ranks[0].clone().unwrap(), p.ranks[1].clone().unwrap());
        let got = std::thread::scope(|s| {
            let h = s.spawn(|| o.take(0));
            e.hand_over(0, Handed::Buffer(DevicePtr(0x1000), 64));
            h.join().unwrap()
        });
        assert_eq!(got, Ok(Handed::Buffer(DevicePtr(0x1000), 64)));
        let p = plan(&[&exporter, &opener], &[0, 0]);
        let (e, o) = (p.ranks[0].clone().unwrap(), p.ranks[1].clone().unwrap());
        e.ended();
        assert!(o.take(0).unwrap_err().contains("ended before"));
    }

    #[test]
    fn a_rank_issues_a_call_only_after_the_others_returned_from_their_earlier_ones() {
        // Rank 0's clock began at 100, rank 1's at 0: rank 0's call at t 50 is at wall 150.
        let exporter = trace(Some(100), vec![(buf(1), ShareSide::Exported { at: 0 })]);
        let opener = trace(Some(0), vec![(buf(4), ShareSide::Opened { fill: None })]);
        let p = plan(&[&exporter, &opener], &[0, 0]);
        let (e, o) = (p.ranks[0].clone().unwrap(), p.ranks[1].clone().unwrap());
        let order = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            // Rank 1's call at wall 200 waits for rank 0's at 150 to return.
            let h = s.spawn(|| {
                o.turn(200).unwrap();
                order.lock().unwrap().push("rank 1 at 200");
                o.returned();
                o.ended();
            });
            // Rank 1 is waiting (its place says 200) before rank 0 goes.
            while o.board().places[1].next != Some(200) {
                std::thread::yield_now();
            }
            e.turn(50).unwrap();
            order.lock().unwrap().push("rank 0 at 150");
            e.returned();
            e.ended();
            h.join().unwrap();
        });
        assert_eq!(*order.lock().unwrap(), ["rank 0 at 150", "rank 1 at 200"]);
    }
}
