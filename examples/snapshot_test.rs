//! A test as you would put it in your engine's CI: record a step on the mock, snapshot its
//! calls, and hold it to rules (no host sync, no allocation, capturable as one CUDA graph).
//!
//! ```text
//! cargo run --example snapshot_test
//! ```
//!
//! In a real test, `insta::assert_snapshot!(rec.render())` stores the rendering; a change that
//! adds a call shows in `cargo insta review`. Here the rendering is printed.

use gputape::analysis::CaptureQuery;
use gputape::backend::{GpuBackend, KernelArg};
use gputape::mock::MockGpuBackend;
use gputape::testing::Harness;

fn step(g: &dyn GpuBackend, x: gputape::backend::DevicePtr, y: gputape::backend::DevicePtr) {
    let n = 64u32;
    let saxpy = g.kernel("blas", "saxpy").unwrap();
    g.launch_typed(
        saxpy,
        [1, 1, 1],
        [64, 1, 1],
        0,
        g.default_stream(),
        &[
            KernelArg::Buffer(x),
            KernelArg::Buffer(y),
            KernelArg::Bytes(&n.to_le_bytes()),
            KernelArg::Bytes(&2f32.to_le_bytes()),
        ],
    )
    .unwrap();
}

fn main() {
    let m = MockGpuBackend::default();
    gputape::workloads::load_kernels(&m).expect("load module blas");
    let h = Harness::new(m);
    // Set-up is not recorded.
    let x = h.gpu().alloc(256).unwrap();
    let y = h.gpu().alloc(256).unwrap();
    let ((), rec) = h.record(|g| step(g, x, y)).unwrap();
    print!("{}", rec.render());
    rec.assert_no_host_sync();
    rec.assert_no_device_alloc();
    rec.assert_capturable(CaptureQuery::default());
    rec.assert_at_most_launches(1);
    println!("launches: {:?}", rec.launches());
    // A rule broken says which call, where, and which rule.
    if let Err(v) = rec.check_at_most_launches(0) {
        println!("as a failure reads: {}", v[0]);
    }
}
