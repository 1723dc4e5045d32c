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
