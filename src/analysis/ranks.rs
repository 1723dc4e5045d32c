//! A rank set's traces side by side: each communicator's group collectives matched by their
//! number across the ranks that joined it (the `unique` id of `comm_init` says which traces
//! belong together), and its sends paired with their receives, sender and receiver alone;
//! and where they part: collectives whose type, count or element type differ, and the first
//! collective (or send) some rank never made, with what that rank did last instead and the
//! failure, if any, that stopped it. The first parting is what broke the run; later ones
//! follow from it, so only the first of each communicator (and of each sender and receiver)
//! is reported. Flight dumps
//! work as well as whole recordings: a dump's checkpoint lists the communicators joined
//! before it (`Adopted::Comm`), and the comparison starts at the first collective that every
//! rank's dump holds.

use crate::backend::CommUniqueId;
pub use crate::backend::Exchange;
use crate::trace::{call_text, ret_text, Call, CommId, Trace, Value};
use std::collections::BTreeMap;

/// One rank's collective, as the report shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
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

/// Where a communicator's ranks parted (`ranks --json`: tagged by `kind`, communicators as
/// they print).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RankFinding {
    /// Collective `seq` was not the same collective on every rank.
    Mismatch {
        /// The communicator.
        #[serde(serialize_with = "displayed")]
        unique: CommUniqueId,
        /// Its collective number.
        seq: u64,
        /// What each rank asked for.
        calls: Vec<RankCall>,
    },
    /// In engine step `step` (from one `step_boundary` to the next, a step every rank's
    /// trace holds whole) the ranks made different numbers of group collectives on the
    /// communicator: one left a collective out or made one more, and from there their
    /// collectives pair off by one, which the numbers alone cannot show (NCCL runs such
    /// pairs as long as their shapes agree).
    StepDiffers {
        /// The communicator.
        #[serde(serialize_with = "displayed")]
        unique: CommUniqueId,
        /// The engine's step number.
        step: u64,
        /// Each rank's count, with its `step_boundary` call.
        counts: Vec<(usize, RankCall)>,
    },
    /// Collective `seq` was made by some ranks and never by `missing`.
    Missing {
        /// The communicator.
        #[serde(serialize_with = "displayed")]
        unique: CommUniqueId,
        /// Its collective number.
        seq: u64,
        /// The ranks that made it.
        made: Vec<RankCall>,
        /// The ranks that never did, each with its last calls (oldest first) and its first
        /// failed call, if any.
        missing: Vec<(u32, Vec<RankCall>, Option<RankCall>)>,
    },
    /// Send `seq` from rank `from` to rank `to` (the `seq`-th between the two) was made by
    /// one side and never by the other.
    Unpaired {
        /// The communicator.
        #[serde(serialize_with = "displayed")]
        unique: CommUniqueId,
        /// The sender and the receiver.
        from: u32,
        to: u32,
        /// Its number between the two.
        seq: u64,
        /// The side that made it.
        made: RankCall,
        /// The side that never did, with its last calls (oldest first) and its first failed
        /// call, if any.
        missing: (u32, Vec<RankCall>, Option<RankCall>),
    },
    /// Send `seq` from rank `from` to rank `to`: the two sides did not agree on how many
    /// elements of what type.
    PairMismatch {
        /// The communicator.
        #[serde(serialize_with = "displayed")]
        unique: CommUniqueId,
        from: u32,
        to: u32,
        seq: u64,
        /// The send, then the receive.
        calls: Vec<RankCall>,
    },
    /// A rank's trace ends inside a group (`comm_group_start` with no `comm_group_end`
    /// after it): the collectives it made there were held for the group's end, never
    /// issued, so they are not counted as made, and the ranks that met them wait.
    OpenGroup {
        /// The group's start.
        start: RankCall,
        /// The collectives held in it (the first 8).
        held: Vec<RankCall>,
        /// How many were held.
        held_count: usize,
    },
    /// A rank of the communicator whose trace is not among those given.
    NoTrace {
        /// The communicator.
        #[serde(serialize_with = "displayed")]
        unique: CommUniqueId,
        /// The ranks without a trace (the first 64).
        ranks: Vec<u32>,
    },
}

/// A value as it prints, for JSON (a communicator's unique id as its hex).
fn displayed<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// One trace's part in the set.
struct Member<'t> {
    trace: &'t Trace,
    /// Per communicator it joined: its rank, the ranks in all, whether it joined before the
    /// trace began (a flight dump's), and where its collectives are in the trace's call list
    /// (a flight dump's calls keep the recording's numbers, so a number is not a place), by
    /// exchange.
    comms: BTreeMap<CommUniqueId, Part>,
    /// Where its trace ends inside a group: the group's outermost start (a place in the
    /// call list; every collective after it was held there, never issued), the first 8 such
    /// collectives' places, and how many there were.
    open_group: Option<(usize, Vec<usize>, usize)>,
}

/// A trace's part in one communicator.
struct Part {
    rank: u32,
    nranks: u32,
    adopted: bool,
    colls: BTreeMap<Exchange, usize>,
    /// Where this rank's numbering of each pair it is in began, when the trace says
    /// (`pair_starts`).
    pair_starts: Option<PairStarts>,
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
    /// Joined before the trace began.
    pub adopted: bool,
    /// The number of its first group collective in the trace: 0 for one joined in it, what
    /// the checkpoint says for one joined before.
    pub next_seq: u64,
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
            next_seq,
        } => Some(Joined {
            id: *id,
            unique: *unique,
            rank: *rank,
            nranks: *nranks,
            adopted: true,
            next_seq: *next_seq,
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
            adopted: false,
            next_seq: 0,
        }),
        _ => None,
    });
    adopted.chain(joined).collect()
}

/// Where one rank's numbering of each (sender, receiver) pair it is in stood when its trace
/// began on a communicator.
#[derive(Clone, Debug, Default)]
pub struct PairStarts {
    /// The trace's rank there.
    pub rank: u32,
    /// The pairs a checkpoint listed, each with its next number; every other pair's is 0
    /// (a file's `nranks` may be anything, and is not a size to allocate by).
    pub listed: BTreeMap<(u32, u32), u64>,
}

impl PairStarts {
    /// The number of the first exchange from `from` to `to` this rank could have made in its
    /// trace.
    pub fn start(&self, from: u32, to: u32) -> u64 {
        self.listed.get(&(from, to)).copied().unwrap_or(0)
    }
}

/// Where `trace` began on each pair, by communicator unique id: from the checkpoint's
/// `Adopted::CommPairs` for one joined before the trace began, at 0 for one joined in it; a
/// dump of a format before 10, which lists no pairs, leaves its communicators out.
pub fn pair_starts(trace: &Trace) -> BTreeMap<CommUniqueId, PairStarts> {
    /// (peer, next number) lists: a `CommPairs`' sends and receives.
    type Lists<'a> = (&'a [(u32, u64)], &'a [(u32, u64)]);
    let listed: BTreeMap<CommId, Lists<'_>> = trace
        .adopted
        .iter()
        .filter_map(|a| match a {
            crate::trace::Adopted::CommPairs { id, sends, recvs } => {
                Some((*id, (sends.as_slice(), recvs.as_slice())))
            }
            _ => None,
        })
        .collect();
    let mut out = BTreeMap::new();
    for j in joined_comms(trace) {
        let (sends, recvs): Lists<'_> = match (j.adopted, listed.get(&j.id)) {
            (false, _) => (&[], &[]),
            (true, Some(l)) => *l,
            (true, None) => continue,
        };
        let sent = sends.iter().map(|&(peer, n)| ((j.rank, peer), n));
        let received = recvs.iter().map(|&(peer, n)| ((peer, j.rank), n));
        out.insert(
            j.unique,
            PairStarts {
                rank: j.rank,
                listed: sent.chain(received).collect(),
            },
        );
    }
    out
}

/// A collective of a trace, as a rank set names it.
#[derive(Clone, Copy, Debug)]
pub struct TraceExchange {
    /// Its place in the trace's call list.
    pub at: usize,
    /// Its communicator, and this trace's rank there.
    pub unique: CommUniqueId,
    pub rank: u32,
    /// Which collective.
    pub op: crate::backend::Collective,
    /// The name every rank taking part gives it.
    pub exchange: Exchange,
}

/// Every collective of `trace` on a communicator it is in, in call order: what the analysis
/// matches across ranks and `replay_ranks` aligns by.
pub fn exchanges(trace: &Trace) -> Vec<TraceExchange> {
    let comms: BTreeMap<CommId, (CommUniqueId, u32)> = joined_comms(trace)
        .into_iter()
        .map(|j| (j.id, (j.unique, j.rank)))
        .collect();
    trace
        .calls
        .iter()
        .enumerate()
        .filter_map(|(at, c)| {
            let Call::Collective { comm, seq, op, .. } = &c.call else {
                return None;
            };
            let (unique, rank) = *comms.get(comm)?;
            Some(TraceExchange {
                at,
                unique,
                rank,
                op: *op,
                exchange: Exchange::of(*op, *seq, rank),
            })
        })
        .collect()
}

fn member(trace: &Trace) -> Member<'_> {
    let mut comms: BTreeMap<CommUniqueId, Part> = BTreeMap::new();
    let mut starts = pair_starts(trace);
    for j in joined_comms(trace) {
        comms.insert(
            j.unique,
            Part {
                rank: j.rank,
                nranks: j.nranks,
                adopted: j.adopted,
                colls: BTreeMap::new(),
                pair_starts: starts.remove(&j.unique),
            },
        );
    }
    // Groups: a collective is issued at its group's outermost end, so those after the last
    // unclosed start never were. A dump may begin inside a group: an end with no start in
    // the trace closes nothing.
    let (mut depth, mut start, mut held, mut n) = (0u32, 0usize, Vec::new(), 0usize);
    for (at, c) in trace.calls.iter().enumerate() {
        match &c.call {
            Call::CommGroupStart => {
                if depth == 0 {
                    (start, n) = (at, 0);
                    held.clear();
                }
                depth = depth.saturating_add(1);
            }
            Call::CommGroupEnd => depth = depth.saturating_sub(1),
            Call::Collective { .. } if depth > 0 => {
                if held.len() < 8 {
                    held.push(at);
                }
                n += 1;
            }
            _ => {}
        }
    }
    let open_group = (depth > 0).then_some((start, held, n));
    let never_issued = |at: usize| open_group.as_ref().is_some_and(|(s, ..)| at > *s);
    for x in exchanges(trace) {
        if never_issued(x.at) {
            continue;
        }
        if let Some(e) = comms.get_mut(&x.unique) {
            e.colls.insert(x.exchange, x.at);
        }
    }
    Member {
        trace,
        comms,
        open_group,
    }
}

/// What `rank` did instead of an exchange it never made: its last three calls, and its first
/// failed call, if any.
fn instead(t: &Trace, rank: u32) -> (u32, Vec<RankCall>, Option<RankCall>) {
    let tail = t.calls.len().saturating_sub(3);
    let last: Vec<RankCall> = (tail..t.calls.len())
        .map(|at| rank_call(t, rank, at))
        .collect();
    let failed = t
        .calls
        .iter()
        .position(|c| matches!(c.ret, Some(Err(_))))
        .map(|at| rank_call(t, rank, at));
    (rank, last, failed)
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
    let mut out = Vec::new();
    for m in &members {
        let Some((start, held, n)) = &m.open_group else {
            continue;
        };
        // The rank it is in the first communicator it joined (a group spans them all).
        let rank = m.comms.values().next().map_or(0, |p| p.rank);
        out.push(RankFinding::OpenGroup {
            start: rank_call(m.trace, rank, *start),
            held: held
                .iter()
                .map(|at| rank_call(m.trace, rank, *at))
                .collect(),
            held_count: *n,
        });
    }
    let mut by_comm: BTreeMap<CommUniqueId, (u32, BTreeMap<u32, usize>)> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        for (u, p) in &m.comms {
            by_comm
                .entry(*u)
                .or_insert((p.nranks, BTreeMap::new()))
                .1
                .insert(p.rank, i);
        }
    }
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
        let part = |r: u32| &members[ranks[&r]].comms[&unique];
        let groups = |r: u32| {
            part(r).colls.iter().filter_map(|(x, at)| match x {
                Exchange::Group(seq) => Some((*seq, *at)),
                Exchange::Pair { .. } => None,
            })
        };
        let group_at = |r: u32, seq: u64| part(r).colls.get(&Exchange::Group(seq)).copied();
        out.extend(first_step_differing(&members, unique, &ranks));
        // Flight dumps of the ranks start at their own checkpoints: compare from the first
        // collective every trace can hold, over the numbers some rank made (a hostile trace
        // may number one 2^64 - 1: no walk over the numbers between).
        let first = ranks
            .keys()
            .filter_map(|r| groups(*r).next().map(|(s, _)| s))
            .max()
            .unwrap_or(0);
        let seqs: std::collections::BTreeSet<u64> = ranks
            .keys()
            .flat_map(|r| groups(*r).map(|(s, _)| s).filter(|s| *s >= first))
            .collect();
        for seq in seqs {
            let made: Vec<RankCall> = ranks
                .iter()
                .filter_map(|(r, i)| {
                    group_at(*r, seq).map(|call| rank_call(members[*i].trace, *r, call))
                })
                .collect();
            let missing: Vec<u32> = ranks
                .keys()
                .copied()
                .filter(|r| group_at(*r, seq).is_none())
                .collect();
            if !missing.is_empty() {
                let missing = missing
                    .into_iter()
                    .map(|r| instead(members[ranks[&r]].trace, r))
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
                .filter_map(|(r, i)| shape(&members[*i].trace.calls[group_at(*r, seq)?].call))
                .collect();
            if shapes.windows(2).any(|w| w[0] != w[1]) {
                out.push(RankFinding::Mismatch {
                    unique,
                    seq,
                    calls: made,
                });
                break;
            }
        }
        out.extend(match_pairs(&members, unique, &ranks));
    }
    out
}

/// Engine step -> (its `step_boundary` call, group collectives made in it).
type PerStep = BTreeMap<u64, (usize, usize)>;

/// The first engine step that every rank's trace of communicator `unique` holds whole and
/// in which the ranks made different numbers of its group collectives.
fn first_step_differing(
    members: &[Member],
    unique: CommUniqueId,
    ranks: &BTreeMap<u32, usize>,
) -> Option<RankFinding> {
    let steps: Vec<(u32, PerStep)> = ranks
        .iter()
        .map(|(r, i)| {
            (
                *r,
                group_per_step(members[*i].trace, &members[*i].comms[&unique]),
            )
        })
        .collect();
    let (_, first) = steps.first()?;
    let step = first.keys().copied().find(|s| {
        let mut n = steps.iter().map(|(_, m)| m.get(s).map(|(_, n)| *n));
        let Some(Some(n0)) = n.next() else {
            return false;
        };
        let all: Vec<Option<usize>> = n.collect();
        all.iter().all(Option::is_some) && all.iter().any(|n| *n != Some(n0))
    })?;
    Some(RankFinding::StepDiffers {
        unique,
        step,
        counts: steps
            .iter()
            .map(|(r, m)| {
                let (at, n) = m[&step];
                (n, rank_call(members[ranks[r]].trace, *r, at))
            })
            .collect(),
    })
}

/// How many of `part`'s group collectives `trace` made in each engine step it holds whole
/// (from a `step_boundary` to the next; the last, which may have been cut short, is left
/// out), with the step's `step_boundary` call.
fn group_per_step(trace: &Trace, part: &Part) -> PerStep {
    let groups: std::collections::BTreeSet<usize> = part
        .colls
        .iter()
        .filter(|(x, _)| matches!(x, Exchange::Group(_)))
        .map(|(_, at)| *at)
        .collect();
    let mut out = BTreeMap::new();
    let mut open: Option<(u64, usize, usize)> = None;
    for (i, c) in trace.calls.iter().enumerate() {
        if let Call::StepBoundary { step } = c.call {
            if let Some((s, at, n)) = open.take() {
                out.insert(s, (at, n));
            }
            open = Some((step, i, 0));
        } else if groups.contains(&i) {
            if let Some((_, _, n)) = &mut open {
                *n += 1;
            }
        }
    }
    out
}

/// The sends and receives of communicator `unique` paired across its ranks (`ranks`: each
/// rank's trace): for each sender and receiver, the first exchange one side made and the
/// other never did, or whose sides disagree on count or type. A side that joined before its
/// trace began (a flight dump) is compared from the first exchange of the pair it holds.
fn match_pairs(
    members: &[Member],
    unique: CommUniqueId,
    ranks: &BTreeMap<u32, usize>,
) -> Vec<RankFinding> {
    let part = |r: u32| &members[ranks[&r]].comms[&unique];
    // Every exchange either side made, by pair.
    let mut pairs: BTreeMap<(u32, u32), std::collections::BTreeSet<u64>> = BTreeMap::new();
    for r in ranks.keys() {
        for x in part(*r).colls.keys() {
            if let Exchange::Pair { from, to, seq } = *x {
                pairs.entry((from, to)).or_default().insert(seq);
            }
        }
    }
    let mut out = Vec::new();
    for ((from, to), seqs) in pairs {
        // A side without a trace is named by `NoTrace`.
        if !ranks.contains_key(&from) || !ranks.contains_key(&to) {
            continue;
        }
        let at = |r: u32, seq: u64| {
            part(r)
                .colls
                .get(&Exchange::Pair { from, to, seq })
                .copied()
        };
        let first_of = |r: u32| seqs.iter().copied().find(|s| at(r, *s).is_some());
        // Where each side's dump began on this pair: as its checkpoint says, or (a format
        // before 10) at the first of the pair's exchanges it holds.
        let start_of = |r: u32| match &part(r).pair_starts {
            Some(p) => Some(p.start(from, to)),
            None => first_of(r),
        };
        let starts: Vec<Option<u64>> = [from, to]
            .iter()
            .filter(|r| part(**r).adopted)
            .map(|r| start_of(*r))
            .collect();
        // A dump of an older format that holds none of this pair's exchanges says nothing
        // about them.
        if starts.iter().any(Option::is_none) {
            continue;
        }
        let first = starts.into_iter().flatten().max().unwrap_or(0);
        for seq in seqs.range(first..).copied() {
            let (send, recv) = (at(from, seq), at(to, seq));
            let call = |r: u32, a: usize| rank_call(members[ranks[&r]].trace, r, a);
            let (made, missing) = match (send, recv) {
                (Some(s), Some(r)) => {
                    let shape_of = |rank: u32, a: usize| {
                        shape(&members[ranks[&rank]].trace.calls[a].call).map(|x| (x.1, x.2))
                    };
                    if shape_of(from, s) != shape_of(to, r) {
                        out.push(RankFinding::PairMismatch {
                            unique,
                            from,
                            to,
                            seq,
                            calls: vec![call(from, s), call(to, r)],
                        });
                        break;
                    }
                    continue;
                }
                (Some(s), None) => (call(from, s), to),
                (None, Some(r)) => (call(to, r), from),
                (None, None) => continue,
            };
            out.push(RankFinding::Unpaired {
                unique,
                from,
                to,
                seq,
                made,
                missing: instead(members[ranks[&missing]].trace, missing),
            });
            break;
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
    // What a rank that never made an exchange did instead.
    let instead = |s: &mut String, (r, last, failed): &(u32, Vec<RankCall>, Option<RankCall>)| {
        let _ = writeln!(s, " rank {r} instead, last calls:");
        for c in last {
            line(s, c);
        }
        if let Some(c) = failed {
            let _ = writeln!(s, " rank {r} failed first at:");
            line(s, c);
        }
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
            RankFinding::StepDiffers {
                unique,
                step,
                counts,
            } => {
                let each: Vec<String> = counts
                    .iter()
                    .map(|(n, c)| format!("rank {}: {n}", c.rank))
                    .collect();
                let _ = writeln!(
                    s,
                    "communicator {unique}, step {step}: the ranks made different numbers of collectives ({}); from there their collectives pair off",
                    each.join(", ")
                );
                for (_, c) in counts {
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
                for m in missing {
                    instead(&mut s, m);
                }
            }
            RankFinding::Unpaired {
                unique,
                from,
                to,
                seq,
                made,
                missing,
            } => {
                let r = missing.0;
                let never = if r == *to { "received" } else { "sent" };
                let _ = writeln!(
                    s,
                    "communicator {unique}, send #{seq} from rank {from} to rank {to}: rank {r} never {never} it"
                );
                line(&mut s, made);
                instead(&mut s, missing);
            }
            RankFinding::PairMismatch {
                unique,
                from,
                to,
                seq,
                calls,
            } => {
                let _ = writeln!(
                    s,
                    "communicator {unique}, send #{seq} from rank {from} to rank {to}: the two sides disagree on count or type"
                );
                for c in calls {
                    line(&mut s, c);
                }
            }
            RankFinding::NoTrace { unique, ranks } => {
                let _ = writeln!(
                    s,
                    "communicator {unique}: no trace given for rank(s) {ranks:?}"
                );
            }
            RankFinding::OpenGroup {
                start,
                held,
                held_count,
            } => {
                let _ = writeln!(
                    s,
                    "rank {}: the trace ends inside a group begun at #{} ({}): its {} collective(s) after it were held for the group's end and never issued",
                    start.rank,
                    start.call,
                    start.site,
                    held_count
                );
                for c in held {
                    line(&mut s, c);
                }
            }
        }
    }
    s
}
