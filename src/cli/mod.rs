//! The `gputape` command line, as a library module.
//!
//! It lives here rather than in `src/main.rs` so that an engine can ship the same tool with its
//! own kernels: `gputape::cli::main_with(&[my_module()])` in a `myengine-tape` binary loads the
//! engine's modules into every backend the command line opens, so `replay`, `minimize` and
//! `trim` of the engine's traces run its kernels (their CPU bodies on the mock, their CUDA C on
//! a GPU) instead of skipping them as opaque.
//!
//! Laid out one file per verb: each holds its `Args` (the flags, their help and defaults) and an
//! `exec` that turns them into the library's options. This file holds what every verb shares:
//! the global flags, the `Cmd` enum that names the verbs, the exit statuses and the context a
//! verb runs in. Arguments and files that several verbs read are handled in `common`, backends
//! are opened in `backends`.

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::backend::ModuleDesc;

mod analyze;
mod backends;
mod bench_launch;
mod capture_table;
mod common;
mod demo;
mod diff;
mod dump;
mod export;
mod info;
mod inspect;
mod minimize;
mod minimize_ranks;
mod ranks;
mod record;
mod reference;
mod replay;
mod report;
mod report_bug;
mod run;
mod show;
mod trim;

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
                  damaged or unreadable; 4 the backend asked for (or the one the trace needs) is not available here. `run` \
                  exits with its command's own status instead (128 + N after signal N).\n\n\
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
    /// Device memory of the mock, in bytes, for every verb that runs it (default 16 GiB): the
    /// 8B-shaped step's weights alone are 16 GB, so replaying it on the mock wants more, on
    /// a host that has it (host memory is used only as buffers are written).
    #[arg(long, global = true, value_name = "BYTES")]
    mock_memory: Option<usize>,
    #[command(subcommand)]
    cmd: Cmd,
}

/// The verbs, in the order `--help` lists them; each wraps its own file's `Args`.
#[derive(Subcommand)]
enum Cmd {
    /// List the backends usable on this machine (mock always; cuda when a driver is present).
    Info(info::Args),
    /// Run the built-in Llama-style decoder: generation, tokens and per-step time.
    Demo(demo::Args),
    /// Record decode step K of the built-in model (mid-run start: the trace begins with a
    /// snapshot of device memory), or one of the small built-in workloads.
    Record(record::Args),
    /// Run every capture-rule probe on a backend and compare it with the rule table.
    CaptureTable(capture_table::Args),
    /// Measure the host cost of a kernel launch through the CUDA backend against a bare
    /// driver launch.
    BenchLaunch(bench_launch::Args),
    /// Replay a trace on a backend, check its results against the recording, reproduce its
    /// faults, optionally as CUDA graphs.
    Replay(replay::Args),
    /// A buffer's contents after any call, replayed: a summary line, or a `.npy` or
    /// `.safetensors` file.
    Inspect(inspect::Args),
    /// The first difference between two traces' call lists (ids renamed away), and what was
    /// added or removed: allocations, host syncs, launches.
    Diff(diff::Args),
    /// Analyse a trace offline: what breaks CUDA-graph capture and why, cross-stream races,
    /// leaks and use-after-free, the critical path. All sections unless some are named.
    Analyze(analyze::Args),
    /// Export a trace as pictures: Perfetto/Chrome trace-event JSON and/or Graphviz DOT.
    Export(export::Args),
    /// Shrink a trace that records a fault to the fewest calls (and the buffers they use) that
    /// still reproduce it: the same driver error, raised by the same kernel. The result is an
    /// ordinary trace that `replay` reproduces. On CUDA each attempt runs in a child process
    /// (a reproduced illegal address kills the context). Given a rank set's traces, shrinks
    /// them together on mock ranks, a collective kept or dropped on every rank at once.
    Minimize(minimize::Args),
    /// Cut a trace to calls A..B. The new trace starts with the device state at A, computed
    /// by replaying the calls before A (on the mock when every kernel has a CPU twin there,
    /// or on CUDA), so a long recording can be cut to the step that matters.
    Trim(trim::Args),
    /// Write one self-contained HTML page about a trace (no scripts, no network): the
    /// timeline per stream, faults and their windows, capture verdicts with their rules and
    /// sites, races, leaks, and the dependency graph.
    Report(report::Args),
    /// Print a trace: its calls in canonical form, then a summary.
    Show(show::Args),
    /// Lay a rank set's traces side by side: each communicator's collectives matched by
    /// number across the ranks and each send paired with its receive, and the first where
    /// they parted (a rank that never made a collective or a send's other side, with what it
    /// did instead; a different collective, count or type) named with ranks and sites. Exit 1
    /// where they parted.
    Ranks(ranks::Args),
    /// Run an unmodified CUDA program (PyTorch, vLLM, anything that loads libcuda.so.1) with
    /// gputape's driver shim in front of the real driver: every driver call is counted and
    /// forwarded, and a table of the entry points called is printed when it exits; with `-o`
    /// the calls are recorded into a trace; with `--flight` they are kept in memory and dumped
    /// at a fault.
    Run(run::Args),
    /// Ask a process `gputape run --flight` is recording for its flight dump now, without a
    /// fault (a step that hangs, numbers that look wrong), with a reason; prints the dump's
    /// path, which every verb opens as it is.
    Dump(dump::Args),
    /// Write the book's reference pages (commands, environment variables) from the code, or
    /// check them (`--check`): for gputape's own docs and CI.
    #[command(hide = true)]
    Reference(reference::Args),
}

/// What `gputape` exits with, the same for every verb (README and `--help` list them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: matched, fault reproduced, no differences, no findings.
    Pass,
    /// 1: a divergence, a fault not reproduced, differences, or an `analyze --fail-on` finding.
    Findings,
    /// 2: a usage error, or anything else that kept the command from running.
    Usage,
    /// 3: the trace is damaged or unreadable.
    Damaged,
    /// 4: the backend asked for is not available on this machine.
    NoBackend,
    /// `gputape run`: the status its command exited with, relayed (128 + N when signal N
    /// ended it, as a shell reports it).
    Relayed(u8),
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Pass => 0,
            Exit::Findings => 1,
            Exit::Usage => 2,
            Exit::Damaged => 3,
            Exit::NoBackend => 4,
            Exit::Relayed(c) => c,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e.code())
    }
}

/// The exit status of a failed command, from what failed.
pub fn exit_for(e: &anyhow::Error) -> Exit {
    use crate::replayer::ReplayError as R;
    use crate::trace::TraceError as T;
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
        if let Some(crate::shimtrace::ShimTraceError::Log { .. }) =
            c.downcast_ref::<crate::shimtrace::ShimTraceError>()
        {
            return Exit::Damaged;
        }
        if c.downcast_ref::<crate::cuda::ProbeError>().is_some()
            || c.downcast_ref::<backends::NeedsGpu>().is_some()
            || c.downcast_ref::<backends::NeedsTool>().is_some()
        {
            return Exit::NoBackend;
        }
    }
    // CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NOT_INITIALIZED: a driver without a usable device.
    if matches!(crate::driver_code(e), Some(100 | 3)) {
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

/// What every verb runs with besides its own arguments: the engine's modules, where blobs are
/// kept, and the command line itself (a replay that isolates a fault runs it again in a child).
pub(crate) struct Ctx<'a> {
    /// The engine's own modules (`main_with`), loaded into every backend after gputape's.
    modules: &'a [ModuleDesc],
    /// `--blobs DIR`, else GPUTAPE_BLOBS.
    blobs: Option<PathBuf>,
    /// `--mock-memory BYTES`: the mock's device memory.
    mock_memory: Option<usize>,
    /// The arguments after the program's name.
    args: Vec<OsString>,
}

impl Ctx<'_> {
    /// Where stored blobs are looked for and put, for every verb that reads or records a trace.
    fn blob_dir(&self) -> Option<&Path> {
        self.blobs.as_deref()
    }
}

/// The `gputape` binary: gputape's own kernels only.
pub fn main() -> std::process::ExitCode {
    main_with(&[])
}

/// A `gputape` of an engine's own: `modules` are loaded into every backend a verb opens, after
/// gputape's built-in kernels, so the engine's traces replay, minimize and trim with its
/// kernels run (on the mock, their CPU bodies) rather than skipped as opaque. An engine's
/// `src/bin/myengine-tape.rs` is `fn main() -> ExitCode { gputape::cli::main_with(&[module()]) }`.
pub fn main_with(modules: &[ModuleDesc]) -> std::process::ExitCode {
    // Output into a closed pipe (`gputape show t | head`) ends the process quietly, as it does
    // for other command-line tools, instead of panicking on the failed write.
    // SAFETY: restoring the default disposition of one signal, before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    run_with(std::env::args_os(), modules).into()
}

/// Run one command line (`args` begins with the program's name, as `std::env::args_os` does)
/// with the engine's `modules`, and say how it ended: what `main_with` exits with, for a test
/// or a tool that embeds the command line. Usage errors, `--help` and `--version` are printed
/// as the binary prints them. Logging is set up by the first call in a process.
pub fn run_with(args: impl IntoIterator<Item = OsString>, modules: &[ModuleDesc]) -> Exit {
    let args: Vec<OsString> = args.into_iter().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help and the version on stdout, errors on stderr.
            let _ = e.print();
            return if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Pass
            };
        }
    };
    init_logging(cli.quiet, cli.verbose);
    let ctx = Ctx {
        modules,
        blobs: cli
            .blobs
            .clone()
            .or_else(|| std::env::var_os("GPUTAPE_BLOBS").map(PathBuf::from)),
        mock_memory: cli.mock_memory,
        args: args.into_iter().skip(1).collect(),
    };
    match exec(cli.cmd, &ctx) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit_for(&e)
        }
    }
}

/// Log on stderr at the level `-q` / `-v` asks, unless GPUTAPE_LOG or RUST_LOG say otherwise.
fn init_logging(quiet: bool, verbose: u8) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    // A second command line in the same process keeps the first one's logging.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPUTAPE_LOG")
                .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
                .unwrap_or_else(|_| level.into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

fn exec(cmd: Cmd, ctx: &Ctx) -> Result<Exit> {
    match cmd {
        Cmd::Info(a) => info::exec(a, ctx),
        Cmd::Demo(a) => demo::exec(a, ctx),
        Cmd::Record(a) => record::exec(a, ctx),
        Cmd::CaptureTable(a) => capture_table::exec(a, ctx),
        Cmd::BenchLaunch(a) => bench_launch::exec(a, ctx),
        Cmd::Replay(a) => replay::exec(a, ctx),
        Cmd::Inspect(a) => inspect::exec(a, ctx),
        Cmd::Diff(a) => diff::exec(a, ctx),
        Cmd::Analyze(a) => analyze::exec(a, ctx),
        Cmd::Export(a) => export::exec(a, ctx),
        Cmd::Minimize(a) => minimize::exec(a, ctx),
        Cmd::Trim(a) => trim::exec(a, ctx),
        Cmd::Report(a) => report::exec(a, ctx),
        Cmd::Show(a) => show::exec(a, ctx),
        Cmd::Ranks(a) => ranks::exec(a, ctx),
        Cmd::Run(a) => run::exec(a, ctx),
        Cmd::Dump(a) => dump::exec(a, ctx),
        Cmd::Reference(a) => reference::exec(a, ctx),
    }
}
