//! A rank set replayed together: one thread and one backend per rank's trace, as the ranks
//! ran. Each communicator the traces joined is joined again under one fresh unique id that
//! every rank's replay shares, so the collectives meet and exchange bytes again, and each
//! rank's readbacks after them are checked against its recording as any readback is.

use super::{ReplayError, ReplayOptions, ReplayReport, Replayer};
use crate::backend::{CommUniqueId, GpuBackend};
use crate::trace::{Adopted, Call, Trace};
use std::collections::{BTreeMap, HashMap};

/// Replay `traces` (one per rank, any order) together, `backends[i]` running `traces[i]`.
/// Each rank's report, or why its replay could not run, in the order given; an error before
/// any ran when the counts differ or no fresh unique id could be had.
pub fn replay_ranks<B: GpuBackend + Sync>(
    traces: &[Trace],
    backends: &[B],
    opts: &ReplayOptions,
) -> anyhow::Result<Vec<Result<ReplayReport, ReplayError>>> {
    let apart: Vec<usize> = (0..traces.len()).collect();
    replay_ranks_sharing(traces, backends, &apart, opts)
}

/// `replay_ranks`, where the ranks whose `spaces` are equal address one memory (one CUDA
/// device, or one mock backend): a buffer one of them opened from another's IPC handle is
/// then that rank's buffer in the replay too (`shared.rs`).
pub fn replay_ranks_sharing<B: GpuBackend + Sync>(
    traces: &[Trace],
    backends: &[B],
    spaces: &[usize],
    opts: &ReplayOptions,
) -> anyhow::Result<Vec<Result<ReplayReport, ReplayError>>> {
    anyhow::ensure!(
        traces.len() == backends.len() && !traces.is_empty(),
        "{} trace(s) and {} backend(s): one backend per rank's trace",
        traces.len(),
        backends.len()
    );
    let starts = aligned(traces);
    let traces: Vec<&Trace> = starts.iter().map(|s| s.trace.as_ref()).collect();
    let mut unmet = unmet(&traces);
    // A trace begun again at a later checkpoint is numbered afresh: its shares' places no
    // longer hold, so only traces replayed from their beginning share.
    let whole: Vec<&Trace> = starts
        .iter()
        .map(|s| match (&s.from, &s.trace) {
            (None, std::borrow::Cow::Borrowed(t)) => *t,
            _ => &EMPTY,
        })
        .collect();
    let plan = super::shared::plan(&whole, spaces);
    for (skip, fills) in unmet.iter_mut().zip(&plan.skip) {
        skip.extend(fills.iter().map(|(k, v)| (*k, v.clone())));
    }
    let mut ids: HashMap<CommUniqueId, CommUniqueId> = HashMap::new();
    for t in &traces {
        // Joined in the trace, or before it began (a flight dump's checkpoint lists those).
        let joined = t.calls.iter().filter_map(|c| match &c.call {
            Call::CommInit { unique, .. } => Some(*unique),
            _ => None,
        });
        let adopted = t.adopted.iter().filter_map(|a| match a {
            Adopted::Comm { unique, .. } => Some(*unique),
            _ => None,
        });
        for unique in joined.chain(adopted) {
            if let std::collections::hash_map::Entry::Vacant(e) = ids.entry(unique) {
                e.insert(backends[0].comm_unique_id()?);
            }
        }
    }
    let opts = ReplayOptions {
        comms: ids,
        ..opts.clone()
    };
    let opts = &opts;
    Ok(std::thread::scope(|sc| {
        let hs: Vec<_> = starts
            .iter()
            .zip(backends)
            .zip(unmet)
            .zip(plan.ranks.iter().zip(&plan.notes))
            .map(|(((start, b), skip), (share, notes))| {
                sc.spawn(move || {
                    // CUDA binds a context per thread; this rank's thread is new.
                    b.bind_to_thread().map_err(|e| ReplayError::Setup {
                        what: "this rank's thread".into(),
                        cause: format!("binding its backend to the thread: {e:#}"),
                    })?;
                    let opts = ReplayOptions {
                        skip,
                        share: share.clone(),
                        ..opts.clone()
                    };
                    let mut r = Replayer::new(&start.trace).run(b, &opts, None, |_| {})?;
                    r.begun_at.clone_from(&start.from);
                    r.shared.extend(notes.iter().cloned());
                    Ok(r)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(ReplayError::Setup {
                        what: "this rank's replay thread".into(),
                        cause: "it panicked".into(),
                    })
                })
            })
            .collect()
    }))
}

/// What a trace that shares nothing is seen as by `shared::plan`.
static EMPTY: std::sync::LazyLock<Trace> = std::sync::LazyLock::new(Trace::default);

/// Where a trace of a rank set begins its replay.
#[derive(Clone, Debug)]
pub struct Aligned<'a> {
    /// The trace, or a dump begun again at one of its later checkpoints (`Trace::rebased`).
    pub trace: std::borrow::Cow<'a, Trace>,
    /// Where it was begun again, in words (`None`: where it began).
    pub from: Option<String>,
}

/// The later checkpoints of a trace `aligned` considers.
const MAX_STARTS: usize = 16;

/// Each communicator's next group collective number at a place a trace may begin.
type NextGroup = BTreeMap<CommUniqueId, u64>;

/// Each trace (in order) begun where every rank's holds the same group collectives next.
///
/// A flight dump starts from its older checkpoint, and each rank's checkpoints fall where
/// its own budget allowed: dumps may begin at different collectives, and a replay from
/// there leaves out what one made before another's began (`unmet`), whose received bytes no
/// dump holds. A dump also holds its newer checkpoint (`Frame::Restart`); where every
/// trace has a start (its beginning or a later checkpoint) at which each communicator's next
/// group collective has the same number, the earliest such is taken and nothing of the group
/// collectives is left out (sends and receives are still paired by `unmet`). Otherwise every
/// trace begins where it began.
pub fn aligned(traces: &[Trace]) -> Vec<Aligned<'_>> {
    let as_is = || {
        traces
            .iter()
            .map(|t| Aligned {
                trace: std::borrow::Cow::Borrowed(t),
                from: None,
            })
            .collect()
    };
    // Each trace's starts: its beginning (None) and each later checkpoint, with the number
    // of each communicator's next group collective there (a communicator not yet joined:
    // 0, as one joined in the trace numbers its first).
    let starts: Vec<Vec<(Option<usize>, NextGroup)>> = traces
        .iter()
        .map(|t| {
            let at = |adopted: &[Adopted]| -> NextGroup {
                adopted
                    .iter()
                    .filter_map(|a| match a {
                        Adopted::Comm {
                            unique, next_seq, ..
                        } => Some((*unique, *next_seq)),
                        _ => None,
                    })
                    .collect()
            };
            std::iter::once((None, at(&t.adopted)))
                .chain(
                    t.restarts
                        .iter()
                        .enumerate()
                        // A dump holds one or two; a hostile trace may list any number.
                        .take(MAX_STARTS)
                        .map(|(k, r)| (Some(k), at(&r.adopted))),
                )
                .collect()
        })
        .collect();
    let same = |a: &NextGroup, b: &NextGroup| {
        a.keys()
            .chain(b.keys())
            .all(|u| a.get(u).copied().unwrap_or(0) == b.get(u).copied().unwrap_or(0))
    };
    let Some(first) = starts.first() else {
        return Vec::new();
    };
    for (_, key) in first {
        // Each trace's first start with this numbering that it can begin from.
        let mut chosen = Vec::with_capacity(traces.len());
        for (t, ss) in traces.iter().zip(&starts) {
            let found = ss.iter().find_map(|(k, other)| {
                if !same(key, other) {
                    return None;
                }
                match k {
                    None => Some(Aligned {
                        trace: std::borrow::Cow::Borrowed(t),
                        from: None,
                    }),
                    Some(k) => t.rebased(*k).ok().map(|r| {
                        let c = &t.restarts[*k];
                        Aligned {
                            trace: std::borrow::Cow::Owned(r),
                            from: Some(format!(
                                "begun at the dump's later checkpoint (step {}, before call #{}), where every rank's trace holds the same collectives next",
                                c.step, c.first_seq
                            )),
                        }
                    }),
                }
            });
            match found {
                Some(a) => chosen.push(a),
                None => break,
            }
        }
        if chosen.len() == traces.len() {
            return chosen;
        }
    }
    as_is()
}

/// What each trace (in order) leaves out to be replayed with the others, by call seq, with
/// why. Flight dumps whose checkpoints fell at different steps start at different
/// collectives: a group collective numbered before another rank's dump begins, or a send
/// numbered before its other side's dump begins, has nothing to meet in the replay (the
/// other rank's part was made before its trace). Those are left out, so every rank's replay
/// meets from the first exchange all of its ranks hold; what they received is not known
/// here, so what a rank computes from it may differ, and its readbacks say so. Whole
/// recordings start together and leave nothing out.
fn unmet(traces: &[&Trace]) -> Vec<std::collections::BTreeMap<u64, String>> {
    use crate::analysis::ranks::exchanges;
    use crate::backend::Exchange;
    use std::collections::BTreeMap;
    // Where each communicator's group collectives start in every trace holding it, and each
    // pair's exchanges on each side.
    let mut group_start: HashMap<CommUniqueId, u64> = HashMap::new();
    for j in traces
        .iter()
        .flat_map(|t| crate::analysis::ranks::joined_comms(t))
    {
        let s = group_start.entry(j.unique).or_insert(j.next_seq);
        *s = (*s).max(j.next_seq);
    }
    let all: Vec<Vec<_>> = traces
        .iter()
        .map(|t| {
            exchanges(t)
                .into_iter()
                .map(|x| (t.calls[x.at].seq, x.unique, x.rank, x.op, x.exchange))
                .collect()
        })
        .collect();
    // (communicator, sender, receiver) -> each side's first number: where its trace began on
    // the pair, as a dump's checkpoint says, else the first of the pair's exchanges it holds.
    let mut firsts: BTreeMap<(CommUniqueId, u32, u32), [Option<u64>; 2]> = BTreeMap::new();
    for (t, xs) in traces.iter().zip(&all) {
        let starts = crate::analysis::ranks::pair_starts(t);
        for (_, unique, rank, _, x) in xs {
            if let Exchange::Pair { from, to, seq } = *x {
                let side = usize::from(*rank == to);
                let known = starts.get(unique).map(|p| p.start(from, to));
                firsts.entry((*unique, from, to)).or_default()[side]
                    .get_or_insert(known.unwrap_or(seq));
            }
        }
        // A side that made none of a pair's exchanges in its trace still began somewhere.
        for (unique, p) in &starts {
            for (&(from, to), &n) in &p.listed {
                let side = usize::from(p.rank == to);
                firsts.entry((*unique, from, to)).or_default()[side].get_or_insert(n);
            }
        }
    }
    all.iter()
        .map(|xs| {
            let mut skip = BTreeMap::new();
            for (call, unique, rank, op, x) in xs {
                let why = match *x {
                    Exchange::Group(seq) => {
                        let start = group_start.get(unique).copied().unwrap_or(0);
                        (seq < start).then(|| {
                            format!(
                                "rank {rank}'s #{call} {} (collective #{seq} of communicator {unique}), made before another rank's trace begins at #{start}",
                                op.name()
                            )
                        })
                    }
                    Exchange::Pair { from, to, seq } => match firsts.get(&(*unique, from, to)) {
                        Some([Some(a), Some(b)]) if seq < (*a).max(*b) => Some(format!(
                            "rank {rank}'s #{call} {} (#{seq} from rank {from} to rank {to}), made before the other side's trace begins at #{}",
                            op.name(),
                            (*a).max(*b)
                        )),
                        _ => None,
                    },
                };
                if let Some(why) = why {
                    skip.insert(*call, why);
                }
            }
            skip
        })
        .collect()
}
