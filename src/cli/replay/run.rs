//! `replay`'s main mode: the trace replayed eagerly or as graphs, here or, where what the
//! trace records says so (`replayer::ReplayPolicy`), in a child process under the
//! deadline and hang rules of `replayer::child`.

use anyhow::Result;
use std::path::Path;

use super::super::backends::{self, Want};
use super::super::common::{check_range, step_range, timing_line, write_out};
use super::super::{pass_if, Ctx, Exit};
use super::Args;

/// The plain replay: eager, or as graphs with `--as-graph`.
pub(super) fn replay(ctx: &Ctx, mut a: Args) -> Result<Exit> {
    anyhow::ensure!(
        a.perfetto.as_deref() != Some(Path::new("-")),
        "replay --perfetto needs a file: standard output carries the replay's report"
    );
    let opts = crate::replayer::ReplayOptions {
        range: a.range,
        stop_at: a.stop_at,
        loops: a.loops as usize,
        sync_each: a.sync_each || a.perfetto.is_some(),
        scan_redzones_each: a.scan_redzones,
        verify: !a.no_verify,
        per_call_timing: a.timing || a.perfetto.is_some(),
        break_before: a.break_at,
        ..Default::default()
    };
    let t = a.take_trace(ctx)?;
    let Args {
        trace: ref path,
        on,
        as_graph,
        pdl,
        fixed_addresses,
        json,
        no_isolate,
        max_memory,
        ref perfetto,
        steps,
        ref child_report,
        ref sanitize,
        debug,
        break_at,
        ..
    } = a;
    let sanitize = sanitize.as_deref();
    let child_report = child_report.as_deref();
    use crate::replayer::Replayer;
    // A dump taken for a NaN: the NaN is what to reproduce, so the values are checked.
    let plain = !as_graph && perfetto.is_none() && opts.loops == 1 && child_report.is_none();
    if plain && t.dump.as_ref().is_some_and(|d| d.names_nan()) {
        eprintln!(
            "note: {} was dumped for a NaN; replaying it with --check-finite to find the launch that wrote it",
            path.display()
        );
        let finite = crate::replayer::FiniteOptions::default();
        return super::modes::finite(ctx, (&t, path), on, finite, (json, max_memory, true));
    }
    let stepped;
    let opts = match steps {
        Some(s) => {
            stepped = crate::replayer::ReplayOptions {
                range: Some(step_range(&t, s)?),
                ..opts.clone()
            };
            &stepped
        }
        None => &opts,
    };
    // What the trace records decides how it replays (see `replayer::ReplayPolicy`).
    let policy = crate::replayer::ReplayPolicy::of(&t);
    say_notes(
        &t,
        path,
        (sanitize, child_report),
        as_graph && !policy.as_graph(true),
    );
    let as_graph = policy.as_graph(as_graph);
    // A hang's dump is expected to hang again, on any backend: only a child can be killed.
    let hang_dump = t.is_hang_dump();
    if let (Some(tool), None) = (sanitize, child_report) {
        // Under the tool, always in a child: the tool runs the child, not this process.
        anyhow::ensure!(
            !on.runs_cpu_twins(),
            "--sanitize runs compute-sanitizer over a CUDA replay: add --on cuda"
        );
        let exe = crate::replayer::sanitizer::find().ok_or_else(|| {
            super::super::backends::NeedsTool(
                "compute-sanitizer (set COMPUTE_SANITIZER, put it on PATH, or CUDA_HOME)".into(),
            )
        })?;
        return in_child(ctx, &t, json, Some((tool, exe)));
    }
    if debug && std::env::var_os(crate::replayer::debugger::ENV_UNDER_DEBUGGER).is_none() {
        return under_debugger(ctx, &t, path, on, break_at);
    }
    if (policy.isolate(on.fault_poisons_process()) || hang_dump)
        && !no_isolate
        && child_report.is_none()
    {
        return in_child(ctx, &t, json, None);
    }
    let want = Want {
        redzones: policy.redzones(opts.scan_redzones_each).then_some(256),
        pdl,
        ..Want::replay()
    };
    let opened = backends::open(ctx, on, want)?;
    let gpu = opened.gpu.as_ref();
    let load_cuda = |m: &crate::backend::ModuleCode| opened.load_trace_code(m);
    let place = |addr: u64, bytes: usize| (opened.place)(addr, bytes);
    check_range(&t, opts.range)?;
    if !on.has_redzones() && opts.scan_redzones_each && child_report.is_none() {
        eprintln!(
            "note: the mock has no red zones (it checks every access against exact bounds instead): --scan-redzones does nothing there"
        );
    }
    let mut r = Replayer::new(&t).with_max_memory(max_memory);
    if on.runs_cpu_twins() {
        // An engine's own kernels have no CPU body here (unless this tool was built with its
        // modules, `cli::main_with`): skipped, and said so in the report.
        r = r.with_opaque_kernels();
    }
    if fixed_addresses {
        r = r.with_fixed_addresses(&place);
    } else if let Some(h) = r.hidden().first() {
        eprintln!(
            "note: {} holds the device address of {} (and {} more such words); the replay \
             stops if that buffer lands elsewhere (--fixed-addresses puts buffers where they were)",
            h.holder,
            h.target,
            r.hidden().len() - 1
        );
    }
    let mut done = if as_graph {
        graphs(&r, gpu, opts, &load_cuda)?
    } else {
        let ctl = Eager {
            json,
            child: child_report.is_some(),
            perfetto: perfetto.as_deref(),
            on,
        };
        eager(&t, &r, gpu, opts, &load_cuda, ctl)?
    };
    deliver(&mut done, &opened, pdl, child_report, json)
}

/// What the user should know before the replay's report: a cut trace, a sanitizer finding no
/// driver error shows, a graph replay refused for a trace that records a fault
/// (`graph_refused`). Said once, by the process the user started (not again by a child or
/// the replay cuda-gdb runs).
fn say_notes(
    t: &crate::trace::Trace,
    path: &Path,
    (sanitize, child_report): (Option<&str>, Option<&Path>),
    graph_refused: bool,
) {
    if let Some(cut) = &t.cut {
        eprintln!(
            "note: {} is cut after {} frames ({}); replaying the {} complete calls",
            path.display(),
            cut.frames,
            cut.reason,
            t.calls.iter().filter(|c| c.ret.is_some()).count()
        );
    }
    let inside_debugger = std::env::var_os(crate::replayer::debugger::ENV_UNDER_DEBUGGER).is_some();
    if let (None, None, false, Some((what, kernel))) = (
        sanitize,
        child_report,
        inside_debugger,
        crate::replayer::sanitizer::kept(t),
    ) {
        eprintln!(
            "note: {} keeps a compute-sanitizer finding ({what} in {kernel}) that no driver error shows: replay it with --on cuda --sanitize {}",
            path.display(),
            crate::replayer::sanitizer::kept_tool(t).unwrap_or("memcheck")
        );
    }
    if graph_refused && child_report.is_none() {
        eprintln!(
            "note: {} records a fault; replaying it eagerly (a graph replay would hide which call raised it)",
            path.display()
        );
    }
}

/// The replay's report where it is wanted: to the parent (`--child-report`), as JSON, or as
/// text, with what `--pdl` did.
fn deliver(
    done: &mut Outcome,
    opened: &backends::Opened,
    pdl: bool,
    child_report: Option<&Path>,
    json: bool,
) -> Result<Exit> {
    let (out, report, passed) = (&mut done.text, &done.report, done.passed);
    if pdl {
        match &opened.pdl_kernels {
            Some(count) => {
                let (pdl_kernels, kernels) = count();
                out.push_str(&format!(
                    "programmatic dependent launch: {pdl_kernels} of {kernels} kernel(s) (the others' PTX has no griddepcontrol.wait, so they launch the ordinary way)\n"
                ));
            }
            None => out.push_str("note: --pdl applies to CUDA replays only; ignored\n"),
        }
    }
    if let Some(p) = child_report {
        std::fs::write(
            p,
            serde_json::to_string(
                &serde_json::json!({"text": *out, "report": report, "passed": passed}),
            )?,
        )?;
        return Ok(pass_if(passed));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{out}");
    }
    Ok(pass_if(passed))
}

/// `--debug`: this same command again, in this process's place, under cuda-gdb (the replay
/// in one process: the debugger must see the faulting kernel).
fn under_debugger(
    ctx: &Ctx,
    t: &crate::trace::Trace,
    path: &std::path::Path,
    on: super::super::backends::Backend,
    break_at: Option<u64>,
) -> Result<Exit> {
    use crate::replayer::debugger;
    use std::io::IsTerminal;
    anyhow::ensure!(
        !on.runs_cpu_twins(),
        "--debug runs the replay under cuda-gdb, which debugs CUDA kernels: add --on cuda"
    );
    let exe = debugger::find().ok_or_else(|| {
        super::super::backends::NeedsTool(
            "cuda-gdb (set CUDA_GDB, put it on PATH, or CUDA_HOME)".into(),
        )
    })?;
    // A kept sanitizer finding (a race, a read of unwritten memory) raises nothing on the
    // device: stop in the launch it was found in.
    let auto = break_at
        .is_none()
        .then(|| crate::replayer::sanitizer::kept_launch(t))
        .flatten();
    let mut inner = ctx.args.clone();
    if let Some(n) = auto {
        eprintln!(
            "note: {} keeps a compute-sanitizer finding in launch #{n}: stopping in it",
            path.display()
        );
        inner.extend(["--break-at".into(), n.to_string().into()]);
    }
    let break_at = break_at.or(auto);
    if let Some(n) = break_at {
        debugger::check_break_at(t, path, n)?;
    } else if !crate::replayer::records_fault(t) {
        eprintln!(
            "note: {} records no fault, so nothing stops the debugger unless the replay faults; --break-at N stops in launch #N",
            path.display()
        );
    }
    let batch = !std::io::stdin().is_terminal();
    let status = std::process::Command::new(&exe)
        .args(debugger::args(break_at, batch))
        .arg(std::env::current_exe()?)
        .args(&inner)
        .arg("--no-isolate")
        .env(debugger::ENV_UNDER_DEBUGGER, "1")
        .status()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", exe.display()))?;
    Ok(pass_if(status.success()))
}

/// Replay in a child process (this same command again), so a fault that kills the CUDA
/// context, or a hang, leaves this one to report it; a child killed as hung is judged by
/// `replayer::child::HangVerdict`.
fn in_child(
    ctx: &Ctx,
    t: &crate::trace::Trace,
    json: bool,
    sanitize: Option<(&str, std::path::PathBuf)>,
) -> Result<Exit> {
    use crate::replayer::child::{replay_in_child, ChildOutcome};
    use crate::replayer::sanitizer;
    let dir = std::env::temp_dir().join(format!("gputape-replay-{}", std::process::id()));
    let log = std::env::temp_dir().join(format!("gputape-sanitizer-{}.log", std::process::id()));
    let me = std::env::current_exe()?;
    let mut cmd = match &sanitize {
        Some((tool, exe)) => {
            let mut c = std::process::Command::new(exe);
            c.args(sanitizer::wrap_args(tool, &log)).arg(&me);
            c
        }
        None => std::process::Command::new(&me),
    };
    cmd.args(&ctx.args);
    let run = match replay_in_child(cmd, t, &dir)? {
        ChildOutcome::Finished(run) => run,
        ChildOutcome::Killed(v) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&v.json())?);
            } else {
                print!("{}", v.text());
            }
            return Ok(pass_if(v.reproduced));
        }
    };
    let assert_line = run.first_assert.map(|l| {
        format!(
            "device-side assert: {} failing thread(s) reported by CUDA; first: {l}",
            run.asserts
        )
    });
    let Some(text) = run.report else {
        anyhow::bail!(
            "the replay process died before reporting ({}); the fault is past the point a report could be written",
            run.status
        );
    };
    let mut v: serde_json::Value = serde_json::from_str(&text)?;
    let placed: Vec<(crate::trace::BufferId, u64, u64)> = v["report"]
        .as_object_mut()
        .and_then(|r| r.remove("placed"))
        .and_then(|p| serde_json::from_value(p).ok())
        .unwrap_or_default();
    let mut extra = String::new();
    if let Some((tool, _)) = &sanitize {
        let report = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        let j = sanitizer::judge(t, tool, &report, &placed, &v["report"]);
        extra = j.text;
        if let Some(passed) = j.passed {
            v["passed"] = passed.into();
        }
        if let Some(seq) = j.stopped_by_tool {
            v["report"]["stopped_by_tool"] = seq.into();
        }
        v["report"]["sanitizer"] = j.json;
    }
    if json {
        if let Some(l) = &assert_line {
            v["report"]["device_assert"] = serde_json::json!({"threads": run.asserts, "first": l});
        }
        v["report"]["passed"] = v["passed"].clone();
        println!("{}", serde_json::to_string_pretty(&v["report"])?);
    } else {
        print!("{}", v["text"].as_str().unwrap_or_default());
        if let Some(l) = &assert_line {
            println!("{l}");
        }
        print!("{extra}");
        println!(
            "(replayed in a child process, which exited with {})",
            run.status
        );
    }
    Ok(pass_if(v["passed"].as_bool().unwrap_or(false)))
}

/// What a replay mode made: its text, its `--json` document and whether it passed.
struct Outcome {
    text: String,
    report: serde_json::Value,
    passed: bool,
}

/// `--as-graph`: the step's graphs built and launched `--loop` times, then the same step
/// eagerly in this process for the ratio.
fn graphs(
    r: &crate::replayer::Replayer<'_>,
    gpu: &dyn crate::backend::GpuBackend,
    opts: &crate::replayer::ReplayOptions,
    load_cuda: crate::replayer::ModuleLoader<'_>,
) -> Result<Outcome> {
    let mut out = String::new();
    let launches = opts.loops.max(1);
    let mut g = r.run_as_graph(gpu, opts.range, launches, Some(load_cuda))?;
    out.push_str(&g.summary());
    let passed = g.passed();
    if !g.loop_ms.is_empty() {
        out.push_str(&timing_line("graph replay", &g.loop_ms));
    }
    if let Some(t) = g.captured_timing() {
        out.push_str(&t);
    }
    if launches > 1 {
        // The same step eagerly, right after in this process: the ratio that matters.
        let eager = crate::replayer::ReplayOptions {
            range: g.step_range.or(opts.range),
            loops: launches,
            verify: opts.verify,
            ..Default::default()
        };
        g.eager_step_ms = r.run(gpu, &eager, None, |_| {})?.loop_ms;
        if let Some(t) = g.step_ratio() {
            out.push_str(&t);
        }
    }
    let report = crate::replayer::replay_json(None, Some(&g));
    Ok(Outcome {
        text: out,
        report,
        passed,
    })
}

/// How the eager replay reports, beyond the replayer's options.
struct Eager<'a> {
    json: bool,
    /// A child replay: it writes its progress for the parent (`replayer::child`).
    child: bool,
    perfetto: Option<&'a Path>,
    on: super::super::backends::Backend,
}

/// The eager replay, with a progress bar on long traces, the verdict on a hang's dump that
/// ran to its end, timings and `--perfetto`.
fn eager(
    t: &crate::trace::Trace,
    r: &crate::replayer::Replayer<'_>,
    gpu: &dyn crate::backend::GpuBackend,
    opts: &crate::replayer::ReplayOptions,
    load_cuda: crate::replayer::ModuleLoader<'_>,
    ctl: Eager<'_>,
) -> Result<Outcome> {
    let Eager {
        json,
        child,
        perfetto,
        on,
    } = ctl;
    let mut out = String::new();
    let total = t.calls.len() as u64;
    let bar = (total > 20_000 && !json).then(|| {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} calls {per_sec} eta {eta}",
            )
            .expect("valid template"),
        );
        b
    });
    // A child replay tells its parent how far it got, so a hang killed at its deadline
    // can be placed (`replayer::child`).
    let progress_file = child
        .then(crate::replayer::child::progress_writer)
        .flatten();
    let rep = r.run(gpu, opts, Some(load_cuda), |seq| {
        if let Some(f) = &progress_file {
            f(seq);
        }
        if let Some(b) = &bar {
            if seq % 1024 == 0 {
                b.set_position(seq);
            }
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    out.push_str(&rep.summary());
    // A hang's dump whose replay ran to its end: the hang did not happen again.
    let passed = rep.passed() && !t.is_hang_dump();
    if t.is_hang_dump() {
        out.push_str(&crate::replayer::child::finished_hang(
            t,
            &rep.opaque_kernels,
        ));
    }
    if !rep.loop_ms.is_empty() {
        out.push_str(&format!("recorded: {:.3} ms\n", rep.recorded_ms));
        out.push_str(&timing_line("eager replay", &rep.loop_ms));
    }
    if let Some(p) = perfetto {
        let spans: Vec<(u64, f64, f64)> = rep
            .per_call_us
            .iter()
            .map(|c| (c.seq, c.start_us, c.us))
            .collect();
        let j = crate::analysis::export::perfetto_with_device(
            t,
            crate::analysis::CaptureQuery::default(),
            Some(crate::analysis::export::DeviceSpans {
                measured_by: format!("replayed on {}, sync after each call", on.name()),
                spans: &spans,
            }),
        );
        if write_out(p, serde_json::to_string(&j)?.as_bytes())? {
            eprintln!(
                "wrote {} (load it in ui.perfetto.dev or chrome://tracing)",
                p.display()
            );
        }
    } else {
        for c in &rep.per_call_us {
            out.push_str(&format!("  #{:<6} {:10.1} us\n", c.seq, c.us));
        }
    }
    let mut report = crate::replayer::replay_json(Some(&rep), None);
    if child {
        // Where each buffer landed, for the parent to name the addresses a sanitizer's
        // findings give (taken out of the report before anyone sees it).
        report["placed"] = serde_json::to_value(&rep.seen.bufs)?;
    }
    Ok(Outcome {
        text: out,
        report,
        passed,
    })
}
