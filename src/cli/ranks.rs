//! `gputape ranks`: a rank set's traces side by side (one trace per rank, as each rank's
//! recorder wrote it): their communicators' collectives matched by number, and the first
//! place each communicator's ranks parted named with the ranks, the calls and their sites.

use anyhow::Result;
use std::path::PathBuf;

use super::common::open_trace;
use super::{Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// One trace per rank, in any order (their `comm_init` calls say which rank each is).
    #[arg(required = true)]
    traces: Vec<PathBuf>,
}

/// Exit 0 when every communicator's ranks made the same collectives, 1 where they parted.
pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    let traces = a
        .traces
        .iter()
        .map(|p| open_trace(ctx, p))
        .collect::<Result<Vec<_>, _>>()?;
    let comms: usize = traces
        .iter()
        .map(|t| {
            t.calls
                .iter()
                .filter(|c| matches!(c.call, crate::trace::Call::CommInit { .. }))
                .count()
        })
        .sum();
    let found = crate::analysis::ranks::match_ranks(&traces);
    if found.is_empty() {
        println!(
            "{} trace(s), {comms} communicator join(s): every rank made the same collectives",
            traces.len()
        );
        return Ok(Exit::Pass);
    }
    print!("{}", crate::analysis::ranks::render_findings(&found));
    Ok(Exit::Findings)
}
