//! `gputape trim`: a long recording cut to the calls that matter, starting from the device
//! state the calls before them left, so the cut replays on its own. That state comes from a
//! replay, which on the mock needs every kernel's CPU body: an engine's own kernels have one
//! only in a tool built with its modules (`cli::main_with`).

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::common::{open_trace, parse_range, write_trace_atomically};
use super::{Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// The trace to cut.
    trace: PathBuf,
    /// The calls to keep, A..B (B exclusive; `A..` to the end).
    #[arg(long, value_parser = parse_range)]
    range: (u64, u64),
    /// Where to write the cut trace.
    #[arg(short, long)]
    output: PathBuf,
    /// The backend that replays the calls before A.
    #[arg(long, value_enum, default_value_t = Backend::Mock)]
    on: Backend,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    trim(ctx, &a.trace, a.range, &a.output, a.on)?;
    Ok(Exit::Pass)
}

fn trim(ctx: &Ctx, path: &Path, range: (u64, u64), out: &Path, on: Backend) -> Result<()> {
    let t = open_trace(ctx, path)?;
    let o = backends::open(ctx, on, Want::replay())?;
    let load = |m: &crate::backend::ModuleCode| o.load_trace_code(m);
    let cut = crate::replayer::Replayer::new(&t).trim(o.gpu.as_ref(), range, Some(&load))?;
    let bytes = write_trace_atomically(&cut, out)?;
    println!(
        "kept calls {}..{} of {} as {} calls, starting from the state at #{} ({} buffers, {} bytes); wrote {} ({bytes} bytes)",
        range.0,
        range.1.min(t.calls.last().map_or(0, |c| c.seq + 1)),
        t.calls.len(),
        cut.calls.len(),
        range.0,
        cut.initial.len(),
        cut.initial.iter().map(|i| i.bytes).sum::<u64>(),
        out.display()
    );
    Ok(())
}
