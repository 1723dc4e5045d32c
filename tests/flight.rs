//! The flight recorder and recording segments, on the mock: a fault at a step nobody chose is
//! dumped and the dump reproduces it; a recorder re-armed records segment after segment.

use gputape::backend::{DevicePtr, GpuBackend, KernelArg, KernelHandle};
use gputape::mock::MockGpuBackend;
use gputape::model::{self, FaultPlan, Model, ModelConfig};
use gputape::recorder::{BackendDesc, FlightConfig, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::{Call, DevAddr, Trace, VecSink};
use std::path::{Path, PathBuf};

fn mock() -> MockGpuBackend {
    let m = MockGpuBackend::default();
    model::kernels::load(&m).expect("load the model kernels");
    m
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-flight-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn dumps(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gtape"))
        .collect();
    v.sort();
    v
}

/// Run the tiny model for up to 64 steps behind a flight recorder, with the overrun planted
/// at `fault_step` (the engine does not know it is coming), spilling blobs of `spill` bytes
/// or more to disk. Returns the dumps written.
fn run_with_fault(dir: &Path, fault_step: usize, spill: Option<usize>) -> Vec<PathBuf> {
    let mut cfg = FlightConfig::new(dir);
    cfg.checkpoint_every = 8;
    // Every due checkpoint taken on its step (no budget; one that finds the last still being
    // consumed waits for it), so what a dump holds does not depend on this host's speed.
    cfg.budget = None;
    cfg.wait_for_checkpoints = true;
    cfg.spill_blobs_over = spill;
    let rec = RecordingBackend::flight(mock(), cfg, BackendDesc::new("mock")).unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let mut m = Model::load(gpu, ModelConfig::tiny()).unwrap();
    m.fault = Some(FaultPlan {
        step: fault_step,
        overrun: 268_435_456,
    });
    let r = model::generate(gpu, &mut m, 64, |_, _, _| {});
    assert!(r.is_err(), "the planted fault stops generation");
    let h = rec.flight_held().unwrap();
    let bytes = h.call_bytes + h.state_bytes;
    assert!(bytes < 8 << 20, "the flight store is bounded: {h:?}");
    assert!(h.calls > 0);
    if spill.is_some() {
        assert!(h.spilled_bytes > 0, "{h:?}");
    }
    drop(rec);
    let left: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("spill"))
        .collect();
    assert!(
        left.is_empty(),
        "the spill goes with its recorder: {left:?}"
    );
    dumps(dir)
}

#[test]
fn a_fault_at_a_late_step_is_dumped_and_the_dump_reproduces_it() {
    // A step nobody chose: derived from the process, but always late in the run.
    let step = 30 + (std::process::id() as usize % 20);
    late_fault_dump_reproduces("late", step, None);
}

#[test]
fn a_dump_whose_checkpoint_was_spilled_to_disk_reproduces_the_fault() {
    // The tiny model's buffers are under the default threshold: spill everything over 64 B.
    late_fault_dump_reproduces("spill", 41, Some(64));
}

/// A fault planted at `step`, the one dump it leaves, and that dump replayed on the mock.
fn late_fault_dump_reproduces(name: &str, step: usize, spill: Option<usize>) {
    let dir = scratch(name);
    let d = run_with_fault(&dir, step, spill);
    assert_eq!(
        d.len(),
        1,
        "one dump (a dead context fails every later call): {d:?}"
    );
    let t = Trace::open(&d[0]).unwrap();
    assert!(t.stopped && t.cut.is_none());
    // It starts at a checkpoint before the faulting step and holds at most two intervals.
    let marks: Vec<u64> = t
        .calls
        .iter()
        .filter_map(|c| match c.call {
            Call::StepBoundary { step } => Some(step),
            _ => None,
        })
        .collect();
    assert!(marks.contains(&(step as u64)), "{marks:?}");
    assert!(marks.len() <= 17, "{marks:?}");
    assert!(!t.initial.is_empty(), "the checkpoint is the initial state");
    let r = replayed(&t, &mock());
    assert!(r.passed(), "{}", r.summary());
    let f = &r.faults[0];
    assert!(f.reproduced);
    let c = f.raised_by.as_ref().expect("pinned to its launch");
    assert_eq!(c.kernel, "silu_mul::silu_mul");
    // Every readback before the fault matched: the checkpoint is the device state it claims.
    assert_eq!(r.d2h_checked, r.d2h_matched);
    assert!(r.d2h_checked > 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_explicit_dump_holds_the_last_steps_and_replays_clean() {
    let dir = scratch("explicit");
    let mut cfg = FlightConfig::new(&dir);
    cfg.checkpoint_every = 4;
    // Every due checkpoint taken on its step (no budget; one that finds the last still being
    // consumed waits for it), so what a dump holds does not depend on this host's speed.
    cfg.budget = None;
    cfg.wait_for_checkpoints = true;
    let rec = RecordingBackend::flight(mock(), cfg, BackendDesc::new("mock")).unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let mut m = Model::load(gpu, ModelConfig::tiny()).unwrap();
    model::generate(gpu, &mut m, 20, |_, _, _| {}).unwrap();
    let p = rec.flight_dump("asked").unwrap();
    let t = Trace::open(&p).unwrap();
    let steps = t
        .calls
        .iter()
        .filter(|c| matches!(c.call, Call::StepBoundary { .. }))
        .count();
    assert!((4..=8).contains(&steps), "{steps} steps kept");
    let r = replayed(&t, &mock());
    assert!(
        r.passed() && r.d2h_checked == r.d2h_matched && r.d2h_checked > 0,
        "{}",
        r.summary()
    );
    m.teardown(gpu).unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

/// An engine's layers repeat one launch on their own buffers, so the fast path keeps each
/// later layer's launch as a delta of layer 0's. What those deltas write must be in the next
/// checkpoint: here each layer adds into an accumulator of its own, read back every step, so
/// a layer's accumulator kept from an older checkpoint would be read back wrong in replay.
#[test]
fn what_a_later_layers_launch_writes_is_in_the_next_checkpoint() {
    let dir = scratch("layers");
    let mut cfg = FlightConfig::new(&dir);
    cfg.checkpoint_every = 4;
    // Every due checkpoint taken on its step (no budget; one that finds the last still being
    // consumed waits for it), so what a dump holds does not depend on this host's speed.
    cfg.budget = None;
    cfg.wait_for_checkpoints = true;
    let rec = RecordingBackend::flight(mock(), cfg, BackendDesc::new("mock")).unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let n = 256usize;
    let add = gpu.kernel("add", "add").unwrap();
    let x = gpu.alloc(n * 4).unwrap();
    let ones: Vec<u8> = (0..n)
        .flat_map(|i| (1.0f32 + i as f32).to_le_bytes())
        .collect();
    gpu.copy_h2d(&ones, x).unwrap();
    let acc: Vec<DevicePtr> = (0..3)
        .map(|_| {
            let a = gpu.alloc(n * 4).unwrap();
            gpu.memset(a, 0, n * 4).unwrap();
            a
        })
        .collect();
    let tmp = gpu.alloc(n * 4).unwrap();
    let s = gpu.default_stream();
    let count = (n as u32).to_le_bytes();
    let launch = |dst: DevicePtr| {
        let args = [
            KernelArg::Buffer(dst),
            KernelArg::Buffer(x),
            KernelArg::Bytes(&count),
        ];
        gpu.launch_typed(add, [1, 1, 1], [n as u32, 1, 1], 0, s, &args)
            .unwrap();
    };
    let mut out = vec![0u8; n * 4];
    // Until four checkpoints are taken after the fast path has learned the layers (a device
    // checkpoint is consumed by the recorder's thread, and one still being consumed puts the
    // next off: on a loaded host, many steps).
    for step in 0..400u64 {
        if step >= 12 && rec.flight_held().unwrap().checkpoints >= 4 {
            break;
        }
        for a in &acc {
            // The same call before each layer (a norm, say): after it came layer 0's
            // launch, so the later layers' are kept as deltas of that.
            launch(tmp);
            launch(*a);
        }
        gpu.copy_d2h(acc[2], &mut out).unwrap();
        let first = f32::from_le_bytes(out[..4].try_into().unwrap());
        assert_eq!(
            first,
            (step + 1) as f32,
            "the engine's own sum at step {step}"
        );
        gpu.step_boundary(step);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let h = rec.flight_held().unwrap();
    assert!(h.checkpoints >= 4, "{h:?}");
    let t = Trace::open(&rec.flight_dump("asked").unwrap()).unwrap();
    assert!(!t.initial.is_empty(), "the dump starts at a checkpoint");
    let r = replayed(&t, &mock());
    assert!(
        r.passed() && r.d2h_checked == r.d2h_matched && r.d2h_checked >= 3,
        "{}",
        r.summary()
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_rearmed_recorder_records_three_complete_segments() {
    type Shared = std::sync::Arc<parking_lot::Mutex<Vec<u8>>>;
    let bufs: std::sync::Arc<parking_lot::Mutex<Vec<Shared>>> = Default::default();
    let made = bufs.clone();
    let rec = RecordingBackend::with_sinks(
        mock(),
        Box::new(move |_| {
            let s = VecSink::default();
            made.lock().push(s.0.clone());
            Ok(Box::new(s))
        }),
        BackendDesc::new("mock"),
    )
    .unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let mut m = Model::load(gpu, ModelConfig::tiny()).unwrap();
    let mut token = model::PROMPT[0];
    for pos in 0..9 {
        if pos % 3 == 1 {
            rec.start().unwrap();
        }
        token = m.step(gpu, token, pos).unwrap();
        if pos % 3 == 1 {
            rec.stop().unwrap();
        }
    }
    let segs = bufs.lock().clone();
    assert_eq!(segs.len(), 3);
    for (i, s) in segs.iter().enumerate() {
        let t = Trace::from_bytes(Path::new("segment"), &s.lock()).unwrap();
        assert!(t.stopped, "segment {i}");
        assert_eq!(t.calls[0].seq, 0, "segment {i} counts its calls from 0");
        assert!(
            !t.initial.is_empty(),
            "segment {i} has its own initial state"
        );
        let r = replayed(&t, &mock());
        assert!(
            r.passed() && r.d2h_checked == 1,
            "segment {i}: {}",
            r.summary()
        );
    }
    m.teardown(gpu).unwrap();
}

/// Run as a child of `a_panic_and_sigusr1_each_dump`: a flight recorder over some steps, then
/// the trigger named by GPUTAPE_FLIGHT_CHILD.
#[test]
fn flight_child() {
    let Ok(how) = std::env::var("GPUTAPE_FLIGHT_CHILD") else {
        return;
    };
    let dir = std::env::var("GPUTAPE_FLIGHT_CHILD_DIR").unwrap();
    let rec = RecordingBackend::flight(mock(), FlightConfig::new(&dir), BackendDesc::new("mock"))
        .unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let mut m = Model::load(gpu, ModelConfig::tiny()).unwrap();
    model::generate(gpu, &mut m, 12, |_, _, _| {}).unwrap();
    match how.as_str() {
        "panic" => panic!("the engine gave up"),
        _ => {
            // SAFETY: raising a signal at this process; the flight recorder's handler only
            // writes a byte into its watcher's pipe.
            unsafe { libc::raise(libc::SIGUSR1) };
            // The recorder's own thread dumps, with no further call from the engine; an engine
            // that exits at once would not wait, so this one does, a while at most.
            let t0 = std::time::Instant::now();
            while dumps(Path::new(&dir)).is_empty() && t0.elapsed().as_secs() < 10 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// A panic anywhere in the engine, and SIGUSR1, each leave a dump that replays clean.
#[test]
fn a_panic_and_sigusr1_each_dump() {
    for how in ["panic", "sigusr1"] {
        let dir = scratch(how);
        let o = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "flight_child", "--nocapture"])
            .env("GPUTAPE_FLIGHT_CHILD", how)
            .env("GPUTAPE_FLIGHT_CHILD_DIR", &dir)
            .output()
            .unwrap();
        let d = dumps(&dir);
        assert_eq!(d.len(), 1, "{how}: {}", String::from_utf8_lossy(&o.stderr));
        let t = Trace::open(&d[0]).unwrap();
        let r = replayed(&t, &mock());
        assert!(r.passed() && r.d2h_checked > 0, "{how}: {}", r.summary());
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// A sink that fails after `ok` bytes, as a full disk does.
struct Failing {
    ok: usize,
}

impl gputape::trace::Sink for Failing {
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        if b.len() > self.ok {
            return Err(std::io::Error::other("no space left"));
        }
        self.ok -= b.len();
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A segment whose writes failed is closed by `stop` with the error, and the next segment
/// records normally.
#[test]
fn a_failed_segment_stops_cleanly_and_the_next_one_records() {
    let good = VecSink::default();
    let buf = good.0.clone();
    let mut good = Some(good);
    let rec = RecordingBackend::with_sinks(
        mock(),
        Box::new(move |n| -> Result<Box<dyn gputape::trace::Sink>, _> {
            match n {
                0 => Ok(Box::new(Failing { ok: 4096 })),
                _ => Ok(Box::new(good.take().expect("one more segment"))),
            }
        }),
        BackendDesc::new("mock"),
    )
    .unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let mut m = Model::load(gpu, ModelConfig::tiny()).unwrap();
    rec.start().unwrap();
    m.step(gpu, model::PROMPT[0], 0).unwrap();
    let e = rec.stop().unwrap_err();
    assert!(e.to_string().contains("recording stopped"), "{e}");
    rec.start().unwrap();
    m.step(gpu, model::PROMPT[1], 1).unwrap();
    rec.stop().unwrap();
    let t = Trace::from_bytes(Path::new("second"), &buf.lock()).unwrap();
    let r = replayed(&t, &mock());
    assert!(r.passed() && r.d2h_checked == 1, "{}", r.summary());
    m.teardown(gpu).unwrap();
}

/// Launches of one kernel on a buffer that is then freed and replaced by a new one (at the
/// same address, on `Reusing`), and with a scalar that changes: the fast path must notice
/// that identical raw inputs no longer mean the same call.
fn reuse_calls(gpu: &dyn GpuBackend) {
    let k = gpu.kernel("t", "k").unwrap();
    let launch = |p, v: u32| {
        gpu.launch_typed(
            k,
            [1, 1, 1],
            [32, 1, 1],
            0,
            0,
            &[KernelArg::Buffer(p), KernelArg::Bytes(&v.to_le_bytes())],
        )
        .unwrap()
    };
    let a = gpu.alloc(256).unwrap();
    launch(a, 1);
    launch(a, 1);
    gpu.free(a).unwrap();
    // A launch on the freed address, learned as such before the address is reborn.
    launch(a, 1);
    launch(a, 1);
    let b = gpu.alloc(256).unwrap();
    for v in [1, 1, 2, 2, 1] {
        launch(b, v);
    }
    // The mock faults on the freed address: the wait says so (and triggers the dump).
    assert!(gpu.synchronize(0).is_err());
}

/// The model's steps, with a fault planted at step 12.
fn model_calls(gpu: &dyn GpuBackend) {
    let mut m = Model::load(gpu, ModelConfig::tiny()).unwrap();
    m.fault = Some(FaultPlan {
        step: 12,
        overrun: 268_435_456,
    });
    assert!(model::generate(gpu, &mut m, 20, |_, _, _| {}).is_err());
}

/// Record `calls` on a backend from `make` twice: in full, and behind a flight recorder whose
/// only checkpoint is its start, dumped by its trigger or, if none fired, by asking. Returns
/// both traces.
fn full_and_dump<B: GpuBackend>(
    name: &str,
    make: impl Fn() -> B,
    calls: impl Fn(&dyn GpuBackend),
) -> (Trace, Trace) {
    let dir = scratch(name);
    let full_path = dir.join("full.gtape");
    let full = RecordingBackend::to_file(make(), &full_path, BackendDesc::new("mock")).unwrap();
    full.start().unwrap();
    calls(&full);
    full.stop().unwrap();
    let mut cfg = FlightConfig::new(dir.join("flight"));
    cfg.checkpoint_every = 1_000_000;
    // No checkpoint is taken, and the device checkpoints' own staging memory would move the
    // engine's buffers on the mock, which the fault's message names by address.
    cfg.device_checkpoints = false;
    let fr = RecordingBackend::flight(make(), cfg, BackendDesc::new("mock")).unwrap();
    calls(&fr);
    if dumps(&dir.join("flight")).is_empty() {
        fr.flight_dump("asked").unwrap();
    }
    let d = dumps(&dir.join("flight"));
    assert_eq!(d.len(), 1, "{d:?}");
    let pair = (
        Trace::open(&full_path).unwrap(),
        Trace::open(&d[0]).unwrap(),
    );
    std::fs::remove_dir_all(&dir).ok();
    pair
}

/// The dump's calls are the full recording's first calls but its `op_cache` lookups, which a
/// flight recorder does not keep (they change nothing a replay reads): same thread, site,
/// call and result, in the same order, numbered from the dump's start with no gap (sites by
/// where they are, as their ids follow the calls kept; times are not compared: a flight dump
/// keeps no durations of calls that returned `Ok(())`).
fn assert_same_calls(full: &Trace, dump: &Trace) {
    let kept: Vec<&gputape::trace::CallRecord> = full
        .calls
        .iter()
        .filter(|c| !matches!(c.call, Call::OpCache))
        .collect();
    assert!(dump.calls.len() <= kept.len());
    for (i, (a, b)) in kept.iter().zip(&dump.calls).enumerate() {
        let what = |t: &Trace, c: &gputape::trace::CallRecord| {
            (c.thread, t.site(c.site), c.call.clone(), c.ret.clone())
        };
        assert_eq!(what(full, a), what(dump, b), "call {i}");
        assert_eq!(b.seq, i as u64, "call {i}");
    }
    assert_eq!(full.initial.len(), dump.initial.len());
}

#[test]
fn a_dump_of_the_model_holds_the_calls_a_full_recording_holds() {
    let (full, dump) = full_and_dump("same-model", mock, model_calls);
    assert!(dump.calls.len() > 100, "{} calls", dump.calls.len());
    assert_same_calls(&full, &dump);
    // The fault, raised at a sync after the launch that caused it, is in the dump as an
    // error.
    assert!(dump.calls.iter().any(|c| matches!(c.ret, Some(Err(_)))));
}

#[test]
fn a_buffer_reborn_at_a_freed_address_is_named_as_itself_in_a_dump() {
    let (full, dump) = full_and_dump(
        "same-reuse",
        || Reusing(mock_with_t_k(), Default::default()),
        reuse_calls,
    );
    assert_eq!(dump.calls.len(), full.calls.len());
    assert_same_calls(&full, &dump);
    let bufs: Vec<_> = dump
        .calls
        .iter()
        .filter_map(|c| match &c.call {
            Call::LaunchTyped { args, .. } => args[0].device_addr().cloned(),
            _ => None,
        })
        .collect();
    // Launches on a, on a freed, on b at a's address: three names for one address.
    assert_eq!(bufs.len(), 9);
    assert!(matches!(bufs[1], DevAddr::Buf { .. }), "{bufs:?}");
    assert!(matches!(bufs[3], DevAddr::Freed { .. }), "{bufs:?}");
    assert!(matches!(bufs[4], DevAddr::Buf { .. }), "{bufs:?}");
    assert_ne!(
        bufs[1], bufs[4],
        "a new buffer at the old address: {bufs:?}"
    );
}

/// The mock, but a new allocation takes the address the last free gave back, as a caching
/// allocator does (the mock's own never reuses one).
struct Reusing(MockGpuBackend, parking_lot::Mutex<Option<u64>>);

impl GpuBackend for Reusing {
    fn alloc(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        match self.1.lock().take() {
            Some(p) => self.0.alloc_at(p, bytes),
            None => self.0.alloc(bytes),
        }
    }
    fn alloc_managed(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        self.0.alloc_managed(bytes)
    }
    fn free(&self, ptr: DevicePtr) -> anyhow::Result<()> {
        *self.1.lock() = Some(ptr.0);
        self.0.free(ptr)
    }
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> anyhow::Result<()> {
        self.0.copy_h2d(src, dst)
    }
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> anyhow::Result<()> {
        self.0.copy_d2h(src, dst)
    }
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> anyhow::Result<()> {
        self.0.copy_d2d(src, dst, bytes)
    }
    fn launch(
        &self,
        f: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        smem: u32,
        stream: u64,
        params: &mut [*mut std::ffi::c_void],
    ) -> anyhow::Result<()> {
        self.0.launch(f, grid, block, smem, stream, params)
    }
    fn launch_typed(
        &self,
        f: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        smem: u32,
        stream: u64,
        args: &[KernelArg<'_>],
    ) -> anyhow::Result<()> {
        self.0.launch_typed(f, grid, block, smem, stream, args)
    }
    fn synchronize(&self, stream: u64) -> anyhow::Result<()> {
        self.0.synchronize(stream)
    }
    fn default_stream(&self) -> u64 {
        self.0.default_stream()
    }
    fn kernel(&self, module: &str, func_name: &str) -> anyhow::Result<KernelHandle> {
        self.0.kernel(module, func_name)
    }
    fn kernel_registry(&self) -> Option<std::sync::Arc<gputape::backend::KernelRegistry>> {
        self.0.kernel_registry()
    }
    fn op_cache(&self) -> &gputape::backend::OpCache {
        self.0.op_cache()
    }
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> anyhow::Result<()> {
        self.0.memset(ptr, value, bytes)
    }
    fn memset_async(&self, ptr: DevicePtr, v: u8, bytes: usize, s: u64) -> anyhow::Result<()> {
        self.0.memset_async(ptr, v, bytes, s)
    }
    fn total_memory(&self) -> anyhow::Result<usize> {
        self.0.total_memory()
    }
    fn free_memory(&self) -> anyhow::Result<usize> {
        self.0.free_memory()
    }
    fn sm_count(&self) -> anyhow::Result<u32> {
        self.0.sm_count()
    }
}

/// Trace `t` replayed on `on`.
fn replayed(t: &Trace, on: &MockGpuBackend) -> gputape::replayer::ReplayReport {
    Replayer::new(t)
        .run(on, &ReplayOptions::default(), None, |_| {})
        .unwrap()
}

fn mock_with_t_k() -> MockGpuBackend {
    use gputape::backend::{ParamAccess, ParamInfo};
    let m = mock();
    m.register_kernel(
        "t",
        "k",
        ParamInfo::packed(&[(8, ParamAccess::Write), (4, ParamAccess::Value)]),
        None,
    );
    m
}

/// An upload larger than the fast path's blob limit, of new bytes to the same place on the
/// same stream each step, is recorded with each step's bytes: the dump replays its readback.
#[test]
fn a_large_async_upload_of_new_bytes_each_step_keeps_each_steps_bytes() {
    let dir = std::env::temp_dir().join(format!("gputape-dcu-{}", std::process::id()));
    let mut cfg = FlightConfig::new(&dir);
    cfg.checkpoint_every = 1_000;
    let rec =
        RecordingBackend::flight(MockGpuBackend::default(), cfg, BackendDesc::new("mock")).unwrap();
    let s = rec.create_stream().unwrap();
    let buf = rec.alloc(128 << 10).unwrap();
    let mut back = vec![0u8; 128 << 10];
    for step in 0..4u8 {
        rec.copy_h2d_async(&vec![step + 1; 128 << 10], buf, s)
            .unwrap();
        rec.synchronize(s).unwrap();
        rec.copy_d2h(buf, &mut back).unwrap();
        assert_eq!(back[0], step + 1);
        rec.step_boundary(step as u64);
    }
    let path = rec.flight_dump("asked").unwrap();
    let t = Trace::open(&path).unwrap();
    let r = replayed(&t, &MockGpuBackend::default());
    assert!(r.passed(), "{}", r.summary());
    drop(rec);
    std::fs::remove_dir_all(&dir).ok();
}

/// The flight recorder holds what it keeps under quick provisional ids; a dump names every
/// blob by its hash, as any trace does: uploads (a retained one, found unchanged at its
/// sync), readbacks, a chunked upload, and a buffer the device checkpoint makes up of an
/// upload's bytes. Every id checks against its bytes, and the dump replays.
#[test]
fn a_dump_names_every_blob_by_its_hash() {
    let dir = scratch("names");
    let mut cfg = FlightConfig::new(&dir);
    cfg.checkpoint_every = 2;
    cfg.budget = None;
    cfg.wait_for_checkpoints = true;
    let rec = RecordingBackend::flight(mock_with_t_k(), cfg, BackendDesc::new("mock")).unwrap();
    let s = rec.create_stream().unwrap();
    let big = gputape::trace::CHUNK_BYTES + (1 << 20);
    let large = rec.alloc(big).unwrap();
    let small = rec.alloc(4 << 10).unwrap();
    let mut back = vec![0u8; 4 << 10];
    for step in 0..6u8 {
        let bytes: Vec<u8> = (0..big).map(|i| (i as u8) ^ step).collect();
        rec.copy_h2d(&bytes, large).unwrap();
        let tokens = [step; 64];
        rec.copy_h2d_async_retained(&tokens, small, s).unwrap();
        rec.synchronize(s).unwrap();
        rec.copy_d2h(small, &mut back).unwrap();
        assert_eq!(back[..64], tokens);
        rec.step_boundary(step as u64);
    }
    let path = rec.flight_dump("asked").unwrap();
    let t = Trace::open(&path).unwrap();
    assert!(t.findings.is_empty(), "{:?}", t.findings);
    let ids = t.blobs.ids();
    assert!(ids.len() >= 4, "{ids:?}");
    // `try_blob` checks a chunked blob's id against its parts' and each part's against its
    // bytes.
    for id in ids {
        let bytes = t.try_blob(id).unwrap().unwrap();
        if bytes.len() <= gputape::trace::CHUNK_BYTES {
            assert_eq!(
                gputape::trace::BlobId::of(bytes),
                id,
                "{} bytes",
                bytes.len()
            );
        }
    }
    let uploads = t
        .calls
        .iter()
        .filter_map(|c| match &c.call {
            Call::CopyH2D { data, len, .. } => Some((*data, *len)),
            _ => None,
        })
        .collect::<Vec<_>>();
    assert!(!uploads.is_empty());
    for (data, len) in uploads {
        let bytes = t
            .try_blob(data)
            .unwrap()
            .expect("the upload's bytes are in the dump");
        assert_eq!(bytes.len() as u64, len);
    }
    let r = replayed(&t, &mock_with_t_k());
    assert!(r.passed(), "{}", r.summary());
    assert!(r.d2h_checked >= 2, "{}", r.summary());
    assert_eq!(r.d2h_checked, r.d2h_matched, "{}", r.summary());
    drop(rec);
    std::fs::remove_dir_all(&dir).ok();
}

/// A blocking upload of new bytes to the same place every step, and a blocking readback of
/// them (both on the flight recorder's fast path once learned): the dump holds each step's
/// bytes, and replays with every readback matching.
#[test]
fn blocking_copies_on_the_fast_path_keep_each_steps_bytes() {
    let dir = scratch("blocking");
    let mut cfg = FlightConfig::new(&dir);
    cfg.checkpoint_every = 1_000;
    let rec =
        RecordingBackend::flight(MockGpuBackend::default(), cfg, BackendDesc::new("mock")).unwrap();
    let s = rec.create_stream().unwrap();
    let buf = rec.alloc(256).unwrap();
    let mut back = vec![0u8; 256];
    for step in 0..8u8 {
        rec.copy_h2d(&[step + 1; 256], buf).unwrap();
        rec.copy_d2h_on_stream(buf, &mut back, s).unwrap();
        assert_eq!(back, [step + 1; 256]);
        rec.copy_d2h(buf, &mut back).unwrap();
        rec.step_boundary(step as u64);
    }
    let path = rec.flight_dump("asked").unwrap();
    let t = Trace::open(&path).unwrap();
    let uploaded: Vec<u8> = t
        .calls
        .iter()
        .filter_map(|c| match &c.call {
            Call::CopyH2D { data, .. } => t.blob(*data).map(|b| b[0]),
            _ => None,
        })
        .collect();
    assert_eq!(uploaded, (1..=8).collect::<Vec<u8>>());
    let r = replayed(&t, &MockGpuBackend::default());
    assert_eq!(r.d2h_checked, 16, "{}", r.summary());
    assert!(r.passed(), "{}", r.summary());
    drop(rec);
    std::fs::remove_dir_all(&dir).ok();
}
