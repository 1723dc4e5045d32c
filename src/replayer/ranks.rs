//! A rank set replayed together: one thread and one backend per rank's trace, as the ranks
//! ran. Each communicator the traces joined is joined again under one fresh unique id that
//! every rank's replay shares, so the collectives meet and exchange bytes again, and each
//! rank's readbacks after them are checked against its recording as any readback is.

use super::{ReplayError, ReplayOptions, ReplayReport, Replayer};
use crate::backend::{CommUniqueId, GpuBackend};
use crate::trace::{Adopted, Call, Trace};
use std::collections::HashMap;

/// Replay `traces` (one per rank, any order) together, `backends[i]` running `traces[i]`.
/// Each rank's report, or why its replay could not run, in the order given; an error before
/// any ran when the counts differ or no fresh unique id could be had.
pub fn replay_ranks<B: GpuBackend + Sync>(
    traces: &[Trace],
    backends: &[B],
    opts: &ReplayOptions,
) -> anyhow::Result<Vec<Result<ReplayReport, ReplayError>>> {
    anyhow::ensure!(
        traces.len() == backends.len() && !traces.is_empty(),
        "{} trace(s) and {} backend(s): one backend per rank's trace",
        traces.len(),
        backends.len()
    );
    check_aligned(traces)?;
    let mut ids: HashMap<CommUniqueId, CommUniqueId> = HashMap::new();
    for t in traces {
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
        let hs: Vec<_> = traces
            .iter()
            .zip(backends)
            .map(|(t, b)| sc.spawn(move || Replayer::new(t).run(b, opts, None, |_| {})))
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

/// Each communicator's first collective in `t`, by unique id: 0 for one the trace joined, its
/// checkpoint's `next_seq` for one joined before the trace began (a flight dump's).
fn first_collectives(t: &Trace) -> HashMap<CommUniqueId, (u32, u64)> {
    let mut at = HashMap::new();
    for a in &t.adopted {
        if let Adopted::Comm {
            unique,
            rank,
            next_seq,
            ..
        } = a
        {
            at.insert(*unique, (*rank, *next_seq));
        }
    }
    for c in &t.calls {
        if let Call::CommInit { unique, rank, .. } = &c.call {
            at.entry(*unique).or_insert((*rank, 0));
        }
    }
    at
}

/// Traces that start at different collectives of one communicator cannot be replayed
/// together: their first collectives would meet each other, though the ranks made them at
/// different times (flight dumps whose checkpoints fell at different steps). Says which.
fn check_aligned(traces: &[Trace]) -> anyhow::Result<()> {
    let mut by_comm: HashMap<CommUniqueId, Vec<(u32, u64)>> = HashMap::new();
    for t in traces {
        for (unique, start) in first_collectives(t) {
            by_comm.entry(unique).or_default().push(start);
        }
    }
    check_pairs_aligned(traces)?;
    for (unique, mut starts) in by_comm {
        starts.sort_unstable();
        if starts.windows(2).any(|w| w[0].1 != w[1].1) {
            let each: Vec<String> = starts
                .iter()
                .map(|(rank, seq)| format!("rank {rank} at #{seq}"))
                .collect();
            anyhow::bail!(
                "the traces start at different collectives of communicator {unique} ({}): \
                 replayed together, their first collectives would meet though the ranks made \
                 them at different times (flight dumps whose checkpoints fell at different \
                 steps); `gputape ranks` still compares them from the first collective they all hold",
                each.join(", ")
            );
        }
    }
    Ok(())
}

/// Sends likewise: where the sender's and the receiver's traces both hold exchanges of their
/// pair, the first must have the same number on both sides, or one side's first would wait
/// for one the other made before its trace began (a flight dump's). A whole recording starts
/// at the pair's first; one side's exchange the other never made is a recorded failure, and
/// is replayed as it happened.
fn check_pairs_aligned(traces: &[Trace]) -> anyhow::Result<()> {
    use crate::analysis::ranks::joined_comms;
    use crate::backend::Exchange;
    // (communicator, sender, receiver) -> [the sender's first, the receiver's first].
    let mut firsts: std::collections::BTreeMap<(CommUniqueId, u32, u32), [Option<u64>; 2]> =
        Default::default();
    for t in traces {
        let comms: HashMap<_, _> = joined_comms(t)
            .into_iter()
            .map(|j| (j.id, (j.unique, j.rank)))
            .collect();
        for c in &t.calls {
            let Call::Collective { comm, seq, op, .. } = &c.call else {
                continue;
            };
            let Some((unique, rank)) = comms.get(comm) else {
                continue;
            };
            if let Exchange::Pair { from, to, seq } = Exchange::of(*op, *seq, *rank) {
                let side = usize::from(*rank == to);
                let first = &mut firsts.entry((*unique, from, to)).or_default()[side];
                first.get_or_insert(seq);
            }
        }
    }
    for ((unique, from, to), [sent, received]) in firsts {
        if let (Some(a), Some(b)) = (sent, received) {
            anyhow::ensure!(
                a == b,
                "the traces start at different sends from rank {from} to rank {to} on \
                 communicator {unique} (rank {from}'s first send #{a}, rank {to}'s first \
                 receive #{b}): replayed together, each side's first would wait for one the \
                 other made before its dump began; `gputape ranks` still compares them"
            );
        }
    }
    Ok(())
}
