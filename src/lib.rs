//! gputape: record and replay what an inference engine asks of its GPU.
//!
//! See ARCHITECTURE.md for the map. In short: [`backend`] is the trait every part speaks,
//! [`mock`] is the driver-faithful CPU backend that tests and CI run on, [`cuda`] is the only
//! place that talks to the driver.

pub mod analysis;
pub mod backend;
pub mod cli;
pub mod cuda;
pub mod mock;
pub mod model;
pub mod recorder;
pub mod replayer;
pub mod testing;
pub mod trace;
pub mod workloads;

pub use backend::driver_code;
