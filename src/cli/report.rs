//! `gputape report`: one HTML page about a trace, made to be attached to a bug report or kept
//! as a CI artifact, so it carries everything and fetches nothing.

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::common::{open_trace, print_json, stdout_free_for_json, write_out};
use super::{Ctx, Exit};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// The trace to report on.
    trace: PathBuf,
    /// Where to write the page (`-` for stdout).
    #[arg(short, long)]
    output: PathBuf,
    /// Print a summary of the page written as JSON (schema gputape.report.v1); the page then
    /// goes to a file, not stdout.
    #[arg(long)]
    json: bool,
}

/// `report --json`: the page written, and what it found.
#[derive(Serialize)]
struct Summary<'a> {
    schema: &'static str,
    trace: &'a Path,
    output: &'a Path,
    bytes: usize,
    calls: usize,
    /// Why a flight dump was taken, when the trace is one.
    dump_reason: Option<&'a str>,
    /// What the page lists: recorded faults, capture breakers (calls that fail in a capture of
    /// the main stream), races, leaks and use-after-free.
    faults: usize,
    capture_breakers: usize,
    races: usize,
    lifetimes: usize,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    stdout_free_for_json(a.json, &[("--output", Some(&a.output))])?;
    let t = open_trace(ctx, &a.trace)?;
    let (page, r) = crate::analysis::report::page(&t, &a.trace.display().to_string());
    let written = write_out(&a.output, page.as_bytes())?;
    if !a.json {
        if written {
            eprintln!("wrote {} ({} bytes)", a.output.display(), page.len());
        }
        return Ok(Exit::Pass);
    }
    print_json(&Summary {
        schema: "gputape.report.v1",
        trace: &a.trace,
        output: &a.output,
        bytes: page.len(),
        calls: t.calls.len(),
        dump_reason: t.dump.as_ref().map(|d| d.reason.as_str()),
        faults: crate::analysis::window::fault_windows(&t).len(),
        capture_breakers: r.verdicts.iter().filter(|v| v.category == "fails").count(),
        races: r.races.len(),
        lifetimes: r.lifetimes.iter().filter(|l| l.is_problem()).count(),
    })?;
    Ok(Exit::Pass)
}
