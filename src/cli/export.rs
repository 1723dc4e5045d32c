//! `gputape export`: a trace in the formats other tools draw (Perfetto, Graphviz), for when a
//! picture says more than `show` or `report`; or as a standalone C program that makes its
//! driver calls (`--program`), for a bug report to a kernel's owner.

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
    /// Write a standalone program into DIR that makes the trace's driver calls in order with
    /// their recorded arguments and checks each status and read back: `repro.c` (C, also valid
    /// C++), `build.sh` (`cc -O1 -o repro repro.c -lcuda`) and `data/` (module images,
    /// uploads, expected read backs). It needs the CUDA driver only, not gputape. Refused,
    /// naming the call, for a trace with calls it cannot make as recorded (kept by name only,
    /// collectives, tensor maps). Best on a `minimize`d trace: a few hundred lines.
    #[arg(long, value_name = "DIR")]
    program: Option<PathBuf>,
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
    program: Option<crate::repro::Written>,
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
        program,
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
        perfetto.is_some() || dot.is_some() || program.is_some(),
        "nothing to export: give --perfetto FILE, --dot FILE and/or --program DIR"
    );
    anyhow::ensure!(
        traces.len() == 1 || (dot.is_none() && program.is_none()),
        "--dot and --program take one trace: give one trace"
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
        program: None,
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
    if let Some(dir) = &program {
        let w = crate::repro::write_program(t, dir, &traces[0].display().to_string())?;
        if !json {
            eprintln!(
                "wrote {} ({} lines: {} of the trace's calls, {} that change nothing on the \
                 device left out) and {} ({} files, {} bytes); build: (cd {} && {})",
                w.source.display(),
                w.lines,
                w.calls,
                w.skipped,
                w.data.display(),
                w.data_files,
                w.data_bytes,
                dir.display(),
                w.build
            );
        }
        summary.program = Some(w);
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
