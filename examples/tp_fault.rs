//! A tensor-parallel engine's fault, planted, and what its flight recorders make of it.
//!
//! N ranks, a thread and a backend each (mock ranks; with `GPUTAPE_STEP_CUDA=1` rank r on
//! GPU r, meeting over NCCL), each under its own flight recorder (`FlightConfig::from_env`,
//! the ranks' peers in one directory, a hang deadline of 2 s unless `GPUTAPE_FLIGHT_HANG_S`
//! says otherwise). Every step is an AXPY and an all-reduce of 4096 floats, read back. One
//! rank leaves its all-reduce of one step out. Nothing in NCCL notices: from there the ranks'
//! all-reduces pair one off, and the other ranks' last one waits for a partner that never
//! comes. That wait is dumped at the hang deadline, the rank that left it out dumps when its
//! peer says so, and the dumps are matched here as `gputape ranks` matches them.
//!
//! ```text
//! cargo run --example tp_fault -- [DIR] [RANKS=2] [PLANTED_RANK=1] [STEP=13] [STEPS=20]
//! ```
//!
//! Exits 0 when every rank dumped and the dumps name the rank that left an all-reduce out;
//! 1 otherwise; the process ends itself once the dumps are in, as an engine's watchdog would
//! (threads stuck in NCCL cannot be joined).

use gputape::backend::{CollDtype, Collective, GpuBackend, ReduceOp};
use gputape::recorder::{BackendDesc, FlightConfig, RecordingBackend};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ELEMS: usize = 4096;

/// Rank `rank` of `n`: its steps, then it waits (its recorder alive, so a peer's dump still
/// reaches it) until the process ends.
fn rank(
    (gpu, kind): (Box<dyn GpuBackend>, &str),
    id: gputape::backend::CommUniqueId,
    (rank, n): (u32, u32),
    (planted, at, steps): (u32, u64, u64),
    dir: &Path,
) -> anyhow::Result<()> {
    // CUDA binds a context per thread: this rank's thread is not the one that made it.
    gpu.bind_to_thread()?;
    let mut cfg = FlightConfig::from_env(dir.join(format!("rank{rank}")));
    cfg.peers = Some(dir.join("peers"));
    cfg.hang_after.get_or_insert(Duration::from_secs(2));
    // What the dump's header says: the backend, and the GPU this rank ran on.
    let mut desc = BackendDesc::new(kind);
    desc.device_ordinal = rank;
    let g = RecordingBackend::flight(gpu, cfg, desc)?;
    gputape::workloads::load_kernels(&g)?;
    let comm = g.comm_init(id, n, rank)?;
    let s = g.default_stream();
    let (x, y) = (g.alloc(ELEMS * 4)?, g.alloc(ELEMS * 4)?);
    g.memset(x, 0, ELEMS * 4)?;
    let mine: Vec<u8> = (0..ELEMS)
        .flat_map(|i| ((i % 7) as f32 + rank as f32).to_le_bytes())
        .collect();
    g.copy_h2d(&mine, y)?;
    let mut back = vec![0u8; 16];
    for step in 0..steps {
        g.step_boundary(step);
        gputape::workloads::saxpy(&g, x, y, ELEMS as u32, 0.5, s)?;
        if !(rank == planted && step == at) {
            let sum = Collective::AllReduce(ReduceOp::Sum);
            g.collective(comm, sum, y, x, ELEMS as u64, CollDtype::F32, s)?;
        }
        g.copy_d2h(x, &mut back)?;
    }
    println!("rank {rank}: {steps} steps done");
    loop {
        std::thread::park();
    }
}

/// The flight dumps under `dir/rankR`.
fn dumps_of(dir: &Path, r: u32) -> Vec<PathBuf> {
    std::fs::read_dir(dir.join(format!("rank{r}")))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gtape"))
        .collect()
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Without a directory, a temporary one, removed when the dumps named the rank.
    let given = args.first().map(PathBuf::from);
    let dir = given.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("gputape-tp-fault-{}", std::process::id()))
    });
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (n, planted, at, steps) = (num(1, 2) as u32, num(2, 1) as u32, num(3, 13), num(4, 20));
    anyhow::ensure!(
        n >= 2 && planted < n && at < steps,
        "{n} ranks, rank {planted} planted at step {at} of {steps}: two ranks at least, the planted one among them, its step among the steps"
    );
    std::fs::create_dir_all(&dir)?;
    let cuda = std::env::var_os("GPUTAPE_STEP_CUDA").is_some();
    let mut gpus: Vec<Box<dyn GpuBackend>> = Vec::new();
    for r in 0..n as usize {
        gpus.push(if cuda {
            Box::new(gputape::cuda::CudaBackend::new(
                gputape::cuda::CudaConfig::from_env(r),
            )?)
        } else {
            // Mock ranks give up on a missing peer after a while, as NCCL's watchdog does
            // after minutes; the hang deadline dumps first.
            Box::new(gputape::mock::MockGpuBackend::new(
                gputape::mock::MockConfig {
                    comm_timeout: Duration::from_secs(8),
                    ..Default::default()
                },
            ))
        });
    }
    let id = gpus[0].comm_unique_id()?;
    println!(
        "{n} ranks on {}, rank {planted} leaves out its all-reduce of step {at}; dumps under {}",
        if cuda { "CUDA (NCCL)" } else { "mock ranks" },
        dir.display()
    );
    for (r, g) in gpus.into_iter().enumerate() {
        let dir = dir.clone();
        std::thread::spawn(move || {
            let kind = if cuda { "cuda" } else { "mock" };
            if let Err(e) = rank((g, kind), id, (r as u32, n), (planted, at, steps), &dir) {
                println!("rank {r}: {e:#}");
            }
        });
    }
    // Every rank dumped, or the deadline passed.
    let t0 = Instant::now();
    let all_dumped = || (0..n).all(|r| !dumps_of(&dir, r).is_empty());
    while !all_dumped() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    // A dump being announced may still be written: let the writers finish.
    std::thread::sleep(Duration::from_millis(500));
    let mut traces = Vec::new();
    for r in 0..n {
        let d = dumps_of(&dir, r);
        println!("rank {r}: {} dump(s) {:?}", d.len(), d);
        // The newest: a peer's announcement can follow a rank's own dump.
        if let Some(p) = d
            .iter()
            .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        {
            traces.push(gputape::trace::Trace::open(p)?);
        }
    }
    if traces.len() < n as usize {
        println!("NOT every rank dumped within 60 s");
        std::process::exit(1);
    }
    let found = gputape::analysis::ranks::match_ranks(&traces);
    print!("{}", gputape::analysis::ranks::render_findings(&found));
    // The step where the planted rank made one all-reduce fewer than the others.
    let named = found.iter().any(|f| {
        let gputape::analysis::ranks::RankFinding::StepDiffers { step, counts, .. } = f else {
            return false;
        };
        let mine = counts
            .iter()
            .find(|(_, c)| c.rank == planted)
            .map(|(n, _)| *n);
        *step == at
            && counts
                .iter()
                .all(|(n, c)| c.rank == planted || Some(*n) == mine.map(|m| m + 1))
    });
    if named {
        println!("the dumps name rank {planted} at step {at}");
    } else {
        println!("the dumps do NOT name rank {planted} at step {at}");
    }
    if named && given.is_none() {
        std::fs::remove_dir_all(&dir).ok();
    }
    std::process::exit(if named { 0 } else { 1 });
}
