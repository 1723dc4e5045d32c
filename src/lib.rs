//! gputape: record and replay what an inference engine asks of its GPU.
//!
//! See ARCHITECTURE.md for the map. In short: [`backend`] is the trait every part speaks,
//! [`mock`] is the driver-faithful CPU backend that tests and CI run on, [`cuda`] is the only
//! place that talks to the driver.

pub mod analysis;
pub mod backend;
pub mod cuda;
pub mod mock;
pub mod model;
pub mod recorder;
pub mod replayer;
pub mod trace;
pub mod workloads;

/// The CUDA driver code behind a backend error, when there is one: mock errors say which
/// driver error they stand for, driver errors carry theirs.
pub fn driver_code(e: &anyhow::Error) -> Option<u32> {
    e.chain().find_map(|c| {
        c.downcast_ref::<mock::MockError>()
            .map(|m| m.cuda_code())
            .or_else(|| c.downcast_ref::<cuda::CudaError>().map(|e| e.cuda_code()))
    })
}
