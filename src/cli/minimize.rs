//! `gputape minimize`: a fault's trace cut down to what still reproduces it, so a bug report
//! carries a few calls instead of a whole run. The search is `replayer::minimize`; this verb
//! supplies the oracle, a replay on the chosen backend (in a child process where a fault would
//! end this one's CUDA context). Given several traces, it shrinks them as a rank set
//! (`minimize_ranks.rs`).

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::common::{open_trace, print_json, temp_beside, write_trace_atomically};
use super::{Ctx, Exit};
use crate::replayer::FaultSignature;
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// The trace to shrink; or a rank set's traces (one per rank, any order), shrunk together
    /// on mock ranks with their collectives kept matched.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Where to write the small trace (for a rank set, `OUTPUT` with `.rankR` before its
    /// extension, per rank still needed).
    #[arg(short, long)]
    output: PathBuf,
    /// A rank set: the rank whose fault to keep (by its rank in its communicator), where more
    /// than one trace records a fault of its own.
    #[arg(long)]
    rank: Option<u32>,
    /// The backend each attempt replays on. Default: as `replay` chooses (the mock, unless
    /// the trace launches kernels only a GPU runs).
    #[arg(long, value_enum)]
    on: Option<Backend>,
    /// Give up shrinking after this many replays (what was found so far is written).
    #[arg(long, default_value_t = 400)]
    max_attempts: usize,
    /// Print a summary as JSON (schema gputape.minimize.v1) instead of the text and the
    /// small trace's calls.
    #[arg(long)]
    json: bool,
    /// Keep a wrong value instead of a fault: the NaN a recorded readback holds, with the
    /// launch `replay --check-finite` names as its first writer. Implied for a flight dump
    /// taken for a NaN.
    #[arg(long)]
    check_finite: bool,
    /// On CUDA, keep a compute-sanitizer finding instead of the driver's error: each attempt
    /// is replayed under the tool (`replay --sanitize TOOL`), and a candidate reproduces the
    /// fault when the tool names the same finding in the same kernel.
    #[arg(long, value_name = "TOOL", value_parser = clap::builder::PossibleValuesParser::new(crate::replayer::sanitizer::TOOLS), conflicts_with = "check_finite")]
    sanitize: Option<String>,
}

/// `minimize --json`: what was kept, from what, in how many replays. `reproduced: false`
/// (exit 1) when the whole trace does not reproduce its fault: `why` says so and `kept` is
/// null.
#[derive(Serialize)]
struct Summary<'a> {
    schema: &'static str,
    trace: &'a Path,
    backend: &'static str,
    reproduced: bool,
    /// Why not, when not reproduced.
    why: Option<String>,
    kept: Option<Kept<'a>>,
}

#[derive(Serialize)]
struct Kept<'a> {
    output: &'a Path,
    /// The fault the small trace still reproduces, in words, and its parts.
    fault: String,
    signature: FaultSignature,
    /// Replays run, the first (of the whole trace) included.
    attempts: usize,
    /// Stopped at --max-attempts: a smaller trace may exist.
    budget_hit: bool,
    calls: Before,
    initial_buffers: Before,
    initial_bytes: Before,
    file_bytes: Before,
}

/// A size before and after.
#[derive(Serialize)]
struct Before {
    before: u64,
    after: u64,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    if a.traces.len() > 1 || a.rank.is_some() {
        if let Some(on) = a.on.filter(|b| *b != Backend::Mock) {
            anyhow::bail!(
                "a rank set is shrunk on mock ranks only (replaying it on CUDA takes a GPU per rank): leave out --on {}",
                on.name()
            );
        }
        anyhow::ensure!(
            !a.check_finite,
            "--check-finite keeps a wrong value of one trace; a rank set is shrunk for a fault"
        );
        return super::minimize_ranks::exec(
            ctx,
            &a.traces,
            &a.output,
            a.rank,
            (a.max_attempts, a.json),
        );
    }
    let t = open_trace(ctx, &a.traces[0])?;
    let on = match a.on {
        Some(b) => b,
        None => backends::choose(ctx, None, &t, &a.traces[0])?,
    };
    minimize(
        ctx,
        (t, &a.traces[0]),
        &a.output,
        on,
        (a.max_attempts, a.json, a.check_finite),
        a.sanitize.as_deref(),
    )
}

/// The oracle of a wrong-value shrink: the candidate's finite check reproduces the recorded
/// non-finite readback, and names this first writer.
fn finite_signature(
    ctx: &Ctx,
    on: Backend,
    cand: &crate::trace::Trace,
) -> Result<Option<crate::replayer::FaultSignature>> {
    let m = backends::open(ctx, on, Want::replay())?;
    let load = |c: &crate::backend::ModuleCode| m.load_trace_code(c);
    let mut r = crate::replayer::Replayer::new(cand);
    if on.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    let opts = finite_options(&r, m.gpu.as_ref(), cand, None, &load);
    let Ok(rep) = r.check_finite(m.gpu.as_ref(), &opts, Some(&load)) else {
        return Ok(None);
    };
    Ok(match (&rep.first, rep.passed()) {
        (Some(f), true) => Some(crate::replayer::FaultSignature::value(f.value, &f.kernel)),
        _ => None,
    })
}

/// A finite check's options for `t`: with what each launch wrote, where its kernels are ones
/// nobody described (read from beside the trace at `path`, else measured on `gpu`), so each
/// candidate's first writer is judged as `replay --check-finite` judges it.
fn finite_options(
    r: &crate::replayer::Replayer<'_>,
    gpu: &dyn crate::backend::GpuBackend,
    t: &crate::trace::Trace,
    path: Option<&Path>,
    load: crate::replayer::ModuleLoader<'_>,
) -> crate::replayer::FiniteOptions {
    use crate::replayer::writes::{wanted, WriteOptions};
    let mut opts = crate::replayer::FiniteOptions::default();
    if wanted(t) {
        let w = match path {
            Some(p) => r.writes_for(gpu, p, Some(load)).map(|(w, _)| w),
            None => r.measure_writes(gpu, &WriteOptions::default(), String::new(), Some(load)),
        };
        opts.writes = w.ok().map(std::sync::Arc::new);
    }
    opts
}

/// What a long search says on stderr, at most every two seconds: the attempt, and how many
/// calls its `what` holds.
pub(super) fn progress(what: &'static str) -> impl FnMut(usize, usize) {
    let mut last_note = std::time::Instant::now();
    move |attempt, calls| {
        if last_note.elapsed().as_secs() >= 2 {
            eprintln!("minimize: attempt {attempt}, {what} of {calls} calls");
            last_note = std::time::Instant::now();
        }
    }
}

fn minimize(
    ctx: &Ctx,
    (t, path): (crate::trace::Trace, &Path),
    out: &Path,
    on: Backend,
    (max_attempts, json, check_finite): (usize, bool, bool),
    sanitize: Option<&str>,
) -> Result<Exit> {
    use crate::replayer::{minimize, minimize_value, MinimizeError};
    // A wrong value: the readback that recorded it is what each candidate must reproduce.
    let value = check_finite || t.dump.as_ref().is_some_and(|d| d.names_nan());
    let observed = match value {
        false => None,
        true => Some(recorded_nan(ctx, on, &t, path)?),
    };
    let before = std::fs::metadata(path)?.len();
    // Opened once up front, so a missing backend is this command's error.
    drop(backends::open(ctx, on, Want::default())?);
    if sanitize.is_some() {
        sanitizer_usable(on)?;
    }
    let oracle = Oracle {
        ctx,
        on,
        value,
        // A hang's dump: each candidate replays in a child under a deadline (`replay` does
        // that for such traces), and one that is killed there reproduces it.
        hang: t.is_hang_dump(),
        deadline: std::env::var("GPUTAPE_REPLAY_DEADLINE_S")
            .unwrap_or_else(|_| format!("{:.3}", t.recorded_span_ns() as f64 * 2e-9 + 3.0)),
        sanitize,
        attempt: super::common::Scratch(temp_beside(out).with_extension("attempt.gtape")),
    };
    let mut judge = |cand: &crate::trace::Trace| oracle.judge(cand);
    let mut progress = progress("candidate");
    let finding_at = match sanitize {
        Some(tool) if observed.is_none() && !crate::replayer::records_fault(&t) => {
            Some(whole_trace_finding(&t, path, tool, &mut judge)?)
        }
        _ => None,
    };
    let m = match (observed, &finding_at) {
        (Some(at), _) => minimize_value(&t, at, &mut judge, max_attempts, &mut progress),
        (None, Some((at, _))) => {
            crate::replayer::minimize_at(&t, *at, &mut judge, max_attempts, &mut progress)
        }
        (None, None) => minimize(&t, &mut judge, max_attempts, &mut progress),
    };
    let mut m = match m {
        Ok(m) => m,
        // A recorded fault the replay does not reproduce is a finding (exit 1), as for
        // `replay`; a trace that records no fault is a usage error (2), like any other
        // command given the wrong input.
        Err(e @ MinimizeError::NotReproduced(_)) => {
            eprintln!("minimize: {e}");
            if json {
                print_json(&Summary {
                    schema: "gputape.minimize.v1",
                    trace: path,
                    backend: on.name(),
                    reproduced: false,
                    why: Some(e.to_string()),
                    kept: None,
                })?;
            }
            return Ok(Exit::Findings);
        }
        Err(e) => return Err(e.into()),
    };
    if let (Some((_, want)), Some(tool)) = (&finding_at, sanitize) {
        // What the tool found is the trace's fault from now on: `replay --sanitize` checks it.
        let kernel = want.kernel.clone().unwrap_or_default();
        if let Some(seq) = crate::replayer::sanitizer::last_launch_of(&m.trace, &kernel) {
            m.trace.findings.push(crate::trace::Finding::Sanitizer {
                seq,
                tool: tool.to_string(),
                what: want.finding.clone().unwrap_or_default(),
                kernel,
            });
        }
    }
    let after = write_trace_atomically(&m.trace, out)?;
    let initial_bytes = |t: &crate::trace::Trace| t.initial.iter().map(|i| i.bytes).sum::<u64>();
    let before_after = |f: &dyn Fn(&crate::trace::Trace) -> u64| Before {
        before: f(&t),
        after: f(&m.trace),
    };
    let kept = Kept {
        output: out,
        fault: m.signature.to_string(),
        signature: m.signature.clone(),
        attempts: m.attempts,
        budget_hit: m.budget_hit,
        calls: before_after(&|t| t.calls.len() as u64),
        initial_buffers: before_after(&|t| t.initial.len() as u64),
        initial_bytes: before_after(&initial_bytes),
        file_bytes: Before { before, after },
    };
    if json {
        print_json(&Summary {
            schema: "gputape.minimize.v1",
            trace: path,
            backend: on.name(),
            reproduced: true,
            why: None,
            kept: Some(kept),
        })?;
        return Ok(Exit::Pass);
    }
    print_kept(&kept, &m.trace);
    Ok(Exit::Pass)
}

/// The recorded readback holding the NaN a wrong-value shrink keeps, found by a finite check
/// of the whole trace on `on`.
fn recorded_nan(ctx: &Ctx, on: Backend, t: &crate::trace::Trace, path: &Path) -> Result<u64> {
    let m = backends::open(ctx, on, Want::replay())?;
    let load = |c: &crate::backend::ModuleCode| m.load_trace_code(c);
    let mut r = crate::replayer::Replayer::new(t);
    if on.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    let opts = finite_options(&r, m.gpu.as_ref(), t, Some(path), &load);
    let rep = r.check_finite(m.gpu.as_ref(), &opts, Some(&load))?;
    match &rep.recorded {
        Some(rec) => Ok(rec.seq),
        None => anyhow::bail!(
            "{}: no recorded readback holds a NaN whose type the trace says, so there is no wrong value to keep{}",
            path.display(),
            if rep.checked_nothing() {
                " (and no launch could be checked on this backend: its kernels cannot run here)"
            } else {
                ""
            }
        ),
    }
}

/// `--sanitize` needs CUDA replays and the tool.
fn sanitizer_usable(on: Backend) -> Result<()> {
    anyhow::ensure!(
        on.fault_poisons_process(),
        "--sanitize runs compute-sanitizer over CUDA replays: add --on cuda"
    );
    if crate::replayer::sanitizer::find().is_none() {
        return Err(backends::NeedsTool(
            "compute-sanitizer (set COMPUTE_SANITIZER, put it on PATH, or CUDA_HOME)".into(),
        )
        .into());
    }
    Ok(())
}

/// Under the sanitizer, a trace with no recorded fault (a race, a read of unwritten memory)
/// keeps what the tool finds in the whole trace, ending at that kernel's last launch.
fn whole_trace_finding(
    t: &crate::trace::Trace,
    path: &Path,
    tool: &str,
    judge: &mut impl FnMut(&crate::trace::Trace) -> Result<Option<FaultSignature>>,
) -> Result<(u64, FaultSignature)> {
    let Some(want) = judge(t)? else {
        anyhow::bail!(
            "{}: compute-sanitizer {tool} finds nothing in a kernel in the whole trace, so there is nothing to keep",
            path.display(),
        );
    };
    let kernel = want.kernel.clone().unwrap_or_default();
    let at = crate::replayer::sanitizer::last_launch_of(t, &kernel).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: compute-sanitizer names {kernel}, which no launch of the trace ran",
            path.display()
        )
    })?;
    Ok((at, want))
}

/// How a candidate is judged: the fault it reproduces on `on`, if any.
struct Oracle<'a> {
    ctx: &'a Ctx<'a>,
    on: Backend,
    /// A wrong value is kept, not a fault.
    value: bool,
    /// A hang's dump: a candidate killed at its deadline reproduces it.
    hang: bool,
    deadline: String,
    sanitize: Option<&'a str>,
    /// Where a candidate replayed in a child is written (removed on any exit).
    attempt: super::common::Scratch,
}

impl Oracle<'_> {
    fn judge(&self, cand: &crate::trace::Trace) -> Result<Option<FaultSignature>> {
        if self.value {
            return finite_signature(self.ctx, self.on, cand);
        }
        if self.hang {
            let v = self.child_json(cand, &[], Some(&self.deadline))?;
            let v = v.unwrap_or_default();
            return Ok((v["hang"]["reproduced"] == true).then(FaultSignature::hang));
        }
        let report = match (self.on.fault_poisons_process(), self.sanitize) {
            (false, _) => {
                let m = backends::open(self.ctx, self.on, Want::replay())?;
                let opts = crate::replayer::ReplayOptions {
                    verify: false,
                    ..Default::default()
                };
                match crate::replayer::Replayer::new(cand).run(m.gpu.as_ref(), &opts, None, |_| {})
                {
                    Ok(r) => r,
                    // A candidate that cannot even be set up does not reproduce anything.
                    Err(_) => return Ok(None),
                }
            }
            // Under the sanitizer: the finding decides, whatever the driver's code.
            (true, Some(tool)) => {
                let Some(v) = self.child_json(cand, &["--sanitize", tool], None)? else {
                    return Ok(None);
                };
                let first = &v["sanitizer"]["findings"][0];
                return Ok(match (first["what"].as_str(), first["kernel"].as_str()) {
                    (Some(what), Some(kernel)) => Some(FaultSignature::finding(what, kernel)),
                    _ => None,
                });
            }
            // Each candidate in a child: the first fault would end this process's context.
            (true, None) => {
                let Some(v) = self.child_json(cand, &["--no-isolate"], None)? else {
                    return Ok(None);
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
        Ok(crate::replayer::signature(&report).map(|(s, _)| s))
    }

    /// A candidate replayed on `on` by a child `replay --json` with `extra` arguments (under
    /// `deadline`, when given): its report, or `None` where it printed none (it died first).
    fn child_json(
        &self,
        cand: &crate::trace::Trace,
        extra: &[&str],
        deadline: Option<&str>,
    ) -> Result<Option<serde_json::Value>> {
        std::fs::write(&self.attempt.0, cand.to_bytes()?)?;
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.args(["replay", "--on", self.on.name(), "--json"])
            .args(extra)
            .arg(&self.attempt.0)
            .stderr(std::process::Stdio::null());
        if let Some(d) = deadline {
            cmd.env("GPUTAPE_REPLAY_DEADLINE_S", d);
        }
        Ok(serde_json::from_slice(&cmd.output()?.stdout).ok())
    }
}

/// What was kept, for a person: the fault, the sizes before and after, and the calls.
fn print_kept(kept: &Kept<'_>, small: &crate::trace::Trace) {
    println!("fault kept: {}", kept.fault);
    println!(
        "calls: {} -> {}; initial buffers: {} ({} bytes) -> {} ({} bytes); file: {} -> {} bytes",
        kept.calls.before,
        kept.calls.after,
        kept.initial_buffers.before,
        kept.initial_bytes.before,
        kept.initial_buffers.after,
        kept.initial_bytes.after,
        kept.file_bytes.before,
        kept.file_bytes.after,
    );
    println!(
        "{} replay(s){}; wrote {}",
        kept.attempts,
        if kept.budget_hit {
            " (stopped at --max-attempts: a smaller trace may exist)"
        } else {
            ""
        },
        kept.output.display()
    );
    print!("{}", crate::trace::render(small));
}
