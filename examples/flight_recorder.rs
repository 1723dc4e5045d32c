//! The flight recorder: always on, it keeps the last steps in memory; when a call fails it
//! writes them out as a trace, and that trace reproduces the fault in one replay.
//!
//! ```text
//! cargo run --example flight_recorder
//! ```

use gputape::mock::MockGpuBackend;
use gputape::model::{self, FaultPlan, Model, ModelConfig};
use gputape::recorder::{BackendDesc, FlightConfig, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::Trace;

fn mock() -> MockGpuBackend {
    let m = MockGpuBackend::default();
    model::kernels::load(&m).expect("load the model kernels");
    m
}

fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("gputape-flight-example-{}", std::process::id()));
    let cfg = FlightConfig::new(&dir);
    let gpu = RecordingBackend::flight(mock(), cfg, BackendDesc::new("mock"))?;
    let mut m = Model::load(&gpu, ModelConfig::tiny())?;
    // A fault nobody planned for: at step 37 of 64, silu_mul writes a gigabyte past its output.
    m.fault = Some(FaultPlan {
        step: 37,
        overrun: 268_435_456,
    });
    let run = model::generate(&gpu, &mut m, 64, |pos, tok, _| {
        println!("step {pos}: token {tok}")
    });
    println!(
        "the run ended: {:?}",
        run.map(|t| t.len()).map_err(|e| e.to_string())
    );
    let held = gpu.flight_held().unwrap_or_default();
    println!(
        "the flight recorder held {} calls in {} bytes ({} bytes of device state)",
        held.calls, held.call_bytes, held.state_bytes
    );
    let dump = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "gtape"))
        .ok_or_else(|| anyhow::anyhow!("no dump in {}", dir.display()))?;
    println!("dump: {}", dump.display());
    // Replay the dump on a fresh mock: the fault comes back, pinned to its launch.
    let t = Trace::open(&dump)?;
    let r = Replayer::new(&t).run(&mock(), &ReplayOptions::default(), None, |_| {})?;
    print!("{}", r.summary());
    anyhow::ensure!(r.passed(), "the dump did not reproduce the fault");
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
