//! Record your own engine: your backend, one line to wrap it, and the recording turned on from
//! the environment without rebuilding.
//!
//! ```text
//! GPUTAPE_RECORD=/tmp/mine.gtape cargo run --example record_your_engine
//! gputape show /tmp/mine.gtape
//! ```
//!
//! Without GPUTAPE_RECORD (or GPUTAPE_FLIGHT) the wrapper forwards every call and writes
//! nothing. This example records into a temporary file itself when neither is set, so it shows
//! something either way.

use gputape::backend::{GpuBackend, KernelArg};
use gputape::mock::MockGpuBackend;
use gputape::recorder::{BackendDesc, RecordingBackend};

/// Stands in for your engine's step: it knows the GPU only as `&dyn GpuBackend`.
fn step(g: &dyn GpuBackend, x: gputape::backend::DevicePtr, n: u32) -> anyhow::Result<f32> {
    let fill = g.kernel("blas", "fill")?;
    g.launch_typed(
        fill,
        [n.div_ceil(256), 1, 1],
        [256, 1, 1],
        0,
        g.default_stream(),
        &[
            KernelArg::Buffer(x),
            KernelArg::Bytes(&n.to_le_bytes()),
            KernelArg::Bytes(&1.5f32.to_le_bytes()),
        ],
    )?;
    let mut out = [0u8; 4];
    g.copy_d2h_on_stream(x, &mut out, g.default_stream())?;
    Ok(f32::from_le_bytes(out))
}

fn main() -> anyhow::Result<()> {
    // Your backend (here the mock, with the kernels it runs on the CPU).
    let backend = MockGpuBackend::default();
    gputape::workloads::load_kernels(&backend).expect("load module blas");
    if std::env::var_os("GPUTAPE_RECORD").is_none() && std::env::var_os("GPUTAPE_FLIGHT").is_none()
    {
        let p = std::env::temp_dir().join("gputape-example-engine.gtape");
        std::env::set_var("GPUTAPE_RECORD", &p);
    }
    // The one line.
    let gpu = RecordingBackend::from_env(backend, BackendDesc::new("mock"))?;
    let x = gpu.alloc(1024 * 4)?;
    for i in 0..3 {
        gpu.step_boundary(i);
        println!("step {i}: {}", step(&gpu, x, 1024)?);
    }
    gpu.free(x)?;
    let stats = gpu.stop()?;
    println!(
        "recorded {} calls into {} ({} bytes): try `gputape show` and `gputape replay` on it",
        stats.calls,
        std::env::var("GPUTAPE_RECORD").unwrap_or_default(),
        stats.bytes
    );
    Ok(())
}
