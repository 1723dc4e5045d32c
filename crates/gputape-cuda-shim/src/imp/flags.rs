//! The flags every recorded call reads, in one cache line of their own. A program between two
//! launches (PyTorch's Python and dispatcher, tens of microseconds) leaves little of the
//! recorder in the nearer caches, so each line a record touches costs a trip further out:
//! spread over the shim's statics these flags were four or five such lines a launch, here
//! they are one.

use std::sync::atomic::{AtomicBool, AtomicU8};

#[repr(align(64))]
pub(crate) struct Flags {
    /// What the process does with its records (`log::mode`, cached): `MODE_UNKNOWN` until
    /// first asked, then `MODE_NONE`, `MODE_FILE` or `MODE_FLIGHT`.
    pub mode: AtomicU8,
    /// Cleared for good after a failed write.
    pub healthy: AtomicBool,
    /// Set while the program has paused the recording of work (`gputape_shim_pause`).
    pub paused: AtomicBool,
    /// Set in a forked child (a `pthread_atfork` handler).
    pub forked: AtomicBool,
    /// The recorder measures its own time (`selftime.rs`).
    pub selftime: AtomicBool,
}

pub(crate) const MODE_UNKNOWN: u8 = 0;
pub(crate) const MODE_NONE: u8 = 1;
pub(crate) const MODE_FILE: u8 = 2;
pub(crate) const MODE_FLIGHT: u8 = 3;

pub(crate) static FLAGS: Flags = Flags {
    mode: AtomicU8::new(MODE_UNKNOWN),
    healthy: AtomicBool::new(true),
    paused: AtomicBool::new(false),
    forked: AtomicBool::new(false),
    selftime: AtomicBool::new(false),
};
