//! The shim on x86_64 Linux: the forwarders and their tables, loading the driver, the hooks,
//! the counts. See the crate's docs for how they fit.

mod captured;
mod chunks;
mod clock;
mod copies;
mod counts;
mod flags;
mod flight;
mod hooks;
mod launch;
mod lines;
mod log;
mod managed;
mod native;
mod nodes;
mod peers;
mod python;
mod record;
mod resolve;
mod selftime;
mod table;

/// Marks a shared object as gputape's shim: `resolve` refuses a "driver" that exports it (a
/// copy of the shim under another inode would otherwise forward to itself forever).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static gputape_cuda_shim: [u8; 24] = *b"gputape-cuda-shim 0.1.0\0";
