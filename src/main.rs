//! The `gputape` command line.

use anyhow::Result;
use clap::{Parser, Subcommand};
use gputape::backend::GpuBackend;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "gputape",
    version,
    about = "Record and replay what an inference engine asks of its GPU",
    long_about = "gputape wraps a GpuBackend (CUDA or the driver-faithful mock), records every call \
                  into a self-contained, crash-safe trace, and replays or analyses that trace \
                  offline.",
    after_help = "Verbs still to come: record (a decode step), replay (on mock or CUDA, eager or as \
                  CUDA graphs), analyze (capture legality, races, leaks), diff, export (Perfetto, DOT)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the backends usable on this machine (mock always; cuda when a driver is present).
    Info,
    /// Record one of the built-in workloads on the mock into a trace file.
    Record {
        /// Which workload to run.
        #[arg(long, value_enum, default_value_t = Workload::TwoStreams)]
        workload: Workload,
        /// Where to write the trace.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Print a trace: its calls in canonical form, then a summary.
    Show {
        trace: PathBuf,
        /// Only the summary.
        #[arg(long)]
        summary: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Workload {
    SingleStream,
    TwoStreams,
    Capture,
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPUTAPE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Info => info(),
        Cmd::Record { workload, output } => record(workload, &output),
        Cmd::Show { trace, summary } => show(&trace, summary),
    }
}

fn info() -> Result<()> {
    println!("gputape {}", env!("CARGO_PKG_VERSION"));
    println!("backends:");
    println!("  mock   available (CPU, driver-faithful emulation; the default)");
    match gputape::cuda::probe() {
        Ok(devs) if devs.is_empty() => println!("  cuda   driver present, but no device visible"),
        Ok(devs) => {
            for d in devs {
                println!(
                    "  cuda   device {}: {} ({} SMs, {:.1} GiB, driver {}.{})",
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

fn record(w: Workload, out: &Path) -> Result<()> {
    let m = gputape::mock::MockGpuBackend::default();
    gputape::workloads::register_mock_kernels(&m);
    let rec = gputape::recorder::RecordingBackend::to_file(
        m,
        out,
        gputape::recorder::BackendDesc::new("mock"),
    )?;
    rec.start()?;
    let g: &dyn GpuBackend = &rec;
    match w {
        Workload::SingleStream => gputape::workloads::single_stream(g)?,
        Workload::TwoStreams => gputape::workloads::two_streams(g)?,
        Workload::Capture => gputape::workloads::capture_region(g)?,
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

fn show(path: &Path, summary_only: bool) -> Result<()> {
    let t = gputape::trace::Trace::open(path)?;
    if !summary_only {
        print!("{}", gputape::trace::render(&t));
        println!();
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
