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
    /// Run the built-in Llama-style decoder: generation, tokens and per-step time.
    Demo {
        #[arg(long, value_enum, default_value_t = Backend::Mock)]
        backend: Backend,
        #[arg(long, default_value_t = 16)]
        steps: usize,
        /// Model size: `default` or `tiny`.
        #[arg(long, default_value = "default")]
        config: String,
        /// Plant the fault: at this step `silu_mul` writes past the end of its output.
        #[arg(long)]
        fault_step: Option<usize>,
    },
    /// Record decode step K of the built-in model (mid-run start: the trace begins with a
    /// snapshot of device memory), or one of the small built-in workloads.
    Record {
        /// Record this decode step of the model.
        #[arg(long, conflicts_with = "workload")]
        step: Option<usize>,
        /// Model size for --step: `default` or `tiny`.
        #[arg(long, default_value = "tiny")]
        config: String,
        /// Plant the fault at this step (see `demo`).
        #[arg(long)]
        fault_step: Option<usize>,
        /// Record a small workload instead of the model.
        #[arg(long, value_enum)]
        workload: Option<Workload>,
        /// Which backend to record on.
        #[arg(long, value_enum, default_value_t = Backend::Mock)]
        backend: Backend,
        /// Where to write the trace.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Run every capture-rule probe on a backend and compare it with the rule table.
    CaptureTable {
        #[arg(long, value_enum, default_value_t = Backend::Mock)]
        on: Backend,
        /// Exit with an error when any probe disagrees with the table.
        #[arg(long)]
        strict: bool,
    },
    /// Measure the host cost of a kernel launch through the CUDA backend against a bare
    /// driver launch.
    BenchLaunch {
        #[arg(long, default_value_t = 31)]
        rounds: usize,
        #[arg(long, default_value_t = 2000)]
        per_round: usize,
    },
    /// Print a trace: its calls in canonical form, then a summary.
    Show {
        trace: PathBuf,
        /// Only the summary.
        #[arg(long)]
        summary: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    Mock,
    Cuda,
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
        Cmd::Demo {
            backend,
            steps,
            config,
            fault_step,
        } => demo(backend, steps, &config, fault_step),
        Cmd::Record {
            step,
            config,
            fault_step,
            workload,
            backend,
            output,
        } => match (step, workload) {
            (Some(k), _) => record_step(backend, k, &config, fault_step, &output),
            (None, w) => record(w.unwrap_or(Workload::TwoStreams), backend, &output),
        },
        Cmd::CaptureTable { on, strict } => capture_table(on, strict),
        Cmd::BenchLaunch { rounds, per_round } => bench_launch(rounds, per_round),
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

fn cuda_backend() -> Result<gputape::cuda::CudaBackend> {
    let g = gputape::cuda::CudaBackend::new(gputape::cuda::CudaConfig::from_env(0))?;
    gputape::workloads::load_cuda_kernels(&g)?;
    Ok(g)
}

fn cuda_desc() -> gputape::recorder::BackendDesc {
    let mut d = gputape::recorder::BackendDesc::new("cuda");
    if let Ok(devs) = gputape::cuda::probe() {
        if let Some(dev) = devs.first() {
            d.device_name = Some(dev.name.clone());
            d.driver_version = Some(dev.driver_version);
        }
    }
    d
}

fn record(w: Workload, backend: Backend, out: &Path) -> Result<()> {
    match backend {
        Backend::Mock => {
            let m = gputape::mock::MockGpuBackend::default();
            gputape::workloads::register_mock_kernels(&m);
            let d = gputape::recorder::BackendDesc::new("mock");
            record_on(
                gputape::recorder::RecordingBackend::to_file(m, out, d)?,
                w,
                out,
            )
        }
        Backend::Cuda => {
            let g = cuda_backend()?;
            record_on(
                gputape::recorder::RecordingBackend::to_file(g, out, cuda_desc())?,
                w,
                out,
            )
        }
    }
}

fn record_on<B: GpuBackend>(
    rec: gputape::recorder::RecordingBackend<B>,
    w: Workload,
    out: &Path,
) -> Result<()> {
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

fn capture_table(on: Backend, strict: bool) -> Result<()> {
    use gputape::backend::{probe, CaptureMode, StreamKind};
    let code = |e: &anyhow::Error| gputape::driver_code(e).unwrap_or(0);
    if on == Backend::Cuda && !gputape::cuda::driver_present() {
        anyhow::bail!("{}", gputape::cuda::ProbeError::NoDriver);
    }
    let rows = match on {
        Backend::Mock => probe::run_all(
            &|mode: CaptureMode, kind: StreamKind| -> Result<Box<dyn GpuBackend>> {
                Ok(Box::new(gputape::mock::MockGpuBackend::new(
                    gputape::mock::MockConfig {
                        capture_mode: mode,
                        stream_kind: kind,
                        ..Default::default()
                    },
                )))
            },
            &code,
        ),
        Backend::Cuda => probe::run_all(
            &|mode: CaptureMode, kind: StreamKind| -> Result<Box<dyn GpuBackend>> {
                let mut cfg = gputape::cuda::CudaConfig::from_env(0);
                cfg.capture_mode = mode;
                cfg.stream_kind = kind;
                Ok(Box::new(gputape::cuda::CudaBackend::new(cfg)?))
            },
            &code,
        ),
    };
    print!("{}", probe::render_rows(&rows));
    let bad = rows.iter().filter(|r| !r.agrees()).count();
    if strict && bad > 0 {
        anyhow::bail!("{bad} probe(s) disagree with the capture rule table");
    }
    Ok(())
}

fn bench_launch(rounds: usize, per_round: usize) -> Result<()> {
    let g = cuda_backend()?;
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
    Ok(())
}

fn model_config(name: &str) -> Result<gputape::model::ModelConfig> {
    gputape::model::ModelConfig::by_name(name)
        .ok_or_else(|| anyhow::anyhow!("unknown model config {name:?} (try `default` or `tiny`)"))
}

fn fault_plan(step: Option<usize>) -> Option<gputape::model::FaultPlan> {
    step.map(|step| gputape::model::FaultPlan { step, overrun: 16 })
}

/// The mock with the model's kernels, or the CUDA backend with them compiled. With a planted
/// fault on CUDA, red zones are switched on (unless configured) so the overrun is caught.
fn model_backend(b: Backend, fault: bool) -> Result<Box<dyn GpuBackend>> {
    Ok(match b {
        Backend::Mock => {
            let m = gputape::mock::MockGpuBackend::default();
            gputape::model::kernels::register_mock(&m);
            Box::new(m)
        }
        Backend::Cuda => Box::new(cuda_model_backend(fault)?),
    })
}

fn cuda_model_backend(fault: bool) -> Result<gputape::cuda::CudaBackend> {
    let mut cfg = gputape::cuda::CudaConfig::from_env(0);
    if fault && cfg.redzone.bytes == 0 {
        cfg.redzone.bytes = 256;
    }
    let g = gputape::cuda::CudaBackend::new(cfg)?;
    gputape::model::kernels::load_cuda(&g)?;
    Ok(g)
}

fn demo(backend: Backend, steps: usize, config: &str, fault_step: Option<usize>) -> Result<()> {
    let cfg = model_config(config)?;
    let g = model_backend(backend, fault_step.is_some())?;
    let gpu: &dyn GpuBackend = g.as_ref();
    let mut model = gputape::model::Model::load(gpu, cfg.clone())?;
    model.fault = fault_plan(fault_step);
    println!(
        "model {} ({} layers, hidden {}, vocab {}, {:.1} MB of f32 weights) on {}",
        cfg.name,
        cfg.layers,
        cfg.hidden,
        cfg.vocab,
        model.weights.bytes() as f64 / 1e6,
        match backend {
            Backend::Mock => "mock",
            Backend::Cuda => "cuda",
        }
    );
    let mut times = Vec::new();
    let mut fault_seen = None;
    let result = gputape::model::generate(gpu, &mut model, steps, |pos, tok, dt| {
        times.push(dt.as_secs_f64() * 1e3);
        println!(
            "step {pos:>3}  token {tok:>4}  {:8.3} ms",
            dt.as_secs_f64() * 1e3
        );
    });
    if let Err(e) = &result {
        println!("step {} failed: {e:#}", model.step_index);
    }
    if fault_step.is_some() && backend == Backend::Cuda {
        let bad = gpu.scan_redzones()?;
        if bad > 0 {
            fault_seen = Some(bad);
            println!(
                "red-zone scan after the run: {bad} guard band(s) written (see the log above)"
            );
        }
    }
    let tokens = result.unwrap_or_default();
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
    model.teardown(gpu)?;
    let swept = gpu.sweep_unreleased();
    println!("teardown: {swept} allocation(s) left for the sweep");
    if fault_step.is_some() && backend == Backend::Cuda && fault_seen.is_none() {
        println!("the planted fault left no trace in the red zones");
    }
    Ok(())
}

fn record_step(
    backend: Backend,
    k: usize,
    config: &str,
    fault_step: Option<usize>,
    out: &Path,
) -> Result<()> {
    let cfg = model_config(config)?;
    match backend {
        Backend::Mock => {
            let m = gputape::mock::MockGpuBackend::default();
            gputape::model::kernels::register_mock(&m);
            let rec = gputape::recorder::RecordingBackend::to_file(
                m,
                out,
                gputape::recorder::BackendDesc::new("mock"),
            )?;
            record_step_on(&rec, cfg, k, fault_step, out)
        }
        Backend::Cuda => {
            let g = cuda_model_backend(fault_step.is_some())?;
            let rec = gputape::recorder::RecordingBackend::to_file(g, out, cuda_desc())?;
            record_step_on(&rec, cfg, k, fault_step, out)
        }
    }
}

fn record_step_on<B: GpuBackend + 'static>(
    rec: &gputape::recorder::RecordingBackend<B>,
    cfg: gputape::model::ModelConfig,
    k: usize,
    fault_step: Option<usize>,
    out: &Path,
) -> Result<()> {
    let gpu: &dyn GpuBackend = rec;
    let mut model = gputape::model::Model::load(gpu, cfg)?;
    model.fault = fault_plan(fault_step);
    let mut token = gputape::model::PROMPT[0];
    for pos in 0..=k {
        if pos == k {
            rec.start()?;
        }
        let r = model.step(gpu, token, pos);
        if pos == k {
            // Red zones are read while still recording, so the violation is in the trace.
            let scanned = gpu.scan_redzones();
            let stats = rec.stop()?;
            println!(
                "recorded step {k}: {} calls, {} bytes -> {}",
                stats.calls,
                stats.bytes,
                out.display()
            );
            match (&r, scanned) {
                (Err(e), _) => println!("step {k} failed (recorded): {e:#}"),
                (Ok(t), Ok(bad)) if bad > 0 => {
                    println!("step {k} produced token {t}; red-zone scan found {bad} violation(s)")
                }
                (Ok(t), _) => println!("step {k} produced token {t}"),
            }
            break;
        }
        let next = r?;
        token = gputape::model::PROMPT.get(pos + 1).copied().unwrap_or(next);
    }
    model.teardown(gpu)?;
    Ok(())
}
