//! An outside engine and its own gputape tool, in one binary.
//!
//! ```text
//! outside_engine run [--backend mock|cuda] [--steps N] [--fault oob|assert|hang|nan] [--fault-step K]
//!                    [--graph-at K] [--capture-mode global|thread-local|relaxed] [--rows N]
//!                    [--churn-mb N]
//! outside_engine VERB ...     # gputape's command line with this engine's kernels
//! ```
//!
//! `run` wraps its backend with `RecordingBackend::from_env`, as an engine adds gputape:
//! `GPUTAPE_FLIGHT=dir` arms the flight recorder, `GPUTAPE_RECORD=file` records. It exits 1
//! when the engine dies, as an engine does. Any other first word is a gputape verb run with
//! this engine's module loaded (`gputape::cli::main_with`), so `outside_engine replay DUMP`
//! runs the engine's own CPU bodies on the mock.

mod engine;

use gputape::backend::GpuBackend;
use gputape::recorder::{BackendDesc, RecordingBackend};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some("run") {
        return gputape::cli::main_with(&[engine::module()]);
    }
    match run(&args[2..]) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engine died: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    let mut cfg = engine::Config::default();
    let (mut backend, mut steps, mut fault, mut fault_step) = ("mock", 40u64, None, 23u64);
    let mut mode = gputape::backend::CaptureMode::Global;
    let mut churn_mb = 0usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))
        };
        match a.as_str() {
            "--backend" => backend = if val()? == "cuda" { "cuda" } else { "mock" },
            "--steps" => steps = val()?.parse()?,
            "--fault" => fault = Some(val()?),
            "--fault-step" => fault_step = val()?.parse()?,
            "--graph-at" => cfg.graph_at = Some(val()?.parse()?),
            "--rows" => cfg.rows = val()?.parse()?,
            "--churn-mb" => churn_mb = val()?.parse()?,
            "--capture-mode" => {
                use gputape::backend::CaptureMode as M;
                mode = match val()?.as_str() {
                    "global" => M::Global,
                    "thread-local" => M::ThreadLocal,
                    "relaxed" => M::Relaxed,
                    m => anyhow::bail!("unknown capture mode {m}"),
                }
            }
            other => anyhow::bail!("unknown option {other}"),
        }
    }
    match fault.as_deref() {
        None => {}
        Some("oob") => cfg.bad_id = Some((fault_step, 1 << 26)),
        Some("assert") => {
            cfg.checked = true;
            cfg.bad_id = Some((fault_step, cfg.rows as i32 + 3));
        }
        Some("hang") => cfg.hang_at = Some(fault_step),
        Some("nan") => {
            cfg.eps = 0.0;
            cfg.pad_at = Some(fault_step);
        }
        Some(f) => anyhow::bail!("unknown fault {f} (oob, assert, hang, nan)"),
    }
    match backend {
        "cuda" => {
            // The assert prelude this NVRTC compiles, found on a backend nobody records.
            let probe = gputape::cuda::CudaBackend::new(gputape::cuda::CudaConfig::from_env(0))?;
            cfg.prelude = (0..engine::ASSERT_PRELUDES.len())
                .find(|v| probe.load_module(&engine::module_with(*v)).is_ok())
                .ok_or_else(|| anyhow::anyhow!("no assert prelude compiles here"))?;
            drop(probe);
            let mut cc = gputape::cuda::CudaConfig::from_env(0);
            cc.capture_mode = mode;
            let gpu = gputape::cuda::CudaBackend::new(cc)?;
            drive(
                RecordingBackend::from_env(gpu, BackendDesc::new("cuda"))?,
                cfg,
                steps,
                churn_mb,
            )
        }
        _ => drive(
            RecordingBackend::from_env(
                gputape::mock::MockGpuBackend::new(gputape::mock::MockConfig {
                    capture_mode: mode,
                    ..Default::default()
                }),
                BackendDesc::new("mock"),
            )?,
            cfg,
            steps,
            churn_mb,
        ),
    }
}

/// Run the engine for `steps`; with `churn_mb`, a buffer of that many MiB beside it is
/// rewritten on the device every 10 steps (as a KV cache's pages are), which a flight
/// recorder's checkpoints must take from the device.
fn drive<B: GpuBackend>(
    gpu: RecordingBackend<B>,
    cfg: engine::Config,
    steps: u64,
    churn_mb: usize,
) -> anyhow::Result<()> {
    let t0 = std::time::Instant::now();
    let mut e = engine::Engine::new(&gpu, cfg)?;
    let churn = (churn_mb > 0)
        .then(|| gpu.alloc(churn_mb << 20))
        .transpose()?;
    let mut out = Vec::new();
    for n in 0..steps {
        if let (Some(c), 0) = (churn, n % 10) {
            gpu.memset(c, n as u8 + 1, churn_mb << 20)?;
        }
        out = e.step(n).map_err(|err| {
            if let Some(h) = gpu.flight_held() {
                eprintln!("flight recorder at the failure: {h:?}");
            }
            err.context(format!("step {n}"))
        })?;
        // What a careful engine does with a NaN in its output: keep the evidence, stop.
        if let Some(i) = out.iter().position(|v| v.is_nan()) {
            let why = format!("NaN in the step's output at step {n} (element {i})");
            match gpu.flight_dump(&why) {
                Ok(p) => eprintln!("flight dump: {}", p.display()),
                Err(e) => eprintln!("no flight dump: {e}"),
            }
            anyhow::bail!("{why}");
        }
    }
    println!(
        "{steps} steps in {:.1} ms; out[0..4] = {:?}",
        t0.elapsed().as_secs_f64() * 1e3,
        &out[..4.min(out.len())]
    );
    if let Some(h) = gpu.flight_held() {
        println!(
            "flight recorder: {} calls held, {} checkpoint(s) put off by a capture, {} failure(s) of its own; {} checkpoints ({} incomplete, on the device: {})",
            h.calls, h.deferred_checkpoints, h.own_failures, h.checkpoints, h.incomplete_checkpoints, h.device_checkpoints
        );
    }
    Ok(())
}
