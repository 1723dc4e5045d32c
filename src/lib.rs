//! gputape: record and replay what an inference engine asks of its GPU.
//!
//! Every call an engine makes through [`backend::GpuBackend`] can be written to a trace, with
//! ids in place of pointers, and replayed on another machine and another backend: to
//! reproduce a fault, check results, or cut a failing step down to the calls that matter.
//! ARCHITECTURE.md has the map; this page says where to start.
//!
//! - **The trait.** Write the engine against `&dyn GpuBackend` ([`backend`]), or implement it
//!   for a backend of your own. [`mock::MockGpuBackend`] is the driver-faithful CPU backend
//!   tests run on, [`cuda::CudaBackend`] the only code that calls the driver. Kernels are data
//!   ([`backend::ModuleDesc`]): CUDA C, each parameter's access, an optional CPU body.
//! - **Recording.** Wrap the backend once with [`recorder::RecordingBackend::from_env`]:
//!   `GPUTAPE_RECORD=PATH` records every call into `PATH`, `GPUTAPE_FLIGHT=DIR` arms the
//!   flight recorder, and with neither every call passes through and nothing is written.
//!   Call `step_boundary(n)` at each step, so traces and the flight recorder can count steps.
//! - **The flight recorder** ([`recorder::FlightConfig`]) keeps the last steps in memory and
//!   writes them out as a trace on a failed call, a red-zone hit, a panic, SIGUSR1, a hang or
//!   `flight_dump`; the dump replays on its own.
//! - **Replaying.** [`replayer::Replayer`] runs a [`trace::Trace`] on any backend, compares
//!   readbacks with the recording and reproduces recorded faults. On the command line:
//!   `gputape replay`, `minimize` (the fewest calls that still fault), `trim` (a range of
//!   calls as a trace of its own), `analyze` (capture verdicts, races, leaks), `inspect` (a
//!   buffer after any call) and `diff` (two traces' calls and results).
//! - **An engine's CI.** [`testing::Harness`] records a closure in memory; the
//!   [`testing::Recording`] it returns renders for snapshots and asserts rules: no host sync,
//!   no allocation, capturable, a launch budget.
//! - **An engine's own tool.** [`cli::main_with`] is the whole `gputape` command line with the
//!   engine's modules loaded into every backend it opens, so replays run its kernels rather
//!   than skip them (`examples/engine_tape.rs`).
//!
//! ```no_run
//! use gputape::backend::GpuBackend;
//! use gputape::mock::MockGpuBackend;
//! use gputape::recorder::{BackendDesc, RecordingBackend};
//!
//! # fn main() -> anyhow::Result<()> {
//! // The one line an engine adds; then `GPUTAPE_RECORD=step.gtape ./engine` records.
//! let gpu = RecordingBackend::from_env(MockGpuBackend::default(), BackendDesc::new("mock"))?;
//! let g: &dyn GpuBackend = &gpu;
//! g.step_boundary(0);
//! let buf = g.alloc(1 << 20)?;
//! g.memset_async(buf, 0, 1 << 20, g.default_stream())?;
//! g.synchronize(g.default_stream())?;
//! # Ok(())
//! # }
//! ```
//! Then `gputape show step.gtape` lists the calls, and `gputape replay step.gtape` runs them
//! again and checks what they read back.

pub mod analysis;
pub mod backend;
pub mod cli;
pub mod cuda;
pub mod mock;
pub mod model;
pub mod recorder;
pub mod replayer;
pub mod repro;
pub mod shimtrace;
pub mod testing;
pub mod trace;
pub mod workloads;

pub use backend::driver_code;
