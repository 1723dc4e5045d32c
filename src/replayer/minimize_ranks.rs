//! `minimize` of a rank set: the fewest calls, over every rank, that still make one rank
//! fault as recorded when the set is replayed together.
//!
//! A fault on one rank may need another's: a rank that contributes a bad value to an
//! all-reduce makes its peer index out of range. So the search runs over the whole set,
//! keeping the collectives matched: a collective is kept or dropped on every rank at once, so
//! the ranks' collectives still meet one for one, and no candidate waits for a collective its
//! peer no longer makes.
//!
//! The set is first cut where the faulting rank stopped: each other rank up to its last
//! collective the faulting rank also made (a peer's dump holds the collective it was left
//! waiting in, which would wait again). Then, in turn: the collectives (all of them, then
//! ddmin over them); the faulting rank's other calls; each other rank's other calls. A rank
//! left with no collective cannot reach the fault and goes from the set: when the fault needs
//! no collective, what is left is the faulting rank alone, which says the fault is its own.

use super::minimize::{ddmin, FaultSignature, MinimizeError, Shrink};
use crate::analysis::ranks::joined_comms;
use crate::analysis::window::{fault_windows, FaultWindow, WindowKind};
use crate::backend::CommUniqueId;
use crate::backend::Exchange;
use crate::trace::{Adopted, Call, CommId, Trace};
use std::collections::{BTreeSet, HashMap};

/// Replays a candidate rank set together (`.0`, one trace per rank) and says which fault
/// the trace at place `.1` reproduced (`None`: none).
pub type RanksOracle<'a> =
    dyn FnMut(&[Trace], usize) -> anyhow::Result<Option<FaultSignature>> + 'a;

/// A collective of the set: its communicator and number, the same on every rank.
/// A collective as every rank taking part in it names it: its communicator and which
/// exchange (a group collective's number, or a send's sender, receiver and number).
type CollKey = (CommUniqueId, Exchange);

/// What `minimize_ranks` made.
pub struct RanksMinimized {
    /// Per trace given, in that order: its part of the smallest set found, or `None` for a
    /// rank the fault does not need.
    pub traces: Vec<Option<Trace>>,
    /// The place of the faulting rank's trace.
    pub faulting: usize,
    /// The fault kept, as the replay of the cut set reported it.
    pub signature: FaultSignature,
    /// The collectives the faulting rank made before its fault, and those kept.
    pub collectives: (usize, usize),
    /// Replays run, the first included.
    pub attempts: usize,
    /// Whether it stopped early at the attempt budget.
    pub budget_hit: bool,
}

/// The trace that records a fault of its own: a device error or a red-zone hit, not a call
/// left waiting (which is what a peer's dump holds). `chosen` overrides.
pub fn faulting_rank(traces: &[Trace], chosen: Option<usize>) -> Result<usize, MinimizeError> {
    faulting(traces, chosen).map(|(f, _)| f)
}

/// `faulting_rank`, with the first window of its fault (each trace's windows worked out once).
fn faulting(
    traces: &[Trace],
    chosen: Option<usize>,
) -> Result<(usize, FaultWindow), MinimizeError> {
    let first = |t: &Trace| fault_windows(t).first().copied();
    if let Some(c) = chosen {
        let w = traces.get(c).and_then(first);
        return w.map(|w| (c, w)).ok_or(MinimizeError::NoFault);
    }
    let windows: Vec<Option<FaultWindow>> = traces.iter().map(first).collect();
    let own = |w: &FaultWindow| w.kind == WindowKind::Redzone || w.code.is_some();
    let mut found: Vec<usize> = (0..traces.len())
        .filter(|&i| windows[i].as_ref().is_some_and(own))
        .collect();
    if found.is_empty() {
        // Only waits: a rank that hung on its own, say. Take it if it is the only one.
        found = (0..traces.len())
            .filter(|&i| windows[i].is_some())
            .collect();
    }
    match found.as_slice() {
        [] => Err(MinimizeError::NoFault),
        [one] => windows[*one]
            .map(|w| (*one, w))
            .ok_or(MinimizeError::NoFault),
        many => Err(MinimizeError::WhichRank(many.to_vec())),
    }
}

/// One rank's part of the search.
struct Rank<'t> {
    shrink: Shrink<'t>,
    /// Its calls that are neither collectives nor joins and leaves, before its cut: what
    /// ddmin takes from.
    work: Vec<u64>,
    /// Its collectives before the cut, by key: the call's number.
    colls: HashMap<CollKey, u64>,
    /// Its `comm_init` calls, by communicator.
    inits: HashMap<CommUniqueId, u64>,
}

impl<'t> Rank<'t> {
    /// `t` up to (not including) call `end`, with its fault observed at `observed` (the
    /// faulting rank) or none (`u64::MAX`).
    fn new(t: &'t Trace, observed: u64, end: u64) -> Self {
        let uniques = comm_uniques(t);
        let mut r = Rank {
            shrink: Shrink::new(t, observed),
            work: Vec::new(),
            colls: HashMap::new(),
            inits: HashMap::new(),
        };
        for c in t.calls.iter().take_while(|c| c.seq < end) {
            match &c.call {
                Call::Collective { comm, seq, op, .. } => {
                    if let Some((u, rank)) = uniques.get(comm) {
                        r.colls.insert((*u, Exchange::of(*op, *seq, *rank)), c.seq);
                    }
                }
                Call::CommInit { unique, .. } => {
                    r.inits.insert(*unique, c.seq);
                }
                // Kept: a group's ends issue nothing, and an end without its start fails.
                Call::CommDestroy { .. } | Call::CommGroupStart | Call::CommGroupEnd => {}
                _ => r.work.push(c.seq),
            }
        }
        r
    }

    /// This rank's trace with `work` and the collectives of `keep` it made, with the joins
    /// they need; communicators none of them uses are left unjoined (a replay would wait at
    /// the join for ranks no longer in the set).
    fn build(&self, work: &[u64], keep: &BTreeSet<CollKey>) -> Trace {
        let mut calls = work.to_vec();
        let mut used: BTreeSet<CommUniqueId> = BTreeSet::new();
        for (k, seq) in &self.colls {
            if keep.contains(k) {
                calls.push(*seq);
                used.insert(k.0);
            }
        }
        calls.extend(
            self.inits
                .iter()
                .filter(|(u, _)| used.contains(*u))
                .map(|(_, s)| *s),
        );
        calls.sort_unstable();
        let mut t = self.shrink.build(&calls);
        // A communicator left unjoined takes its per-peer numbers with it.
        let unjoined: BTreeSet<CommId> = t
            .adopted
            .iter()
            .filter_map(|a| match a {
                Adopted::Comm { id, unique, .. } if !used.contains(unique) => Some(*id),
                _ => None,
            })
            .collect();
        t.adopted.retain(|a| match a {
            Adopted::Comm { id, .. } | Adopted::CommPairs { id, .. } => !unjoined.contains(id),
            _ => true,
        });
        t
    }

    /// Whether any collective of `keep` is this rank's.
    fn takes_part(&self, keep: &BTreeSet<CollKey>) -> bool {
        self.colls.keys().any(|k| keep.contains(k))
    }
}

/// Each communicator's id in `t`, to its unique id and the trace's rank in it.
fn comm_uniques(t: &Trace) -> HashMap<CommId, (CommUniqueId, u32)> {
    joined_comms(t)
        .into_iter()
        .map(|j| (j.id, (j.unique, j.rank)))
        .collect()
}

/// Where another rank's trace is cut: before its first collective that the faulting rank did
/// not make but would have (a group collective of a communicator the faulting rank is in, by
/// its rank there `faulting`, or a send to or from it), or its first call that never returned.
/// Sends between other ranks go on: the faulting rank may depend on what they passed along.
fn cut_of(t: &Trace, made: &BTreeSet<CollKey>, faulting: &HashMap<CommUniqueId, u32>) -> u64 {
    let uniques = comm_uniques(t);
    t.calls
        .iter()
        .find(|c| match &c.call {
            _ if c.ret.is_none() => true,
            Call::Collective { comm, seq, op, .. } => uniques.get(comm).is_some_and(|(u, rank)| {
                let x = Exchange::of(*op, *seq, *rank);
                let theirs = match x {
                    Exchange::Group(_) => true,
                    Exchange::Pair { from, to, .. } => {
                        faulting.get(u).is_some_and(|f| *f == from || *f == to)
                    }
                };
                faulting.contains_key(u) && theirs && !made.contains(&(*u, x))
            }),
            _ => false,
        })
        .map_or(u64::MAX, |c| c.seq)
}

/// Shrink the rank set `traces` (one trace per rank, any order) while `oracle` still reports,
/// for the faulting rank (`chosen`, or the one trace that records a fault of its own), the
/// fault it reports for the set cut where that rank stopped; at most `max_attempts` replays.
/// `progress` hears (attempt, calls kept over every rank).
pub fn minimize_ranks(
    traces: &[Trace],
    chosen: Option<usize>,
    oracle: &mut RanksOracle<'_>,
    max_attempts: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<RanksMinimized, MinimizeError> {
    let (f, w) = faulting(traces, chosen)?;
    let mut mine = Some(Rank::new(&traces[f], w.observed, w.observed));
    let mut all_colls: BTreeSet<CollKey> =
        mine.iter().flat_map(|r| r.colls.keys().copied()).collect();
    let faulting_comms: HashMap<CommUniqueId, u32> =
        comm_uniques(&traces[f]).into_values().collect();
    let ranks: Vec<Rank<'_>> = traces
        .iter()
        .enumerate()
        .map(|(i, t)| match mine.take_if(|_| i == f) {
            Some(r) => r,
            None => Rank::new(t, u64::MAX, cut_of(t, &all_colls, &faulting_comms)),
        })
        .collect();
    // Sends between other ranks are candidates too, where both sides made them before their
    // cuts (one side alone would wait in a replay).
    let mut sides: HashMap<CollKey, usize> = HashMap::new();
    for k in ranks.iter().flat_map(|r| r.colls.keys()) {
        if matches!(k.1, Exchange::Pair { .. }) {
            *sides.entry(*k).or_default() += 1;
        }
    }
    all_colls.extend(sides.into_iter().filter(|(_, n)| *n == 2).map(|(k, _)| k));
    // Per rank, the work kept so far.
    let mut work: Vec<Vec<u64>> = ranks.iter().map(|r| r.work.clone()).collect();
    let mut keep = all_colls.clone();
    // The candidate set: each rank still taking part (the faulting one always), and the
    // faulting rank's place among them.
    let set = |work: &[Vec<u64>], keep: &BTreeSet<CollKey>| -> (Vec<Option<Trace>>, usize) {
        let traces: Vec<Option<Trace>> = ranks
            .iter()
            .enumerate()
            .map(|(i, r)| (i == f || r.takes_part(keep)).then(|| r.build(&work[i], keep)))
            .collect();
        let at = traces[..f].iter().filter(|t| t.is_some()).count();
        (traces, at)
    };
    let mut eval = |work: &[Vec<u64>], keep: &BTreeSet<CollKey>, attempt: usize| {
        let (cand, at) = set(work, keep);
        let cand: Vec<Trace> = cand.into_iter().flatten().collect();
        progress(attempt, cand.iter().map(|t| t.calls.len()).sum());
        oracle(&cand, at).map_err(MinimizeError::Attempt)
    };
    let mut attempts = 1usize;
    let want = eval(&work, &keep, attempts)?.ok_or_else(|| {
        MinimizeError::NotReproduced(format!(
            "the rank set, each other rank cut after the last collective trace {f} made before its fault, replays without it"
        ))
    })?;
    let mut budget_hit = false;
    let mut test = |work: &[Vec<u64>], keep: &BTreeSet<CollKey>| -> Result<bool, MinimizeError> {
        if attempts >= max_attempts {
            budget_hit = true;
            return Ok(false);
        }
        attempts += 1;
        Ok(eval(work, keep, attempts)?.as_ref() == Some(&want))
    };
    // The collectives: none at all first (a fault of the rank's own), else ddmin over them.
    let listed: Vec<CollKey> = all_colls.iter().copied().collect();
    let subset =
        |idx: &[u64]| -> BTreeSet<CollKey> { idx.iter().map(|&i| listed[i as usize]).collect() };
    if !listed.is_empty() {
        keep = if test(&work, &BTreeSet::new())? {
            BTreeSet::new()
        } else {
            let kept = ddmin((0..listed.len() as u64).collect(), &mut |idx| {
                test(&work, &subset(idx))
            })?;
            subset(&kept)
        };
    }
    // The faulting rank's calls, then each other rank still in the set.
    let order = std::iter::once(f).chain((0..ranks.len()).filter(|&i| i != f));
    for i in order.collect::<Vec<_>>() {
        if i != f && !ranks[i].takes_part(&keep) {
            continue;
        }
        let items = std::mem::take(&mut work[i]);
        let kept = ddmin(items, &mut |cand| {
            let mut w = work.clone();
            w[i] = cand.to_vec();
            test(&w, &keep)
        })?;
        work[i] = kept;
    }
    let (out, _) = set(&work, &keep);
    Ok(RanksMinimized {
        traces: out,
        faulting: f,
        signature: want,
        collectives: (all_colls.len(), keep.len()),
        attempts,
        budget_hit,
    })
}
