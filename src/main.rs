//! The `gputape` command line.

use anyhow::Result;
use clap::{Parser, Subcommand};

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
}

fn main() -> Result<()> {
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
