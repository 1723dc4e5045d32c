//! An outside engine (examples/outside_engine: its own kernels and CPU bodies, two streams,
//! eager or graph-launched) behind the flight recorder, on the mock: each failure it really
//! has is dumped, replayed with its kernel named, and minimized; the recorder never breaks
//! its capture and adds no call of its own while a stream captures.

#[path = "../examples/outside_engine/engine.rs"]
mod engine;

use engine::{Config, Engine};
use gputape::backend::{CaptureMode, GpuBackend};
use gputape::mock::{MockConfig, MockGpuBackend};
use gputape::recorder::{BackendDesc, FlightConfig, RecordingBackend};
use gputape::replayer::{ReplayOptions, ReplayReport, Replayer};
use gputape::trace::Trace;
use std::path::{Path, PathBuf};

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-outside-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn mock(mode: CaptureMode) -> MockGpuBackend {
    MockGpuBackend::new(MockConfig {
        capture_mode: mode,
        ..MockConfig::default()
    })
}

fn flight(dir: &Path, every: u64, mode: CaptureMode) -> RecordingBackend<MockGpuBackend> {
    flight_with(dir, every, mode, true)
}

/// `flight`, with checkpoints on the device (the default) or by the host (`device: false`),
/// which drain the streams and read whole buffers back at the boundary itself.
fn flight_with(
    dir: &Path,
    every: u64,
    mode: CaptureMode,
    device: bool,
) -> RecordingBackend<MockGpuBackend> {
    let mut cfg = FlightConfig::new(dir);
    cfg.checkpoint_every = every;
    // Every due checkpoint is taken on its step, so captures meet them at every phase.
    cfg.budget = None;
    cfg.wait_for_checkpoints = true;
    cfg.device_checkpoints = device;
    RecordingBackend::flight(mock(mode), cfg, BackendDesc::new("mock")).expect("flight recorder")
}

fn dumps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "gtape"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Replay a dump on a fresh mock that has the engine's module (its CPU bodies).
fn replay(t: &Trace) -> ReplayReport {
    let m = MockGpuBackend::default();
    m.load_module(&engine::module()).expect("module");
    Replayer::new(t)
        .run(&m, &ReplayOptions::default(), None, |_| {})
        .expect("replay runs")
}

fn culprit_kernel(r: &ReplayReport) -> String {
    r.faults
        .iter()
        .find(|f| f.reproduced)
        .and_then(|f| f.raised_by.as_ref().map(|c| c.kernel.clone()))
        .unwrap_or_default()
}

/// The engine captures its step with `step_boundary` inside the capture, at every phase of
/// the checkpoint interval, in global and relaxed mode: it runs to the end with the flight
/// recorder on, the recorder makes no call beside the capture, and a fault planted after the
/// capture is dumped and reproduced from the dump, pinned to its kernel inside the graph.
#[test]
fn capture_inside_step_hook_never_broken_and_fault_after_it_replays() {
    let every = 4;
    for mode in [CaptureMode::Global, CaptureMode::Relaxed] {
        for graph_at in 0..every {
            let dir = temp_dir(&format!("cap-{mode:?}-{graph_at}"));
            let gpu = flight(&dir, every, mode);
            let cfg = Config {
                graph_at: Some(graph_at),
                ..Config::default()
            };
            let mut e = Engine::new(&gpu, cfg.clone()).expect("engine");
            let out = e.run(3 * every);
            assert!(
                out.is_ok(),
                "{mode:?}, capture at step {graph_at}: the engine failed: {:?}",
                out.err().map(|(n, e)| format!("step {n}: {e:#}"))
            );
            let beside = gpu.inner().calls_beside_captures();
            assert!(
                beside.is_empty(),
                "{mode:?}, capture at {graph_at}: calls beside the capture: {beside:?}"
            );
            let held = gpu.flight_held().expect("flight");
            assert_eq!(held.own_failures, 0, "{mode:?} {graph_at}");
            drop(gpu);

            // The same engine, a bad id long after the capture: the graph launch faults.
            let gpu = flight(&dir, every, mode);
            let bad_step = 3 * every + 1;
            let mut e = Engine::new(
                &gpu,
                Config {
                    bad_id: Some((bad_step, 1 << 24)),
                    ..cfg
                },
            )
            .expect("engine");
            let err = e.run(4 * every).expect_err("the bad id faults");
            assert_eq!(err.0, bad_step, "{err:?}");
            let d = dumps(&dir);
            assert_eq!(d.len(), 1, "one dump: {d:?}");
            let t = Trace::open(&d[0]).expect("dump opens");
            assert!(t.dump.as_ref().is_some_and(|i| i.reason.contains("failed")));
            // The graph was captured steps before the dump's first checkpoint: its calls, and
            // the host bytes it uploads, are in the dump all the same.
            let uploads: Vec<_> = t
                .calls
                .iter()
                .filter_map(|c| match &c.call {
                    gputape::trace::Call::CopyH2DAsync { data, .. } => Some(*data),
                    _ => None,
                })
                .collect();
            assert!(
                !uploads.is_empty(),
                "{mode:?} {graph_at}: the capture is in the dump"
            );
            for b in uploads {
                assert!(
                    t.blob(b).is_some(),
                    "{mode:?} {graph_at}: blob {b} of the capture"
                );
            }
            let r = replay(&t);
            assert!(r.passed(), "{mode:?} {graph_at}: {}", r.summary());
            assert!(
                culprit_kernel(&r).contains("oe_embed"),
                "{mode:?} {graph_at}: {}",
                r.summary()
            );
            drop(gpu);
            std::fs::remove_dir_all(&dir).ok();
        }
    }
}

/// A device-side assert: raised by the launch, reported at the next wait as
/// CUDA_ERROR_ASSERT (710), the context dead after; the dump replays it, names the kernel,
/// passes, and minimizes.
#[test]
fn device_assert_is_710_reproduced_and_minimized() {
    let dir = temp_dir("assert");
    let gpu = flight(&dir, 8, CaptureMode::Global);
    let mut e = Engine::new(
        &gpu,
        Config {
            checked: true,
            bad_id: Some((13, 70)),
            ..Config::default()
        },
    )
    .expect("engine");
    let (step, err) = e.run(40).expect_err("the assert fires");
    assert_eq!(step, 13);
    assert_eq!(gputape::driver_code(&err), Some(710), "{err:#}");
    assert!(
        format!("{err:#}").contains("id >= 0 && id < rows"),
        "{err:#}"
    );
    drop(gpu);
    let d = dumps(&dir);
    let t = Trace::open(&d[0]).expect("dump");
    let r = replay(&t);
    assert!(r.passed(), "{}", r.summary());
    assert!(
        r.summary().contains("CUDA_ERROR_ASSERT (710)"),
        "{}",
        r.summary()
    );
    assert!(
        culprit_kernel(&r).contains("oe_embed_checked"),
        "{}",
        r.summary()
    );
    assert!(
        r.stopped_at.is_some(),
        "the replay stops at the dead context"
    );

    let mut oracle = |cand: &Trace| -> anyhow::Result<_> {
        Ok(gputape::replayer::signature(&replay(cand)).map(|(s, _)| s))
    };
    let small =
        gputape::replayer::minimize(&t, &mut oracle, 400, &mut |_, _| {}).expect("minimize");
    assert!(
        small.trace.calls.len() < t.calls.len() / 4,
        "{} of {} calls kept",
        small.trace.calls.len(),
        t.calls.len()
    );
    assert!(replay(&small.trace).passed());
    std::fs::remove_dir_all(&dir).ok();
}

/// A replay that cannot run the kernel a recorded failure is about does not pass: the
/// failure is "not checked", never "no divergence".
#[test]
fn a_recorded_fault_in_a_kernel_the_replay_cannot_run_is_not_checked() {
    let dir = temp_dir("opaque");
    let gpu = flight(&dir, 8, CaptureMode::Global);
    let mut e = Engine::new(
        &gpu,
        Config {
            bad_id: Some((5, 1 << 24)),
            ..Config::default()
        },
    )
    .expect("engine");
    e.run(10).expect_err("faults");
    drop(gpu);
    let t = Trace::open(&dumps(&dir)[0]).expect("dump");
    // A mock without the engine's module: its kernels are opaque.
    let r = Replayer::new(&t)
        .with_opaque_kernels()
        .run(
            &MockGpuBackend::default(),
            &ReplayOptions::default(),
            None,
            |_| {},
        )
        .expect("replay");
    assert!(!r.passed(), "{}", r.summary());
    assert!(r.summary().contains("not checked"), "{}", r.summary());
    std::fs::remove_dir_all(&dir).ok();
}

/// A trace with no complete call replays as "nothing checked", and does not pass.
#[test]
fn a_replay_that_checked_nothing_does_not_pass() {
    let dir = temp_dir("empty");
    let gpu = flight(&dir, 8, CaptureMode::Global);
    let path = gpu.flight_dump("asked for at once").expect("dump");
    drop(gpu);
    let t = Trace::open(&path).expect("dump");
    assert_eq!(
        t.dump.as_ref().map(|d| d.reason.as_str()),
        Some("asked for at once")
    );
    let r = replay(&t);
    assert!(r.checked_nothing());
    assert!(!r.passed(), "{}", r.summary());
    std::fs::remove_dir_all(&dir).ok();
}

/// A backend whose stream syncs block while it is stuck: a kernel that spins on a flag
/// nobody sets, as the host sees it.
#[derive(Default)]
struct Stuck {
    stuck: parking_lot::Mutex<bool>,
    /// Each sync takes this long (a checkpoint that costs something).
    sync_cost: std::time::Duration,
    cv: parking_lot::Condvar,
    cache: gputape::backend::OpCache,
}

impl GpuBackend for Stuck {
    fn alloc(&self, _bytes: usize) -> anyhow::Result<gputape::backend::DevicePtr> {
        Ok(gputape::backend::DevicePtr(0x1000))
    }
    fn alloc_managed(&self, bytes: usize) -> anyhow::Result<gputape::backend::DevicePtr> {
        self.alloc(bytes)
    }
    fn free(&self, _ptr: gputape::backend::DevicePtr) -> anyhow::Result<()> {
        Ok(())
    }
    fn copy_h2d(&self, _src: &[u8], _dst: gputape::backend::DevicePtr) -> anyhow::Result<()> {
        Ok(())
    }
    fn copy_d2h(&self, _src: gputape::backend::DevicePtr, _dst: &mut [u8]) -> anyhow::Result<()> {
        Ok(())
    }
    fn copy_d2d(
        &self,
        _src: gputape::backend::DevicePtr,
        _dst: gputape::backend::DevicePtr,
        _bytes: usize,
    ) -> anyhow::Result<()> {
        Ok(())
    }
    fn launch(
        &self,
        _func: gputape::backend::KernelHandle,
        _grid: [u32; 3],
        _block: [u32; 3],
        _shared_mem: u32,
        _stream: u64,
        _params: &mut [*mut std::ffi::c_void],
    ) -> anyhow::Result<()> {
        Ok(())
    }
    fn memset(&self, _: gputape::backend::DevicePtr, _: u8, _: usize) -> anyhow::Result<()> {
        Ok(())
    }
    fn memset_async(
        &self,
        _: gputape::backend::DevicePtr,
        _: u8,
        _: usize,
        _: u64,
    ) -> anyhow::Result<()> {
        Ok(())
    }
    fn total_memory(&self) -> anyhow::Result<usize> {
        Ok(1 << 30)
    }
    fn free_memory(&self) -> anyhow::Result<usize> {
        Ok(1 << 30)
    }
    fn sm_count(&self) -> anyhow::Result<u32> {
        Ok(1)
    }
    fn synchronize(&self, _stream: u64) -> anyhow::Result<()> {
        std::thread::sleep(self.sync_cost);
        let mut s = self.stuck.lock();
        while *s {
            self.cv.wait(&mut s);
        }
        Ok(())
    }
    fn default_stream(&self) -> u64 {
        0
    }
    fn kernel(&self, _module: &str, _func: &str) -> anyhow::Result<gputape::backend::KernelHandle> {
        Ok(gputape::backend::KernelHandle(1))
    }
    fn op_cache(&self) -> &gputape::backend::OpCache {
        &self.cache
    }
    fn comm_init(
        &self,
        _id: gputape::backend::CommUniqueId,
        _nranks: u32,
        _rank: u32,
    ) -> anyhow::Result<gputape::backend::CommHandle> {
        Ok(gputape::backend::CommHandle(1))
    }
}

/// A hang: the engine's thread is stuck inside a sync and makes no further call; the flight
/// recorder's own thread dumps after `hang_after`, naming the call in flight and why.
#[test]
fn a_hang_is_dumped_by_the_recorders_own_thread() {
    let dir = temp_dir("hang");
    let mut cfg = FlightConfig::new(&dir);
    cfg.hang_after = Some(std::time::Duration::from_millis(300));
    let gpu =
        RecordingBackend::flight(Stuck::default(), cfg, BackendDesc::new("stuck")).expect("flight");
    let k = gpu.kernel("spin", "wait_flag").expect("kernel");
    gpu.launch(k, [1, 1, 1], [1, 1, 1], 0, 0, &mut [])
        .expect("launch");
    *gpu.inner().stuck.lock() = true;
    std::thread::scope(|s| {
        let engine = s.spawn(|| gpu.synchronize(0));
        let t0 = std::time::Instant::now();
        while dumps(&dir).is_empty() && t0.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let d = dumps(&dir);
        // Let the engine go before asserting, so a failure does not hang the test.
        *gpu.inner().stuck.lock() = false;
        gpu.inner().cv.notify_all();
        engine.join().expect("engine thread").expect("sync");
        assert_eq!(d.len(), 1, "the hang was dumped");
        let t = Trace::open(&d[0]).expect("dump");
        let info = t.dump.expect("a dump says why");
        assert!(info.reason.starts_with("hang:"), "{}", info.reason);
        let sync = t
            .calls
            .iter()
            .find(|c| c.call.kind().name() == "synchronize")
            .expect("the sync is in the dump");
        assert!(info.in_flight.iter().any(|(seq, _)| *seq == sync.seq));
        assert!(sync.ret.is_none(), "the sync had not returned");
    });
    std::fs::remove_dir_all(&dir).ok();
}

/// CUDA reports a kernel's access to a bad address as 700 or 717 depending on where the
/// address points, which a replay that puts buffers elsewhere changes (seen on the H200): one
/// fault either way, and no other code is mistaken for it.
#[test]
fn an_invalid_address_is_one_fault_whichever_code_cuda_picks() {
    use gputape::backend::same_fault;
    for (recorded, replayed, same) in [
        (700, 700, true),
        (717, 700, true),
        (700, 717, true),
        (710, 710, true),
        (700, 710, false),
        (717, 1, false),
        (716, 700, false),
    ] {
        assert_eq!(
            same_fault(recorded, replayed),
            same,
            "{recorded} vs {replayed}"
        );
    }
}

/// A flight recorder's directory and settings for the budget tests: a checkpoint due every 2
/// steps, within `budget`.
fn every_two_steps(tag: &str, budget: Option<f64>) -> (PathBuf, FlightConfig) {
    let dir = temp_dir(&format!("{tag}-{budget:?}"));
    let mut cfg = FlightConfig::new(&dir);
    cfg.checkpoint_every = 2;
    cfg.budget = budget;
    // The budget is for checkpoints the host takes, which stop the engine while they read.
    cfg.device_checkpoints = false;
    (dir, cfg)
}

/// Checkpoints cost what they cost; the budget (a share of wall time) decides how often they
/// may be taken. With syncs of 20 ms and steps that cost nothing, a 2% budget allows one
/// checkpoint a second, where "every 2 steps" would stall every other step.
#[test]
fn the_checkpoint_budget_bounds_what_checkpoints_cost_the_engine() {
    let run = |budget: Option<f64>| {
        let (dir, cfg) = every_two_steps("budget", budget);
        let backend = Stuck {
            sync_cost: std::time::Duration::from_millis(20),
            ..Stuck::default()
        };
        let gpu = RecordingBackend::flight(backend, cfg, BackendDesc::new("slow sync")).unwrap();
        let t0 = std::time::Instant::now();
        for n in 0..60 {
            gpu.step_boundary(n);
        }
        let took = t0.elapsed();
        let h = gpu.flight_held().unwrap();
        std::fs::remove_dir_all(&dir).ok();
        (h, took)
    };
    let (every, took_every) = run(None);
    assert_eq!(every.checkpoints, 30, "{every:?}");
    assert!(took_every >= std::time::Duration::from_millis(600));
    let (budgeted, took) = run(Some(0.02));
    // The first due checkpoint is taken (nothing was allocated: its estimate is nothing);
    // each later one waits until all of them fit 2% of the time since arming, so no more
    // than one per second of this run can follow.
    let allowed = 1 + (took.as_secs_f64() / 0.98) as u64;
    assert!(budgeted.checkpoints <= allowed, "{budgeted:?} in {took:?}");
    assert!(budgeted.budget_deferrals > 0, "{budgeted:?}");
}

/// In a rank set the budget puts checkpoints off by as much as each rank's own costs say,
/// which differ between ranks; a put-off checkpoint then waits for the next multiple of
/// `checkpoint_every`, so every checkpoint of every rank falls on one and their dumps share
/// a start (`replayer::ranks::aligned`). Deterministic, with no clock in it: a budget too
/// small for any checkpoint after the first to fit by time, so each later one is taken only
/// once its span holds `max_span_calls` calls (9: the fifth step after a checkpoint, two
/// calls a step), which is never a multiple of 4 steps after the last; held to the rank
/// set's rule, it waits for the eighth.
#[test]
fn a_rank_sets_put_off_checkpoints_fall_on_multiples_of_the_interval() {
    let (dir, mut cfg) = every_two_steps("rank-set", Some(1e-12));
    cfg.checkpoint_every = 4;
    cfg.max_span_calls = 9;
    let gpu = RecordingBackend::flight(Stuck::default(), cfg, BackendDesc::new("stuck")).unwrap();
    gpu.comm_init(gputape::backend::CommUniqueId([7; 16]), 1, 0)
        .unwrap();
    let k = gpu.kernel("engine", "step").unwrap();
    for n in 0..40 {
        gpu.step_boundary(n);
        gpu.launch(k, [1, 1, 1], [1, 1, 1], 0, 0, &mut []).unwrap();
    }
    let h = gpu.flight_held().unwrap();
    let t = Trace::open(&gpu.flight_dump("asked").unwrap()).unwrap();
    let restarts: Vec<u64> = t.restarts.iter().map(|r| r.step).collect();
    assert!(h.budget_deferrals > 0, "{h:?}");
    assert_eq!(h.checkpoints, 5, "at steps 4, 12, 20, 28, 36: {h:?}");
    assert_eq!(restarts, [36], "the dump's newer checkpoint: {h:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The budget counts the first checkpoint too: an engine that fills 256 MiB after arming (its
/// weights) would have them all read back at its first due checkpoint, about 0.13 s at the
/// estimate's 2 GB/s, which 2% allows only 6.4 s after arming. Without a budget the
/// checkpoints come every 2 steps and read those bytes.
#[test]
fn the_first_checkpoint_waits_until_the_bytes_it_would_read_fit_the_budget() {
    let run = |budget: Option<f64>| {
        let (dir, cfg) = every_two_steps("first", budget);
        let gpu =
            RecordingBackend::flight(mock(CaptureMode::Global), cfg, BackendDesc::new("mock"))
                .unwrap();
        let weights = gpu.alloc(256 << 20).unwrap();
        for n in 0..8 {
            gpu.step_boundary(n);
        }
        gpu.free(weights).unwrap();
        let h = gpu.flight_held().unwrap();
        std::fs::remove_dir_all(&dir).ok();
        h
    };
    let every = run(None);
    assert_eq!(every.checkpoints, 4, "{every:?}");
    assert!(every.checkpoint_read_bytes >= 256 << 20, "{every:?}");
    let budgeted = run(Some(0.02));
    assert_eq!(budgeted.checkpoints, 0, "{budgeted:?}");
    assert_eq!(budgeted.checkpoint_read_bytes, 0, "{budgeted:?}");
    assert!(budgeted.budget_deferrals >= 3, "{budgeted:?}");
}

/// A graph launch writes what its captured calls write: the flight recorder's checkpoints of a
/// graph-launched engine read back the step's outputs, not its table (which nothing writes
/// after setup). Before, a graph launch counted as writing every buffer.
#[test]
fn checkpoints_of_a_graph_launched_step_read_back_what_the_graph_writes() {
    let dir = temp_dir("graph-writes");
    // What a host checkpoint reads is every buffer the step may write, whole.
    let gpu = flight_with(&dir, 8, CaptureMode::Global, false);
    let cfg = Config {
        graph_at: Some(2),
        ..Config::default()
    };
    let table = (cfg.rows * cfg.dim * 4) as u64;
    let mut e = Engine::new(&gpu, cfg).unwrap();
    e.run(64).map_err(|(n, e)| e.context(n)).unwrap();
    let h = gpu.flight_held().unwrap();
    assert!(h.checkpoints >= 6, "{h:?}");
    let per = h.checkpoint_read_bytes / h.checkpoints;
    assert!(
        per < table,
        "each checkpoint read {per} bytes, as much as the {table}-byte table: {h:?}"
    );
    assert!(per > 0, "the graph's outputs are read: {h:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The kinds of call that stop or grow what an engine runs on: a recorder must add none of
/// them to an engine's steps.
const STALLS: [gputape::backend::CallKind; 6] = {
    use gputape::backend::CallKind::*;
    [
        Synchronize,
        CopyD2H,
        CopyD2HOnStream,
        EventSynchronize,
        Alloc,
        AllocHostPinned,
    ]
};

fn stalls(m: &MockGpuBackend) -> [usize; 6] {
    STALLS.map(|k| m.calls_of(k))
}

/// The syncs, readbacks and allocations `m` saw over `steps` steps of `cfg` on `gpu` (over
/// `m`), counted from now; `between` runs after each step.
fn engine_stalls(
    gpu: &dyn GpuBackend,
    m: &MockGpuBackend,
    cfg: &Config,
    steps: u64,
    between: impl Fn(),
) -> [usize; 6] {
    let before = stalls(m);
    let mut e = Engine::new(gpu, cfg.clone()).expect("engine");
    for n in 0..steps {
        e.step(n).map_err(|e| e.context(n)).unwrap();
        between();
    }
    let after = stalls(m);
    std::array::from_fn(|i| after[i] - before[i])
}

/// Device checkpoints stop nothing: over 40 steps with a checkpoint due every 4, eager and
/// graph-launched, the engine's mock sees exactly the syncs, readbacks and allocations the
/// engine makes without a recorder, while checkpoints are taken and read what changed. The
/// host's checkpoints, on the same run, add syncs and readbacks: the count can tell.
#[test]
fn device_checkpoints_add_no_sync_readback_or_allocation_to_the_engines() {
    for graph_at in [None, Some(2)] {
        let cfg = Config {
            graph_at,
            ..Config::default()
        };
        let plain = mock(CaptureMode::Global);
        let want = engine_stalls(&plain, &plain, &cfg, 40, || {});
        for device in [true, false] {
            let dir = temp_dir(&format!("stalls-{graph_at:?}-{device}"));
            let gpu = flight_with(&dir, 4, CaptureMode::Global, device);
            // The mock's steps take microseconds: each checkpoint is let finish before the
            // next step (a wait of the test's on the recorder's thread, not on the device).
            let settle = || assert!(gpu.flight_settle(std::time::Duration::from_secs(10)));
            let got = engine_stalls(&gpu, gpu.inner(), &cfg, 40, settle);
            let h = gpu.flight_held().unwrap();
            assert_eq!(h.device_checkpoints, device, "{h:?}");
            assert!(h.checkpoints >= 2, "{graph_at:?} {device}: {h:?}");
            assert!(h.checkpoint_read_bytes > 0, "{graph_at:?} {device}: {h:?}");
            let names = STALLS.map(|k| k.name());
            if device {
                assert_eq!(got, want, "{graph_at:?}: {names:?}; {h:?}");
            } else {
                assert_ne!(
                    got, want,
                    "{graph_at:?}: host checkpoints sync and read back"
                );
            }
            drop(gpu);
            std::fs::remove_dir_all(&dir).ok();
        }
    }
}

/// A ring far smaller than what a checkpoint would take: each takes what fits (incomplete
/// ones are counted and never dumped from), the rest follows at later ones, and the ring
/// is reused hundreds of times over. A fault planted late is dumped from the newest complete
/// checkpoint and the dump replays, reproducing it, with every readback matching.
#[test]
fn a_dump_after_the_ring_wrapped_many_times_replays_and_reproduces_the_fault() {
    let dir = temp_dir("ring-wrapped");
    let mut fc = FlightConfig::new(&dir);
    fc.checkpoint_every = 2;
    fc.budget = None;
    fc.ring_mb = 1;
    let gpu =
        RecordingBackend::flight(mock(CaptureMode::Global), fc, BackendDesc::new("mock")).unwrap();
    // Besides the engine's own buffers, 3 MiB that the device rewrites every 10 steps (a
    // memset, whose bytes the recorder does not know) against a 1 MiB ring, of which half is
    // for taking what was not taken yet.
    let scratch = gpu.alloc(3 << 20).unwrap();
    let bad_step = 61;
    let mut e = Engine::new(
        &gpu,
        Config {
            bad_id: Some((bad_step, 1 << 24)),
            ..Config::default()
        },
    )
    .unwrap();
    for n in 0..bad_step {
        if n % 10 == 0 {
            gpu.memset(scratch, n as u8 + 1, 3 << 20).unwrap();
        }
        e.step(n).unwrap();
        // Each checkpoint done before the next boundary, so every due one is taken.
        assert!(gpu.flight_settle(std::time::Duration::from_secs(10)));
    }
    let h = gpu.flight_held().unwrap();
    assert!(h.incomplete_checkpoints >= 3, "{h:?}");
    assert!(h.checkpoints >= 25, "{h:?}");
    assert!(
        h.checkpoint_read_bytes > 2 << 20,
        "the ring went round: {h:?}"
    );
    let err = e.step(bad_step).expect_err("the bad id faults");
    let d = dumps(&dir);
    assert_eq!(d.len(), 1, "one dump: {d:?} ({err:#})");
    let t = Trace::open(&d[0]).expect("dump opens");
    let steps: Vec<u64> = t
        .calls
        .iter()
        .filter_map(|c| match c.call {
            gputape::trace::Call::StepBoundary { step } => Some(step),
            _ => None,
        })
        .collect();
    assert!(
        steps.first().is_some_and(|s| *s >= bad_step - 6),
        "from a recent checkpoint: {steps:?}"
    );
    let r = replay(&t);
    assert!(r.passed(), "{}", r.summary());
    assert!(!r.faults.is_empty(), "{}", r.summary());
    drop(gpu);
    std::fs::remove_dir_all(&dir).ok();
}

/// A dump asked for while the engine's thread waits in a sync (as a SIGUSR1 handler or
/// `gputape dump` asks: no hang deadline set, a reason that does not say "hang") is a hang's
/// dump all the same: a call in it never returned. A replay killed while blocked inside the
/// recorded window reproduces it; one blocked before the window does not.
#[test]
fn a_requested_dump_with_a_call_in_flight_is_judged_as_a_hang() {
    use gputape::replayer::child::{HangVerdict, Killed};
    let dir = temp_dir("asked-hang");
    let cfg = FlightConfig::new(&dir);
    let gpu =
        RecordingBackend::flight(Stuck::default(), cfg, BackendDesc::new("stuck")).expect("flight");
    let k = gpu.kernel("spin", "wait_flag").expect("kernel");
    gpu.synchronize(0).expect("a sync before the spin");
    gpu.launch(k, [1, 1, 1], [1, 1, 1], 0, 0, &mut [])
        .expect("launch");
    *gpu.inner().stuck.lock() = true;
    let path = std::thread::scope(|s| {
        let engine = s.spawn(|| gpu.synchronize(0));
        // Until the engine's thread is inside the sync (its Begin written), then ask.
        let t0 = std::time::Instant::now();
        let path = loop {
            let p = gpu.flight_dump("SIGUSR1").expect("dump");
            let t = Trace::open(&p).expect("dump opens");
            if t.dump.as_ref().is_some_and(|d| !d.in_flight.is_empty())
                || t0.elapsed() > std::time::Duration::from_secs(20)
            {
                break p;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        *gpu.inner().stuck.lock() = false;
        gpu.inner().cv.notify_all();
        engine.join().expect("engine thread").expect("sync");
        path
    });
    let t = Trace::open(&path).expect("dump");
    assert_eq!(t.dump.as_ref().unwrap().reason, "SIGUSR1");
    assert!(t.is_hang_dump(), "a call in flight: a hang's dump");
    let launch = t.calls.iter().find(|c| c.call.launch().is_some()).unwrap();
    // Killed after the launch, waiting in the sync that never returned: reproduced.
    let v = HangVerdict::of(
        &t,
        Killed::Deadline(std::time::Duration::from_secs(1)),
        Some(launch.seq),
    );
    assert!(v.reproduced, "{}", v.text());
    assert!(v.text().contains("hang REPRODUCED"), "{}", v.text());
    // Stopped right after the spinning launch: waiting in the sync the replay makes after it.
    let blocked = v.replay_blocked_in.as_deref().unwrap_or_default();
    assert!(
        blocked.starts_with("the sync after") && blocked.contains("wait_flag"),
        "{blocked}"
    );
    assert!(v
        .launches_not_known_complete
        .iter()
        .any(|l| l.contains("wait_flag")));
    // Killed before the window (blocked in the first sync, which returned when recorded).
    let v = HangVerdict::of(
        &t,
        Killed::Deadline(std::time::Duration::from_secs(1)),
        None,
    );
    assert!(!v.reproduced && v.blocked_elsewhere, "{}", v.text());
    std::fs::remove_dir_all(&dir).ok();
}
