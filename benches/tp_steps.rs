//! What recording costs a tensor-parallel engine, step by step: the bf16 step split over N
//! ranks (`Llama::load_tp`: a thread and a backend each, the ranks meeting in one
//! communicator; on CUDA rank r on GPU r, over NCCL), plain, recorded into a trace per rank
//! (what `gputape record -o` writes) and under a flight recorder per rank (`from_env`'s
//! defaults, the ranks' peers in one directory). The three engines' steps alternate one for
//! one in one process, in an order that turns each step, so they meet the same host. A
//! step's time is rank 0's: it holds the all-reduces that wait for the slowest rank, and the
//! sampling's readback.
//!
//! ```text
//! cargo bench --bench tp_steps                                  # mock ranks, a tiny shape
//! GPUTAPE_STEP_CUDA=1 GPUTAPE_TP=2 cargo bench --bench tp_steps # GPUs 0 and 1
//! ```
//!
//! GPUTAPE_TP: ranks (default 2), GPUTAPE_FS_PRESETS: shapes (default `llama-3.2-1b` on CUDA,
//! `tiny` on the mock), GPUTAPE_FS_BATCHES (default 1), GPUTAPE_FS_STEPS: timed steps (default
//! 200), GPUTAPE_FS_DIR: where the traces and dumps go (default a temporary directory, removed
//! after). Every engine's tokens are compared: a recorder that changed them fails the run.

use gputape::backend::{CommUniqueId, GpuBackend};
use gputape::model::hf::HfConfig;
use gputape::model::llama::{Llama, LlamaOptions, TpPart};
use gputape::recorder::{BackendDesc, FlightConfig, RecordingBackend};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

const WARM: usize = 10;
const MODES: [&str; 3] = ["plain", "recorded (-o)", "flight"];

fn stats(v: &[f64]) -> (f64, f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    (
        s.iter().sum::<f64>() / s.len() as f64,
        at(0.5),
        at(0.99),
        s[s.len() - 1],
    )
}

/// Per mode: rank 0's step times (ms), and the tokens each step sampled.
type RankRun = ([Vec<f64>; 3], [Vec<Vec<u32>>; 3]);

/// One rank's part of a run: its three engines on `gpu`, stepped `steps` times after `WARM`;
/// rank 0's step times per mode, and every engine's tokens per step.
#[allow(clippy::too_many_arguments)]
fn rank(
    gpu: Arc<dyn GpuBackend>,
    (rank, n): (usize, usize),
    ids: [CommUniqueId; 3],
    cfg: &HfConfig,
    batch: usize,
    steps: usize,
    dir: &Path,
) -> anyhow::Result<RankRun> {
    // CUDA binds a context per thread: this rank's thread is not the one that made it.
    gpu.bind_to_thread()?;
    let desc = BackendDesc::new("tp bench");
    let rec = RecordingBackend::to_file(
        gpu.clone(),
        &dir.join(format!("tp-rank{rank}.gtape")),
        desc.clone(),
    )?;
    rec.start()?;
    let mut fc = FlightConfig::from_env(dir.join(format!("flight-rank{rank}")));
    fc.peers = Some(dir.join("peers"));
    let flight = RecordingBackend::flight(gpu.clone(), fc, desc)?;
    let gpus: [&dyn GpuBackend; 3] = [gpu.as_ref(), &rec, &flight];
    let max = cfg.max_position_embeddings.min(1024);
    anyhow::ensure!(
        max >= WARM + steps,
        "{} holds {max} positions: {} steps at most",
        cfg.name,
        max.saturating_sub(WARM)
    );
    // The sequences start up to 200 positions in (a quarter of a short context), with room
    // for every step.
    let start = (max / 4).min(200).min(max - WARM - steps);
    let mut models = Vec::with_capacity(3);
    for (g, id) in gpus.iter().zip(ids) {
        let comm = g.comm_init(id, n as u32, rank as u32)?;
        let opts = LlamaOptions::staggered(batch, max, start);
        models.push(Llama::load_tp(
            *g,
            cfg,
            opts,
            TpPart {
                rank,
                size: n,
                comm,
            },
        )?);
    }
    let mut tokens: [Vec<u32>; 3] = std::array::from_fn(|_| vec![1u32; batch]);
    let mut times: [Vec<f64>; 3] = Default::default();
    let mut seen: [Vec<Vec<u32>>; 3] = Default::default();
    for i in 0..WARM + steps {
        for k in 0..3 {
            // Which engine goes first turns with each step.
            let m = (i + k) % 3;
            let t = Instant::now();
            tokens[m] = models[m].step(gpus[m], &tokens[m])?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if i >= WARM {
                times[m].push(ms);
                seen[m].push(tokens[m].clone());
            }
        }
    }
    for (m, g) in models.iter_mut().zip(gpus) {
        m.release(g)?;
    }
    rec.stop()?;
    Ok((times, seen))
}

fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let cuda = std::env::var_os("GPUTAPE_STEP_CUDA").is_some();
    let (n, steps) = (env("GPUTAPE_TP", 2), env("GPUTAPE_FS_STEPS", 200));
    anyhow::ensure!(
        n >= 1 && steps >= 1,
        "GPUTAPE_TP and GPUTAPE_FS_STEPS from 1"
    );
    let backends: Vec<Arc<dyn GpuBackend>> = (0..n)
        .map(|r| -> anyhow::Result<Arc<dyn GpuBackend>> {
            Ok(if cuda {
                Arc::new(gputape::cuda::CudaBackend::new(
                    gputape::cuda::CudaConfig::from_env(r),
                )?)
            } else {
                let m = gputape::mock::MockGpuBackend::default();
                gputape::model::llama::kernels::load_modules(&m)?;
                Arc::new(m)
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let (dir, keep) = match std::env::var_os("GPUTAPE_FS_DIR") {
        Some(d) => (PathBuf::from(d), true),
        None => (
            std::env::temp_dir().join(format!("gputape-tp-steps-{}", std::process::id())),
            false,
        ),
    };
    let presets = std::env::var("GPUTAPE_FS_PRESETS")
        .unwrap_or_else(|_| if cuda { "llama-3.2-1b" } else { "tiny" }.into());
    let batches = std::env::var("GPUTAPE_FS_BATCHES").unwrap_or_else(|_| "1".into());
    println!(
        "backend: {}, {n} rank(s), {steps} steps after {WARM} warm-up, the three engines' steps alternating; rank 0's step times",
        if cuda { "cuda (rank r on GPU r)" } else { "mock ranks" }
    );
    println!("| shape | mode | mean / median / p99 / max (ms) | ratio to plain, mean / median / p99 | tokens as plain's |");
    println!("|---|---|---|---|---|");
    for p in presets.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let cfg = HfConfig::preset(p).ok_or_else(|| anyhow::anyhow!("no preset {p}"))?;
        for b in batches
            .split(',')
            .filter_map(|b| b.trim().parse::<usize>().ok())
        {
            let run = dir.join(format!("{p}-b{b}"));
            std::fs::create_dir_all(&run)?;
            let ids = [
                backends[0].comm_unique_id()?,
                backends[0].comm_unique_id()?,
                backends[0].comm_unique_id()?,
            ];
            let results: Vec<anyhow::Result<_>> = std::thread::scope(|sc| {
                let hs: Vec<_> = backends
                    .iter()
                    .enumerate()
                    .map(|(r, g)| {
                        let (g, cfg, run) = (g.clone(), &cfg, &run);
                        sc.spawn(move || rank(g, (r, n), ids, cfg, b, steps, run))
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("a rank panicked")))
                    })
                    .collect()
            });
            let mut results = results.into_iter().enumerate();
            let (_, first) = results.next().expect("one rank at least");
            let (times, seen) = first?;
            for (r, other) in results {
                let (_, s) = other.map_err(|e| e.context(format!("rank {r}")))?;
                anyhow::ensure!(s == seen, "rank {r} sampled other tokens than rank 0");
            }
            let plain = stats(&times[0]);
            for (m, name) in MODES.iter().enumerate() {
                let s = stats(&times[m]);
                println!(
                    "| {p} batch {b} | {name} | {:.3} / {:.3} / {:.3} / {:.3} | {:.3}x / {:.3}x / {:.3}x | {} |",
                    s.0, s.1, s.2, s.3,
                    s.0 / plain.0, s.1 / plain.1, s.2 / plain.2,
                    if seen[m] == seen[0] { "same" } else { "DIFFERENT" }
                );
            }
            let traces: u64 = (0..n)
                .filter_map(|r| std::fs::metadata(run.join(format!("tp-rank{r}.gtape"))).ok())
                .map(|m| m.len())
                .sum();
            println!(
                "(traces of all ranks: {:.1} MiB)",
                traces as f64 / (1 << 20) as f64
            );
            anyhow::ensure!(
                seen.iter().all(|s| *s == seen[0]),
                "a recorder changed what the engine sampled"
            );
        }
    }
    if !keep {
        std::fs::remove_dir_all(&dir).ok();
    }
    Ok(())
}
