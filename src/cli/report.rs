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
    #[arg(short, long, required_unless_present = "bug")]
    output: Option<PathBuf>,
    /// Write a bug report into directory DIR instead: the trace minimized on CUDA (under
    /// compute-sanitizer --tool, when there is one, keeping its finding), the sanitizer's
    /// findings on the result, a standalone C program that reproduces it with only the CUDA
    /// driver (`export --program`), the report page, and a README with the verdict and where
    /// it was recorded. Exit 0 when the minimized repro reproduces it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["output", "json"])]
    bug: Option<PathBuf>,
    /// With --bug: the compute-sanitizer tool (memcheck for faults; racecheck for a race in
    /// shared memory; initcheck for reads of never-written memory; synccheck). Default:
    /// memcheck, then, when it finds nothing to keep, racecheck, initcheck and synccheck in
    /// turn.
    #[arg(long, value_name = "TOOL", requires = "bug", value_parser = clap::builder::PossibleValuesParser::new(crate::replayer::sanitizer::TOOLS))]
    tool: Option<String>,
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
    if let Some(dir) = &a.bug {
        let dir = super::report_bug::check_dir(dir)?;
        return super::report_bug::exec(ctx, &a.trace, &dir, a.tool.as_deref());
    }
    let output = a
        .output
        .clone()
        .expect("clap requires --output without --bug");
    stdout_free_for_json(a.json, &[("--output", Some(&output))])?;
    let t = open_trace(ctx, &a.trace)?;
    let (page, r) = crate::analysis::report::page(&t, &a.trace.display().to_string());
    let written = write_out(&output, page.as_bytes())?;
    if !a.json {
        if written {
            eprintln!("wrote {} ({} bytes)", output.display(), page.len());
        }
        return Ok(Exit::Pass);
    }
    print_json(&Summary {
        schema: "gputape.report.v1",
        trace: &a.trace,
        output: &output,
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
