//! `gputape minimize`: a fault's trace cut down to what still reproduces it, so a bug report
//! carries a few calls instead of a whole run. The search is `replayer::minimize`; this verb
//! supplies the oracle, a replay on the chosen backend (in a child process where a fault would
//! end this one's CUDA context).

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::common::{open_trace, temp_beside, write_trace_atomically};
use super::{Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// The trace to shrink.
    trace: PathBuf,
    /// Where to write the small trace.
    #[arg(short, long)]
    output: PathBuf,
    /// The backend each attempt replays on.
    #[arg(long, value_enum, default_value_t = Backend::Mock)]
    on: Backend,
    /// Give up shrinking after this many replays (what was found so far is written).
    #[arg(long, default_value_t = 400)]
    max_attempts: usize,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    minimize(ctx, &a.trace, &a.output, a.on, a.max_attempts)
}

fn minimize(ctx: &Ctx, path: &Path, out: &Path, on: Backend, max_attempts: usize) -> Result<Exit> {
    use crate::replayer::{
        minimize, signature, FaultSignature, MinimizeError, ReplayOptions, Replayer,
    };
    let t = open_trace(ctx, path)?;
    // A hang's dump: each candidate replays in a child under a deadline (`replay` does that
    // for such traces), and one that is killed there reproduces it.
    let hang = t.is_hang_dump();
    let deadline = std::env::var("GPUTAPE_REPLAY_DEADLINE_S")
        .unwrap_or_else(|_| format!("{:.3}", t.recorded_span_ns() as f64 * 2e-9 + 3.0));
    let before = std::fs::metadata(path)?.len();
    // Opened once up front, so a missing backend is this command's error.
    drop(backends::open(ctx, on, Want::default())?);
    let opts = ReplayOptions {
        verify: false,
        ..Default::default()
    };
    let attempt_file = temp_beside(out).with_extension("attempt.gtape");
    let mut oracle = |cand: &crate::trace::Trace| -> Result<Option<FaultSignature>> {
        if hang {
            std::fs::write(&attempt_file, cand.to_bytes()?)?;
            let child = std::process::Command::new(std::env::current_exe()?)
                .args(["replay", "--on", on.name(), "--json"])
                .arg(&attempt_file)
                .env("GPUTAPE_REPLAY_DEADLINE_S", &deadline)
                .stderr(std::process::Stdio::null())
                .output()?;
            let v: serde_json::Value = serde_json::from_slice(&child.stdout).unwrap_or_default();
            return Ok((v["hang"]["reproduced"] == true).then(FaultSignature::hang));
        }
        let report = match on.fault_poisons_process() {
            false => {
                let m = backends::open(ctx, on, Want::replay())?;
                match Replayer::new(cand).run(m.gpu.as_ref(), &opts, None, |_| {}) {
                    Ok(r) => r,
                    // A candidate that cannot even be set up does not reproduce anything.
                    Err(_) => return Ok(None),
                }
            }
            // Each candidate in a child: the first fault would end this process's context.
            true => {
                std::fs::write(&attempt_file, cand.to_bytes()?)?;
                let child = std::process::Command::new(std::env::current_exe()?)
                    .args(["replay", "--on", on.name(), "--json", "--no-isolate"])
                    .arg(&attempt_file)
                    .stderr(std::process::Stdio::null())
                    .output()?;
                let v: serde_json::Value = match serde_json::from_slice(&child.stdout) {
                    Ok(v) => v,
                    Err(_) => return Ok(None),
                };
                // Only the faults decide the signature.
                match serde_json::from_value(v["faults"].clone()) {
                    Ok(faults) => crate::replayer::ReplayReport {
                        faults,
                        ..Default::default()
                    },
                    Err(_) => return Ok(None),
                }
            }
        };
        Ok(signature(&report).map(|(s, _)| s))
    };
    let mut last_note = std::time::Instant::now();
    let mut progress = |attempt: usize, calls: usize| {
        if last_note.elapsed().as_secs() >= 2 {
            eprintln!("minimize: attempt {attempt}, candidate of {calls} calls");
            last_note = std::time::Instant::now();
        }
    };
    let m = minimize(&t, &mut oracle, max_attempts, &mut progress);
    let _ = std::fs::remove_file(&attempt_file);
    let m = match m {
        Ok(m) => m,
        // A recorded fault the replay does not reproduce is a finding (exit 1), as for
        // `replay`; a trace that records no fault is a usage error (2), like any other
        // command given the wrong input.
        Err(e @ MinimizeError::NotReproduced(_)) => {
            eprintln!("minimize: {e}");
            return Ok(Exit::Findings);
        }
        Err(e) => return Err(e.into()),
    };
    let after = write_trace_atomically(&m.trace, out)?;
    let initial_bytes = |t: &crate::trace::Trace| t.initial.iter().map(|i| i.bytes).sum::<u64>();
    println!("fault kept: {}", m.signature);
    println!(
        "calls: {} -> {}; initial buffers: {} ({} bytes) -> {} ({} bytes); file: {before} -> {after} bytes",
        t.calls.len(),
        m.trace.calls.len(),
        t.initial.len(),
        initial_bytes(&t),
        m.trace.initial.len(),
        initial_bytes(&m.trace),
    );
    println!(
        "{} replay(s){}; wrote {}",
        m.attempts,
        if m.budget_hit {
            " (stopped at --max-attempts: a smaller trace may exist)"
        } else {
            ""
        },
        out.display()
    );
    print!("{}", crate::trace::render(&m.trace));
    Ok(Exit::Pass)
}
