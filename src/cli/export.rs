//! `gputape export`: a trace in the formats other tools draw (Perfetto, Graphviz), for when a
//! picture says more than `show` or `report`.

use anyhow::Result;
use std::path::PathBuf;

use super::common::{open_trace, write_out};
use super::{Ctx, Exit};

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
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    let Args {
        trace,
        perfetto,
        dot,
    } = a;
    let t = open_trace(ctx, &trace)?;
    let q = crate::analysis::CaptureQuery::default();
    anyhow::ensure!(
        perfetto.is_some() || dot.is_some(),
        "nothing to export: give --perfetto FILE and/or --dot FILE"
    );
    if let Some(p) = perfetto {
        let j = crate::analysis::export::perfetto(&t, q);
        if write_out(&p, serde_json::to_string(&j)?.as_bytes())? {
            eprintln!(
                "wrote {} (load it in ui.perfetto.dev or chrome://tracing)",
                p.display()
            );
        }
    }
    if let Some(p) = dot {
        if write_out(&p, crate::analysis::export::dot(&t, q).as_bytes())? {
            eprintln!("wrote {} (render with `dot -Tsvg`)", p.display());
        }
    }
    Ok(Exit::Pass)
}
