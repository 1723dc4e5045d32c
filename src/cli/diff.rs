//! `gputape diff`: two recordings of the same work compared, to say what an engine change
//! changed on the GPU side; its exit status lets a CI job fail on any difference.

use anyhow::Result;
use std::path::PathBuf;

use super::common::open_trace;
use super::{pass_if, Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// The first trace.
    a: PathBuf,
    /// The second trace.
    b: PathBuf,
    /// Print as JSON (schema gputape.diff.v2: v1's fields plus `results`, the first result
    /// that differs and by how much).
    #[arg(long)]
    json: bool,
}

pub fn exec(args: Args, ctx: &Ctx) -> Result<Exit> {
    let Args { a, b, json } = args;
    let ta = open_trace(ctx, &a)?;
    let tb = open_trace(ctx, &b)?;
    let (text, differs) = crate::trace::diff_report(&ta, &tb);
    if json {
        let lines: Vec<&str> = text.lines().collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gputape.diff.v2",
                "differs": differs,
                "results": crate::trace::result_diff(&ta, &tb, crate::trace::same_calls(&ta, &tb)),
                "a": {"path": a, "calls": ta.calls.len(), "cut": ta.cut.as_ref().map(|c| &c.reason)},
                "b": {"path": b, "calls": tb.calls.len(), "cut": tb.cut.as_ref().map(|c| &c.reason)},
                "report": lines,
            }))?
        );
    } else {
        print!("{text}");
    }
    Ok(pass_if(!differs))
}
