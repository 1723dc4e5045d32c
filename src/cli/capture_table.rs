//! `gputape capture-table`: the capture rules the analyses judge by, checked against what a
//! backend really does, so a driver (or mock) that behaves differently is found by a probe
//! rather than by a wrong verdict.

use anyhow::Result;

use super::backends::{self, Backend, Want};
use super::{Ctx, Exit};
use crate::backend::GpuBackend;

#[derive(clap::Args)]
pub struct Args {
    /// The backend whose capture behaviour is probed.
    #[arg(long, value_enum, default_value_t = Backend::Mock)]
    on: Backend,
    /// Exit with an error when any probe disagrees with the table.
    #[arg(long)]
    strict: bool,
    /// Print the rule table itself instead of running the probes.
    #[arg(long)]
    rules: bool,
    /// Print the probes as JSON (schema gputape.capture-table.v1).
    #[arg(long)]
    json: bool,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    if a.rules {
        print!("{}", crate::backend::render_rules());
        return Ok(Exit::Pass);
    }
    capture_table(ctx, a.on, a.strict, a.json)
}

fn capture_table(ctx: &Ctx, on: Backend, strict: bool, json: bool) -> Result<Exit> {
    use crate::backend::{probe, CaptureMode, StreamKind};
    let code = |e: &anyhow::Error| crate::driver_code(e).unwrap_or(0);
    // Opened once up front, so a missing backend is this command's error, not every probe's.
    drop(backends::open(ctx, on, Want::default())?);
    let rows = probe::run_all(
        &|mode: CaptureMode, kind: StreamKind| -> Result<Box<dyn GpuBackend>> {
            let want = Want {
                capture: Some((mode, kind)),
                ..Want::default()
            };
            Ok(Box::new(backends::open(ctx, on, want)?.gpu))
        },
        &code,
    );
    let bad = rows.iter().filter(|r| !r.agrees()).count();
    if json {
        let probes: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "op": format!("{:?}", r.probe.op),
                    "relation": format!("{:?}", r.probe.relation),
                    "stream_kind": r.probe.kind.name(),
                    "mode": r.probe.mode.name(),
                    "same_thread": r.probe.same_thread,
                    "rule": r.rule,
                    "expected": r.expected.describe(),
                    "observed": match &r.observed {
                        Ok(o) => o.describe(),
                        Err(e) => format!("probe failed: {e}"),
                    },
                    "agrees": r.agrees(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gputape.capture-table.v1",
                "backend": on.name(),
                "probes": probes,
                "disagree": bad,
            }))?
        );
    } else {
        print!("{}", probe::render_rows(&rows));
    }
    if strict && bad > 0 {
        eprintln!("{bad} probe(s) disagree with the capture rule table");
        return Ok(Exit::Findings);
    }
    Ok(Exit::Pass)
}
