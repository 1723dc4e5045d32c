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

/// What the watchdog does on its third low reading in a row.
pub enum OnTrip {
    /// End the process at once with status 1 (`_exit`: no exit handlers run): an engine
    /// that runs the device out of memory can freeze an integrated machine outright, and a dead
    /// engine is the lesser harm.
    Exit,
    /// Call this (once) with the last reading, and stop watching: for an engine with its own
    /// shutdown path, and for tests.
    Call(Box<dyn FnOnce(usize) + Send>),
}

/// The running watchdog. Dropping it (or `stop`) ends the thread, after which another may be
/// started.
pub struct WatchdogHandle {
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WatchdogHandle {
    /// Stop polling and wait for the thread to end.
    pub fn stop(self) {}
}

impl Drop for WatchdogHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        RUNNING.store(false, Ordering::SeqCst);
    }
}

/// Start the watchdog thread, polling `read_free` every `interval`; `None` if one already runs
/// in this process (the second caller is told so by the log, once).
pub fn spawn_oom_watchdog(
    threshold_mb: usize,
    interval: Duration,
    read_free: impl Fn() -> Option<usize> + Send + 'static,
    on_trip: OnTrip,
) -> Option<WatchdogHandle> {
    if RUNNING.swap(true, Ordering::SeqCst) {
        tracing::debug!("OOM watchdog already running; not starting a second");
        return None;
    }
    let threshold = threshold_mb << 20;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::Builder::new()
        .name("gputape-oom-watchdog".into())
        .spawn(move || {
            let mut w = Watchdog::default();
            let mut on_trip = Some(on_trip);
            loop {
                std::thread::park_timeout(interval);
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
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
                            "OOM watchdog: {} readings in a row below {threshold_mb} MiB (last {} MiB)",
                            Watchdog::STRIKES,
                            free.unwrap_or(0) >> 20
                        );
                        match on_trip.take() {
                            Some(OnTrip::Call(f)) => {
                                f(free.unwrap_or(0));
                                return;
                            }
                            _ => {
                                tracing::error!("OOM watchdog: exiting with status 1");
                                use std::io::Write;
                                let _ = std::io::stderr().flush();
                                let _ = std::io::stdout().flush();
                                // Not `process::exit`: that runs the process's exit handlers,
                                // the CUDA driver's among them, while the engine's threads are
                                // still in the driver (seen on the H200: a segfault instead of
                                // status 1).
                                // SAFETY: `_exit` ends the process at once; nothing after it
                                // runs, so no Rust invariant can be observed broken.
                                unsafe { libc::_exit(1) }
                            }
                        }
                    }
                }
            }
        });
    match thread {
        Ok(t) => Some(WatchdogHandle {
            stop,
            thread: Some(t),
        }),
        Err(e) => {
            // No thread, no watchdog: the engine runs on, and is told.
            tracing::error!("OOM watchdog: could not start its thread: {e}");
            RUNNING.store(false, Ordering::SeqCst);
            None
        }
    }
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

    /// A planted low reading trips it after three polls, once; a second one cannot start
    /// while it runs, and can after it stopped.
    #[test]
    fn a_low_reading_trips_one_watchdog_once() {
        let (tx, rx) = std::sync::mpsc::channel();
        let polls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = polls.clone();
        let a = spawn_oom_watchdog(
            1,
            Duration::from_millis(1),
            move || {
                counted.fetch_add(1, Ordering::SeqCst);
                Some(4096)
            },
            OnTrip::Call(Box::new(move |free| tx.send(free).unwrap())),
        )
        .expect("the first watchdog starts");
        let b = spawn_oom_watchdog(0, Duration::from_secs(3600), || None, OnTrip::Exit);
        assert!(b.is_none(), "a second watchdog started beside the first");
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(4096));
        // It tripped on the third reading and stopped polling.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(polls.load(Ordering::SeqCst), Watchdog::STRIKES as usize);
        assert!(rx.try_recv().is_err());
        a.stop();
        let c = spawn_oom_watchdog(0, Duration::from_secs(3600), || None, OnTrip::Exit);
        assert!(c.is_some(), "stopping the first lets another start");
    }
}
