//! What recording costs the recorded threads themselves, measured where it is spent: with
//! `GPUTAPE_SHIM_SELFTIME=1`, the time inside the recorder's own code (a launch's parameters
//! gathered, each record encoded and kept) is summed by the CPU's time-stamp counter and said
//! at exit, beside the number of records. Set against a program's step times with the
//! recording on and paused (`scripts/gpu-driver-cost.sh`), it splits what the recorder spends
//! from what it costs the program besides (caches, memory traffic). Off, a guard costs one
//! relaxed load.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Set to 1 to measure.
pub const ENV: &str = "GPUTAPE_SHIM_SELFTIME";

static ON: AtomicBool = AtomicBool::new(false);
static TICKS: AtomicU64 = AtomicU64::new(0);
static SPANS: AtomicU64 = AtomicU64::new(0);
/// (counter, instant) when measuring began, to turn ticks into time at the end.
static START: OnceLock<(u64, Instant)> = OnceLock::new();

thread_local! {
    /// Guards open on this thread: only the outermost counts.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Reads the variable once (the log's first open).
pub fn init() {
    if std::env::var_os(ENV).is_some_and(|v| v == "1") {
        START.get_or_init(|| (ticks(), Instant::now()));
        ON.store(true, Ordering::Relaxed);
    }
}

fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc reads a counter; it has no preconditions.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// While alive, the thread is in the recorder's own code.
pub struct Guard(Option<u64>);

impl Guard {
    pub fn start() -> Guard {
        if !ON.load(Ordering::Relaxed) {
            return Guard(None);
        }
        let outer = DEPTH.with(|d| {
            d.set(d.get() + 1);
            d.get() == 1
        });
        Guard(outer.then(ticks))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !ON.load(Ordering::Relaxed) {
            return;
        }
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        if let Some(t0) = self.0 {
            TICKS.fetch_add(ticks().wrapping_sub(t0), Ordering::Relaxed);
            SPANS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The line said at exit, when measuring: time spent, in how many spans, per span.
pub fn summary() -> Option<String> {
    if !ON.load(Ordering::Relaxed) {
        return None;
    }
    let &(t0, i0) = START.get()?;
    let (spent, n) = (TICKS.load(Ordering::Relaxed), SPANS.load(Ordering::Relaxed));
    let per_s = ticks().wrapping_sub(t0) as f64 / i0.elapsed().as_secs_f64().max(1e-9);
    let secs = spent as f64 / per_s.max(1.0);
    Some(format!(
        "recorder self time {:.3} ms in {n} records ({:.0} ns each; counter {:.2} GHz)",
        secs * 1e3,
        secs * 1e9 / n.max(1) as f64,
        per_s / 1e9
    ))
}
