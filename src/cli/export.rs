//! `gputape export`: a trace in the formats other tools draw (Perfetto, Graphviz), for when a
//! picture says more than `show` or `report`.

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::common::{open_trace, print_json, stdout_free_for_json, write_out};
use super::{Ctx, Exit};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// The trace to export; several (a rank set's, one per rank) go on one time line, each a
    /// process of its own, with `--perfetto` alone.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Write Chrome/Perfetto trace-event JSON here (`-` for stdout). Of several traces: laid
    /// by the wall time each recording's clock started at, each collective joined by a flow
    /// across the ranks that made it.
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
        traces,
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
    anyhow::ensure!(
        perfetto.is_some() || dot.is_some(),
        "nothing to export: give --perfetto FILE and/or --dot FILE"
    );
    anyhow::ensure!(
        traces.len() == 1 || dot.is_none(),
        "--dot draws one trace's dependency graph: give one trace"
    );
    let opened = traces
        .iter()
        .map(|p| open_trace(ctx, p))
        .collect::<Result<Vec<_>, _>>()?;
    let t = &opened[0];
    let q = crate::analysis::CaptureQuery::default();
    let mut summary = Summary {
        schema: "gputape.export.v1",
        trace: &traces[0],
        perfetto: None,
        dot: None,
    };
    if let Some(p) = &perfetto {
        // One trace as it was recorded; several (a rank set) on one time line.
        let (j, how) = match opened.as_slice() {
            [t] => (
                crate::analysis::export::perfetto(t, q),
                "load it in ui.perfetto.dev or chrome://tracing".to_string(),
            ),
            all => {
                let refs: Vec<&crate::trace::Trace> = all.iter().collect();
                let names: Vec<String> = traces.iter().map(|p| p.display().to_string()).collect();
                (
                    crate::analysis::timeline::perfetto_ranks(&refs, &names),
                    format!(
                        "{} traces on one time line; load it in ui.perfetto.dev",
                        all.len()
                    ),
                )
            }
        };
        let text = serde_json::to_string(&j)?;
        if write_out(p, text.as_bytes())? && !json {
            eprintln!("wrote {} ({how})", p.display());
        }
        summary.perfetto = Some(Written {
            path: p,
            bytes: text.len(),
            items: j["traceEvents"].as_array().map_or(0, |a| a.len()),
        });
    }
    if let Some(p) = &dot {
        let text = crate::analysis::export::dot(t, q);
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
