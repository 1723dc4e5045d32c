//! Each record's time, read at every recorded call: by the CPU's time-stamp counter once its
//! rate is known, rather than `clock_gettime`. Under a hypervisor's clock the system call's
//! fast path still costs tens of nanoseconds, which a launch-bound program (a thousand launches
//! a decode step) pays on each launch; the counter is one instruction.
//!
//! The counter's rate is measured against the monotonic clock over the first
//! `CALIBRATE` of the log (records until then are timed by the clock), and only where the
//! kernel says the counter ticks at a constant rate through every power state
//! (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`); elsewhere every record is timed by
//! the clock. Timestamps only order and space records for people and `report`: a rate off by
//! a millionth drifts a few milliseconds an hour, which nothing reads as meaningful.

use std::io::Read as _;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the counter is compared with the clock before it is trusted: long enough that a
/// nanosecond of clock resolution is a ten-millionth of the span.
const CALIBRATE: Duration = Duration::from_millis(20);

/// The counter now (0 off x86_64, where nothing uses it).
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc reads a counter; it has no preconditions.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// Whether the counter runs at one rate whatever the core's frequency and sleep state, as the
/// kernel found it (read once per process).
fn counter_is_steady() -> bool {
    static STEADY: OnceLock<bool> = OnceLock::new();
    *STEADY.get_or_init(|| {
        if !cfg!(target_arch = "x86_64") {
            return false;
        }
        // The first processor's entry holds the flags; its first 16 KiB is plenty.
        let mut head = Vec::with_capacity(16 << 10);
        let read = std::fs::File::open("/proc/cpuinfo")
            .and_then(|f| f.take(16 << 10).read_to_end(&mut head));
        if read.is_err() {
            return false;
        }
        let text = String::from_utf8_lossy(&head);
        text.lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| {
                let has = |w: &str| l.split_whitespace().any(|x| x == w);
                has("constant_tsc") && has("nonstop_tsc")
            })
    })
}

/// A log's clock: nanoseconds since it was opened. `repr(C)`: what a calibrated clock reads
/// on every record first.
#[repr(C)]
pub struct Clock {
    start_ticks: u64,
    /// Nanoseconds per tick, once measured.
    ns_per_tick: Option<f64>,
    start: Instant,
    /// Whether to measure it at all.
    steady: bool,
}

impl Clock {
    /// A clock reading 0 now.
    pub fn new() -> Clock {
        Clock {
            start: Instant::now(),
            start_ticks: ticks(),
            ns_per_tick: None,
            steady: counter_is_steady(),
        }
    }

    /// Nanoseconds since the clock was made.
    pub fn now_ns(&mut self) -> u64 {
        if let Some(k) = self.ns_per_tick {
            return (ticks().wrapping_sub(self.start_ticks) as f64 * k) as u64;
        }
        let since = self.start.elapsed();
        if self.steady && since >= CALIBRATE {
            let t = ticks().wrapping_sub(self.start_ticks);
            if t > 0 {
                self.ns_per_tick = Some(since.as_nanos() as f64 / t as f64);
            }
        }
        since.as_nanos() as u64
    }

    /// Nanoseconds since the clock was made, by the monotonic clock (for the rare record written
    /// outside the hot path).
    pub fn elapsed_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once calibrated, the counter's time keeps up with the monotonic clock's and never runs
    /// backwards.
    #[test]
    fn the_counter_keeps_time_with_the_clock() {
        let mut c = Clock::new();
        let mut last = 0;
        let t0 = Instant::now();
        while t0.elapsed() < CALIBRATE * 3 {
            let now = c.now_ns();
            assert!(now >= last, "{now} after {last}");
            last = now;
        }
        let by_clock = c.elapsed_ns();
        let by_counter = c.now_ns();
        let off = by_counter.abs_diff(by_clock);
        // A millisecond of slack: the two reads are not simultaneous on a busy machine.
        assert!(
            off < 1_000_000,
            "counter {by_counter} ns, clock {by_clock} ns"
        );
        if counter_is_steady() {
            assert!(c.ns_per_tick.is_some(), "the counter was not calibrated");
        }
    }
}
