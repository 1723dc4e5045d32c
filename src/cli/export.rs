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
    if traces.len() > 1 {
        anyhow::ensure!(
            dot.is_none(),
            "--dot draws one trace's dependency graph: give one trace"
        );
        let opened = traces
            .iter()
            .map(|p| open_trace(ctx, p))
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&crate::trace::Trace> = opened.iter().collect();
        let names: Vec<String> = traces.iter().map(|p| p.display().to_string()).collect();
        let j = crate::analysis::timeline::perfetto_ranks(&refs, &names);
        let p = perfetto
            .as_deref()
            .expect("--perfetto, as --dot was refused");
        let text = serde_json::to_string(&j)?;
        if write_out(p, text.as_bytes())? && !json {
            eprintln!(
                "wrote {} ({} traces on one time line; load it in ui.perfetto.dev)",
                p.display(),
                traces.len()
            );
        }
        if json {
            print_json(&Summary {
                schema: "gputape.export.v1",
                trace: &traces[0],
                perfetto: Some(Written {
                    path: p,
                    bytes: text.len(),
                    items: j["traceEvents"].as_array().map_or(0, |a| a.len()),
                }),
                dot: None,
            })?;
        }
        return Ok(Exit::Pass);
    }
    let trace = &traces[0];
    let t = open_trace(ctx, trace)?;
    let q = crate::analysis::CaptureQuery::default();
    let mut summary = Summary {
        schema: "gputape.export.v1",
        trace,
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
