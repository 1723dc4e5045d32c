//! `gputape minimize` of a rank set (several traces): `replayer::minimize_ranks` with an
//! oracle that replays each candidate set together on fresh mock ranks, the engine's modules
//! loaded into each. Writes one trace per rank still needed, `OUTPUT` tagged with the rank.

use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::common::{open_trace, print_json, with_tag, write_trace_atomically};
use super::{Ctx, Exit};
use crate::replayer::{minimize_ranks, signature, MinimizeError, ReplayOptions};
use crate::trace::Trace;

/// `minimize --json` of a rank set (schema gputape.minimize-ranks.v1).
#[derive(Serialize)]
struct Summary<'a> {
    schema: &'static str,
    reproduced: bool,
    /// Why not, when not reproduced.
    why: Option<String>,
    /// The trace whose fault was kept.
    faulting: Option<&'a Path>,
    fault: Option<String>,
    /// The faulting rank's collectives before its fault, and those kept (on every rank).
    collectives: Option<(usize, usize)>,
    ranks: Vec<RankOut<'a>>,
    attempts: usize,
    budget_hit: bool,
}

/// One trace of the set: its calls before and after, and where the small one went (`None`:
/// the fault does not need this rank).
#[derive(Serialize)]
struct RankOut<'a> {
    trace: &'a Path,
    rank: Option<u32>,
    calls_before: usize,
    calls_after: Option<usize>,
    output: Option<PathBuf>,
}

/// The rank a trace ran as: in the first communicator it joined (or had joined, for a flight
/// dump).
fn rank_of(t: &Trace) -> Option<u32> {
    crate::analysis::ranks::joined_comms(t)
        .first()
        .map(|j| j.rank)
}

pub fn exec(
    ctx: &Ctx,
    paths: &[PathBuf],
    out: &Path,
    rank: Option<u32>,
    (max_attempts, json): (usize, bool),
) -> Result<Exit> {
    let traces = open_aligned(ctx, paths)?;
    let ranks: Vec<Option<u32>> = traces.iter().map(rank_of).collect();
    let chosen = match rank {
        None => None,
        Some(r) => Some(ranks.iter().position(|x| *x == Some(r)).ok_or_else(|| {
            anyhow::anyhow!("--rank {r}: no trace given ran as rank {r} (their ranks: {ranks:?})")
        })?),
    };
    // Opened once up front, so a missing backend is this command's error.
    drop(backends::open(ctx, Backend::Mock, Want::default())?);
    let opts = ReplayOptions {
        verify: false,
        ..Default::default()
    };
    let mut oracle = |cand: &[Trace], at: usize| {
        let backends = cand
            .iter()
            .map(|_| backends::open(ctx, Backend::Mock, Want::replay()).map(|o| o.gpu))
            .collect::<Result<Vec<_>>>()?;
        // A candidate set that cannot be set up reproduces nothing.
        let Ok(mut reports) = crate::replayer::replay_ranks(cand, &backends, &opts) else {
            return Ok(None);
        };
        Ok(match reports.swap_remove(at) {
            Ok(r) => signature(&r).map(|(s, _)| s),
            Err(_) => None,
        })
    };
    let mut progress = super::minimize::progress("candidate rank set");
    let m = match minimize_ranks(&traces, chosen, &mut oracle, max_attempts, &mut progress) {
        Ok(m) => m,
        Err(e @ MinimizeError::NotReproduced(_)) => {
            eprintln!("minimize: {e}");
            if json {
                print_json(&Summary {
                    schema: "gputape.minimize-ranks.v1",
                    reproduced: false,
                    why: Some(e.to_string()),
                    faulting: None,
                    fault: None,
                    collectives: None,
                    ranks: Vec::new(),
                    attempts: 0,
                    budget_hit: false,
                })?;
            }
            return Ok(Exit::Findings);
        }
        Err(MinimizeError::WhichRank(places)) => {
            let which: Vec<String> = places
                .iter()
                .map(|&i| match ranks[i] {
                    Some(r) => format!("{} (rank {r})", paths[i].display()),
                    None => paths[i].display().to_string(),
                })
                .collect();
            anyhow::bail!(
                "more than one trace records a fault of its own: {}; say which to keep with --rank",
                which.join(", ")
            );
        }
        Err(MinimizeError::NoFault) => anyhow::bail!(
            "{} (no call failed with a device error, no red zone was found written)",
            match rank {
                Some(r) => format!("rank {r}'s trace records no fault to keep"),
                None => format!(
                    "none of the {} traces records a fault to keep",
                    traces.len()
                ),
            }
        ),
        Err(e) => return Err(e.into()),
    };
    let outs = write_smalls(&m.traces, (paths, &ranks, &traces), out)?;
    if json {
        print_json(&Summary {
            schema: "gputape.minimize-ranks.v1",
            reproduced: true,
            why: None,
            faulting: Some(&paths[m.faulting]),
            fault: Some(m.signature.to_string()),
            collectives: Some(m.collectives),
            ranks: outs,
            attempts: m.attempts,
            budget_hit: m.budget_hit,
        })?;
        return Ok(Exit::Pass);
    }
    print_kept(&m, paths, &outs);
    Ok(Exit::Pass)
}

/// The traces at `paths`; dumps that begin at different collectives are shrunk from a
/// checkpoint they all hold, where there is one (the small traces then leave nothing out
/// either). A trace begun where it began is taken as opened, not copied.
fn open_aligned(ctx: &Ctx, paths: &[PathBuf]) -> Result<Vec<Trace>> {
    let opened = paths
        .iter()
        .map(|p| open_trace(ctx, p))
        .collect::<Result<Vec<_>, _>>()?;
    let rebased: Vec<Option<Trace>> = crate::replayer::aligned(&opened)
        .into_iter()
        .zip(paths)
        .map(|(a, p)| {
            let from = a.from?;
            eprintln!("minimize: {}: {from}", p.display());
            Some(a.trace.into_owned())
        })
        .collect();
    Ok(opened
        .into_iter()
        .zip(rebased)
        .map(|(t, r)| r.unwrap_or(t))
        .collect())
}

/// Each rank's small trace written beside `out` (tagged with its rank), where the fault still
/// needs it.
fn write_smalls<'p>(
    smalls: &[Option<Trace>],
    (paths, ranks, traces): (&'p [PathBuf], &[Option<u32>], &[Trace]),
    out: &Path,
) -> Result<Vec<RankOut<'p>>> {
    let mut outs = Vec::new();
    for (i, small) in smalls.iter().enumerate() {
        let output = match small {
            Some(t) => {
                let tag = format!("rank{}", ranks[i].map_or(i as u32, |r| r));
                let p = with_tag(out, &tag);
                write_trace_atomically(t, &p)?;
                Some(p)
            }
            None => None,
        };
        outs.push(RankOut {
            trace: &paths[i],
            rank: ranks[i],
            calls_before: traces[i].calls.len(),
            calls_after: small.as_ref().map(|t| t.calls.len()),
            output,
        });
    }
    Ok(outs)
}

/// What was kept, for a person.
fn print_kept(m: &crate::replayer::RanksMinimized, paths: &[PathBuf], outs: &[RankOut<'_>]) {
    println!(
        "fault kept: {}, on {}",
        m.signature,
        paths[m.faulting].display()
    );
    let (before, after) = m.collectives;
    println!("collectives: {before} -> {after}, kept on every rank still in the set");
    for r in outs {
        let who = r.rank.map_or(String::new(), |k| format!(" (rank {k})"));
        match (&r.output, r.calls_after) {
            (Some(p), Some(n)) => println!(
                "{}{who}: {} -> {n} calls, wrote {}",
                r.trace.display(),
                r.calls_before,
                p.display()
            ),
            _ => println!(
                "{}{who}: not needed (the fault needs none of its collectives)",
                r.trace.display()
            ),
        }
    }
    println!(
        "{} replay(s){}",
        m.attempts,
        if m.budget_hit {
            " (stopped at --max-attempts: a smaller set may exist)"
        } else {
            ""
        }
    );
}
