//! `gputape record`: traces of gputape's own workloads and models, for trying the tools, for
//! the test fixtures in `traces/`, and for measuring the recorder on real hardware. An engine
//! records its own work through `RecordingBackend`, not through this verb.

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::common::{
    model_backend, model_config, parse_range, print_json, FaultArgs, DEFAULT_CONFIG,
};
use super::{Ctx, Exit};
use crate::backend::GpuBackend;
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
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
    #[command(flatten)]
    fault: FaultArgs,
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
    /// Run the --hf step tensor parallel over N ranks (attention heads and MLP split, an
    /// all-reduce after each), one thread and backend each (on CUDA, GPU r for rank r), and
    /// record each rank into OUTPUT with `.rankR` before its extension; `gputape ranks
    /// --replay` replays them together.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "hf")]
    tp: usize,
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
    /// Print a summary as JSON (schema gputape.record.v1) instead of the steps' text.
    #[arg(long)]
    json: bool,
}

/// `record --json`: what was recorded, and how each recorded step went. Printed whenever a
/// trace was written, a step that failed (and was recorded) included; the exit status says
/// the rest.
#[derive(Serialize, Default)]
struct Summary {
    schema: &'static str,
    output: PathBuf,
    backend: &'static str,
    /// `step 5`, `steps 5..9`, `workload two-streams`, `llama-3.2-1b steps 3..5, batch 2`.
    what: String,
    /// The trace written: its calls and bytes (`None`: recording stopped before it was).
    calls: Option<u64>,
    bytes: Option<u64>,
    /// Each recorded step: its tokens, or its failure (recorded too).
    steps: Vec<StepOutcome>,
    /// Guard bands the red-zone scan after the last step found written (a backend with red
    /// zones only).
    redzone_violations: Option<usize>,
    /// A workload's own failure, recorded (the graph-fault workload's, say).
    failed: Option<String>,
}

#[derive(Serialize)]
struct StepOutcome {
    step: usize,
    tokens: Vec<u32>,
    error: Option<String>,
}

/// What a recording says as it goes: text lines as they happen, or the summary for `--json`
/// at the end.
struct Said {
    json: bool,
    doc: Summary,
}

impl Said {
    fn line(&self, text: std::fmt::Arguments<'_>) {
        if !self.json {
            println!("{text}");
        }
    }

    fn step(&mut self, step: usize, r: Result<Vec<u32>, String>) {
        let (tokens, error) = match r {
            Ok(t) => (t, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        self.doc.steps.push(StepOutcome {
            step,
            tokens,
            error,
        });
    }

    fn stopped(&mut self, stats: &crate::recorder::RecordStats) {
        self.doc.calls = Some(stats.calls);
        self.doc.bytes = Some(stats.bytes);
    }
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
    /// Two streams where the consumer forgot to wait for the producer (for `replay --chaos`).
    MissingEvent,
}

/// How a recording is made, beyond what is recorded.
#[derive(Clone, Copy)]
struct How<'c> {
    backend: Backend,
    /// `--hash-syncs`.
    hash_syncs: bool,
    ctx: &'c Ctx<'c>,
}

impl How<'_> {
    /// A recorder's settings from the command line: hashes at syncs, and the blob store.
    fn set_up<B: GpuBackend>(&self, rec: &crate::recorder::RecordingBackend<B>) {
        rec.hash_at_syncs(self.hash_syncs);
        if let Some(dir) = self.ctx.blob_dir() {
            rec.blob_store(dir);
        }
    }
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    let mut said = Said {
        json: a.json,
        doc: Summary {
            schema: "gputape.record.v1",
            output: a.output.clone(),
            backend: a.backend.name(),
            ..Summary::default()
        },
    };
    let r = record_as_asked(a, ctx, &mut said);
    if said.json && said.doc.calls.is_some() {
        print_json(&said.doc)?;
    }
    r
}

fn record_as_asked(a: Args, ctx: &Ctx, said: &mut Said) -> Result<Exit> {
    let how = How {
        backend: a.backend,
        hash_syncs: a.hash_syncs,
        ctx,
    };
    let steps = match (a.step, a.steps) {
        (Some(k), _) => Some((k, k + 1)),
        (None, Some((s, e))) => Some((s as usize, e.min(1 << 20) as usize)),
        (None, None) => None,
    };
    if steps.is_none() && a.workload.is_none() {
        anyhow::bail!(
            "say what to record: --step K or --steps A..B (decode steps of the built-in model), or --workload NAME"
        );
    }
    if let (Some(hf), Some(range)) = (&a.hf, steps) {
        match a.tp {
            1 => record_llama(how, hf, a.batch, range, &a.output, said)?,
            n => record_llama_tp(how, hf, a.batch, range, n, &a.output, said)?,
        }
        return Ok(Exit::Pass);
    }
    match (steps, a.workload) {
        (Some(k), _) => record_step(how, k, &a.config, a.fault.plan(), &a.output, said),
        (None, w) => record(
            how,
            w.unwrap_or(Workload::TwoStreams),
            a.fault.fault_overrun,
            &a.output,
            said,
        ),
    }?;
    Ok(Exit::Pass)
}

fn record(how: How, w: Workload, overrun: u32, out: &Path, said: &mut Said) -> Result<()> {
    let want = Want {
        blas: true,
        ..Want::default()
    };
    let o = backends::open(how.ctx, how.backend, want)?;
    let rec = crate::recorder::RecordingBackend::to_file(o.gpu, out, o.desc)?;
    record_on(how, rec, w, overrun, out, said)
}

/// A Hugging Face config: a preset's name, or the path of a config.json.
fn hf_config(what: &str) -> Result<crate::model::hf::HfConfig> {
    if let Some(c) = crate::model::hf::HfConfig::preset(what) {
        return Ok(c);
    }
    let text = anyhow::Context::with_context(std::fs::read_to_string(what), || {
        let names: Vec<&str> = crate::model::hf::HfConfig::preset_names().collect();
        format!(
            "--hf {what} is neither a preset ({}) nor a readable config.json",
            names.join(", ")
        )
    })?;
    anyhow::Context::with_context(crate::model::hf::HfConfig::parse(&text), || {
        format!("parsing {what}")
    })
}

/// `record --hf`: steps `first..end` of the bf16 batched step (`model::llama`) on a batch of
/// `batch` sequences, recording from `first` on. A step that fails ends the recording there,
/// the trace kept.
fn record_llama(
    how: How,
    hf: &str,
    batch: usize,
    (first, end): (usize, usize),
    out: &Path,
    said: &mut Said,
) -> Result<()> {
    use crate::model::llama::Llama;
    let cfg = hf_config(hf)?;
    said.doc.what = format!("{} steps {first}..{end}, batch {batch}", cfg.name);
    let o = backends::open(how.ctx, how.backend, Want::default())?;
    let rec = crate::recorder::RecordingBackend::to_file(o.gpu, out, o.desc)?;
    how.set_up(&rec);
    let gpu: &dyn GpuBackend = &rec;
    let opts = llama_options(&cfg, batch);
    let t = std::time::Instant::now();
    let mut m = Llama::load(gpu, &cfg, opts)?;
    eprintln!(
        "loaded {} (batch {batch}, contexts {:?}): {:.2} GB on the device in {:.1} s",
        cfg.name,
        m.lens(),
        m.device_bytes() as f64 / 1e9,
        t.elapsed().as_secs_f64()
    );
    let r = llama_steps(&rec, gpu, &mut m, batch, (first, end))?;
    r.tell(said, None, out);
    match r.failed {
        Some(e) => Err(e),
        None => m.release(gpu),
    }
}

/// The bf16 step's options for `record --hf`: contexts from 200 tokens on, under the config's
/// longest.
fn llama_options(
    cfg: &crate::model::hf::HfConfig,
    batch: usize,
) -> crate::model::llama::LlamaOptions {
    crate::model::llama::LlamaOptions::staggered(batch, cfg.max_position_embeddings.min(1024), 200)
}

/// What one recording of bf16 steps made.
struct LlamaRecorded {
    /// Each recorded step's tokens, or its failure.
    steps: Vec<(usize, Result<Vec<u32>, String>)>,
    /// The recorder's totals, when it was recording at the end.
    stats: Option<crate::recorder::RecordStats>,
    /// The failure that ended the steps (recorded when it came at a recorded step).
    failed: Option<anyhow::Error>,
    /// A failure before the recorded steps, said as it is.
    early: Option<String>,
}

impl LlamaRecorded {
    /// Says what was recorded (`rank`: whose, for a tensor-parallel rank).
    fn tell(&self, said: &mut Said, rank: Option<usize>, out: &Path) {
        let who = rank.map_or(String::new(), |r| format!("rank {r}: "));
        for (step, r) in &self.steps {
            match r {
                Ok(next) => said.line(format_args!("{who}step {step} produced tokens {next:?}")),
                Err(e) => said.line(format_args!("{who}step {step} failed (recorded): {e}")),
            }
            if rank.is_none_or(|r| r == 0) {
                said.step(*step, r.clone());
            }
        }
        if let Some(e) = &self.early {
            said.line(format_args!("{who}{e}"));
        }
        if let Some(stats) = &self.stats {
            if rank.is_none_or(|r| r == 0) {
                said.stopped(stats);
            }
            said.line(format_args!(
                "{who}recorded: {} calls, {} bytes -> {}",
                stats.calls,
                stats.bytes,
                out.display()
            ));
        }
    }
}

/// Steps `0..end` of `m` on `gpu` (which is `rec`), recording from `first` on. A step that
/// fails ends them there, the recording kept.
fn llama_steps<B: GpuBackend>(
    rec: &crate::recorder::RecordingBackend<B>,
    gpu: &dyn GpuBackend,
    m: &mut crate::model::llama::Llama,
    batch: usize,
    (first, end): (usize, usize),
) -> Result<LlamaRecorded> {
    let mut tokens: Vec<u32> = (0..batch as u32).map(|b| 1 + 7 * b).collect();
    let mut r = LlamaRecorded {
        steps: Vec::new(),
        stats: None,
        failed: None,
        early: None,
    };
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
                    r.steps.push((step, Ok(next.clone())));
                }
                tokens = next;
            }
            Err(e) => {
                if step >= first {
                    r.steps.push((step, Err(format!("{e:#}"))));
                } else {
                    r.early = Some(format!("step {step} failed: {e:#}"));
                }
                r.failed = Some(e);
                break;
            }
        }
    }
    if rec.is_recording() {
        r.stats = Some(rec.stop()?);
    }
    Ok(r)
}

/// `record --hf --tp N`: `record_llama` tensor parallel, rank r of N on backend r (a thread
/// each; ranks meet in one communicator), each rank into `out` with `.rankR` before its
/// extension.
fn record_llama_tp(
    how: How,
    hf: &str,
    batch: usize,
    range: (usize, usize),
    n: usize,
    out: &Path,
    said: &mut Said,
) -> Result<()> {
    use crate::model::llama::{Llama, TpPart};
    anyhow::ensure!((2..=64).contains(&n), "--tp {n}: from 2 to 64 ranks");
    let cfg = hf_config(hf)?;
    said.doc.what = format!(
        "{} steps {}..{}, batch {batch}, tensor parallel over {n} ranks",
        cfg.name, range.0, range.1
    );
    let mut gpus = Vec::with_capacity(n);
    for rank in 0..n {
        let want = Want {
            device: rank,
            ..Want::default()
        };
        let o = backends::open(how.ctx, how.backend, want)
            .map_err(|e| e.context(format!("opening rank {rank}'s backend")))?;
        gpus.push((o.gpu, o.desc));
    }
    let id = gpus[0].0.comm_unique_id()?;
    let (hash_syncs, blobs) = (how.hash_syncs, how.ctx.blob_dir().map(Path::to_path_buf));
    let cfg = &cfg;
    let results: Vec<Result<(PathBuf, LlamaRecorded)>> = std::thread::scope(|sc| {
        let ranks: Vec<_> = gpus
            .into_iter()
            .enumerate()
            .map(|(rank, (g, desc))| {
                let path = super::common::with_tag(out, &format!("rank{rank}"));
                let blobs = blobs.clone();
                sc.spawn(move || -> Result<(PathBuf, LlamaRecorded)> {
                    // CUDA binds a context per thread: this rank's is new.
                    g.bind_to_thread()?;
                    let rec = crate::recorder::RecordingBackend::to_file(g, &path, desc)?;
                    rec.hash_at_syncs(hash_syncs);
                    if let Some(dir) = &blobs {
                        rec.blob_store(dir);
                    }
                    let gpu: &dyn GpuBackend = &rec;
                    let comm = gpu.comm_init(id, n as u32, rank as u32)?;
                    let part = TpPart {
                        rank,
                        size: n,
                        comm,
                    };
                    let mut m = Llama::load_tp(gpu, cfg, llama_options(cfg, batch), part)?;
                    let r = llama_steps(&rec, gpu, &mut m, batch, range)?;
                    if r.failed.is_none() {
                        m.release(gpu)?;
                        gpu.comm_destroy(comm)?;
                    }
                    Ok((path, r))
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a rank's thread panicked")))
            })
            .collect()
    });
    let mut first_failure = None;
    let mut tokens: Option<Vec<Vec<u32>>> = None;
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok((path, rec)) => {
                rec.tell(said, Some(rank), &path);
                let mine: Vec<Vec<u32>> = rec
                    .steps
                    .iter()
                    .filter_map(|(_, t)| t.as_ref().ok().cloned())
                    .collect();
                if let Some(t) = &tokens {
                    if *t != mine && first_failure.is_none() {
                        first_failure = Some(anyhow::anyhow!(
                            "rank {rank} sampled other tokens than rank 0: {mine:?} against {t:?}"
                        ));
                    }
                } else {
                    tokens = Some(mine);
                }
                if let (Some(e), None) = (rec.failed, &first_failure) {
                    first_failure = Some(e.context(format!("rank {rank}")));
                }
            }
            Err(e) => {
                said.line(format_args!("rank {rank}: {e:#}"));
                if first_failure.is_none() {
                    first_failure = Some(e.context(format!("rank {rank}")));
                }
            }
        }
    }
    match first_failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn record_on<B: GpuBackend>(
    how: How,
    rec: crate::recorder::RecordingBackend<B>,
    w: Workload,
    overrun: u32,
    out: &Path,
    said: &mut Said,
) -> Result<()> {
    said.doc.what = format!(
        "workload {}",
        clap::ValueEnum::to_possible_value(&w).map_or("?".into(), |v| v.get_name().to_string())
    );
    how.set_up(&rec);
    rec.start()?;
    let g: &dyn GpuBackend = &rec;
    match w {
        Workload::SingleStream => crate::workloads::single_stream(g)?,
        Workload::TwoStreams => crate::workloads::two_streams(g)?,
        Workload::Capture => crate::workloads::capture_region(g)?,
        Workload::PointerTable => crate::workloads::pointer_table(g)?,
        Workload::Tma => crate::workloads::tma(g)?,
        Workload::MissingEvent => crate::workloads::missing_event(g)?,
        Workload::GraphFault => {
            let r = crate::workloads::graph_fault_with(g, overrun);
            if let Err(e) = &r {
                said.line(format_args!("the graph step failed (recorded): {e:#}"));
                said.doc.failed = Some(format!("{e:#}"));
            }
            let _ = g.sweep_unreleased();
            Vec::new()
        }
    };
    let stats = rec.stop()?;
    said.stopped(&stats);
    said.line(format_args!(
        "recorded {} calls, {} bytes -> {}",
        stats.calls,
        stats.bytes,
        out.display()
    ));
    Ok(())
}

fn record_step(
    how: How,
    steps: (usize, usize),
    config: &str,
    fault: Option<crate::model::FaultPlan>,
    out: &Path,
    said: &mut Said,
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
    let o = model_backend(how.ctx, how.backend, fault.is_some())?;
    let rec = crate::recorder::RecordingBackend::to_file(o.gpu, out, o.desc)?;
    record_steps_on(how, &rec, cfg, steps, fault, out, said)
}

/// Run the model up to `steps.1`, recording steps `steps.0..steps.1` (the trace starts with a
/// snapshot of device memory at step `steps.0`, and the weights are stored once however many
/// steps it holds).
fn record_steps_on<B: GpuBackend + 'static>(
    how: How,
    rec: &crate::recorder::RecordingBackend<B>,
    cfg: crate::model::ModelConfig,
    (first, end): (usize, usize),
    fault: Option<crate::model::FaultPlan>,
    out: &Path,
    said: &mut Said,
) -> Result<()> {
    how.set_up(rec);
    let gpu: &dyn GpuBackend = rec;
    let mut model = crate::model::Model::load(gpu, cfg)?;
    model.fault = fault;
    let mut token = crate::model::PROMPT[0];
    let what = if end == first + 1 {
        format!("step {first}")
    } else {
        format!("steps {first}..{end}")
    };
    said.doc.what = what.clone();
    for pos in 0..end {
        if pos == first {
            rec.start()?;
        }
        let r = model.step(gpu, token, pos);
        let last = pos + 1 == end || r.is_err();
        if pos >= first {
            match &r {
                Err(e) => said.line(format_args!("step {pos} failed (recorded): {e:#}")),
                Ok(t) => said.line(format_args!("step {pos} produced token {t}")),
            }
            said.step(
                pos,
                r.as_ref().map(|t| vec![*t]).map_err(|e| format!("{e:#}")),
            );
        }
        if last && how.backend.has_redzones() {
            // Red zones are read while still recording, so a violation is in the trace (a
            // replay reproduces the overrun from it), as this tool's own call: the engine did
            // not make it, and its analyses leave it out. A backend without red zones (the
            // mock checks every access) has nothing to scan.
            if let Ok(bad @ 1..) = rec.tools_own(|r| r.scan_redzones()) {
                said.line(format_args!("red-zone scan found {bad} violation(s)"));
                said.doc.redzone_violations = Some(bad);
            }
        }
        if last {
            let stopped = rec.stop();
            if let Ok(stats) = &stopped {
                said.stopped(stats);
                said.line(format_args!(
                    "recorded {what}: {} calls, {} bytes -> {}",
                    stats.calls,
                    stats.bytes,
                    out.display()
                ));
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
        token = crate::model::PROMPT.get(pos + 1).copied().unwrap_or(next);
    }
    model.teardown(gpu)?;
    Ok(())
}
