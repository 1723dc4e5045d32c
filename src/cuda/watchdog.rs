//! Free-memory accounting and the OOM watchdog, as pure functions first (so the rules are
//! unit-tested without a GPU) and a thin polling thread second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Free device memory to report. Host `MemAvailable` may stand in for the driver's figure only
/// on an integrated GPU, where host and device share one physical pool (and the driver's figure
/// misses reclaimable page cache). On a discrete card the two pools are unrelated and the
/// substitution would report many times the card's capacity.
pub fn effective_free_bytes(
    cu_free: usize,
    mem_available: Option<usize>,
    integrated: bool,
) -> usize {
    match mem_available {
        Some(avail) if integrated => cu_free.max(avail),
        _ => cu_free,
    }
}

/// The same, for a poll that may not know whether the device is integrated. Unknown counts as
/// discrete: over-reporting free memory would disarm the watchdog, under-reporting only makes it
/// fire early.
pub fn polled_free_bytes(
    cu_free: usize,
    mem_available: Option<usize>,
    integrated: Option<bool>,
) -> usize {
    effective_free_bytes(cu_free, mem_available, integrated.unwrap_or(false))
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<usize> {
    parse_mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

pub fn parse_mem_available(meminfo: &str) -> Option<usize> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// What the watchdog does after one reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchdogAction {
    Fine,
    /// Low, for the n-th reading in a row.
    Low(u32),
    /// Low for the third reading in a row: end the process before the machine suffers.
    Exit,
}

/// Three consecutive low readings, then exit; any good reading resets the count, so a
/// transient spike does not kill a healthy server.
#[derive(Default)]
pub struct Watchdog {
    consecutive_low: u32,
}

impl Watchdog {
    pub const STRIKES: u32 = 3;

    pub fn observe(&mut self, free: Option<usize>, threshold: usize) -> WatchdogAction {
        match free {
            // A failed reading is no evidence either way.
            None => WatchdogAction::Fine,
            Some(f) if f < threshold => {
                self.consecutive_low += 1;
                if self.consecutive_low >= Self::STRIKES {
                    WatchdogAction::Exit
                } else {
                    WatchdogAction::Low(self.consecutive_low)
                }
            }
            Some(_) => {
                self.consecutive_low = 0;
                WatchdogAction::Fine
            }
        }
    }
}

/// One watchdog per process: free memory is a property of the process and its device, not of a
/// model, and a second load must not start a second poller.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Start the watchdog thread, polling `read_free` every `interval`; `None` if one already runs.
pub fn spawn_oom_watchdog(
    threshold_mb: usize,
    interval: Duration,
    read_free: impl Fn() -> Option<usize> + Send + 'static,
) -> Option<std::thread::JoinHandle<()>> {
    if RUNNING.swap(true, Ordering::SeqCst) {
        return None;
    }
    let threshold = threshold_mb << 20;
    Some(
        std::thread::Builder::new()
            .name("gputape-oom-watchdog".into())
            .spawn(move || {
                let mut w = Watchdog::default();
                loop {
                    std::thread::sleep(interval);
                    let free = read_free();
                    match w.observe(free, threshold) {
                        WatchdogAction::Fine => {}
                        WatchdogAction::Low(n) => tracing::error!(
                            "OOM watchdog: device free memory {} MiB below {threshold_mb} MiB [{n}/{}]",
                            free.unwrap_or(0) >> 20,
                            Watchdog::STRIKES
                        ),
                        WatchdogAction::Exit => {
                            tracing::error!(
                                "OOM watchdog: {} readings in a row below {threshold_mb} MiB; exiting",
                                Watchdog::STRIKES
                            );
                            std::process::exit(1);
                        }
                    }
                }
            })
            .expect("spawn watchdog thread"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_stands_in_only_on_integrated_devices() {
        assert_eq!(effective_free_bytes(10, Some(1000), true), 1000);
        assert_eq!(effective_free_bytes(10, Some(1000), false), 10);
        assert_eq!(effective_free_bytes(2000, Some(1000), true), 2000);
        assert_eq!(effective_free_bytes(10, None, true), 10);
        assert_eq!(
            polled_free_bytes(10, Some(1000), None),
            10,
            "unknown counts as discrete"
        );
        assert_eq!(polled_free_bytes(10, Some(1000), Some(true)), 1000);
    }

    #[test]
    fn watchdog_needs_three_low_readings_in_a_row() {
        let mut w = Watchdog::default();
        let t = 100;
        assert_eq!(w.observe(Some(50), t), WatchdogAction::Low(1));
        assert_eq!(w.observe(Some(50), t), WatchdogAction::Low(2));
        assert_eq!(w.observe(Some(500), t), WatchdogAction::Fine);
        assert_eq!(w.observe(Some(50), t), WatchdogAction::Low(1));
        assert_eq!(w.observe(None, t), WatchdogAction::Fine);
        assert_eq!(w.observe(Some(50), t), WatchdogAction::Low(2));
        assert_eq!(w.observe(Some(50), t), WatchdogAction::Exit);
    }

    #[test]
    fn meminfo_parsing() {
        let s = "MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    2048 kB\n";
        assert_eq!(parse_mem_available(s), Some(2048 * 1024));
        assert_eq!(parse_mem_available("nothing"), None);
    }

    #[test]
    fn only_one_watchdog_per_process() {
        let a = spawn_oom_watchdog(0, Duration::from_secs(3600), || Some(usize::MAX));
        let b = spawn_oom_watchdog(0, Duration::from_secs(3600), || Some(usize::MAX));
        assert!(a.is_some());
        assert!(b.is_none());
    }
}
