//! What recording costs the recorded threads themselves, measured where it is spent: with
//! `GPUTAPE_SHIM_SELFTIME=1`, the time inside the recorder's own code (a launch's parameters
//! gathered, each record encoded and kept) is summed by the CPU's time-stamp counter and said
//! at exit, beside the number of records. Set against a program's step times with the
//! recording on and paused (`scripts/gpu-driver-cost.sh`), it splits what the recorder spends
//! from what it costs the program besides (caches, memory traffic). The time is also kept by
//! kind of record (a module image copied at load and a launch differ by orders), and the
//! program can read the running totals (`gputape_shim_selftime`) around its own steps. Off, a
//! guard costs one relaxed load.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::clock::ticks;
use super::flags::FLAGS;

/// Set to 1 to measure.
pub const ENV: &str = "GPUTAPE_SHIM_SELFTIME";

static TICKS: AtomicU64 = AtomicU64::new(0);
static SPANS: AtomicU64 = AtomicU64::new(0);
/// By record tag: (ticks, spans), and a name to say it by.
static BY_TAG: [(AtomicU64, AtomicU64); 256] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; 256];
static NAMES: [OnceLock<&'static str>; 256] = [const { OnceLock::new() }; 256];
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
        FLAGS.selftime.store(true, Ordering::Relaxed);
    }
}

/// While alive, the thread is in the recorder's own code, for a record of this tag.
pub struct Guard(Option<(u64, u8)>);

impl Guard {
    /// `kind`: the record's type byte and family (`Rec::tag`, `Rec::family`), asked only when
    /// measuring (every recorded call passes here).
    #[inline(always)]
    pub fn start(kind: impl FnOnce() -> (u8, &'static str)) -> Guard {
        if !FLAGS.selftime.load(Ordering::Relaxed) {
            return Guard(None);
        }
        let (tag, name) = kind();
        Guard::measured(tag, name)
    }

    /// `start` while measuring: out of line, so a record's path holds only the test above.
    #[cold]
    #[inline(never)]
    fn measured(tag: u8, name: &'static str) -> Guard {
        let outer = DEPTH.with(|d| {
            d.set(d.get() + 1);
            d.get() == 1
        });
        NAMES[tag as usize].get_or_init(|| name);
        Guard(outer.then(|| (ticks(), tag)))
    }

    /// The drop while measuring: the span's time added to the totals, out of line as
    /// `measured` is.
    #[cold]
    #[inline(never)]
    fn stop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        if let Some((t0, tag)) = self.0 {
            let spent = ticks().wrapping_sub(t0);
            TICKS.fetch_add(spent, Ordering::Relaxed);
            SPANS.fetch_add(1, Ordering::Relaxed);
            let (t, n) = &BY_TAG[tag as usize];
            t.fetch_add(spent, Ordering::Relaxed);
            n.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        if FLAGS.selftime.load(Ordering::Relaxed) {
            self.stop();
        }
    }
}

/// The totals so far (0 and 0 unless measuring): nanoseconds in the recorder's own code, and
/// records. For a program that times its own steps (through ctypes, say).
///
/// # Safety
/// Each pointer is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gputape_shim_selftime(ns: *mut u64, records: *mut u64) {
    let (spent, n) = (TICKS.load(Ordering::Relaxed), SPANS.load(Ordering::Relaxed));
    let t = START
        .get()
        .map_or(0, |&(t0, i0)| (spent as f64 / rate(t0, i0)) as u64);
    // SAFETY: the contract.
    unsafe {
        if !ns.is_null() {
            *ns = t;
        }
        if !records.is_null() {
            *records = n;
        }
    }
}

/// Counter ticks per nanosecond since measuring began.
fn rate(t0: u64, i0: Instant) -> f64 {
    let per_ns = ticks().wrapping_sub(t0) as f64 / i0.elapsed().as_nanos().max(1) as f64;
    per_ns.max(1e-9)
}

/// The lines said at exit, when measuring: time spent, in how many spans, per span; then the
/// kinds of record that took most.
pub fn summary() -> Option<String> {
    if !FLAGS.selftime.load(Ordering::Relaxed) {
        return None;
    }
    let &(t0, i0) = START.get()?;
    let (spent, n) = (TICKS.load(Ordering::Relaxed), SPANS.load(Ordering::Relaxed));
    let per_ns = rate(t0, i0);
    let ns = spent as f64 / per_ns;
    let mut out = format!(
        "recorder self time {:.3} ms in {n} records ({:.0} ns each; counter {:.2} GHz)",
        ns / 1e6,
        ns / n.max(1) as f64,
        per_ns
    );
    let mut kinds: Vec<(u64, u64, &str)> = BY_TAG
        .iter()
        .zip(&NAMES)
        .filter_map(|((t, c), name)| {
            let c = c.load(Ordering::Relaxed);
            (c > 0).then(|| (t.load(Ordering::Relaxed), c, *name.get().unwrap_or(&"?")))
        })
        .collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.0));
    for (t, c, name) in kinds.iter().take(6) {
        let ns = *t as f64 / per_ns;
        out.push_str(&format!(
            "; {name} {:.3} ms in {c} ({:.0} ns each)",
            ns / 1e6,
            ns / *c as f64
        ));
    }
    Some(out)
}
