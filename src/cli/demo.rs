//! `gputape demo`: the built-in decoder run for its own sake, so there is something to record,
//! break (`--fault-step`) and catch (`--flight`) on any machine before an engine is wired in.

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::backends::Backend;
use super::common::{model_backend, model_config, FaultArgs, DEFAULT_CONFIG};
use super::{Ctx, Exit};
use crate::backend::GpuBackend;

#[derive(clap::Args)]
pub struct Args {
    /// Which backend runs the model.
    #[arg(long, value_enum, default_value_t = Backend::Mock)]
    backend: Backend,
    /// Decode steps to run (at most the model's positions: 256 default, 64 tiny).
    #[arg(long, default_value_t = 16)]
    steps: usize,
    /// Model size: `default` or `tiny`.
    #[arg(long, default_value = DEFAULT_CONFIG)]
    config: String,
    #[command(flatten)]
    fault: FaultArgs,
    /// Run behind the flight recorder, which keeps the last steps in memory and writes
    /// them into this directory as a trace if a call fails (GPUTAPE_FLIGHT_STEPS: steps
    /// between checkpoints, default 8; GPUTAPE_FLIGHT_SPILL_MB: blobs this large wait on
    /// disk beside the dumps, default 1, 0 keeps them in memory).
    #[arg(long)]
    flight: Option<PathBuf>,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    demo(
        ctx,
        a.backend,
        a.steps,
        &a.config,
        a.fault.plan(),
        a.flight.as_deref(),
    )?;
    Ok(Exit::Pass)
}

fn demo(
    ctx: &Ctx,
    backend: Backend,
    steps: usize,
    config: &str,
    fault: Option<crate::model::FaultPlan>,
    flight: Option<&Path>,
) -> Result<()> {
    if let Some(dir) = flight {
        let cfg = crate::recorder::FlightConfig::from_env(dir);
        let o = model_backend(ctx, backend, fault.is_some())?;
        let rec = crate::recorder::RecordingBackend::flight(o.gpu, cfg, o.desc)?;
        // The demo's red-zone scans are its own calls, not the model's: a dump keeps them
        // (a scan that finds a band written is what triggers it) marked as the tool's.
        let scan = || rec.tools_own(|r| r.scan_redzones());
        return demo_on(&rec, &scan, backend, steps, config, fault);
    }
    let o = model_backend(ctx, backend, fault.is_some())?;
    let gpu = o.gpu.as_ref();
    demo_on(gpu, &|| gpu.scan_redzones(), backend, steps, config, fault)
}

/// Reads the red zones after a step.
type Scan<'a> = dyn Fn() -> Result<usize> + 'a;

fn demo_on(
    gpu: &(dyn GpuBackend + 'static),
    scan_redzones: &Scan<'_>,
    backend: Backend,
    steps: usize,
    config: &str,
    fault: Option<crate::model::FaultPlan>,
) -> Result<()> {
    let fault_step = fault.map(|f| f.step);
    let cfg = model_config(config)?;
    anyhow::ensure!(
        steps <= cfg.max_seq,
        "--steps {steps} is more than the {} model's {} positions",
        cfg.name,
        cfg.max_seq
    );
    let mut model = crate::model::Model::load(gpu, cfg.clone())?;
    model.fault = fault;
    println!(
        "model {} ({} layers, hidden {}, vocab {}, {:.1} MB of f32 weights) on {}",
        cfg.name,
        cfg.layers,
        cfg.hidden,
        cfg.vocab,
        model.weights.bytes() as f64 / 1e6,
        backend.name()
    );
    let mut times = Vec::new();
    let mut fault_seen = None;
    let scan = fault_step.is_some() && backend.has_redzones();
    let result = crate::model::generate(gpu, &mut model, steps, |pos, tok, dt| {
        times.push(dt.as_secs_f64() * 1e3);
        println!(
            "step {pos:>3}  token {tok:>4}  {:8.3} ms",
            dt.as_secs_f64() * 1e3
        );
        if scan {
            // With a planted fault, read the red zones after every step so the report names
            // the step that wrote past its buffer.
            match scan_redzones() {
                Ok(0) => {}
                Ok(n) => {
                    println!(
                        "step {pos:>3}  RED ZONE: {n} guard band(s) written past their buffer"
                    );
                    fault_seen = Some(n);
                }
                Err(e) => println!("step {pos:>3}  red-zone scan failed: {e:#}"),
            }
        }
    });
    if let Err(e) = &result {
        println!("step {} failed: {e:#}", model.step_index);
    }
    let tokens = result.as_ref().cloned().unwrap_or_default();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if !times.is_empty() {
        println!(
            "generated {:?}
per-step median {:.3} ms (min {:.3}, max {:.3}) over {} steps",
            tokens,
            times[times.len() / 2],
            times[0],
            times[times.len() - 1],
            times.len()
        );
    }
    match (model.teardown(gpu), result.is_err()) {
        (Ok(()), _) => {}
        // After a fault the context may be gone, and teardown with it: say so once.
        (Err(e), true) => {
            let first = format!("{e:#}");
            println!(
                "teardown after the fault failed too: {}",
                first.split(": ").next().unwrap_or(&first)
            );
        }
        (Err(e), false) => return Err(e),
    }
    let swept = gpu.sweep_unreleased();
    println!("teardown: {swept} allocation(s) left for the sweep");
    if let Some(a) = gpu.kernel_registry().map(|r| r.audit()) {
        // The audit's first line is for -v; a lookup that did not resolve is always shown.
        if a.unresolved.is_empty() {
            tracing::info!("{}", a.render().trim_end());
        } else {
            print!("{}", a.render());
        }
    }
    if scan && fault_seen.is_none() {
        println!("the planted fault left no trace in the red zones");
    }
    Ok(())
}
