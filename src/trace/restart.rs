//! A dump begun again from one of its later checkpoints (`Frame::Restart`).
//!
//! A flight dump starts from its older checkpoint and holds the newer one too. In a rank set
//! each process's checkpoints fall where its own budget allows, so the ranks' dumps may begin
//! at different collectives; the collectives one rank made before another's dump begins have
//! nothing to meet in a replay, and what they received is in no dump. Where every rank's dump
//! holds a checkpoint at the same collective, each is begun from there instead and nothing is
//! left out.

use super::{Call, CallRecord, GraphId, Trace, Value};
use std::collections::BTreeSet;

/// Why a dump cannot begin at one of its later checkpoints.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RestartError {
    /// There is no such checkpoint.
    #[error("the trace holds {held} later checkpoint(s): there is no checkpoint {index}")]
    NoSuch {
        /// The one asked for.
        index: usize,
        /// How many the trace holds.
        held: usize,
    },
    /// Its first call is not in the trace (a damaged or hand-made file).
    #[error(
        "checkpoint {index} (step {step}) begins at call #{seq}, which the trace does not hold"
    )]
    NoFirstCall {
        /// Which checkpoint.
        index: usize,
        /// Its step.
        step: u64,
        /// The call it names.
        seq: u64,
    },
    /// A capture is open across it: the graph would be cut in two.
    #[error("checkpoint {index} (step {step}) falls inside the capture begun at call #{begun}")]
    InsideCapture {
        /// Which checkpoint.
        index: usize,
        /// Its step.
        step: u64,
        /// The capture's `BeginCapture`.
        begun: u64,
    },
}

impl Trace {
    /// This trace begun at its later checkpoint `index`: that checkpoint's state as the
    /// initial one, the calls from its first on, and the later checkpoints after it. The
    /// captures of graphs made before it and launched after it are kept (a capture runs
    /// nothing, so it needs no state but the buffers it names, which are live at the
    /// checkpoint): a graph-launched step begun again still launches its graph.
    pub fn rebased(&self, index: usize) -> Result<Trace, RestartError> {
        let r = self.restarts.get(index).ok_or(RestartError::NoSuch {
            index,
            held: self.restarts.len(),
        })?;
        let at = self.calls.iter().position(|c| c.seq == r.first_seq).ok_or(
            RestartError::NoFirstCall {
                index,
                step: r.step,
                seq: r.first_seq,
            },
        )?;
        let (before, after) = self.calls.split_at(at);
        let kept =
            captures_used_after(before, after).map_err(|begun| RestartError::InsideCapture {
                index,
                step: r.step,
                begun,
            })?;
        let mut t = self.clone();
        t.initial = r.initial.clone();
        t.adopted = r.adopted.clone();
        t.addresses.extend(r.addresses.iter().copied());
        t.calls = before
            .iter()
            .filter(|c| kept.contains(&c.seq))
            .chain(after)
            .cloned()
            .collect();
        t.restarts = self.restarts[index + 1..].to_vec();
        let seqs: BTreeSet<u64> = t.calls.iter().map(|c| c.seq).collect();
        t.d2h_async.retain(|s, _| seqs.contains(s));
        t.sync_hashes.retain(|s, _| seqs.contains(s));
        t.size_buffers();
        Ok(t)
    }
}

/// The seqs of the calls in `before` that capture a graph `after` still launches (from each
/// such capture's `BeginCapture` to its `EndCapture`, every call between); `Err` with the
/// `BeginCapture` of a capture still open at the end of `before`.
fn captures_used_after(before: &[CallRecord], after: &[CallRecord]) -> Result<BTreeSet<u64>, u64> {
    let launched: BTreeSet<GraphId> = after
        .iter()
        .filter_map(|c| match c.call {
            Call::LaunchGraph { graph, .. } => Some(graph),
            _ => None,
        })
        .collect();
    let mut kept = BTreeSet::new();
    let mut open: Option<(usize, u64)> = None;
    for (i, c) in before.iter().enumerate() {
        match (&c.call, &c.ret) {
            (Call::BeginCapture { .. }, _) if open.is_none() => open = Some((i, c.seq)),
            (Call::EndCapture { .. }, Some(Ok(Value::Graph(g)))) => {
                if let Some((from, _)) = open.take() {
                    if launched.contains(g) {
                        kept.extend(before[from..=i].iter().map(|c| c.seq));
                    }
                }
            }
            (Call::EndCapture { .. }, _) => open = None,
            _ => {}
        }
    }
    match open {
        Some((_, begun)) => Err(begun),
        None => Ok(kept),
    }
}
