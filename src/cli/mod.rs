//! The `gputape` command line.

use anyhow::Result;
use clap::{Parser, Subcommand};
use gputape::backend::GpuBackend;
use std::path::{Path, PathBuf};

#[path = "cli/backends.rs"]
mod backends;
use backends::{Backend, Want};

#[derive(Parser)]
#[command(
    name = "gputape",
    version,
    about = "Record and replay what an inference engine asks of its GPU",
    long_about = "gputape wraps a GpuBackend (CUDA or the driver-faithful mock), records every call \
                  into a self-contained, crash-safe trace, and replays or analyses that trace \
                  offline.",
    after_help = "Exit status, the same for every verb: 0 matched, fault reproduced, no differences or \
                  findings; 1 a divergence, a fault not reproduced, differences, or an `analyze \
                  --fail-on` finding; 2 a usage error (or any other failure to run); 3 the trace is \
                  damaged or unreadable; 4 the backend asked for is not available here.\n\n\
                  Logging: -v / -vv, -q, or GPUTAPE_LOG / RUST_LOG (e.g. GPUTAPE_LOG=gputape=debug)."
)]
struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace), on stderr.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// A shared blob store: `record` puts large blobs (weights, big buffers) there instead of
    /// into the trace, so the next recording does not store them again; every verb that reads
    /// a trace looks for its stored blobs there (default: where the trace was recorded, or
    /// GPUTAPE_BLOBS).
    #[arg(long, global = true, value_name = "DIR")]
    blobs: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the backends usable on this machine (mock always; cuda when a driver is present).
    Info {
        /// Print as JSON (schema gputape.info.v1).
        #[arg(long)]
        json: bool,
    },
    /// Run the built-in Llama-style decoder: generation, tokens and per-step time.
    Demo {
        /// Which backend runs the model.
        #[arg(long, value_enum, default_value_t = Backend::Mock)]
        backend: Backend,
        /// Decode steps to run (at most the model's positions: 256 default, 64 tiny).
        #[arg(long, default_value_t = 16)]
        steps: usize,
        /// Model size: `default` or `tiny`.
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: String,
        /// Plant the fault: at this step `silu_mul` writes past the end of its output.
        #[arg(long)]
        fault_step: Option<usize>,
        /// How far past the end, in floats: the default lands in a red zone; a large value
        /// (say 268435456) runs into unmapped memory and faults with an illegal address.
        #[arg(long, default_value_t = 16)]
        fault_overrun: u32,
        /// Run behind the flight recorder, which keeps the last steps in memory and writes
        /// them into this directory as a trace if a call fails (GPUTAPE_FLIGHT_STEPS: steps
        /// between checkpoints, default 8; GPUTAPE_FLIGHT_SPILL_MB: blobs this large wait on
        /// disk beside the dumps, default 1, 0 keeps them in memory).
        #[arg(long)]
        flight: Option<PathBuf>,
    },
    /// Record decode step K of the built-in model (mid-run start: the trace begins with a
    /// snapshot of device memory), or one of the small built-in workloads.
    Record {
        /// Record this decode step of the model.
        #[arg(long, conflicts_with_all = ["workload", "steps"])]
        step: Option<usize>,
        /// Record consecutive decode steps A..B (B exclusive) into one trace.
        #[arg(long, value_parser = parse_range, conflicts_with = "workload")]
        steps: Option<(u64, u64)>,
        /// Model size for --step: `default` or `tiny` (the same default as `demo`, so step K
        /// is the same step in both).
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: String,
        /// Plant the fault at this step (see `demo`).
        #[arg(long)]
        fault_step: Option<usize>,
        /// How far past the end the planted fault writes, in floats (see `demo`).
        #[arg(long, default_value_t = 16)]
        fault_overrun: u32,
        /// Record a small workload instead of the model.
        #[arg(long, value_enum)]
        workload: Option<Workload>,
        /// Record the bf16 batched step (paged KV, grouped-query attention) of this Hugging
        /// Face config instead of the small f32 model: a preset (tiny, default, llama-3.2-1b,
        /// llama-3-8b) or the path of a config.json. Weights are generated on the device from
        /// a seed. With --steps or --step.
        #[arg(long, conflicts_with_all = ["workload", "fault_step"])]
        hf: Option<String>,
        /// Sequences in the --hf step's batch (1 to 16), of different context lengths.
        #[arg(long, default_value_t = 1, requires = "hf")]
        batch: usize,
        /// Hash every live buffer at each host sync, so a replay can name the first sync (and
        /// the kernels before it) where a buffer went wrong. Reads all device memory per sync.
        #[arg(long)]
        hash_syncs: bool,
        /// Which backend to record on.
        #[arg(long, value_enum, default_value_t = Backend::Mock)]
        backend: Backend,
        /// Where to write the trace.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Run every capture-rule probe on a backend and compare it with the rule table.
    CaptureTable {
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
    },
    /// Measure the host cost of a kernel launch through the CUDA backend against a bare
    /// driver launch.
    BenchLaunch {
        /// Rounds; each variant's median over rounds is reported.
        #[arg(long, default_value_t = 31)]
        rounds: usize,
        /// Launches per round.
        #[arg(long, default_value_t = 2000)]
        per_round: usize,
    },
    /// Replay a trace on a backend, check its results against the recording, reproduce its
    /// faults, optionally as CUDA graphs.
    Replay {
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
        #[arg(long, default_value_t = gputape::replayer::DEFAULT_MAX_HOST_BYTES)]
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
        #[arg(long, hide = true)]
        child_report: Option<PathBuf>,
    },
    /// The first difference between two traces' call lists (ids renamed away), and what was
    /// added or removed: allocations, host syncs, launches.
    Diff {
        /// The first trace.
        a: PathBuf,
        /// The second trace.
        b: PathBuf,
        /// Print as JSON (schema gputape.diff.v1).
        #[arg(long)]
        json: bool,
    },
    /// Analyse a trace offline: what breaks CUDA-graph capture and why, cross-stream races,
    /// leaks and use-after-free, the critical path. All sections unless some are named.
    Analyze {
        /// The trace to analyse.
        trace: PathBuf,
        /// The capture-legality section (for the capture described by --mode, --stream-kind,
        /// --stream, --range).
        #[arg(long)]
        capture: bool,
        /// The stream-capture mode to judge the capture in.
        #[arg(long, value_enum, default_value_t = Mode::Global)]
        mode: Mode,
        /// Whether the engine's streams are blocking (they synchronise with the legacy
        /// stream) or non-blocking.
        #[arg(long, value_enum, default_value_t = Kind::Blocking)]
        stream_kind: Kind,
        /// The stream that would begin the capture (`s1` or `1`); default: the stream with the
        /// most device work.
        #[arg(long, value_parser = parse_stream)]
        stream: Option<u32>,
        /// Calls A..B (default: all).
        #[arg(long, value_parser = parse_range)]
        range: Option<(u64, u64)>,
        /// The cross-stream race section.
        #[arg(long)]
        races: bool,
        /// The leak and use-after-free section.
        #[arg(long)]
        leaks: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Exit with 1 when any of these is found (comma-separated), for CI: `capture` (a call
        /// that fails or breaks the capture), `hazard` (a capture hazard), `race`, `leak`
        /// (leaks and use-after-free).
        #[arg(long, value_enum, value_delimiter = ',')]
        fail_on: Vec<FailOn>,
    },
    /// Export a trace as pictures: Perfetto/Chrome trace-event JSON and/or Graphviz DOT.
    Export {
        /// The trace to export.
        trace: PathBuf,
        /// Write Chrome/Perfetto trace-event JSON here (`-` for stdout).
        #[arg(long)]
        perfetto: Option<PathBuf>,
        /// Write the dependency graph as Graphviz DOT here (`-` for stdout).
        #[arg(long)]
        dot: Option<PathBuf>,
    },
    /// Shrink a trace that records a fault to the fewest calls (and the buffers they use) that
    /// still reproduce it: the same driver error, raised by the same kernel. The result is an
    /// ordinary trace that `replay` reproduces. On CUDA each attempt runs in a child process
    /// (a reproduced illegal address kills the context).
    Minimize {
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
    },
    /// Cut a trace to calls A..B. The new trace starts with the device state at A, computed
    /// by replaying the calls before A (on the mock when every kernel has a CPU twin there,
    /// or on CUDA), so a long recording can be cut to the step that matters.
    Trim {
        /// The trace to cut.
        trace: PathBuf,
        /// The calls to keep, A..B (B exclusive; `A..` to the end).
        #[arg(long, value_parser = parse_range)]
        range: (u64, u64),
        /// Where to write the cut trace.
        #[arg(short, long)]
        output: PathBuf,
        /// The backend that replays the calls before A.
        #[arg(long, value_enum, default_value_t = Backend::Mock)]
        on: Backend,
    },
    /// Write one self-contained HTML page about a trace (no scripts, no network): the
    /// timeline per stream, faults and their windows, capture verdicts with their rules and
    /// sites, races, leaks, and the dependency graph.
    Report {
        /// The trace to report on.
        trace: PathBuf,
        /// Where to write the page (`-` for stdout).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Print a trace: its calls in canonical form, then a summary.
    Show {
        /// The trace to print.
        trace: PathBuf,
        /// Only the summary.
        #[arg(long)]
        summary: bool,
        /// Only calls A..B.
        #[arg(long, value_parser = parse_range, conflicts_with = "steps")]
        calls: Option<(u64, u64)>,
        /// Only steps A..B, as the engine marked them (`step_boundary`).
        #[arg(long, value_parser = parse_range)]
        steps: Option<(u64, u64)>,
        /// Only launches of this kernel (`module::name`, or the name alone).
        #[arg(long)]
        kernel: Option<String>,
        /// Only calls of this kind (a trait method name: `launch_typed`, `copy_d2h`, ...).
        #[arg(long)]
        kind: Option<String>,
        /// Print as JSON (schema gputape.show.v1): the header and the calls shown.
        #[arg(long)]
        json: bool,
    },
}

/// What `analyze --fail-on` fails on.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FailOn {
    Capture,
    Hazard,
    Race,
    Leak,
}

impl FailOn {
    fn name(self) -> &'static str {
        match self {
            FailOn::Capture => "capture breakers",
            FailOn::Hazard => "capture hazards",
            FailOn::Race => "races",
            FailOn::Leak => "leaks or use-after-free",
        }
    }

    fn found_in(self, r: &gputape::analysis::Report) -> bool {
        match self {
            FailOn::Capture => r.verdicts.iter().any(|v| v.category == "fails"),
            FailOn::Hazard => r.verdicts.iter().any(|v| v.category == "hazard"),
            FailOn::Race => !r.races.is_empty(),
            FailOn::Leak => !r.lifetimes.is_empty(),
        }
    }
}

/// The model size `demo` and `record` use unless told.
const DEFAULT_CONFIG: &str = "default";

/// `s1` or `1`.
fn parse_stream(s: &str) -> Result<u32, String> {
    s.strip_prefix('s')
        .unwrap_or(s)
        .parse()
        .map_err(|_| format!("{s:?} is not a stream (try `s1` or `1`)"))
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Mode {
    Global,
    ThreadLocal,
    Relaxed,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Kind {
    Blocking,
    NonBlocking,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Workload {
    SingleStream,
    TwoStreams,
    Capture,
    PointerTable,
    /// A Hopper TMA kernel reading through a tensor map (a device address inside a kernel
    /// parameter, encoded again at replay).
    Tma,
    /// A step captured into a graph whose second node writes past its output
    /// (`--fault-overrun` floats; the default 16 is caught by the mock's bounds).
    GraphFault,
}

/// What `gputape` exits with, the same for every verb (README and `--help` list them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// Matched, fault reproduced, no differences, no findings.
    Pass = 0,
    /// A divergence, a fault not reproduced, differences, or an `analyze --fail-on` finding.
    Findings = 1,
    /// A usage error, or anything else that kept the command from running.
    Usage = 2,
    /// The trace is damaged or unreadable.
    Damaged = 3,
    /// The backend asked for is not available on this machine.
    NoBackend = 4,
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e as u8)
    }
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(code) => code.into(),
        Err(e) => {
            eprintln!("error: {e:#}");
            exit_for(&e).into()
        }
    }
}

/// The exit status of a failed command, from what failed.
fn exit_for(e: &anyhow::Error) -> Exit {
    use gputape::replayer::ReplayError as R;
    use gputape::trace::TraceError as T;
    for c in e.chain() {
        if let Some(t) = c.downcast_ref::<T>() {
            return match t {
                T::Io { what, .. } if !matches!(*what, "open" | "read") => Exit::Usage,
                T::Encode(_) => Exit::Usage,
                _ => Exit::Damaged,
            };
        }
        if let Some(r) = c.downcast_ref::<R>() {
            if matches!(r, R::Dangling { .. } | R::MissingBlob(_) | R::Trace(_)) {
                return Exit::Damaged;
            }
        }
        if c.downcast_ref::<gputape::cuda::ProbeError>().is_some() {
            return Exit::NoBackend;
        }
    }
    // CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NOT_INITIALIZED: a driver without a usable device.
    if matches!(gputape::driver_code(e), Some(100 | 3)) {
        return Exit::NoBackend;
    }
    Exit::Usage
}

fn pass_if(ok: bool) -> Exit {
    if ok {
        Exit::Pass
    } else {
        Exit::Findings
    }
}

fn run() -> Result<Exit> {
    // Output into a closed pipe (`gputape show t | head`) ends the process quietly, as it does
    // for other command-line tools, instead of panicking on the failed write.
    // SAFETY: restoring the default disposition of one signal, before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    if let Some(dir) = &cli.blobs {
        BLOBS.get_or_init(|| Some(dir.clone()));
    }
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPUTAPE_LOG")
                .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
                .unwrap_or_else(|_| level.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let done = |r: Result<()>| r.map(|()| Exit::Pass);
    match cli.cmd {
        Cmd::Info { json } => done(info(json)),
        Cmd::Demo {
            backend,
            steps,
            config,
            fault_step,
            fault_overrun,
            flight,
        } => done(demo(
            backend,
            steps,
            &config,
            fault_plan(fault_step, fault_overrun),
            flight.as_deref(),
        )),
        Cmd::Record {
            step,
            steps,
            config,
            fault_step,
            fault_overrun,
            workload,
            hf,
            batch,
            hash_syncs,
            backend,
            output,
        } => {
            HASH_SYNCS.store(hash_syncs, std::sync::atomic::Ordering::Relaxed);
            let steps = match (step, steps) {
                (Some(k), _) => Some((k, k + 1)),
                (None, Some((a, b))) => Some((a as usize, b.min(1 << 20) as usize)),
                (None, None) => None,
            };
            if steps.is_none() && workload.is_none() {
                anyhow::bail!(
                    "say what to record: --step K or --steps A..B (decode steps of the built-in model), or --workload NAME"
                );
            }
            if let (Some(hf), Some(range)) = (&hf, steps) {
                return done(record_llama(backend, hf, batch, range, &output));
            }
            done(match (steps, workload) {
                (Some(k), _) => record_step(
                    backend,
                    k,
                    &config,
                    fault_plan(fault_step, fault_overrun),
                    &output,
                ),
                (None, w) => record(
                    w.unwrap_or(Workload::TwoStreams),
                    fault_overrun,
                    backend,
                    &output,
                ),
            })
        }
        Cmd::CaptureTable { rules: true, .. } => {
            print!("{}", gputape::backend::render_rules());
            Ok(Exit::Pass)
        }
        Cmd::CaptureTable {
            on, strict, json, ..
        } => capture_table(on, strict, json),
        Cmd::BenchLaunch { rounds, per_round } => done(bench_launch(rounds, per_round)),
        Cmd::Show {
            trace,
            summary,
            calls,
            steps,
            kernel,
            kind,
            json,
        } => done(show(
            &trace,
            summary,
            ShowFilter {
                calls,
                steps,
                kernel: kernel.as_deref(),
                kind: kind.as_deref(),
            },
            json,
        )),
        Cmd::Replay {
            trace,
            on,
            range,
            steps,
            stop_at,
            loops,
            as_graph,
            sync_each,
            scan_redzones,
            no_verify,
            max_memory,
            timing,
            perfetto,
            fixed_addresses,
            pdl,
            json,
            no_isolate,
            child_report,
        } => {
            anyhow::ensure!(
                perfetto.as_deref() != Some(Path::new("-")),
                "replay --perfetto needs a file: standard output carries the replay's report"
            );
            let opts = gputape::replayer::ReplayOptions {
                range,
                stop_at,
                loops: loops as usize,
                sync_each: sync_each || perfetto.is_some(),
                scan_redzones_each: scan_redzones,
                verify: !no_verify,
                per_call_timing: timing || perfetto.is_some(),
            };
            let flags = ReplayFlags {
                as_graph,
                pdl,
                fixed_addresses,
                json,
                no_isolate,
                max_memory,
                perfetto,
                steps,
            };
            replay(&trace, on, &opts, flags, child_report.as_deref())
        }
        Cmd::Analyze {
            trace,
            capture,
            mode,
            stream_kind,
            stream,
            range,
            races,
            leaks,
            json,
            fail_on,
        } => {
            let t = open_trace(&trace)?;
            check_range(&t, range)?;
            if let Some(s) = stream {
                let known = t.calls.iter().any(|c| {
                    c.call.work_stream()
                        == Some(gputape::trace::StreamRef::Id(gputape::trace::StreamId(s)))
                });
                anyhow::ensure!(
                    known,
                    "--stream s{s}: the trace has no work on s{s} (streams with work: {})",
                    streams_with_work(&t)
                );
            }
            let q = capture_query(mode, stream_kind, stream, range);
            let all = !(capture || races || leaks);
            let sections = gputape::analysis::Sections {
                capture: capture || all,
                races: races || all,
                leaks: leaks || all,
            };
            let r = gputape::analysis::analyze(&t, q, sections);
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "schema": "gputape.analyze.v1",
                        "report": r,
                    }))?
                );
            } else {
                print!("{}", r.render());
            }
            let found: Vec<&str> = fail_on
                .iter()
                .filter(|f| f.found_in(&r))
                .map(|f| f.name())
                .collect();
            if !found.is_empty() {
                eprintln!("analyze --fail-on: found {}", found.join(", "));
            }
            Ok(pass_if(found.is_empty()))
        }
        Cmd::Export {
            trace,
            perfetto,
            dot,
        } => {
            let t = open_trace(&trace)?;
            let q = gputape::analysis::CaptureQuery::default();
            anyhow::ensure!(
                perfetto.is_some() || dot.is_some(),
                "nothing to export: give --perfetto FILE and/or --dot FILE"
            );
            if let Some(p) = perfetto {
                let j = gputape::analysis::export::perfetto(&t, q);
                if write_out(&p, serde_json::to_string(&j)?.as_bytes())? {
                    eprintln!(
                        "wrote {} (load it in ui.perfetto.dev or chrome://tracing)",
                        p.display()
                    );
                }
            }
            if let Some(p) = dot {
                if write_out(&p, gputape::analysis::export::dot(&t, q).as_bytes())? {
                    eprintln!("wrote {} (render with `dot -Tsvg`)", p.display());
                }
            }
            Ok(Exit::Pass)
        }
        Cmd::Minimize {
            trace,
            output,
            on,
            max_attempts,
        } => minimize(&trace, &output, on, max_attempts),
        Cmd::Trim {
            trace,
            range,
            output,
            on,
        } => done(trim(&trace, range, &output, on)),
        Cmd::Report { trace, output } => {
            let t = open_trace(&trace)?;
            let page = gputape::analysis::report::html(&t, &trace.display().to_string());
            if write_out(&output, page.as_bytes())? {
                eprintln!("wrote {} ({} bytes)", output.display(), page.len());
            }
            Ok(Exit::Pass)
        }
        Cmd::Diff { a, b, json } => {
            let ta = open_trace(&a)?;
            let tb = open_trace(&b)?;
            let (text, differs) = gputape::trace::diff_report(&ta, &tb);
            if json {
                let lines: Vec<&str> = text.lines().collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "schema": "gputape.diff.v1",
                        "differs": differs,
                        "a": {"path": a, "calls": ta.calls.len(), "cut": ta.cut.as_ref().map(|c| &c.reason)},
                        "b": {"path": b, "calls": tb.calls.len(), "cut": tb.cut.as_ref().map(|c| &c.reason)},
                        "report": lines,
                    }))?
                );
            } else {
                print!("{text}");
            }
            Ok(pass_if(!differs))
        }
    }
}

fn info(json: bool) -> Result<()> {
    if json {
        let cuda = match gputape::cuda::probe() {
            Ok(devs) => serde_json::json!({
                "available": !devs.is_empty(),
                "devices": devs.iter().map(|d| serde_json::json!({
                    "ordinal": d.ordinal,
                    "name": d.name,
                    "sm_count": d.sm_count,
                    "total_memory": d.total_memory,
                    "free_memory": gputape::cuda::device_memory(d.ordinal as usize).ok().map(|m| m.0),
                    "driver_version": d.driver_version,
                })).collect::<Vec<_>>(),
            }),
            Err(e) => serde_json::json!({"available": false, "why": e.to_string()}),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gputape.info.v1",
                "version": env!("CARGO_PKG_VERSION"),
                "backends": {"mock": {"available": true}, "cuda": cuda},
            }))?
        );
        return Ok(());
    }
    println!("gputape {}", env!("CARGO_PKG_VERSION"));
    println!("backends:");
    println!("  mock   available (CPU, driver-faithful emulation; the default)");
    match gputape::cuda::probe() {
        Ok(devs) if devs.is_empty() => println!("  cuda   driver present, but no device visible"),
        Ok(devs) => {
            for d in devs {
                let free = gputape::cuda::device_memory(d.ordinal as usize)
                    .map(|(f, _)| format!("{:.1} GiB free of ", f as f64 / (1u64 << 30) as f64))
                    .unwrap_or_default();
                println!(
                    "  cuda   device {}: {} ({} SMs, {free}{:.1} GiB, driver {}.{})",
                    d.ordinal,
                    d.name,
                    d.sm_count,
                    d.total_memory as f64 / (1u64 << 30) as f64,
                    d.driver_version / 1000,
                    (d.driver_version % 1000) / 10
                );
            }
        }
        Err(e) => println!("  cuda   unavailable: {e}"),
    }
    Ok(())
}

fn record(w: Workload, overrun: u32, backend: Backend, out: &Path) -> Result<()> {
    let want = Want {
        blas: true,
        ..Want::default()
    };
    let o = backends::open(backend, want)?;
    let rec = gputape::recorder::RecordingBackend::to_file(o.gpu, out, o.desc)?;
    record_on(rec, w, overrun, out)
}

/// A Hugging Face config: a preset's name, or the path of a config.json.
fn hf_config(what: &str) -> Result<gputape::model::hf::HfConfig> {
    if let Some(c) = gputape::model::hf::HfConfig::preset(what) {
        return Ok(c);
    }
    let text = anyhow::Context::with_context(std::fs::read_to_string(what), || {
        let names: Vec<&str> = gputape::model::hf::HfConfig::preset_names().collect();
        format!(
            "--hf {what} is neither a preset ({}) nor a readable config.json",
            names.join(", ")
        )
    })?;
    anyhow::Context::with_context(gputape::model::hf::HfConfig::parse(&text), || {
        format!("parsing {what}")
    })
}

/// `record --hf`: steps `first..end` of the bf16 batched step (`model::llama`) on a batch of
/// `batch` sequences, recording from `first` on. A step that fails ends the recording there,
/// the trace kept.
fn record_llama(
    backend: Backend,
    hf: &str,
    batch: usize,
    (first, end): (usize, usize),
    out: &Path,
) -> Result<()> {
    use gputape::model::llama::{Llama, LlamaOptions};
    let cfg = hf_config(hf)?;
    let o = backends::open(backend, Want::default())?;
    let rec = gputape::recorder::RecordingBackend::to_file(o.gpu, out, o.desc)?;
    rec.hash_at_syncs(HASH_SYNCS.load(std::sync::atomic::Ordering::Relaxed));
    if let Some(dir) = blob_dir() {
        rec.blob_store(dir);
    }
    let gpu: &dyn GpuBackend = &rec;
    let opts = LlamaOptions::staggered(batch, cfg.max_position_embeddings.min(1024), 200);
    let t = std::time::Instant::now();
    let mut m = Llama::load(gpu, &cfg, opts)?;
    eprintln!(
        "loaded {} (batch {batch}, contexts {:?}): {:.2} GB on the device in {:.1} s",
        cfg.name,
        m.lens(),
        m.device_bytes() as f64 / 1e9,
        t.elapsed().as_secs_f64()
    );
    let mut tokens: Vec<u32> = (0..batch as u32).map(|b| 1 + 7 * b).collect();
    let mut failed = None;
    for step in 0..end {
        if step == first {
            let t = std::time::Instant::now();
            rec.start()?;
            eprintln!(
                "snapshot of device memory: {:.1} s",
                t.elapsed().as_secs_f64()
            );
        }
        match m.step(gpu, &tokens) {
            Ok(next) => {
                if step >= first {
                    println!("step {step} produced tokens {next:?}");
                }
                tokens = next;
            }
            Err(e) => {
                println!(
                    "step {step} failed{}: {e:#}",
                    if step >= first { " (recorded)" } else { "" }
                );
                failed = Some(e);
                break;
            }
        }
    }
    if rec.is_recording() {
        let stats = rec.stop()?;
        println!(
            "recorded: {} calls, {} bytes -> {}",
            stats.calls,
            stats.bytes,
            out.display()
        );
    }
    match failed {
        Some(e) => Err(e),
        None => m.release(gpu),
    }
}

/// `--blobs DIR` (or GPUTAPE_BLOBS), for every verb that reads or records a trace.
static BLOBS: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

fn blob_dir() -> Option<&'static Path> {
    BLOBS
        .get_or_init(|| std::env::var_os("GPUTAPE_BLOBS").map(PathBuf::from))
        .as_deref()
}

/// Open a trace, looking for its stored blobs where `--blobs` says.
fn open_trace(path: &Path) -> Result<gputape::trace::Trace, gputape::trace::TraceError> {
    gputape::trace::Trace::open_with(path, blob_dir())
}

/// `record --hash-syncs`, for the recording helpers below.
static HASH_SYNCS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn record_on<B: GpuBackend>(
    rec: gputape::recorder::RecordingBackend<B>,
    w: Workload,
    overrun: u32,
    out: &Path,
) -> Result<()> {
    rec.hash_at_syncs(HASH_SYNCS.load(std::sync::atomic::Ordering::Relaxed));
    if let Some(dir) = blob_dir() {
        rec.blob_store(dir);
    }
    rec.start()?;
    let g: &dyn GpuBackend = &rec;
    match w {
        Workload::SingleStream => gputape::workloads::single_stream(g)?,
        Workload::TwoStreams => gputape::workloads::two_streams(g)?,
        Workload::Capture => gputape::workloads::capture_region(g)?,
        Workload::PointerTable => gputape::workloads::pointer_table(g)?,
        Workload::Tma => gputape::workloads::tma(g)?,
        Workload::GraphFault => {
            let r = gputape::workloads::graph_fault_with(g, overrun);
            if let Err(e) = &r {
                println!("the graph step failed (recorded): {e:#}");
            }
            let _ = g.sweep_unreleased();
            Vec::new()
        }
    };
    let stats = rec.stop()?;
    println!(
        "recorded {} calls, {} bytes -> {}",
        stats.calls,
        stats.bytes,
        out.display()
    );
    Ok(())
}

/// Write `bytes` to `p`, or to stdout for `-`. True when a file was written (through a
/// temporary name, renamed when complete).
fn write_out(p: &Path, bytes: &[u8]) -> Result<bool> {
    if p == Path::new("-") {
        use std::io::Write;
        std::io::stdout().write_all(bytes)?;
        return Ok(false);
    }
    let tmp = temp_beside(p);
    std::fs::write(&tmp, bytes)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, p).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("cannot rename {} to {}: {e}", tmp.display(), p.display())
    })?;
    Ok(true)
}

/// The calls of steps `a..b` (as the engine marked them): from step a's boundary to step b's,
/// or to the end.
fn step_range(t: &gputape::trace::Trace, (a, b): (u64, u64)) -> Result<(u64, u64)> {
    let marks: Vec<(u64, u64)> = t
        .calls
        .iter()
        .filter_map(|c| match c.call {
            gputape::trace::Call::StepBoundary { step } => Some((step, c.seq)),
            _ => None,
        })
        .collect();
    anyhow::ensure!(
        !marks.is_empty(),
        "the trace marks no steps (its engine never called step_boundary): select calls instead (--range A..B for replay, --calls A..B for show)"
    );
    let start = marks.iter().find(|(s, _)| *s == a).map(|(_, q)| *q);
    let start = start.ok_or_else(|| {
        anyhow::anyhow!(
            "step {a} is not in the trace: it holds steps {}..={}",
            marks[0].0,
            marks[marks.len() - 1].0
        )
    })?;
    let end = marks
        .iter()
        .find(|(s, _)| *s >= b)
        .map_or(u64::MAX, |(_, q)| *q);
    Ok((start, end))
}

/// A `--range` that starts past the trace's last call is a usage error, not an empty answer.
fn check_range(t: &gputape::trace::Trace, range: Option<(u64, u64)>) -> Result<()> {
    let (Some((a, _)), Some(last)) = (range, t.calls.last()) else {
        return Ok(());
    };
    anyhow::ensure!(
        a <= last.seq,
        "--range starts at #{a}, past the trace's last call #{}: the calls are #{}..#{}",
        last.seq,
        t.calls[0].seq,
        last.seq
    );
    Ok(())
}

fn streams_with_work(t: &gputape::trace::Trace) -> String {
    let s: std::collections::BTreeSet<String> = t
        .calls
        .iter()
        .filter_map(|c| match c.call.work_stream() {
            Some(gputape::trace::StreamRef::Id(id)) => Some(id.to_string()),
            _ => None,
        })
        .collect();
    s.into_iter().collect::<Vec<_>>().join(", ")
}

/// Which calls `show` prints.
struct ShowFilter<'a> {
    calls: Option<(u64, u64)>,
    /// Steps A..B: resolved to calls once the trace is open.
    steps: Option<(u64, u64)>,
    kernel: Option<&'a str>,
    kind: Option<&'a str>,
}

impl ShowFilter<'_> {
    fn any(&self) -> bool {
        self.calls.is_some() || self.kernel.is_some() || self.kind.is_some()
    }

    fn keeps(&self, t: &gputape::trace::Trace, c: &gputape::trace::CallRecord) -> bool {
        let (a, b) = self.calls.unwrap_or((0, u64::MAX));
        if c.seq < a || c.seq >= b || self.kind.is_some_and(|k| c.call.kind().name() != k) {
            return false;
        }
        match self.kernel {
            None => true,
            Some(k) => c.call.launch().is_some_and(|(id, _)| {
                let name = t.kernel_name(id);
                name == k || name.rsplit("::").next() == Some(k)
            }),
        }
    }
}

fn show(path: &Path, summary_only: bool, mut filter: ShowFilter<'_>, json: bool) -> Result<()> {
    let t = open_trace(path)?;
    if let Some(s) = filter.steps.take() {
        filter.calls = Some(step_range(&t, s)?);
    }
    check_range(&t, filter.calls)?;
    if let Some(k) = filter.kind {
        let present: std::collections::BTreeSet<&str> =
            t.calls.iter().map(|c| c.call.kind().name()).collect();
        anyhow::ensure!(
            present.contains(k),
            "--kind {k}: no call of that kind in this trace (kinds present: {})",
            present.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    if json {
        let shown: Vec<serde_json::Value> = t
            .calls
            .iter()
            .filter(|c| filter.keeps(&t, c))
            .map(|c| {
                serde_json::json!({
                    "seq": c.seq,
                    "thread": c.thread,
                    "kind": c.call.kind().name(),
                    "kernel": c.call.launch().map(|(k, _)| t.kernel_name(k)),
                    "call": gputape::trace::call_text(&t, &c.call),
                    "ok": c.ret.as_ref().map(|r| r.is_ok()),
                    "error": c.ret.as_ref().and_then(|r| r.as_ref().err()).map(|e| serde_json::json!({"code": e.code, "message": e.message})),
                    "site": t.site(c.site),
                })
            })
            .collect();
        let h = t.header.as_ref();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gputape.show.v1",
                "header": {
                    "backend": h.map(|h| &h.backend),
                    "device": h.and_then(|h| h.device_name.as_ref()),
                    "driver_version": h.and_then(|h| h.driver_version),
                    "gputape": h.map(|h| &h.gputape),
                    "format": h.map(|h| h.format),
                    "recorded_at_unix_ms": t.provenance.as_ref().map(|p| p.unix_ms),
                    "recorded_at": t.provenance.as_ref().map(|p| p.recorded_at()),
                    "command_line": t.provenance.as_ref().map(|p| &p.command_line),
                    "pid": t.provenance.as_ref().map(|p| p.pid),
                    "host": t.provenance.as_ref().and_then(|p| p.host.as_ref()),
                },
                "calls_in_trace": t.calls.len(),
                "initial_buffers": t.initial.len(),
                "cut": t.cut.as_ref().map(|c| serde_json::json!({"offset": c.offset, "frames": c.frames, "reason": c.reason})),
                "calls": shown,
            }))?
        );
        return Ok(());
    }
    if let Some(h) = &t.header {
        println!(
            "recorded on {} {}{}, gputape {}, trace format {}",
            h.backend,
            h.device_name.as_deref().unwrap_or("(no device name)"),
            h.driver_version
                .map(|v| format!(", driver API {}.{}", v / 1000, (v % 1000) / 10))
                .unwrap_or_default(),
            h.gputape,
            h.format
        );
        match &t.provenance {
            Some(p) => println!(
                "recorded at {} by `{}` (pid {}{})",
                p.recorded_at(),
                p.command(),
                p.pid,
                p.host
                    .as_deref()
                    .map(|h| format!(" on {h}"))
                    .unwrap_or_default()
            ),
            None => println!(
                "recorded at: not stored (recorded in trace format {}, before it had provenance)",
                h.format
            ),
        }
        println!(
            "columns: #seq, t<thread> (recording thread, in order of first call), call -> result, @ site"
        );
    }
    if !summary_only && !filter.any() {
        print!("{}", gputape::trace::render(&t));
        println!();
    } else if !summary_only {
        let mut n = 0;
        for c in t.calls.iter().filter(|c| filter.keeps(&t, c)) {
            println!("{}", gputape::trace::render_call(&t, c));
            n += 1;
        }
        println!("({n} call(s) shown)\n");
    }
    print!("{}", gputape::trace::summary(&t));
    if let Some(c) = t.unfinished() {
        println!(
            "the trace ends inside call #{} ({}) at {}",
            c.seq,
            c.call.kind().name(),
            t.site(c.site)
        );
    }
    Ok(())
}

fn capture_table(on: Backend, strict: bool, json: bool) -> Result<Exit> {
    use gputape::backend::{probe, CaptureMode, StreamKind};
    let code = |e: &anyhow::Error| gputape::driver_code(e).unwrap_or(0);
    // Opened once up front, so a missing backend is this command's error, not every probe's.
    drop(backends::open(on, Want::default())?);
    let rows = probe::run_all(
        &|mode: CaptureMode, kind: StreamKind| -> Result<Box<dyn GpuBackend>> {
            let want = Want {
                capture: Some((mode, kind)),
                ..Want::default()
            };
            Ok(Box::new(backends::open(on, want)?.gpu))
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

/// `bench-launch` measures the CUDA backend itself, so it builds one directly.
fn cuda_blas() -> Result<gputape::cuda::CudaBackend> {
    let g = gputape::cuda::CudaBackend::new(gputape::cuda::CudaConfig::from_env(0))?;
    gputape::workloads::load_kernels(&g)?;
    Ok(g)
}

fn bench_launch(rounds: usize, per_round: usize) -> Result<()> {
    let g = cuda_blas()?;
    let b = gputape::cuda::bench::launch_overhead(&g, rounds, per_round)?;
    println!(
        "launch host cost, saxpy (4 args), median of {} rounds x {} launches",
        b.rounds, b.per_round
    );
    println!("| variant | ns/launch | over bare |");
    println!("|---|---:|---:|");
    println!(
        "| bare cuLaunchKernel (cudarc sys) | {:.0} | - |",
        b.bare_ns
    );
    println!(
        "| CudaBackend::launch | {:.0} | {:+.0} |",
        b.backend_ns,
        b.backend_ns - b.bare_ns
    );
    println!(
        "| CudaBackend::launch_typed | {:.0} | {:+.0} |",
        b.typed_ns,
        b.typed_ns - b.bare_ns
    );

    // The same launch through a recorder that is recording (into a file in the temp dir).
    let path = std::env::temp_dir().join(format!("gputape-bench-{}.gtape", std::process::id()));
    let desc = gputape::recorder::BackendDesc::new("cuda");
    let rec = gputape::recorder::RecordingBackend::to_file(cuda_blas()?, &path, desc)?;
    rec.start()?;
    let (plain, recorded) =
        gputape::cuda::bench::launch_pair(&g, &rec, "saxpy", rounds, per_round)?;
    let stats = rec.stop()?;
    std::fs::remove_file(&path).ok();
    println!();
    println!(
        "recorder overhead on the driver, saxpy launch_typed (4 args), median of {rounds} rounds x {per_round}"
    );
    println!("| variant | ns/launch | over plain |");
    println!("|---|---:|---:|");
    println!("| CudaBackend::launch_typed | {plain:.0} | - |");
    println!(
        "| RecordingBackend<CudaBackend>, recording | {recorded:.0} | {:+.0} |",
        recorded - plain
    );
    println!("({} calls, {} bytes recorded)", stats.calls, stats.bytes);

    // A kernel written for programmatic dependent launch, launched the ordinary way and with
    // it (cuLaunchKernelEx): what PDL costs or saves on the host.
    let backend = |pdl: bool| -> Result<gputape::cuda::CudaBackend> {
        let mut cfg = gputape::cuda::CudaConfig::from_env(0);
        cfg.pdl = pdl;
        let g = gputape::cuda::CudaBackend::new(cfg)?;
        gputape::workloads::load_kernels(&g)?;
        Ok(g)
    };
    let (plain_g, pdl_g) = (backend(false)?, backend(true)?);
    let (ordinary, programmatic) =
        gputape::cuda::bench::launch_pair(&plain_g, &pdl_g, "saxpy_pdl", rounds, per_round)?;
    println!();
    println!(
        "programmatic dependent launch, saxpy_pdl launch_typed (4 args), median of {rounds} rounds x {per_round}"
    );
    println!("| variant | ns/launch | over ordinary |");
    println!("|---|---:|---:|");
    println!("| ordinary (cuLaunchKernel) | {ordinary:.0} | - |");
    println!(
        "| PDL (cuLaunchKernelEx, programmatic serialization) | {programmatic:.0} | {:+.0} |",
        programmatic - ordinary
    );

    // The floor under graph replay: a chain of empty kernels as one graph, per node.
    println!();
    println!(
        "graph of a chain of empty kernels (noop_pdl), us per node, median of {rounds} launches"
    );
    println!("| nodes | ordinary edges | programmatic edges (PDL) |");
    println!("|---:|---:|---:|");
    for nodes in [37, 1000] {
        let a = gputape::cuda::bench::graph_chain_us_per_node(&plain_g, nodes, rounds)?;
        let b = gputape::cuda::bench::graph_chain_us_per_node(&pdl_g, nodes, rounds)?;
        println!("| {nodes} | {a:.2} | {b:.2} |");
    }
    Ok(())
}

fn model_config(name: &str) -> Result<gputape::model::ModelConfig> {
    gputape::model::ModelConfig::by_name(name)
        .ok_or_else(|| anyhow::anyhow!("unknown model config {name:?} (try `default` or `tiny`)"))
}

fn fault_plan(step: Option<usize>, overrun: u32) -> Option<gputape::model::FaultPlan> {
    step.map(|step| gputape::model::FaultPlan { step, overrun })
}

/// The backend with the model's kernels. With a planted fault, red zones are switched on
/// where the backend has them (unless configured) so the overrun is caught at its write.
fn model_backend(b: Backend, fault: bool) -> Result<backends::Opened> {
    backends::open(
        b,
        Want {
            model: true,
            redzones: fault.then_some(256),
            ..Want::default()
        },
    )
}

fn demo(
    backend: Backend,
    steps: usize,
    config: &str,
    fault: Option<gputape::model::FaultPlan>,
    flight: Option<&Path>,
) -> Result<()> {
    if let Some(dir) = flight {
        let cfg = gputape::recorder::FlightConfig::from_env(dir);
        let o = model_backend(backend, fault.is_some())?;
        let rec = gputape::recorder::RecordingBackend::flight(o.gpu, cfg, o.desc)?;
        return demo_on(&rec, backend, steps, config, fault);
    }
    let o = model_backend(backend, fault.is_some())?;
    demo_on(o.gpu.as_ref(), backend, steps, config, fault)
}

fn demo_on(
    gpu: &(dyn GpuBackend + 'static),
    backend: Backend,
    steps: usize,
    config: &str,
    fault: Option<gputape::model::FaultPlan>,
) -> Result<()> {
    let fault_step = fault.map(|f| f.step);
    let cfg = model_config(config)?;
    anyhow::ensure!(
        steps <= cfg.max_seq,
        "--steps {steps} is more than the {} model's {} positions",
        cfg.name,
        cfg.max_seq
    );
    let mut model = gputape::model::Model::load(gpu, cfg.clone())?;
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
    let result = gputape::model::generate(gpu, &mut model, steps, |pos, tok, dt| {
        times.push(dt.as_secs_f64() * 1e3);
        println!(
            "step {pos:>3}  token {tok:>4}  {:8.3} ms",
            dt.as_secs_f64() * 1e3
        );
        if scan {
            // With a planted fault, read the red zones after every step so the report names
            // the step that wrote past its buffer.
            match gpu.scan_redzones() {
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

fn record_step(
    backend: Backend,
    steps: (usize, usize),
    config: &str,
    fault: Option<gputape::model::FaultPlan>,
    out: &Path,
) -> Result<()> {
    let cfg = model_config(config)?;
    let (first, end) = steps;
    anyhow::ensure!(
        end <= cfg.max_seq,
        "step {} is past the {} model's last position ({}): its KV cache holds {} positions",
        end - 1,
        cfg.name,
        cfg.max_seq - 1,
        cfg.max_seq
    );
    anyhow::ensure!(first < end, "no steps in {first}..{end}");
    let o = model_backend(backend, fault.is_some())?;
    let rec = gputape::recorder::RecordingBackend::to_file(o.gpu, out, o.desc)?;
    record_steps_on(&rec, cfg, steps, fault, out)
}

/// Run the model up to `steps.1`, recording steps `steps.0..steps.1` (the trace starts with a
/// snapshot of device memory at step `steps.0`, and the weights are stored once however many
/// steps it holds).
fn record_steps_on<B: GpuBackend + 'static>(
    rec: &gputape::recorder::RecordingBackend<B>,
    cfg: gputape::model::ModelConfig,
    (first, end): (usize, usize),
    fault: Option<gputape::model::FaultPlan>,
    out: &Path,
) -> Result<()> {
    rec.hash_at_syncs(HASH_SYNCS.load(std::sync::atomic::Ordering::Relaxed));
    if let Some(dir) = blob_dir() {
        rec.blob_store(dir);
    }
    let gpu: &dyn GpuBackend = rec;
    let mut model = gputape::model::Model::load(gpu, cfg)?;
    model.fault = fault;
    let mut token = gputape::model::PROMPT[0];
    let what = if end == first + 1 {
        format!("step {first}")
    } else {
        format!("steps {first}..{end}")
    };
    for pos in 0..end {
        if pos == first {
            rec.start()?;
        }
        let r = model.step(gpu, token, pos);
        let last = pos + 1 == end || r.is_err();
        if pos >= first {
            match &r {
                Err(e) => println!("step {pos} failed (recorded): {e:#}"),
                Ok(t) => println!("step {pos} produced token {t}"),
            }
        }
        if last {
            // Red zones are read while still recording, so the violation is in the trace.
            if let Ok(bad @ 1..) = gpu.scan_redzones() {
                println!("red-zone scan found {bad} violation(s)");
            }
            let stopped = rec.stop();
            if let Ok(stats) = &stopped {
                println!(
                    "recorded {what}: {} calls, {} bytes -> {}",
                    stats.calls,
                    stats.bytes,
                    out.display()
                );
            }
            if r.is_err() {
                // After a recorded fault the device may be gone; the trace is what matters.
                if let Err(e) = model.teardown(gpu) {
                    let first = format!("{e:#}");
                    eprintln!(
                        "note: teardown after the recorded fault failed too: {}",
                        first.split(": ").next().unwrap_or(&first)
                    );
                }
                stopped?;
                return Ok(());
            }
            // The steps ran whatever became of the recording; a recording that stopped early
            // is this command's failure, said after the steps' own results.
            stopped.map_err(|e| anyhow::anyhow!("{e} -> {}", out.display()))?;
            break;
        }
        let next = r?;
        token = gputape::model::PROMPT.get(pos + 1).copied().unwrap_or(next);
    }
    model.teardown(gpu)?;
    Ok(())
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("{s:?} is not a range like 10..200"))?;
    let a = if a.is_empty() {
        0
    } else {
        a.parse().map_err(|e| format!("{a:?}: {e}"))?
    };
    let b = if b.is_empty() {
        u64::MAX
    } else {
        b.parse().map_err(|e| format!("{b:?}: {e}"))?
    };
    if a >= b {
        return Err(format!("empty range {s}"));
    }
    Ok((a, b))
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
    path: &Path,
    on: Backend,
    opts: &gputape::replayer::ReplayOptions,
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
    use gputape::replayer::Replayer;
    let t = open_trace(path)?;
    let stepped;
    let opts = match steps {
        Some(s) => {
            stepped = gputape::replayer::ReplayOptions {
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
    let policy = gputape::replayer::ReplayPolicy::of(&t);
    if as_graph && !policy.as_graph(true) && child_report.is_none() {
        // Said once, by the process the user started (a child replays the same command).
        eprintln!(
            "note: {} records a fault; replaying it eagerly (a graph replay would hide which call raised it)",
            path.display()
        );
    }
    let as_graph = policy.as_graph(as_graph);
    if policy.isolate(on.fault_poisons_process()) && !no_isolate && child_report.is_none() {
        return replay_in_child(json);
    }
    let want = Want {
        redzones: policy.redzones(opts.scan_redzones_each).then_some(256),
        pdl,
        ..Want::replay()
    };
    let opened = backends::open(on, want)?;
    let gpu = opened.gpu.as_ref();
    let load_cuda = |m: &gputape::backend::ModuleCode| opened.load_trace_code(m);
    let place = |addr: u64, bytes: usize| (opened.place)(addr, bytes);
    check_range(&t, opts.range)?;
    if !on.has_redzones() && opts.scan_redzones_each && child_report.is_none() {
        eprintln!(
            "note: the mock has no red zones (it checks every access against exact bounds instead): --scan-redzones does nothing there"
        );
    }
    let mut r = Replayer::new(&t).with_max_memory(max_memory);
    if on.runs_cpu_twins() {
        // An engine's own kernels have no CPU body here: skipped, and said so in the report.
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
            let eager = gputape::replayer::ReplayOptions {
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
        gputape::replayer::replay_json(None, Some(&g))
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
        let rep = r.run(gpu, opts, Some(&load_cuda), |seq| {
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
            let j = gputape::analysis::export::perfetto_with_device(
                &t,
                gputape::analysis::CaptureQuery::default(),
                Some(gputape::analysis::export::DeviceSpans {
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
        gputape::replayer::replay_json(Some(&rep), None)
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

/// Write `t` to `out` through a temporary name in the same directory, renamed when complete,
/// so a failure never leaves half a trace (or destroys the trace that was there).
fn write_trace_atomically(t: &gputape::trace::Trace, out: &Path) -> Result<u64> {
    let bytes = t.to_bytes()?;
    write_out(out, &bytes)?;
    Ok(bytes.len() as u64)
}

/// `dir/.name.partial-PID`, beside `out`.
fn temp_beside(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    out.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

fn minimize(path: &Path, out: &Path, on: Backend, max_attempts: usize) -> Result<Exit> {
    use gputape::replayer::{minimize, signature, FaultSignature, ReplayOptions, Replayer};
    let t = open_trace(path)?;
    let before = std::fs::metadata(path)?.len();
    // Opened once up front, so a missing backend is this command's error.
    drop(backends::open(on, Want::default())?);
    let opts = ReplayOptions {
        verify: false,
        ..Default::default()
    };
    let attempt_file = temp_beside(out).with_extension("attempt.gtape");
    let mut oracle = |cand: &gputape::trace::Trace| -> Result<Option<FaultSignature>> {
        let report = match on.fault_poisons_process() {
            false => {
                let m = backends::open(on, Want::replay())?;
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
                    Ok(faults) => gputape::replayer::ReplayReport {
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
    let m = m?;
    let after = write_trace_atomically(&m.trace, out)?;
    let initial_bytes = |t: &gputape::trace::Trace| t.initial.iter().map(|i| i.bytes).sum::<u64>();
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
    print!("{}", gputape::trace::render(&m.trace));
    Ok(Exit::Pass)
}

fn trim(path: &Path, range: (u64, u64), out: &Path, on: Backend) -> Result<()> {
    let t = open_trace(path)?;
    let o = backends::open(on, Want::replay())?;
    let load = |m: &gputape::backend::ModuleCode| o.load_trace_code(m);
    let cut = gputape::replayer::Replayer::new(&t).trim(o.gpu.as_ref(), range, Some(&load))?;
    let bytes = write_trace_atomically(&cut, out)?;
    println!(
        "kept calls {}..{} of {} as {} calls, starting from the state at #{} ({} buffers, {} bytes); wrote {} ({bytes} bytes)",
        range.0,
        range.1.min(t.calls.last().map_or(0, |c| c.seq + 1)),
        t.calls.len(),
        cut.calls.len(),
        range.0,
        cut.initial.len(),
        cut.initial.iter().map(|i| i.bytes).sum::<u64>(),
        out.display()
    );
    Ok(())
}

/// Load a trace's module onto a CUDA backend from the code the trace carries.
fn timing_line(what: &str, ms: &[f64]) -> String {
    let mut v = ms.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    format!(
        "{what}: median {:.3} ms over {} run(s) (min {:.3}, max {:.3})\n",
        v[v.len() / 2],
        v.len(),
        v[0],
        v[v.len() - 1]
    )
}

/// Run this same command in a child process and relay its report, so a fault that poisons the
/// CUDA context cannot take the parent (and its report) down.
fn replay_in_child(json: bool) -> Result<Exit> {
    let dir = std::env::temp_dir().join(format!("gputape-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let report = dir.join("report.json");
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(std::env::args_os().skip(1))
        .arg("--child-report")
        .arg(&report)
        .status()?;
    let text = std::fs::read_to_string(&report).ok();
    std::fs::remove_dir_all(&dir).ok();
    match text {
        Some(t) => {
            let v: serde_json::Value = serde_json::from_str(&t)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v["report"])?);
            } else {
                print!("{}", v["text"].as_str().unwrap_or_default());
                println!("(replayed in a child process, which exited with {status})");
            }
            Ok(pass_if(v["passed"].as_bool().unwrap_or(false)))
        }
        None => anyhow::bail!(
            "the replay process died before reporting ({status}); the fault is past the point a report could be written"
        ),
    }
}

fn capture_query(
    mode: Mode,
    kind: Kind,
    stream: Option<u32>,
    range: Option<(u64, u64)>,
) -> gputape::analysis::CaptureQuery {
    use gputape::backend::{CaptureMode, StreamKind};
    gputape::analysis::CaptureQuery {
        range: range.unwrap_or((0, u64::MAX)),
        stream: stream.map(|s| gputape::trace::StreamRef::Id(gputape::trace::StreamId(s))),
        mode: match mode {
            Mode::Global => CaptureMode::Global,
            Mode::ThreadLocal => CaptureMode::ThreadLocal,
            Mode::Relaxed => CaptureMode::Relaxed,
        },
        kind: match kind {
            Kind::Blocking => StreamKind::Blocking,
            Kind::NonBlocking => StreamKind::NonBlocking,
        },
    }
}
