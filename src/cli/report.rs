//! `gputape report`: one HTML page about a trace, made to be attached to a bug report or kept
//! as a CI artifact, so it carries everything and fetches nothing.

use anyhow::Result;
use std::path::PathBuf;

use super::common::{open_trace, write_out};
use super::{Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// The trace to report on.
    trace: PathBuf,
    /// Where to write the page (`-` for stdout).
    #[arg(short, long)]
    output: PathBuf,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    let t = open_trace(ctx, &a.trace)?;
    let page = crate::analysis::report::html(&t, &a.trace.display().to_string());
    if write_out(&a.output, page.as_bytes())? {
        eprintln!("wrote {} ({} bytes)", a.output.display(), page.len());
    }
    Ok(Exit::Pass)
}
