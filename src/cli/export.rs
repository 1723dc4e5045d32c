//! `gputape export`: a trace in the formats other tools draw (Perfetto, Graphviz), for when a
//! picture says more than `show` or `report`.

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::common::{open_trace, print_json, stdout_free_for_json, write_out};
use super::{Ctx, Exit};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// The trace to export.
    trace: PathBuf,
    /// Write Chrome/Perfetto trace-event JSON here (`-` for stdout).
    #[arg(long)]
    perfetto: Option<PathBuf>,
    /// Write the dependency graph as Graphviz DOT here (`-` for stdout).
    #[arg(long)]
    dot: Option<PathBuf>,
    /// Print a summary of what was written as JSON (schema gputape.export.v1); the exports
    /// then go to files, not stdout.
    #[arg(long)]
    json: bool,
}

/// `export --json`: each file written, and its size.
#[derive(Serialize)]
struct Summary<'a> {
    schema: &'static str,
    trace: &'a Path,
    perfetto: Option<Written<'a>>,
    dot: Option<Written<'a>>,
}

#[derive(Serialize)]
struct Written<'a> {
    path: &'a Path,
    bytes: usize,
    /// Trace events (Perfetto) or nodes (DOT).
    items: usize,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    let Args {
        trace,
        perfetto,
        dot,
        json,
    } = a;
    stdout_free_for_json(
        json,
        &[
            ("--perfetto", perfetto.as_deref()),
            ("--dot", dot.as_deref()),
        ],
    )?;
    let t = open_trace(ctx, &trace)?;
    let q = crate::analysis::CaptureQuery::default();
    anyhow::ensure!(
        perfetto.is_some() || dot.is_some(),
        "nothing to export: give --perfetto FILE and/or --dot FILE"
    );
    let mut summary = Summary {
        schema: "gputape.export.v1",
        trace: &trace,
        perfetto: None,
        dot: None,
    };
    if let Some(p) = &perfetto {
        let j = crate::analysis::export::perfetto(&t, q);
        let text = serde_json::to_string(&j)?;
        if write_out(p, text.as_bytes())? && !json {
            eprintln!(
                "wrote {} (load it in ui.perfetto.dev or chrome://tracing)",
                p.display()
            );
        }
        summary.perfetto = Some(Written {
            path: p,
            bytes: text.len(),
            items: j["traceEvents"].as_array().map_or(0, |a| a.len()),
        });
    }
    if let Some(p) = &dot {
        let text = crate::analysis::export::dot(&t, q);
        if write_out(p, text.as_bytes())? && !json {
            eprintln!("wrote {} (render with `dot -Tsvg`)", p.display());
        }
        summary.dot = Some(Written {
            path: p,
            bytes: text.len(),
            items: text.lines().filter(|l| is_node(l)).count(),
        });
    }
    if json {
        print_json(&summary)?;
    }
    Ok(Exit::Pass)
}

/// A DOT line that declares one of the graph's nodes (`n12 [label=...]`), not a cluster's or
/// the legend's.
fn is_node(line: &str) -> bool {
    line.trim_start()
        .strip_prefix('n')
        .and_then(|r| r.split_once(" [label="))
        .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}
