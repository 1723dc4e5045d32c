//! A real decode step at scale (`model::llama`: bf16 weights, a batch over the paged KV cache)
//! and what gputape costs and gives on it. Per (shape, batch), each part on a fresh backend:
//!
//! 1. the step alone: median time, weight bytes read per second;
//! 2. recorded: `start()`'s snapshot into a shared blob store, the first step's and the next
//!    step's trace bytes, then steps with recording on (the snapshot not counted);
//! 3. the flight recorder on (timed after its first full checkpoint);
//! 4. the first step's trace replayed: restore, eager replay time, bit-identical readbacks
//!    (tokens and logits) in every loop, then as CUDA graphs.
//!
//! ```text
//! cargo bench --bench step                                     # a small shape on the mock
//! GPUTAPE_STEP_CUDA=1 GPUTAPE_STEP_PRESETS=llama-3.2-1b,llama-3-8b \
//!     GPUTAPE_STEP_BATCHES=1,16 cargo bench --bench step        # the H200 table
//! ```
//!
//! GPUTAPE_STEP_DIR says where traces and the store go (default: the temp dir; removed after),
//! GPUTAPE_STEP_N how many steps each median is of (default 20).

use gputape::backend::GpuBackend;
use gputape::model::hf::HfConfig;
use gputape::model::llama::{Llama, LlamaOptions};
use gputape::recorder::{segment_path, BackendDesc, FlightConfig, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::Trace;
use std::path::Path;

#[path = "common/mod.rs"]
mod common;
use common::{dir_bytes, median, peak_over, reset_peak};
use std::time::Instant;

type Make = dyn Fn() -> Box<dyn GpuBackend>;

fn max(v: &[f64]) -> f64 {
    v.iter().cloned().fold(f64::NAN, f64::max)
}

/// `n` timed steps after `warm` untimed ones, in milliseconds each.
fn steps(gpu: &dyn GpuBackend, m: &mut Llama, warm: usize, n: usize) -> anyhow::Result<Vec<f64>> {
    steps_then(gpu, m, warm, n, false)
}

/// The same, each step followed by a readback of its logits (what a recorded step here does,
/// so what its replay is compared with) when `logits`.
fn steps_then(
    gpu: &dyn GpuBackend,
    m: &mut Llama,
    warm: usize,
    n: usize,
    logits: bool,
) -> anyhow::Result<Vec<f64>> {
    let mut tokens: Vec<u32> = (0..m.opts.batch as u32).map(|b| 1 + b * 7).collect();
    let mut ms = Vec::new();
    for i in 0..warm + n {
        let t = Instant::now();
        tokens = m.step(gpu, &tokens)?;
        if logits {
            m.logits(gpu)?;
        }
        if i >= warm {
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(ms)
}

/// One step recorded between `start` and `stop`, its logits read back too (so a replay checks
/// them as well as the tokens). Returns the snapshot's seconds.
fn record_one<B: GpuBackend>(rec: &RecordingBackend<B>, m: &mut Llama) -> anyhow::Result<f64> {
    let t = Instant::now();
    rec.start()?;
    let snap = t.elapsed().as_secs_f64();
    let toks: Vec<u32> = (0..m.opts.batch as u32).map(|b| 3 + b).collect();
    m.step(rec, &toks)?;
    m.logits(rec)?;
    rec.stop()?;
    Ok(snap)
}

struct Row {
    lines: Vec<(String, String)>,
}

impl Row {
    fn add(&mut self, what: &str, v: String) {
        eprintln!("  {what}: {v}");
        self.lines.push((what.to_string(), v));
    }
}

fn group(cfg: &HfConfig, batch: usize, make: &Make, n: usize, dir: &Path) -> anyhow::Result<Row> {
    let mut row = Row { lines: Vec::new() };
    let opts = LlamaOptions::staggered(batch, cfg.max_position_embeddings.min(1024), 200);
    let per_step = cfg_bytes(cfg, batch);
    eprintln!("== {} batch {batch}", cfg.name);

    // 1. The step alone.
    let g = make();
    let t = Instant::now();
    let mut m = Llama::load(g.as_ref(), cfg, opts.clone())?;
    let load_s = t.elapsed().as_secs_f64();
    let device = m.device_bytes();
    let plain = steps(g.as_ref(), &mut m, 3, n)?;
    let t0 = median(&plain);
    let t0_logits = median(&steps_then(g.as_ref(), &mut m, 0, n, true)?);
    row.add(
        "device bytes (weights + KV cache), load",
        format!(
            "{:.2} GB, {load_s:.1} s (weights generated on the device)",
            device as f64 / 1e9
        ),
    );
    row.add(
        "step, median",
        format!(
            "{t0:.3} ms (min {:.3}), weights {:.2} GB/step at {:.0} GB/s",
            plain.iter().cloned().fold(f64::MAX, f64::min),
            per_step as f64 / 1e9,
            per_step as f64 / t0 / 1e6
        ),
    );
    m.release(g.as_ref())?;
    drop(g);
    if std::env::var_os("GPUTAPE_STEP_CUDA").is_some() {
        // The same step with programmatic dependent launch: each kernel's launch and weight
        // reads overlap the one before it (kernels/model/prelude.cuh).
        std::env::set_var("GPUTAPE_PDL", "1");
        let g = make();
        std::env::remove_var("GPUTAPE_PDL");
        let mut m = Llama::load(g.as_ref(), cfg, opts.clone())?;
        let pdl = median(&steps(g.as_ref(), &mut m, 3, n)?);
        row.add(
            "step with programmatic dependent launch, median",
            format!(
                "{pdl:.3} ms, weights at {:.0} GB/s",
                per_step as f64 / pdl / 1e6
            ),
        );
        m.release(g.as_ref())?;
    }

    // 2. Recorded, into a shared blob store.
    let path = dir.join("step.gtape");
    let store = dir.join("blobs");
    let rec = RecordingBackend::to_file(make(), &path, BackendDesc::new("step"))?;
    rec.blob_store(&store);
    let mut m = Llama::load(&rec, cfg, opts.clone())?;
    steps(&rec, &mut m, 3, 0)?;
    let snap1 = record_one(&rec, &mut m)?;
    let first = std::fs::metadata(&path)?.len();
    let store1 = dir_bytes(&store);
    let snap2 = record_one(&rec, &mut m)?;
    let second = std::fs::metadata(segment_path(&path, 1))?.len();
    let store2 = dir_bytes(&store);
    row.add(
        "start() snapshot into an empty store",
        format!("{snap1:.2} s, {:.2} GB/s", device as f64 / snap1 / 1e9),
    );
    row.add(
        "first step: trace + store",
        format!(
            "{:.1} KB + {:.2} GB",
            first as f64 / 1e3,
            store1 as f64 / 1e9
        ),
    );
    row.add(
        "next step, same store: trace, store growth, snapshot",
        format!(
            "{:.1} KB, +{:.1} MB, {snap2:.2} s",
            second as f64 / 1e3,
            (store2 - store1) as f64 / 1e6
        ),
    );
    rec.start()?;
    let recorded = steps(&rec, &mut m, 0, n)?;
    let stats = rec.stop()?;
    let third = std::fs::metadata(segment_path(&path, 2))?.len();
    row.add(
        "step with recording on, median (ratio)",
        format!(
            "{:.3} ms ({:.3}x), {:.1} KB of trace per step, {} calls",
            median(&recorded),
            median(&recorded) / t0,
            third as f64 / 1e3 / n as f64,
            stats.calls
        ),
    );
    m.release(&rec)?;
    drop(rec);

    // 3. The flight recorder, timed after its first full checkpoint (step 8).
    let rss0 = reset_peak();
    let mut fc = FlightConfig::new(dir.join("flight"));
    fc.checkpoint_every = 8;
    let rec = RecordingBackend::flight(make(), fc, BackendDesc::new("step"))?;
    let mut m = Llama::load(&rec, cfg, opts.clone())?;
    let flight = steps(&rec, &mut m, 10, n)?;
    row.add(
        "step with the flight recorder on, median (ratio), slowest",
        format!(
            "{:.3} ms ({:.3}x), {:.1} ms (a checkpoint step), peak RSS +{:.1} GB",
            median(&flight),
            median(&flight) / t0,
            max(&flight),
            peak_over(rss0)
        ),
    );
    let held = rec.flight_held().unwrap_or_default();
    row.add(
        "flight recorder holds: calls, bytes per call, device state (memory, disk)",
        format!(
            "{} calls, {:.1} B/call ({:.1} in the logs), {:.2} GB of checkpoints and payloads in memory, {:.2} GB spilled to disk",
            held.calls,
            held.bytes_per_call(),
            held.log_bytes_per_call(),
            held.state_bytes as f64 / 1e9,
            held.spilled_bytes as f64 / 1e9
        ),
    );
    m.release(&rec)?;
    drop(rec);

    // 4. The first step's trace, replayed.
    let t = Instant::now();
    let tr = Trace::open_with(&path, Some(&store))?;
    let open_s = t.elapsed().as_secs_f64();
    let target = make();
    gputape::model::llama::kernels::load(target.as_ref())?;
    let t = Instant::now();
    let replayer = Replayer::new(&tr);
    let scan_s = t.elapsed().as_secs_f64();
    let ro = ReplayOptions {
        loops: n,
        ..Default::default()
    };
    let r = replayer.run(target.as_ref(), &ro, None, |_| {})?;
    let restores = &r.restore_ms[1.min(r.restore_ms.len())..];
    row.add(
        "open, pointer scan, first restore (allocate + upload)",
        format!(
            "{open_s:.2} s, {scan_s:.2} s, {:.0} ms ({:.1} GB/s)",
            r.restore_ms[0],
            device as f64 / r.restore_ms[0] / 1e6
        ),
    );
    row.add(
        "restore between loops, median",
        format!(
            "{:.0} ms ({:.1} GB/s)",
            median(restores),
            device as f64 / median(restores) / 1e6
        ),
    );
    let eager = median(&r.loop_ms);
    row.add(
        "eager replay, median (vs the same step and logits readback, not recorded)",
        format!(
            "{eager:.3} ms ({:.3}x of {t0_logits:.3} ms)",
            eager / t0_logits
        ),
    );
    row.add(
        "device-to-host results bit-identical (tokens, logits)",
        format!(
            "{} of {} in {} loops{}",
            r.d2h_matched,
            r.d2h_checked,
            r.loops,
            if r.passed() { "" } else { ": FAILED" }
        ),
    );
    // Where the step's time goes: once more with a sync after each launch, by kernel.
    let ro = ReplayOptions {
        sync_each: true,
        per_call_timing: true,
        ..Default::default()
    };
    let timed = replayer.run(target.as_ref(), &ro, None, |_| {})?;
    let mut by_kernel: std::collections::BTreeMap<String, (usize, f64)> = Default::default();
    let by_seq: std::collections::HashMap<u64, &gputape::trace::CallRecord> =
        tr.calls.iter().map(|c| (c.seq, c)).collect();
    for ct in &timed.per_call_us {
        let name = match by_seq.get(&ct.seq).and_then(|c| c.call.launch()) {
            Some((k, _)) => tr.kernel_name(k),
            None => "(copies, syncs, events)".to_string(),
        };
        let e = by_kernel.entry(name).or_default();
        e.0 += 1;
        e.1 += ct.us / 1e3;
    }
    let mut top: Vec<_> = by_kernel.into_iter().collect();
    top.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    row.add(
        "time by kernel, a sync after each launch (ms, launches)",
        top.iter()
            .take(6)
            .map(|(k, (n, ms))| format!("{k} {ms:.2} ({n})"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let gr = replayer.run_as_graph(target.as_ref(), None, n, None)?;
    let graph = median(&gr.loop_ms);
    row.add(
        "graph replay, median (vs eager replay)",
        format!(
            "{graph:.3} ms ({:.2}x faster), {} graph(s), readbacks {} of {}",
            eager / graph,
            gr.plan.graph_count(),
            gr.d2h_matched,
            gr.d2h_checked
        ),
    );
    drop(tr);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    Ok(row)
}

/// Each gemv kernel alone on the 8B shape's gate_up matrix (28672 x 4096), at its widest batch:
/// the median over 5 rounds of the mean of `n` launches back to back.
fn gemv_alone(make: &Make, n: usize) -> anyhow::Result<Vec<(String, String)>> {
    use gputape::backend::KernelArg;
    let g = make();
    let gpu = g.as_ref();
    gputape::model::llama::kernels::load(gpu)?;
    let (rows, cols) = (28672usize, 4096usize);
    let w = gpu.alloc(rows * cols * 2)?;
    gpu.memset(w, 0x3c, rows * cols * 2)?;
    let x = gpu.alloc(16 * cols * 4)?;
    gpu.memset(x, 0x3c, 16 * cols * 4)?;
    let y = gpu.alloc(16 * rows * 4)?;
    let s = gpu.default_stream();
    let mut out = Vec::new();
    for (name, batch) in [
        ("gemv_bf16_b1", 1usize),
        ("gemv_bf16_b4", 4),
        ("gemv_bf16_b16", 16),
    ] {
        let k = gpu.op_cache().kernel(gpu, "llama_gemv", name)?;
        let u = |v: usize| (v as u32).to_le_bytes();
        let (r, c, b, acc) = (u(rows), u(cols), u(batch), u(0));
        let args = [
            KernelArg::Buffer(w),
            KernelArg::Buffer(x),
            KernelArg::Buffer(y),
            KernelArg::Bytes(&r),
            KernelArg::Bytes(&c),
            KernelArg::Bytes(&b),
            KernelArg::Bytes(&acc),
        ];
        let grid = [
            rows.div_ceil(gputape::model::llama::kernels::GEMV_ROWS) as u32,
            1,
            1,
        ];
        let mut ms = Vec::new();
        for round in 0..6 {
            let t = Instant::now();
            for _ in 0..n {
                gpu.launch_typed(k, grid, [256, 1, 1], 0, s, &args)?;
            }
            gpu.synchronize(s)?;
            if round > 0 {
                ms.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
            }
        }
        let t = median(&ms);
        out.push((
            format!("{name} alone, batch {batch}, 28672 x 4096"),
            format!(
                "{t:.3} ms, {:.0} GB/s of weights",
                (rows * cols * 2) as f64 / t / 1e6
            ),
        ));
    }
    for p in [w, x, y] {
        gpu.free(p)?;
    }
    Ok(out)
}

fn cfg_bytes(cfg: &HfConfig, batch: usize) -> u64 {
    gputape::model::llama::Shape::new(cfg).weight_bytes_per_step(batch)
}

fn main() -> anyhow::Result<()> {
    let env = |k: &str| std::env::var(k).ok();
    let cuda = env("GPUTAPE_STEP_CUDA").is_some();
    let n: usize = env("GPUTAPE_STEP_N")
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let batches: Vec<usize> = env("GPUTAPE_STEP_BATCHES")
        .unwrap_or_else(|| "1,4".into())
        .split(',')
        .filter_map(|b| b.trim().parse().ok())
        .collect();
    let configs: Vec<HfConfig> = match env("GPUTAPE_STEP_PRESETS") {
        Some(list) => list
            .split(',')
            .map(|p| HfConfig::preset(p.trim()).ok_or_else(|| anyhow::anyhow!("no preset {p}")))
            .collect::<Result<_, _>>()?,
        None => vec![HfConfig::preset("default").expect("the default preset")],
    };
    let dir = env("GPUTAPE_STEP_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("gputape-step-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let make: Box<Make> = if cuda {
        Box::new(|| -> Box<dyn GpuBackend> {
            Box::new(
                gputape::cuda::CudaBackend::new(gputape::cuda::CudaConfig::from_env(0))
                    .expect("a CUDA backend"),
            )
        })
    } else {
        Box::new(|| -> Box<dyn GpuBackend> { Box::new(gputape::mock::MockGpuBackend::default()) })
    };
    println!(
        "backend: {}, {n} steps per median",
        if cuda { "cuda" } else { "mock" }
    );
    let mut out = Vec::new();
    if cuda {
        let lines = gemv_alone(make.as_ref(), n)?;
        out.push(("gemv kernels".to_string(), Row { lines }));
    }
    for cfg in &configs {
        for &b in &batches {
            let row = group(cfg, b, make.as_ref(), n, &dir);
            match row {
                Ok(r) => out.push((format!("{} B={b}", cfg.name), r)),
                Err(e) => println!("{} batch {b}: FAILED: {e:#}", cfg.name),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for (name, r) in out {
        println!("\n### {name}\n\n| what | result |\n|---|---|");
        for (w, v) in r.lines {
            println!("| {w} | {v} |");
        }
    }
    Ok(())
}
