//! `gputape replay`: the verb the rest of the tool exists for, its arguments and a dispatch
//! to its modes (`run.rs`: eager or as graphs; `modes.rs`: the rest). The options only choose
//! how the replayer runs (`replayer::ReplayOptions`) and where; what the trace records
//! decides the rest (`replayer::ReplayPolicy`), and a replay that may kill a CUDA context or
//! hang runs in a child process under `replayer::child`'s rules: this same command line
//! again with a hidden `--child-report`.

use anyhow::Result;
use std::path::PathBuf;

use super::backends::Backend;
use super::common::parse_range;
use super::{Ctx, Exit};
pub(super) use modes::parse_buffer;
use modes::parse_dtype;

mod modes;
mod run;

#[derive(clap::Args)]
pub struct Args {
    /// The trace to replay.
    trace: PathBuf,
    /// The backend to replay on. Default: the mock, unless the trace launches kernels only a
    /// GPU runs (a driver-level recording's, an engine's own): then CUDA where a driver is
    /// present, else exit 4 saying so.
    #[arg(long = "on", value_enum)]
    on_arg: Option<Backend>,
    /// `--on`, or what `backends::choose` picked.
    #[arg(skip)]
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
    /// its kernels say (`--dtype buf12=bf16`); or the pointers of kernels whose name matches
    /// GLOB, parameter ARG (`N`, or `N.M` for the M-th pointer inside a by-value parameter
    /// such as PyTorch's array of data pointers), when their names say no type
    /// (`--dtype '*gemm*:2=bf16'`). Repeatable; the first rule that matches wins.
    #[arg(long = "dtype", value_name = "BUF=TYPE|GLOB[:ARG]=TYPE", value_parser = parse_dtype)]
    dtypes: Vec<modes::Dtype>,
    /// Replay on --on and on this backend in lockstep and name the first launch whose
    /// written bytes differ (exit 1), e.g. `--on cuda --against mock`: the kernels against
    /// their CPU twins on a real recorded step.
    /// With --loop N, the lockstep runs up to N times and stops at the first round that differs
    /// (a race that loses rarely).
    #[arg(long, value_enum, conflicts_with_all = ["as_graph", "perfetto", "check_finite"])]
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
    /// Replay once, measuring what each launch wrote: for every pointer argument, the bytes of
    /// its allocation that changed (in 512-byte chunks, split among the launch's pointers into
    /// the same allocation) and the element type they read as. Stored beside the trace
    /// (TRACE.writes.json) for --check-finite and --against, which measure it themselves when
    /// the trace launches kernels nobody described and it is not there.
    #[arg(long, conflicts_with_all = ["as_graph", "perfetto", "loops", "check_finite", "against", "chaos"])]
    write_extents: bool,
    /// With --check-finite or --against: neither measure what launches wrote nor use a stored
    /// measurement (undeclared pointers are then checked from the pointer to the end of their
    /// allocation).
    #[arg(long)]
    no_write_extents: bool,
    /// Replay once on the mock and print, from what the mock did, what the replay allocated
    /// (size, buffer, placement against the recording's) and freed, and per stream the work
    /// it ran in the order it ran, with the events between: the allocation and ordering a
    /// snapshot test holds (`gputape::replayer::replay_layout`).
    #[arg(long, conflicts_with_all = ["as_graph", "perfetto", "loops", "check_finite", "against", "chaos", "json"])]
    layout: bool,
    /// On CUDA, replay under NVIDIA's compute-sanitizer with this tool (memcheck, racecheck,
    /// initcheck, synccheck; found as `COMPUTE_SANITIZER`, on PATH or under CUDA_HOME): its
    /// findings join the report, and a recorded fault counts as reproduced when the tool names
    /// a launch of the fault's window, whatever code the driver returned under it.
    #[arg(long, value_name = "TOOL", value_parser = clap::builder::PossibleValuesParser::new(crate::replayer::sanitizer::TOOLS), conflicts_with_all = ["as_graph", "perfetto", "check_finite", "against", "chaos", "layout"])]
    sanitize: Option<String>,
    /// On CUDA, run the replay under NVIDIA's cuda-gdb (found as `CUDA_GDB`, on PATH or under
    /// CUDA_HOME): it stops in the kernel at a recorded fault's device exception, or in the
    /// launch --break-at names. At a terminal you get the debugger's prompt there; otherwise
    /// (a script, a log) it prints the kernel, the stack and the instructions where it
    /// stopped, and exits.
    #[arg(long, conflicts_with_all = ["as_graph", "perfetto", "check_finite", "against", "chaos", "layout", "sanitize", "loops"])]
    debug: bool,
    /// With --debug: stop in the kernel of launch #N, whatever happens first; its arguments
    /// are printed as the trace names them, with where this replay put each buffer.
    #[arg(long, value_name = "N", requires = "debug")]
    break_at: Option<u64>,
    /// The trace, once opened (to choose `--on`): opened once, whatever reads it.
    #[arg(skip)]
    opened: Option<Box<crate::trace::Trace>>,
    // Given by the parent of a child replay (see `replay_in_child`): where to write the report.
    #[arg(long, hide = true)]
    child_report: Option<PathBuf>,
}

impl Args {
    /// The trace: the one opened to choose the backend, or opened now.
    fn take_trace(&mut self, ctx: &Ctx) -> Result<crate::trace::Trace> {
        match self.opened.take() {
            Some(t) => Ok(*t),
            None => super::common::open_trace(ctx, &self.trace),
        }
    }
}

/// One mode per run, chosen by its flag; the plain replay otherwise.
pub fn exec(mut a: Args, ctx: &Ctx) -> Result<Exit> {
    a.on = match a.on_arg {
        Some(b) => b,
        None => {
            let t = super::common::open_trace(ctx, &a.trace)?;
            let on = super::backends::choose(ctx, None, &t, &a.trace)?;
            a.opened = Some(Box::new(t));
            on
        }
    };
    if a.layout {
        modes::layout(ctx, a)
    } else if a.write_extents {
        modes::write_extents(ctx, a)
    } else if a.chaos.is_some() {
        modes::chaos(ctx, a)
    } else if a.against.is_some() {
        modes::lockstep(ctx, a)
    } else if a.check_finite {
        modes::check_finite(ctx, a)
    } else {
        run::replay(ctx, a)
    }
}
