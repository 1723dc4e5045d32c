//! What the flight recorder costs an engine, step by step: mean, median, 99th percentile and
//! slowest step, plain against flight, a plain engine's steps and a recorded one's alternating
//! in one process (the host's speed drifts by more than the recorder costs), on
//!
//! - an outside engine (examples/outside_engine: its own kernels, two streams, 5 launches and
//!   2 event waits a step), eager and launched as a CUDA graph, with a 4 MiB table;
//! - the built-in default decode step (`model`);
//! - with `GPUTAPE_FS_PRESETS=llama-3.2-1b,llama-3-8b`, the bf16 step of those shapes at
//!   batch 1, or at each of `GPUTAPE_FS_BATCHES=1,16` (`model::llama`, weights generated on
//!   the device). Its first full checkpoint
//!   (every weight read back) falls in the warm-up, as it does once in an engine's life.
//!
//! A median hides what a checkpoint costs: it stalls a few steps in hundreds, which the mean
//! and the tail show. Flight runs use the defaults an engine gets from `from_env` (a
//! checkpoint every 8 steps within a 2% budget of wall time); `GPUTAPE_FLIGHT_BUDGET=0` in
//! the environment shows the cost without the budget.
//!
//! ```text
//! cargo bench --bench flight_steps                         # on the mock
//! GPUTAPE_STEP_CUDA=1 cargo bench --bench flight_steps     # on the GPU
//! ```
//!
//! GPUTAPE_FS_STEPS: timed steps per round (default 500), GPUTAPE_FS_ROUNDS (default 5),
//! GPUTAPE_FS_ONLY: the workloads whose names contain this, GPUTAPE_FS_NULL: only the floor
//! (the table over a mock that runs no kernel bodies; for profiling the recorder),
//! GPUTAPE_FS_NO_FLOOR: no floor (for profiling the recorder over CUDA alone),
//! GPUTAPE_FS_PHASES: after the table, each workload's median flight step by steps since the
//! last checkpoint, and how much of it the engine's thread spent issuing work.
//! GPUTAPE_FS_TAIL: after each run, on stderr, its ten slowest flight steps by index, with
//! the plain step beside each and the checkpoints taken by then (where a tail comes from).

#[path = "../examples/outside_engine/engine.rs"]
mod engine;

use gputape::backend::GpuBackend;
use gputape::recorder::{BackendDesc, FlightConfig, RecordingBackend};
use std::sync::Arc;
use std::time::Instant;

const WARM: usize = 20;

struct Stats {
    mean: f64,
    median: f64,
    p99: f64,
    max: f64,
}

fn stats(v: &[f64]) -> Stats {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    Stats {
        mean: s.iter().sum::<f64>() / s.len() as f64,
        median: at(0.5),
        p99: at(0.99),
        max: s[s.len() - 1],
    }
}

/// One timed step: its time and the part of it spent handing work to the backend (ms; 0
/// where the engine does not say), and the checkpoints the recorder had taken after it (with
/// `GPUTAPE_FS_PHASES`).
#[derive(Clone, Copy)]
struct Sample {
    ms: f64,
    issue_ms: f64,
    checkpoints: u64,
}

fn sample(t: Instant, issue: std::time::Duration) -> Sample {
    Sample {
        ms: t.elapsed().as_secs_f64() * 1e3,
        issue_ms: issue.as_secs_f64() * 1e3,
        checkpoints: 0,
    }
}

/// An engine that has taken its `WARM` untimed steps, stepped one timed step at a time, so
/// that a plain engine's steps and a recorded one's can alternate in one process.
trait Stepper {
    fn step(&mut self) -> anyhow::Result<Sample>;
    /// Give back what the engine holds (two loads of a large shape in each of several runs
    /// would not fit the device).
    fn finish(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// How a workload starts an engine on a backend.
type Start =
    dyn for<'g> Fn(&'g (dyn GpuBackend + 'static)) -> anyhow::Result<Box<dyn Stepper + 'g>>;

struct Outside<'g> {
    e: engine::Engine<'g>,
    n: u64,
}

impl Stepper for Outside<'_> {
    fn step(&mut self) -> anyhow::Result<Sample> {
        let t = Instant::now();
        self.e.step(self.n)?;
        self.n += 1;
        Ok(sample(t, self.e.last_issue))
    }
}

fn outside<'g>(
    gpu: &'g (dyn GpuBackend + 'static),
    graph: bool,
) -> anyhow::Result<Box<dyn Stepper + 'g>> {
    let cfg = engine::Config {
        rows: 8192,
        dim: 128,
        tokens: 8,
        graph_at: graph.then_some(0),
        prelude: 1,
        ..engine::Config::default()
    };
    let e = engine::Engine::new(gpu, cfg.clone())
        .or_else(|_| engine::Engine::new(gpu, engine::Config { prelude: 0, ..cfg }))?;
    let mut s = Outside { e, n: 0 };
    for _ in 0..WARM {
        s.step()?;
    }
    Ok(Box::new(s))
}

struct Bf16<'g> {
    gpu: &'g (dyn GpuBackend + 'static),
    m: gputape::model::llama::Llama,
    tokens: Vec<u32>,
}

impl Stepper for Bf16<'_> {
    fn step(&mut self) -> anyhow::Result<Sample> {
        let t = Instant::now();
        self.tokens = self.m.step(self.gpu, &self.tokens)?;
        Ok(sample(t, std::time::Duration::ZERO))
    }
    fn finish(&mut self) -> anyhow::Result<()> {
        self.m.release(self.gpu)
    }
}

fn llama<'g>(
    gpu: &'g (dyn GpuBackend + 'static),
    cfg: &gputape::model::hf::HfConfig,
    batch: usize,
) -> anyhow::Result<Box<dyn Stepper + 'g>> {
    use gputape::model::llama::{Llama, LlamaOptions};
    // The sequences start up to 200 positions in (a quarter of a short context), and must
    // have room for every step.
    let max = cfg.max_position_embeddings.min(1024);
    let opts = LlamaOptions::staggered(batch, max, (max / 4).min(200));
    let m = Llama::load(gpu, cfg, opts)?;
    let mut s = Bf16 {
        gpu,
        m,
        tokens: vec![1u32; batch],
    };
    for _ in 0..WARM {
        s.step()?;
    }
    Ok(Box::new(s))
}

/// The built-in decode step: a model runs `PER_RUN` positions, then is loaded again (untimed)
/// and its first `WARM` positions run untimed, as before.
struct Decode<'g> {
    gpu: &'g (dyn GpuBackend + 'static),
    m: gputape::model::Model,
    pos: usize,
    token: u32,
}

impl Decode<'_> {
    fn per_run(&self) -> usize {
        240usize.min(self.m.cfg.max_seq)
    }

    fn one(&mut self) -> anyhow::Result<Sample> {
        let t = Instant::now();
        let next = self.m.step(self.gpu, self.token, self.pos)?;
        let s = sample(t, std::time::Duration::ZERO);
        self.pos += 1;
        self.token = gputape::model::PROMPT
            .get(self.pos)
            .copied()
            .unwrap_or(next);
        Ok(s)
    }
}

impl Stepper for Decode<'_> {
    fn step(&mut self) -> anyhow::Result<Sample> {
        if self.pos >= self.per_run() {
            self.m.teardown(self.gpu)?;
            self.m = gputape::model::Model::load(self.gpu, self.m.cfg.clone())?;
            (self.pos, self.token) = (0, gputape::model::PROMPT[0]);
            while self.pos < WARM {
                self.one()?;
            }
        }
        self.one()
    }
    fn finish(&mut self) -> anyhow::Result<()> {
        self.m.teardown(self.gpu)
    }
}

fn decode<'g>(gpu: &'g (dyn GpuBackend + 'static)) -> anyhow::Result<Box<dyn Stepper + 'g>> {
    gputape::model::kernels::load(gpu)?;
    let cfg = gputape::model::ModelConfig::default_config();
    let m = gputape::model::Model::load(gpu, cfg)?;
    let mut s = Decode {
        gpu,
        m,
        pos: 0,
        token: gputape::model::PROMPT[0],
    };
    while s.pos < WARM {
        s.one()?;
    }
    Ok(Box::new(s))
}

/// Per-step times of one workload, plain and under the flight recorder.
struct Measured {
    plain: Vec<f64>,
    flight: Vec<f64>,
    /// The flight run's steps, for `GPUTAPE_FS_PHASES`.
    flight_samples: Vec<Sample>,
    plain_samples: Vec<Sample>,
    /// Each run's flight mean minus its plain mean (us): how far one run's answer moves.
    runs: Vec<f64>,
    checkpoints: u64,
    deferrals: u64,
    /// Device checkpoints that could not take every changed chunk.
    incomplete: u64,
    /// Boundaries at which a due checkpoint waited for the one before.
    busy: u64,
    /// What checkpoints cost the engine's thread, in all.
    host: std::time::Duration,
}

impl Measured {
    /// What the flight recorder adds to the mean step, in microseconds.
    fn extra_us(&self) -> f64 {
        (stats(&self.flight).mean - stats(&self.plain).mean) * 1e3
    }
}

/// `rounds` runs, each with a fresh plain engine and a fresh one under a fresh flight
/// recorder, both started before either is timed; their steps alternate one for one (which
/// goes first alternates too). Runs of hundreds of plain steps and then of flight steps
/// measured the host's drift as much as the recorder: on the H200 a plain run's mean moved
/// by 15% from one run to the next (run 99), more than the recorder costs. Alternate steps
/// meet the same host.
///
/// Each of `on` (the floor's mock, then the backend measured) gets its run in turn, round by
/// round, so that a floor and the cost it is held to are measured minutes apart at most.
fn measure(
    on: &[&Arc<dyn GpuBackend>],
    start: &Start,
    steps: usize,
    rounds: usize,
    cfg: &FlightConfig,
) -> anyhow::Result<Vec<Measured>> {
    let mut all: Vec<Measured> = on
        .iter()
        .map(|_| Measured {
            plain: Vec::new(),
            flight: Vec::new(),
            flight_samples: Vec::new(),
            plain_samples: Vec::new(),
            runs: Vec::new(),
            checkpoints: 0,
            deferrals: 0,
            incomplete: 0,
            busy: 0,
            host: std::time::Duration::ZERO,
        })
        .collect();
    for _ in 0..rounds {
        for (gpu, m) in on.iter().zip(&mut all) {
            one_run(gpu, start, steps, cfg, m)?;
        }
    }
    Ok(all)
}

/// One run of `measure`, its steps added to `m`.
fn one_run(
    gpu: &Arc<dyn GpuBackend>,
    start: &Start,
    steps: usize,
    cfg: &FlightConfig,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let phases = std::env::var_os("GPUTAPE_FS_PHASES").is_some();
    let rec = RecordingBackend::flight(gpu.clone(), cfg.clone(), BackendDesc::new("bench"))?;
    let mut plain = start(gpu.as_ref())?;
    let mut flight = start(&rec)?;
    let (mut p, mut f) = (Vec::with_capacity(steps), Vec::with_capacity(steps));
    for i in 0..steps {
        for recorded in [i % 2 == 1, i % 2 == 0] {
            if recorded {
                let mut s = flight.step()?;
                if phases {
                    s.checkpoints = rec.flight_held().map_or(0, |h| h.checkpoints);
                }
                f.push(s);
            } else {
                p.push(plain.step()?);
            }
        }
    }
    plain.finish()?;
    flight.finish()?;
    let mean = |v: &[Sample]| v.iter().map(|s| s.ms).sum::<f64>() / v.len().max(1) as f64;
    m.runs.push((mean(&f) - mean(&p)) * 1e3);
    if std::env::var_os("GPUTAPE_FS_TAIL").is_some() {
        let mut by: Vec<usize> = (0..f.len()).collect();
        by.sort_by(|a, b| f[*b].ms.total_cmp(&f[*a].ms));
        let tail: Vec<String> = by
            .iter()
            .take(10)
            .map(|&i| {
                format!(
                    "#{i} {:.1} us (plain {:.1}, checkpoints {})",
                    f[i].ms * 1e3,
                    p[i].ms * 1e3,
                    f[i].checkpoints
                )
            })
            .collect();
        eprintln!("tail: {}", tail.join("; "));
    }
    m.plain.extend(p.iter().map(|s| s.ms));
    m.flight.extend(f.iter().map(|s| s.ms));
    m.plain_samples.extend(p);
    // Each round's count starts again at 0: a round's first step is never "after" the
    // last round's checkpoint.
    m.flight_samples.extend(f);
    let h = rec.flight_held().unwrap_or_default();
    m.checkpoints += h.checkpoints;
    m.deferrals += h.budget_deferrals;
    m.incomplete += h.incomplete_checkpoints;
    m.busy += h.busy_deferrals;
    m.host += h.checkpoint_time;
    Ok(())
}

/// With `GPUTAPE_FS_PHASES`: the flight run's median step and issue time by steps since the
/// last checkpoint (0: the step that took it), against the plain run's: where a checkpoint's
/// cost lands, on the engine's thread or on the device, and how long it lasts.
fn phases(name: &str, m: &Measured) -> String {
    let med = |v: Vec<f64>| {
        if v.is_empty() {
            return f64::NAN;
        }
        stats(&v).median
    };
    let mut since: Vec<(usize, Sample)> = Vec::new();
    let (mut last, mut n) = (0u64, usize::MAX / 2);
    for s in &m.flight_samples {
        n = if s.checkpoints > last { 0 } else { n + 1 };
        if s.checkpoints < last {
            n = usize::MAX / 2;
        }
        last = s.checkpoints;
        since.push((n, *s));
    }
    let mut line = format!(
        "phases {name}: plain {:.1} us (issue {:.1})",
        med(m.plain_samples.iter().map(|s| s.ms * 1e3).collect()),
        med(m.plain_samples.iter().map(|s| s.issue_ms * 1e3).collect()),
    );
    for (lo, hi) in [(0, 0), (1, 1), (2, 2), (3, 3), (4, 7), (8, usize::MAX)] {
        let pick: Vec<&Sample> = since
            .iter()
            .filter(|(n, _)| (lo..=hi).contains(n))
            .map(|(_, s)| s)
            .collect();
        line += &format!(
            "; +{lo}{}: {} steps {:.1} us (issue {:.1})",
            if hi > lo { "..." } else { "" },
            pick.len(),
            med(pick.iter().map(|s| s.ms * 1e3).collect()),
            med(pick.iter().map(|s| s.issue_ms * 1e3).collect()),
        );
    }
    line
}

fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (steps, rounds) = (env("GPUTAPE_FS_STEPS", 500), env("GPUTAPE_FS_ROUNDS", 5));
    let cuda = std::env::var_os("GPUTAPE_STEP_CUDA").is_some();
    let null_only = std::env::var_os("GPUTAPE_FS_NULL").is_some();
    let no_floor = std::env::var_os("GPUTAPE_FS_NO_FLOOR").is_some();
    let gpu: Arc<dyn GpuBackend> = if cuda {
        Arc::new(gputape::cuda::CudaBackend::new(
            gputape::cuda::CudaConfig::from_env(0),
        )?)
    } else {
        Arc::new(gputape::mock::MockGpuBackend::new(
            gputape::mock::MockConfig {
                skip_kernel_bodies: null_only,
                ..Default::default()
            },
        ))
    };
    let dir = std::env::temp_dir().join(format!("gputape-flight-steps-{}", std::process::id()));
    let cfg = FlightConfig::from_env(&dir);
    println!(
        "backend: {}, {steps} steps x {rounds} runs after {WARM} warm-up, plain and flight steps alternating; checkpoint every {} steps, budget {:?}",
        match (cuda, null_only) {
            (true, _) => "cuda",
            (false, true) => "mock without kernel bodies (the floor alone)",
            (false, false) => "mock",
        },
        cfg.checkpoint_every,
        cfg.budget
    );
    println!(
        "| workload | plain mean / median / p99 / max (ms) | flight mean / median / p99 / max (ms) | ratio mean / median / p99 | checkpoints (incomplete), budget / busy deferrals, host us per checkpoint | flight - plain, mean (us) | each run's (us) | floor (us; each run's) | goal |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut workloads: Vec<(String, Box<Start>)> = vec![
        (
            "outside engine, eager".into(),
            Box::new(|g: &(dyn GpuBackend + 'static)| outside(g, false)),
        ),
        (
            "outside engine, graph".into(),
            Box::new(|g: &(dyn GpuBackend + 'static)| outside(g, true)),
        ),
        ("default decode step".into(), Box::new(decode)),
    ];
    for p in std::env::var("GPUTAPE_FS_PRESETS")
        .unwrap_or_default()
        .split(',')
    {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        let cfg = gputape::model::hf::HfConfig::preset(p)
            .ok_or_else(|| anyhow::anyhow!("no preset {p}"))?;
        for b in std::env::var("GPUTAPE_FS_BATCHES")
            .unwrap_or_else(|_| "1".into())
            .split(',')
            .filter_map(|b| b.trim().parse::<usize>().ok())
        {
            let cfg = cfg.clone();
            workloads.push((
                format!("{p} bf16 step, batch {b}"),
                Box::new(move |g: &(dyn GpuBackend + 'static)| llama(g, &cfg, b)),
            ));
        }
    }
    // The recorder's floor: the same steps over a mock that runs no kernel bodies, where a
    // launch costs about what a driver's enqueue does. Flight minus plain there is what the
    // recorder itself adds per step on this host's CPU; a step too short for 3% is held to
    // 1.5 times that. The goal: mean and median within that, the 99th percentile within 1.10x
    // (or 1.5 times the floor, where that is more).
    let null: Arc<dyn GpuBackend> = Arc::new(gputape::mock::MockGpuBackend::new(
        gputape::mock::MockConfig {
            skip_kernel_bodies: true,
            ..Default::default()
        },
    ));
    let only = std::env::var("GPUTAPE_FS_ONLY").unwrap_or_default();
    workloads.retain(|(name, _)| name.contains(&only));
    let mut phase_lines = Vec::new();
    for (name, start) in &workloads {
        // The bf16 shapes' weights are generated by kernels: over the mock they would be
        // gigabytes of host memory. Their steps are long enough for 3% to be far above the
        // floor.
        let floored = !null_only && !no_floor && !name.contains("bf16");
        let on: Vec<&Arc<dyn GpuBackend>> = if floored {
            vec![&null, &gpu]
        } else {
            vec![&gpu]
        };
        let mut ms = measure(&on, start.as_ref(), steps, rounds, &cfg)?;
        let m = ms.pop().expect("the backend measured");
        let floor_m = ms.pop();
        let floor = floor_m.as_ref().map(Measured::extra_us);
        let (p, f) = (stats(&m.plain), stats(&m.flight));
        if std::env::var_os("GPUTAPE_FS_PHASES").is_some() {
            phase_lines.push(phases(name, &m));
        }
        let extra = m.extra_us();
        let allowed = (0.03 * p.mean * 1e3).max(floor.map_or(0.0, |f| 1.5 * f));
        // The 99th percentile within 1.10x, or within 1.5 times the floor where a tenth of
        // the step is less than that.
        let tail_allowed = (0.10 * p.p99 * 1e3).max(floor.map_or(0.0, |f| 1.5 * f));
        println!(
            "| {name} | {:.3} / {:.3} / {:.3} / {:.3} | {:.3} / {:.3} / {:.3} / {:.3} | {:.3}x / {:.3}x / {:.3}x | {} ({}), {} / {}, {:.0} | {extra:.1} | {} | {} | {} |",
            p.mean, p.median, p.p99, p.max, f.mean, f.median, f.p99, f.max,
            f.mean / p.mean, f.median / p.median, f.p99 / p.p99,
            m.checkpoints, m.incomplete, m.deferrals, m.busy,
            m.host.as_secs_f64() * 1e6 / m.checkpoints.max(1) as f64,
            m.runs.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>().join(" "),
            floor_m.as_ref().map_or("-".into(), |fm| format!(
                "{:.1} ({})",
                fm.extra_us(),
                fm.runs.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>().join(" ")
            )),
            if extra <= allowed && (f.median - p.median) * 1e3 <= allowed && (f.p99 - p.p99) * 1e3 <= tail_allowed {
                "within"
            } else {
                "OVER"
            },
        );
    }
    for l in phase_lines {
        println!("{l}");
    }
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
