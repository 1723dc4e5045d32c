//! The flight recorder and recording segments, on the mock: a fault at a step nobody chose is
//! dumped and the dump reproduces it; a recorder re-armed records segment after segment.

use gputape::backend::GpuBackend;
use gputape::mock::MockGpuBackend;
use gputape::model::{self, FaultPlan, Model, ModelConfig};
use gputape::recorder::{BackendDesc, FlightConfig, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::{Call, Trace, VecSink};
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
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gtape"))
        .collect();
    v.sort();
    v
}

/// Run the tiny model for up to 64 steps behind a flight recorder, with the overrun planted
/// at `fault_step` (the engine does not know it is coming). Returns the dumps written.
fn run_with_fault(dir: &Path, fault_step: usize) -> Vec<PathBuf> {
    let mut cfg = FlightConfig::new(dir);
    cfg.checkpoint_every = 8;
    let rec = RecordingBackend::flight(mock(), cfg, BackendDesc::new("mock")).unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let mut m = Model::load(gpu, ModelConfig::tiny()).unwrap();
    m.fault = Some(FaultPlan {
        step: fault_step,
        overrun: 268_435_456,
    });
    let r = model::generate(gpu, &mut m, 64, |_, _, _| {});
    assert!(r.is_err(), "the planted fault stops generation");
    let (bytes, calls) = rec.flight_held().unwrap();
    assert!(
        bytes < 8 << 20,
        "the flight store is bounded: {bytes} bytes"
    );
    assert!(calls > 0);
    dumps(dir)
}

#[test]
fn a_fault_at_a_late_step_is_dumped_and_the_dump_reproduces_it() {
    // A step nobody chose: derived from the process, but always late in the run.
    let step = 30 + (std::process::id() as usize % 20);
    let dir = scratch("late");
    let d = run_with_fault(&dir, step);
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
    let r = Replayer::new(&t)
        .run(&mock(), &ReplayOptions::default(), None, |_| {})
        .unwrap();
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
    let r = Replayer::new(&t)
        .run(&mock(), &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(
        r.passed() && r.d2h_checked == r.d2h_matched && r.d2h_checked > 0,
        "{}",
        r.summary()
    );
    m.teardown(gpu).unwrap();
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
        let r = Replayer::new(&t)
            .run(&mock(), &ReplayOptions::default(), None, |_| {})
            .unwrap();
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
    let rec =
        RecordingBackend::flight(mock(), FlightConfig::new(dir), BackendDesc::new("mock")).unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let mut m = Model::load(gpu, ModelConfig::tiny()).unwrap();
    model::generate(gpu, &mut m, 12, |_, _, _| {}).unwrap();
    match how.as_str() {
        "panic" => panic!("the engine gave up"),
        _ => {
            // SAFETY: raising a signal at this process; the flight recorder's handler only
            // sets a flag.
            unsafe { libc::raise(libc::SIGUSR1) };
            // The next recorded call notices it.
            let _ = gpu.alloc(16).unwrap();
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
        let r = Replayer::new(&t)
            .run(&mock(), &ReplayOptions::default(), None, |_| {})
            .unwrap();
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
    let r = Replayer::new(&t)
        .run(&mock(), &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(r.passed() && r.d2h_checked == 1, "{}", r.summary());
    m.teardown(gpu).unwrap();
}
