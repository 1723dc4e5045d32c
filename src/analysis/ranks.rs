//! A rank set's traces side by side: each communicator's collectives matched by their number
//! across the ranks that joined it (the `unique` id of `comm_init` says which traces belong
//! together), and where they part: collectives whose type, count or element type differ, and
//! the first collective some ranks never made, with what those ranks did last instead and
//! the failure, if any, that stopped them. The first parting is what broke the run; later
//! ones follow from it, so only the first of each communicator is reported. Flight dumps
//! work as well as whole recordings: a dump's checkpoint lists the communicators joined
//! before it (`Adopted::Comm`), and the comparison starts at the first collective that every
//! rank's dump holds.

use crate::backend::CommUniqueId;
use crate::trace::{call_text, ret_text, Call, CommId, Trace, Value};
use std::collections::BTreeMap;

/// One rank's collective, as the report shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankCall {
    /// The rank.
    pub rank: u32,
    /// Its call number in that rank's trace.
    pub call: u64,
    /// The call, rendered.
    pub text: String,
    /// Where the engine made it.
    pub site: String,
    /// Its result, rendered (`ok`, `ERR ...`, `!! never returned`).
    pub ret: String,
}

/// Where a communicator's ranks parted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RankFinding {
    /// Collective `seq` was not the same collective on every rank.
    Mismatch {
        /// The communicator.
        unique: CommUniqueId,
        /// Its collective number.
        seq: u64,
        /// What each rank asked for.
        calls: Vec<RankCall>,
    },
    /// Collective `seq` was made by some ranks and never by `missing`.
    Missing {
        /// The communicator.
        unique: CommUniqueId,
        /// Its collective number.
        seq: u64,
        /// The ranks that made it.
        made: Vec<RankCall>,
        /// The ranks that never did, each with its last calls (oldest first) and its first
        /// failed call, if any.
        missing: Vec<(u32, Vec<RankCall>, Option<RankCall>)>,
    },
    /// A rank of the communicator whose trace is not among those given.
    NoTrace {
        /// The communicator.
        unique: CommUniqueId,
        /// The ranks without a trace (the first 64).
        ranks: Vec<u32>,
    },
}

/// One trace's part in the set.
struct Member<'t> {
    trace: &'t Trace,
    /// Per communicator it joined: its rank, the ranks in all, and where its collectives
    /// are in the trace's call list (a flight dump's calls keep the recording's numbers, so
    /// a number is not a place), by collective number.
    comms: BTreeMap<CommUniqueId, (u32, u32, BTreeMap<u64, usize>)>,
}

/// A communicator a trace's rank is in: joined in the trace (a `comm_init` that returned it)
/// or, for a flight dump, before it began (its checkpoint's `Adopted::Comm`).
#[derive(Clone, Copy, Debug)]
pub struct Joined {
    /// Its id in this trace.
    pub id: CommId,
    /// The unique id every rank joined with.
    pub unique: CommUniqueId,
    /// This rank, of `nranks`.
    pub rank: u32,
    pub nranks: u32,
}

/// The communicators `trace` is in: those a checkpoint lists first, then those it joins, in
/// order.
pub fn joined_comms(trace: &Trace) -> Vec<Joined> {
    let adopted = trace.adopted.iter().filter_map(|a| match a {
        crate::trace::Adopted::Comm {
            id,
            unique,
            nranks,
            rank,
            ..
        } => Some(Joined {
            id: *id,
            unique: *unique,
            rank: *rank,
            nranks: *nranks,
        }),
        _ => None,
    });
    let joined = trace.calls.iter().filter_map(|c| match (&c.call, &c.ret) {
        (
            Call::CommInit {
                unique,
                nranks,
                rank,
            },
            Some(Ok(Value::Comm(id))),
        ) => Some(Joined {
            id: *id,
            unique: *unique,
            rank: *rank,
            nranks: *nranks,
        }),
        _ => None,
    });
    adopted.chain(joined).collect()
}

fn member(trace: &Trace) -> Member<'_> {
    let mut ids: BTreeMap<CommId, CommUniqueId> = BTreeMap::new();
    let mut comms: BTreeMap<CommUniqueId, (u32, u32, BTreeMap<u64, usize>)> = BTreeMap::new();
    for j in joined_comms(trace) {
        ids.insert(j.id, j.unique);
        comms.insert(j.unique, (j.rank, j.nranks, BTreeMap::new()));
    }
    for (at, c) in trace.calls.iter().enumerate() {
        if let Call::Collective { comm, seq, .. } = &c.call {
            if let Some(e) = ids.get(comm).and_then(|u| comms.get_mut(u)) {
                e.2.insert(*seq, at);
            }
        }
    }
    Member { trace, comms }
}

/// The call at place `at` of `t`'s call list, as the report shows it.
fn rank_call(t: &Trace, rank: u32, at: usize) -> RankCall {
    let c = &t.calls[at];
    RankCall {
        rank,
        call: c.seq,
        text: call_text(t, &c.call),
        site: t.site(c.site),
        ret: ret_text(&c.ret),
    }
}

/// What must agree across ranks for collective `c` to be the same one.
fn shape(c: &Call) -> Option<(crate::backend::Collective, u64, crate::backend::CollDtype)> {
    match c {
        Call::Collective {
            op, count, dtype, ..
        } => Some((*op, *count, *dtype)),
        _ => None,
    }
}

/// Match the collectives of `traces` (one per rank, in any order) and report where the ranks
/// parted; empty when every communicator's ranks made the same collectives.
pub fn match_ranks(traces: &[Trace]) -> Vec<RankFinding> {
    let members: Vec<Member> = traces.iter().map(member).collect();
    let mut by_comm: BTreeMap<CommUniqueId, (u32, BTreeMap<u32, usize>)> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        for (u, (rank, n, _)) in &m.comms {
            by_comm
                .entry(*u)
                .or_insert((*n, BTreeMap::new()))
                .1
                .insert(*rank, i);
        }
    }
    let mut out = Vec::new();
    for (unique, (nranks, ranks)) in by_comm {
        // At most 64 named: a hostile trace may claim 4 billion ranks.
        let absent: Vec<u32> = (0..nranks.min((ranks.len() as u32).saturating_add(64)))
            .filter(|r| !ranks.contains_key(r))
            .collect();
        if !absent.is_empty() {
            out.push(RankFinding::NoTrace {
                unique,
                ranks: absent,
            });
        }
        let colls = |r: u32| &members[ranks[&r]].comms[&unique].2;
        // Flight dumps of the ranks start at their own checkpoints: compare from the first
        // collective every trace can hold, over the numbers some rank made (a hostile trace
        // may number one 2^64 - 1: no walk over the numbers between).
        let first = ranks
            .keys()
            .filter_map(|r| colls(*r).keys().next().copied())
            .max()
            .unwrap_or(0);
        let seqs: std::collections::BTreeSet<u64> = ranks
            .keys()
            .flat_map(|r| colls(*r).range(first..).map(|(s, _)| *s))
            .collect();
        for seq in seqs {
            let made: Vec<RankCall> = ranks
                .iter()
                .filter_map(|(r, i)| {
                    colls(*r)
                        .get(&seq)
                        .map(|call| rank_call(members[*i].trace, *r, *call))
                })
                .collect();
            let missing: Vec<u32> = ranks
                .keys()
                .copied()
                .filter(|r| !colls(*r).contains_key(&seq))
                .collect();
            if !missing.is_empty() {
                let missing = missing
                    .into_iter()
                    .map(|r| {
                        let t = members[ranks[&r]].trace;
                        let tail = t.calls.len().saturating_sub(3);
                        let last: Vec<RankCall> = (tail..t.calls.len())
                            .map(|at| rank_call(t, r, at))
                            .collect();
                        let failed = t
                            .calls
                            .iter()
                            .position(|c| matches!(c.ret, Some(Err(_))))
                            .map(|at| rank_call(t, r, at));
                        (r, last, failed)
                    })
                    .collect();
                out.push(RankFinding::Missing {
                    unique,
                    seq,
                    made,
                    missing,
                });
                break;
            }
            let shapes: Vec<_> = ranks
                .iter()
                .filter_map(|(r, i)| {
                    let at = *colls(*r).get(&seq)?;
                    shape(&members[*i].trace.calls[at].call)
                })
                .collect();
            // Point to point: a send and its peer's receive are one exchange.
            let p2p = shapes.iter().all(|s| {
                matches!(
                    s,
                    (
                        crate::backend::Collective::Send { .. }
                            | crate::backend::Collective::Recv { .. },
                        ..
                    )
                )
            });
            if !p2p && shapes.windows(2).any(|w| w[0] != w[1]) {
                out.push(RankFinding::Mismatch {
                    unique,
                    seq,
                    calls: made,
                });
                break;
            }
        }
    }
    out
}

/// The findings as text, one block each, with sites.
pub fn render_findings(f: &[RankFinding]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let line = |s: &mut String, c: &RankCall| {
        let _ = writeln!(
            s,
            "  rank {}: #{} {} -> {} @ {}",
            c.rank, c.call, c.text, c.ret, c.site
        );
    };
    for x in f {
        match x {
            RankFinding::Mismatch { unique, seq, calls } => {
                let _ = writeln!(
                    s,
                    "communicator {unique}, collective #{seq}: the ranks asked for different collectives"
                );
                for c in calls {
                    line(&mut s, c);
                }
            }
            RankFinding::Missing {
                unique,
                seq,
                made,
                missing,
            } => {
                let who: Vec<String> = missing.iter().map(|(r, ..)| r.to_string()).collect();
                let _ = writeln!(
                    s,
                    "communicator {unique}, collective #{seq}: rank(s) {} never made it",
                    who.join(", ")
                );
                for c in made {
                    line(&mut s, c);
                }
                for (r, last, failed) in missing {
                    let _ = writeln!(s, " rank {r} instead, last calls:");
                    for c in last {
                        line(&mut s, c);
                    }
                    if let Some(c) = failed {
                        let _ = writeln!(s, " rank {r} failed first at:");
                        line(&mut s, c);
                    }
                }
            }
            RankFinding::NoTrace { unique, ranks } => {
                let _ = writeln!(
                    s,
                    "communicator {unique}: no trace given for rank(s) {ranks:?}"
                );
            }
        }
    }
    s
}
