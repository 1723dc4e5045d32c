//! `gputape replay`: the verb the rest of the tool exists for. The options here only choose
//! how the replayer runs (`replayer::ReplayOptions`) and where it runs; what the trace records
//! decides the rest (`replayer::ReplayPolicy`). A replay that may kill a CUDA context runs in a
//! child process, which is this same command line again with a hidden `--child-report`.

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::common::{check_range, open_trace, parse_range, step_range, timing_line, write_out};
use super::{pass_if, Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// The trace to replay.
    trace: PathBuf,
    /// The backend to replay on.
    #[arg(long, value_enum, default_value_t = Backend::Mock)]
    on: Backend,
    /// Replay only calls A..B (the calls before A still run, to rebuild the state).
    #[arg(long, value_parser = parse_range, conflicts_with = "steps")]
    range: Option<(u64, u64)>,
    /// Replay only steps A..B, as the engine marked them (`step_boundary`); the calls
    /// before still run, to rebuild the state.
    #[arg(long, value_parser = parse_range)]
    steps: Option<(u64, u64)>,
    /// Stop after call N.
    #[arg(long)]
    stop_at: Option<u64>,
    /// Replay N times, each from the recorded initial state (restored into the same
    /// buffers, as an engine steps over long-lived ones).
    #[arg(long = "loop", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    loops: u32,
    /// Replay as CUDA graphs (through the trait: the mock emulates capture).
    #[arg(long)]
    as_graph: bool,
    /// Synchronise after every launch, so a fault is reported at its kernel.
    #[arg(long)]
    sync_each: bool,
    /// Scan red zones after every launch (CUDA).
    #[arg(long)]
    scan_redzones: bool,
    /// Do not compare device-to-host results with the recording (they are by default).
    #[arg(long)]
    no_verify: bool,
    /// The most host memory one replayed call may ask for (a readback buffer), in bytes; a
    /// trace asking for more is refused rather than trusted.
    #[arg(long, default_value_t = crate::replayer::DEFAULT_MAX_HOST_BYTES)]
    max_memory: u64,
    /// Print each call's host time (first loop); with --sync-each, a launch's time runs
    /// until its stream is synchronised, so it includes the kernel's run.
    #[arg(long)]
    timing: bool,
    /// Write a Perfetto/Chrome trace of the recording's host calls plus the device work as
    /// this replay timed it (one track per stream; implies --sync-each and --timing: a
    /// launch's span runs until its kernel finished, launch and sync latency included;
    /// other calls' spans are their host time).
    #[arg(long, value_name = "FILE", conflicts_with = "as_graph")]
    perfetto: Option<PathBuf>,
    /// Put every buffer at its recorded address (needed when buffers hold device
    /// addresses; CUDA uses the driver's virtual memory management).
    #[arg(long)]
    fixed_addresses: bool,
    /// On CUDA, launch kernels written for programmatic dependent launch (their PTX waits
    /// on the grid dependency) so each may start while the one before it finishes; in a
    /// graph that overlaps a node's launch with the previous node. Same as GPUTAPE_PDL=1.
    #[arg(long)]
    pdl: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// On CUDA, replay in this process even if the trace recorded a fault (an illegal
    /// address kills the CUDA context, so by default a child process runs such replays).
    #[arg(long)]
    no_isolate: bool,
    /// Scan what every launch writes for NaN (graph nodes run eagerly for it) and name the
    /// first launch that wrote one, its buffer, element and inputs. Exit 0 when nothing
    /// non-finite is written, or when a NaN the recording read back is reproduced and its
    /// writer named; 1 otherwise.
    #[arg(long, conflicts_with_all = ["as_graph", "perfetto", "loops"])]
    check_finite: bool,
    /// With --check-finite: count +Inf and -Inf as well as NaN.
    #[arg(long, requires = "check_finite")]
    inf: bool,
    /// With --check-finite or --against: never check this buffer (`buf7`); repeatable.
    #[arg(long = "ignore", value_name = "BUF", value_parser = parse_buffer)]
    ignore: Vec<crate::trace::BufferId>,
    /// With --check-finite or --against: read buffer BUF as TYPE (f32, f16, bf16), whatever
    /// its kernels say; repeatable (`--dtype buf12=bf16`).
    #[arg(long = "dtype", value_name = "BUF=TYPE", value_parser = parse_dtype)]
    dtypes: Vec<(crate::trace::BufferId, crate::backend::ElemType)>,
    /// Replay on --on and on this backend in lockstep and name the first launch whose
    /// written bytes differ (exit 1), e.g. `--on cuda --against mock`: the kernels against
    /// their CPU twins on a real recorded step.
    #[arg(long, value_enum, conflicts_with_all = ["as_graph", "perfetto", "loops", "check_finite"])]
    against: Option<Backend>,
    /// Replay on the mock twice in lockstep, as recorded and under chaos seeded with SEED
    /// (the same seed, the same schedule): streams run deferred and out of order as far as
    /// the trace's events and syncs allow, and fresh device memory holds 0xFF bytes (NaN)
    /// until written. Names the first launch whose written bytes differ from the plain replay
    /// and why: a missing dependency between streams, or a read of never-written memory
    /// (exit 1; 0 when nothing differs). On CUDA (`--on cuda`) the perturbed replay's
    /// streams are held at random before launches instead (up to --chaos-max-delay-us each), which lets work
    /// that should have waited on another stream run first; fresh memory is not poisoned there
    /// (compute-sanitizer --tool initcheck is CUDA's check for reads of unwritten memory).
    #[arg(long, value_name = "SEED", conflicts_with_all = ["as_graph", "perfetto", "loops", "check_finite", "against"])]
    chaos: Option<u64>,
    /// With --chaos on CUDA: the longest a stream is held before a launch, in microseconds.
    /// It must outlast the replay's own host time between the launches that race (a copy of
    /// each launch's output is set up between them), or the held work is done before the
    /// other stream's reaches the device.
    #[arg(long, value_name = "US", default_value_t = 20_000, requires = "chaos")]
    chaos_max_delay_us: u64,
    /// With --against: replay the --against side with this file's CUDA C as module MODULE's
    /// code (`llama_rmsnorm=new.cu`), the recorded code on the other: a kernel author's
    /// regression check on a real recorded step. Needs a backend that compiles (cuda).
    #[arg(long, value_name = "MODULE=FILE", requires = "against")]
    substitute: Option<String>,
    /// With --against: how far values may differ (`exact`, `ulps:N`, `rel:X`).
    #[arg(long, default_value = "exact", value_parser = crate::replayer::Tolerance::parse, requires = "against")]
    tolerance: crate::replayer::Tolerance,
    /// Replay once on the mock and print, from what the mock did, what the replay allocated
    /// (size, buffer, placement against the recording's) and freed, and per stream the work
    /// it ran in the order it ran, with the events between: the allocation and ordering a
    /// snapshot test holds (`gputape::replayer::replay_layout`).
    #[arg(long, conflicts_with_all = ["as_graph", "perfetto", "loops", "check_finite", "against", "chaos", "json"])]
    layout: bool,
    // Given by the parent of a child replay (see `replay_in_child`): where to write the report.
    #[arg(long, hide = true)]
    child_report: Option<PathBuf>,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    if a.layout {
        return layout(ctx, &a.trace, a.on);
    }
    if let Some(seed) = a.chaos {
        // On CUDA the schedule is the device's: the perturbed side's streams are held at
        // random before launches instead.
        let opts = crate::replayer::LockstepOptions {
            tolerance: crate::replayer::Tolerance::Exact,
            dtypes: a.dtypes,
            ignore: a.ignore,
            in_stream_order: true,
            delays: (!a.on.runs_cpu_twins()).then_some((seed, a.chaos_max_delay_us * 1000)),
        };
        return chaos(ctx, &a.trace, (a.on, seed), &opts, (a.json, a.max_memory));
    }
    if let Some(b) = a.against {
        let opts = crate::replayer::LockstepOptions {
            tolerance: a.tolerance,
            dtypes: a.dtypes,
            ignore: a.ignore,
            in_stream_order: false,
            delays: None,
        };
        let substitute = match &a.substitute {
            None => None,
            Some(s) => {
                let (module, file) = s
                    .split_once('=')
                    .ok_or_else(|| anyhow::anyhow!("--substitute {s:?}: expected MODULE=FILE"))?;
                let code = std::fs::read_to_string(file)
                    .map_err(|e| anyhow::anyhow!("--substitute: reading {file}: {e}"))?;
                Some((module.to_string(), code))
            }
        };
        return lockstep(
            ctx,
            &a.trace,
            (a.on, b),
            &opts,
            substitute,
            (a.json, a.max_memory),
        );
    }
    if a.check_finite {
        let opts = crate::replayer::FiniteOptions {
            inf: a.inf,
            ignore: a.ignore,
            dtypes: a.dtypes,
        };
        let t = open_trace(ctx, &a.trace)?;
        return check_finite(ctx, (&t, &a.trace), a.on, &opts, a.json, a.max_memory);
    }
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
        ..Default::default()
    };
    let flags = ReplayFlags {
        as_graph: a.as_graph,
        pdl: a.pdl,
        fixed_addresses: a.fixed_addresses,
        json: a.json,
        no_isolate: a.no_isolate,
        max_memory: a.max_memory,
        perfetto: a.perfetto,
        steps: a.steps,
    };
    replay(ctx, &a.trace, a.on, &opts, flags, a.child_report.as_deref())
}

/// `buf12` or `12`.
pub(super) fn parse_buffer(s: &str) -> Result<crate::trace::BufferId, String> {
    s.strip_prefix("buf")
        .unwrap_or(s)
        .parse()
        .map(crate::trace::BufferId)
        .map_err(|_| format!("{s:?} is not a buffer (try `buf12` or `12`)"))
}

/// `buf12=bf16`.
fn parse_dtype(s: &str) -> Result<(crate::trace::BufferId, crate::backend::ElemType), String> {
    let (b, t) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not BUF=TYPE (try `buf12=bf16`)"))?;
    let e = crate::backend::ElemType::parse(t)
        .ok_or_else(|| format!("{t:?} is not an element type (f32, f16, bf16)"))?;
    Ok((parse_buffer(b)?, e))
}

/// Refuse buffers the trace does not have, named on the command line.
fn known_buffers(
    t: &crate::trace::Trace,
    path: &Path,
    ignore: &[crate::trace::BufferId],
    dtypes: &[(crate::trace::BufferId, crate::backend::ElemType)],
) -> Result<()> {
    for b in ignore.iter().chain(dtypes.iter().map(|(b, _)| b)) {
        anyhow::ensure!(
            t.sizes.contains_key(b),
            "{} has no buffer {b} (its buffers are buf0..buf{})",
            path.display(),
            t.sizes.keys().last().map_or(0, |b| b.0)
        );
    }
    Ok(())
}

/// `replay --check-finite`: the first launch that wrote a NaN (see `replayer::finite`).
fn check_finite(
    ctx: &Ctx,
    (t, path): (&crate::trace::Trace, &Path),
    on: Backend,
    opts: &crate::replayer::FiniteOptions,
    json: bool,
    max_memory: u64,
) -> Result<Exit> {
    known_buffers(t, path, &opts.ignore, &opts.dtypes)?;
    let opened = backends::open(ctx, on, Want::replay())?;
    let load_cuda = |m: &crate::backend::ModuleCode| opened.load_trace_code(m);
    let mut r = crate::replayer::Replayer::new(t).with_max_memory(max_memory);
    if on.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    let rep = r.check_finite(opened.gpu.as_ref(), opts, Some(&load_cuda))?;
    if json {
        let v = serde_json::json!({
            "schema": crate::replayer::REPLAY_SCHEMA,
            "passed": rep.passed(),
            "finite": rep,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", rep.summary());
    }
    Ok(pass_if(rep.passed()))
}

/// `replay --against`: two backends in lockstep (see `replayer::lockstep`).
fn lockstep(
    ctx: &Ctx,
    path: &Path,
    (on, against): (Backend, Backend),
    opts: &crate::replayer::LockstepOptions,
    substitute: Option<(String, String)>,
    (json, max_memory): (bool, u64),
) -> Result<Exit> {
    let t = open_trace(ctx, path)?;
    known_buffers(&t, path, &opts.ignore, &opts.dtypes)?;
    if let Some((module, _)) = &substitute {
        anyhow::ensure!(
            t.modules.iter().any(|m| &m.name == module),
            "--substitute: {} has no module {module} (its modules: {})",
            path.display(),
            t.modules
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        anyhow::ensure!(
            !against.runs_cpu_twins(),
            "--substitute needs an --against backend that compiles code (cuda); {} runs CPU twins",
            against.name()
        );
    }
    let a = backends::open(ctx, on, Want::replay())?;
    let b = backends::open(ctx, against, Want::replay())?;
    let load_a = |m: &crate::backend::ModuleCode| a.load_trace_code(m);
    let load_b = |m: &crate::backend::ModuleCode| match &substitute {
        Some((module, code)) if &m.name == module => {
            b.load_trace_code(&crate::backend::ModuleCode {
                name: m.name.clone(),
                source: Some(code.clone()),
                ptx: None,
            })
        }
        _ => b.load_trace_code(m),
    };
    let mut r = crate::replayer::Replayer::new(&t).with_max_memory(max_memory);
    if on.runs_cpu_twins() || against.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    let b_name = match &substitute {
        Some((module, _)) => format!("{} with {module} substituted", against.name()),
        None => against.name().to_string(),
    };
    let names = (on.name(), b_name.as_str());
    let rep = r.lockstep(
        (a.gpu.as_ref(), b.gpu.as_ref()),
        names,
        opts,
        (Some(&load_a), Some(&load_b)),
    )?;
    print_lockstep(&rep, json)
}

/// A lockstep's report on standard output, and its exit status.
fn print_lockstep(rep: &crate::replayer::LockstepReport, json: bool) -> Result<Exit> {
    if json {
        let v = serde_json::json!({
            "schema": crate::replayer::REPLAY_SCHEMA,
            "passed": rep.passed(),
            "lockstep": rep,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", rep.summary());
    }
    Ok(pass_if(rep.passed()))
}

/// `replay --chaos`: the trace on a plain mock and on a chaos mock in lockstep, each launch's
/// output read back on its own stream so the chaos side's streams overlap as the trace lets
/// them (see `mock/chaos.rs`, `replayer::lockstep`).
fn chaos(
    ctx: &Ctx,
    path: &Path,
    (on, seed): (Backend, u64),
    opts: &crate::replayer::LockstepOptions,
    (json, max_memory): (bool, u64),
) -> Result<Exit> {
    let t = open_trace(ctx, path)?;
    known_buffers(&t, path, &opts.ignore, &opts.dtypes)?;
    let plain = backends::open(ctx, on, Want::replay())?;
    let perturbed = backends::open(
        ctx,
        on,
        Want {
            chaos: on.runs_cpu_twins().then_some(seed),
            ..Want::replay()
        },
    )?;
    let mut r = crate::replayer::Replayer::new(&t).with_max_memory(max_memory);
    if on.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    let (load_a, load_b) = (
        |m: &crate::backend::ModuleCode| plain.load_trace_code(m),
        |m: &crate::backend::ModuleCode| perturbed.load_trace_code(m),
    );
    let name = match opts.delays {
        Some((_, max_ns)) => format!(
            "{} --chaos {seed} (streams held up to {} us before launches)",
            on.name(),
            max_ns / 1000
        ),
        None => format!("{} --chaos {seed}", on.name()),
    };
    let rep = r.lockstep(
        (plain.gpu.as_ref(), perturbed.gpu.as_ref()),
        (on.name(), &name),
        opts,
        (Some(&load_a), Some(&load_b)),
    )?;
    print_lockstep(&rep, json)
}

/// How `replay` runs, beyond the replayer's own options.
struct ReplayFlags {
    as_graph: bool,
    pdl: bool,
    fixed_addresses: bool,
    json: bool,
    no_isolate: bool,
    max_memory: u64,
    perfetto: Option<PathBuf>,
    /// Steps A..B: resolved to the range once the trace is open.
    steps: Option<(u64, u64)>,
}

fn replay(
    ctx: &Ctx,
    path: &Path,
    on: Backend,
    opts: &crate::replayer::ReplayOptions,
    flags: ReplayFlags,
    child_report: Option<&Path>,
) -> Result<Exit> {
    let ReplayFlags {
        as_graph,
        pdl,
        fixed_addresses,
        json,
        no_isolate,
        max_memory,
        perfetto,
        steps,
    } = flags;
    use crate::replayer::Replayer;
    let t = open_trace(ctx, path)?;
    // A dump taken for a NaN: the NaN is what to reproduce, so the values are checked.
    let plain = !as_graph && perfetto.is_none() && opts.loops == 1 && child_report.is_none();
    if plain && t.dump.as_ref().is_some_and(|d| d.names_nan()) {
        eprintln!(
            "note: {} was dumped for a NaN; replaying it with --check-finite to find the launch that wrote it",
            path.display()
        );
        let finite = crate::replayer::FiniteOptions::default();
        return check_finite(ctx, (&t, path), on, &finite, json, max_memory);
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
        None => opts,
    };
    if let Some(cut) = &t.cut {
        eprintln!(
            "note: {} is cut after {} frames ({}); replaying the {} complete calls",
            path.display(),
            cut.frames,
            cut.reason,
            t.calls.iter().filter(|c| c.ret.is_some()).count()
        );
    }
    // What the trace records decides how it replays (see `replayer::ReplayPolicy`).
    let policy = crate::replayer::ReplayPolicy::of(&t);
    if as_graph && !policy.as_graph(true) && child_report.is_none() {
        // Said once, by the process the user started (a child replays the same command).
        eprintln!(
            "note: {} records a fault; replaying it eagerly (a graph replay would hide which call raised it)",
            path.display()
        );
    }
    let as_graph = policy.as_graph(as_graph);
    // A hang's dump is expected to hang again, on any backend: only a child can be killed.
    let hang_dump = t.is_hang_dump();
    if (policy.isolate(on.fault_poisons_process()) || hang_dump)
        && !no_isolate
        && child_report.is_none()
    {
        return replay_in_child(ctx, &t, json);
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
    let mut out = String::new();
    let passed: bool;
    let report = if as_graph {
        let launches = opts.loops.max(1);
        let mut g = r.run_as_graph(gpu, opts.range, launches, Some(&load_cuda))?;
        out.push_str(&g.summary());
        passed = g.passed();
        if !g.loop_ms.is_empty() {
            out.push_str(&timing_line("graph replay", &g.loop_ms));
        }
        if let Some(t) = g.captured_timing() {
            out.push_str(&t);
        }
        if launches > 1 {
            // The same step eagerly, right after in this process: the ratio that matters.
            let eager = crate::replayer::ReplayOptions {
                range: opts.range,
                loops: launches,
                verify: opts.verify,
                ..Default::default()
            };
            g.eager_step_ms = r.run(gpu, &eager, None, |_| {})?.loop_ms;
            if let Some(t) = g.step_ratio() {
                out.push_str(&t);
            }
        }
        crate::replayer::replay_json(None, Some(&g))
    } else {
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
        // can be placed (`replay_in_child`).
        let progress_file = child_report
            .and(std::env::var_os(PROGRESS_ENV))
            .and_then(|p| std::fs::OpenOptions::new().write(true).open(p).ok());
        let rep = r.run(gpu, opts, Some(&load_cuda), |seq| {
            if let Some(f) = &progress_file {
                use std::os::unix::fs::FileExt;
                let _ = f.write_all_at(&seq.to_le_bytes(), 0);
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
        passed = rep.passed();
        if !rep.loop_ms.is_empty() {
            out.push_str(&format!("recorded: {:.3} ms\n", rep.recorded_ms));
            out.push_str(&timing_line("eager replay", &rep.loop_ms));
        }
        if let Some(p) = &perfetto {
            let spans: Vec<(u64, f64, f64)> = rep
                .per_call_us
                .iter()
                .map(|c| (c.seq, c.start_us, c.us))
                .collect();
            let j = crate::analysis::export::perfetto_with_device(
                &t,
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
        crate::replayer::replay_json(Some(&rep), None)
    };
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
                &serde_json::json!({"text": out, "report": report, "passed": passed}),
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

/// Run this same command in a child process and relay its report, so a fault that poisons the
/// CUDA context cannot take the parent (and its report) down.
/// The file a child replay writes its last finished call's seq into (8 bytes, overwritten).
const PROGRESS_ENV: &str = "GPUTAPE_REPLAY_PROGRESS_FILE";

/// How long a replay in a child may take before it counts as hung: ten times the recorded
/// wall time plus a minute (setup, restores and a cold start included); for a hang's dump,
/// which is expected to hang, twice the recorded time plus ten seconds; or
/// GPUTAPE_REPLAY_DEADLINE_S.
fn deadline(t: &crate::trace::Trace) -> std::time::Duration {
    if let Some(s) = std::env::var("GPUTAPE_REPLAY_DEADLINE_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
    {
        return std::time::Duration::from_secs_f64(s.min(1e9));
    }
    let span_ns = t.recorded_span_ns();
    let hang_dump = t.is_hang_dump();
    let (times, slack) = if hang_dump { (2, 10) } else { (10, 60) };
    std::time::Duration::from_nanos(span_ns.saturating_mul(times))
        + std::time::Duration::from_secs(slack)
}

/// For a hang's dump: how long the replay may sit without progress, once it is blocked where
/// the recording was, before it counts as the same hang: as long as the recording had waited
/// when it was dumped (at least a second). `None` for other traces, and for a dump that does
/// not say (a `SIGUSR1` dump): those run to the deadline.
fn stall_limit(t: &crate::trace::Trace) -> Option<std::time::Duration> {
    let waited = t.dump.as_ref()?.hang_waited_s()?;
    Some(std::time::Duration::from_secs_f64(waited.clamp(1.0, 1e9)))
}

/// Where a hang's dump hung: the first call of the last fault window (the launches since the
/// last sync that returned, through the call that never did). A replay syncs after each
/// launch there, so it stops right after the launch that spins.
fn hang_window_start(t: &crate::trace::Trace) -> u64 {
    crate::analysis::window::fault_windows(t)
        .last()
        .map_or(0, |w| w.start)
}

/// Whether a replay whose last finished call is `finished` waits inside the hang's window
/// (from `from`) or past the last call.
fn blocked_where_recorded(t: &crate::trace::Trace, from: u64, finished: Option<u64>) -> bool {
    crate::analysis::window::stuck_at(t, finished)
        .0
        .is_none_or(|c| c.seq >= from)
}

/// Replay in a child process, so a fault that kills the CUDA context (or a hang) leaves this
/// one to report it. The child's stderr is passed on, and CUDA's device-side assert lines
/// (one per failing thread) are counted and the first quoted. A child still running at the
/// deadline is killed: a hang, reproduced when the trace is a hang's dump.
fn replay_in_child(ctx: &Ctx, t: &crate::trace::Trace, json: bool) -> Result<Exit> {
    use std::io::BufRead;
    let dir = std::env::temp_dir().join(format!("gputape-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let report = dir.join("report.json");
    let progress = dir.join("progress");
    std::fs::write(&progress, b"")?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(&ctx.args)
        .arg("--child-report")
        .arg(&report)
        .env(PROGRESS_ENV, &progress)
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let (mut asserts, mut first) = (0usize, None::<String>);
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(|l| l.ok())
        {
            if line.contains("Assertion") && line.contains("failed") {
                asserts += 1;
                first.get_or_insert_with(|| line.clone());
                if asserts > 3 {
                    continue;
                }
            }
            eprintln!("{line}");
        }
        (asserts, first)
    });
    let limit = deadline(t);
    let stall = stall_limit(t).map(|s| (s, hang_window_start(t)));
    let read_progress = || {
        std::fs::read(&progress)
            .ok()
            .and_then(|b| Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?)))
    };
    let t0 = std::time::Instant::now();
    let (mut seen, mut still_since) = (None, t0);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Ok(s);
        }
        let now = read_progress();
        if now != seen {
            (seen, still_since) = (now, std::time::Instant::now());
        }
        let stuck_as_recorded = stall.is_some_and(|(s, from)| {
            seen.is_some() && still_since.elapsed() >= s && blocked_where_recorded(t, from, seen)
        });
        let killed = if stuck_as_recorded {
            stall.map(|(s, _)| Killed::Stalled(s))
        } else {
            (t0.elapsed() >= limit).then_some(Killed::Deadline(limit))
        };
        if let Some(k) = killed {
            let _ = child.kill();
            let _ = child.wait();
            break Err(k);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (asserts, first_assert) = reader.join().unwrap_or((0, None));
    let text = std::fs::read_to_string(&report).ok();
    let finished = read_progress();
    std::fs::remove_dir_all(&dir).ok();
    let assert_line = first_assert.map(|l| {
        format!("device-side assert: {asserts} failing thread(s) reported by CUDA; first: {l}")
    });
    let status = match status {
        Ok(s) => s,
        Err(killed) => return Ok(hang_verdict(t, killed, finished, json)),
    };
    match text {
        Some(text) => {
            let mut v: serde_json::Value = serde_json::from_str(&text)?;
            if json {
                if let Some(l) = &assert_line {
                    v["report"]["device_assert"] = serde_json::json!({"threads": asserts, "first": l});
                }
                println!("{}", serde_json::to_string_pretty(&v["report"])?);
            } else {
                print!("{}", v["text"].as_str().unwrap_or_default());
                if let Some(l) = &assert_line {
                    println!("{l}");
                }
                println!("(replayed in a child process, which exited with {status})");
            }
            Ok(pass_if(v["passed"].as_bool().unwrap_or(false)))
        }
        None => anyhow::bail!(
            "the replay process died before reporting ({status}); the fault is past the point a report could be written"
        ),
    }
}

/// Why a child replay was killed.
#[derive(Clone, Copy)]
enum Killed {
    /// It ran past the deadline.
    Deadline(std::time::Duration),
    /// A hang's dump: it made no progress for this long, blocked where the recording hung.
    Stalled(std::time::Duration),
}

/// The child replay was killed as hung. A trace dumped for a hang expects exactly
/// that: the hang reproduced (exit 0), naming the calls that had not returned when it was
/// dumped; any other trace hung where its recording did not (exit 1).
fn hang_verdict(
    t: &crate::trace::Trace,
    killed: Killed,
    finished: Option<u64>,
    json: bool,
) -> Exit {
    let (blocked, launches) = crate::analysis::window::stuck_at(t, finished);
    let blocked = blocked.map(|c| crate::trace::render_call(t, c));
    let launches: Vec<String> = launches
        .iter()
        .map(|c| crate::trace::render_call(t, c))
        .collect();
    let recorded = t.dump.as_ref().filter(|d| d.is_hang());
    let stuck: Vec<String> = recorded
        .map(|d| {
            d.in_flight
                .iter()
                .filter_map(|(seq, _)| t.calls.iter().find(|c| c.seq == *seq))
                .map(|c| crate::trace::render_call(t, c))
                .collect()
        })
        .unwrap_or_default();
    let reproduced = recorded.is_some();
    if json {
        let (deadline_s, stalled_s) = match killed {
            Killed::Deadline(d) => (Some(d.as_secs_f64()), None),
            Killed::Stalled(d) => (None, Some(d.as_secs_f64())),
        };
        let v = serde_json::json!({
            "schema": crate::replayer::REPLAY_SCHEMA,
            "passed": reproduced,
            "hang": {
                "deadline_s": deadline_s,
                "stalled_s": stalled_s,
                "reproduced": reproduced,
                "recorded_in_flight": stuck,
                "replay_blocked_in": blocked,
                "launches_not_known_complete": launches,
            },
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        match killed {
            Killed::Deadline(d) => println!(
                "HANG: the replay did not finish within {:.0} s and was killed",
                d.as_secs_f64()
            ),
            Killed::Stalled(d) => println!(
                "HANG: the replay made no progress for {:.1} s where the recording hung (as long as the recording had waited) and was killed",
                d.as_secs_f64()
            ),
        }
        if let Some(b) = &blocked {
            println!("  the replay was blocked in: {b}");
        }
        if !launches.is_empty() {
            println!(
                "  launches not known to have completed (the hung kernel is among them): {}",
                launches.len()
            );
            for l in &launches {
                println!("    {l}");
            }
        }
        match recorded {
            Some(d) => {
                println!("recorded: {}", d.reason);
                for c in &stuck {
                    println!("  in flight when dumped: {c}");
                }
                println!("-> hang REPRODUCED");
            }
            None => println!("-> the recording did not hang here: not reproduced"),
        }
    }
    pass_if(reproduced)
}

/// `--layout`: the mock's own log of one replay, rendered.
fn layout(ctx: &Ctx, path: &Path, on: Backend) -> Result<Exit> {
    let t = open_trace(ctx, path)?;
    let o = backends::open(ctx, on, Want::replay())?;
    let Some(mock) = o.mock else {
        anyhow::bail!("replay --layout reads the mock's own log of what it did: use --on mock");
    };
    let (text, report) = crate::replayer::replay_layout(&t, &mock)?;
    print!("{text}");
    Ok(pass_if(report.passed()))
}
