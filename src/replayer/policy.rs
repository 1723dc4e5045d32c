//! How a trace should be replayed, decided from what the trace records, not from the command
//! line: a trace that records a fault replays eagerly (a graph replay would hide which call
//! raised it), with red zones where the fault may have been an overrun, and, on a device whose
//! context the fault may kill, in a child process so the report survives it.

use crate::trace::{Call, Trace, Value};

/// What a trace records that decides how to replay it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayPolicy {
    /// A call failed, a call never returned, or a red-zone scan found a band written.
    pub faulty: bool,
    /// A call failed with a sticky (context-killing) device error, an illegal address say.
    pub sticky: bool,
    /// A red-zone scan in the recording found guard bands written.
    pub redzone_hits: bool,
}

impl ReplayPolicy {
    /// Read it off the trace.
    pub fn of(t: &Trace) -> Self {
        let redzone_hits = t.calls.iter().any(|c| {
            matches!(
                (&c.call, &c.ret),
                (Call::ScanRedzones, Some(Ok(Value::Count(n)))) if *n > 0
            )
        });
        ReplayPolicy {
            faulty: t.calls.iter().any(|c| !matches!(c.ret, Some(Ok(_))))
                || !super::fault_windows(t).is_empty(),
            sticky: t.calls.iter().any(
                |c| matches!(&c.ret, Some(Err(e)) if e.code.is_some_and(crate::backend::is_sticky)),
            ),
            redzone_hits,
        }
    }

    /// Replay as graphs only when asked and the trace records no fault: a fault inside a graph
    /// launch is pinned to its node only eagerly, and a step that failed leaves a plan with a
    /// launch it cannot build.
    pub fn as_graph(&self, asked: bool) -> bool {
        asked && !self.faulty
    }

    /// Red zones on a device that has them: when asked (`scan_each`), when the recording found
    /// some written, or for a sticky fault, which need not recur (whether an overrun faults
    /// depends on what happens to be mapped past the buffer) while the write into a guard band
    /// is seen either way.
    pub fn redzones(&self, scan_each: bool) -> bool {
        scan_each || self.redzone_hits || self.sticky
    }

    /// Replay in a child process: a trace that records a fault, on a device whose context the
    /// fault may kill (and with it the process's report).
    pub fn isolate(&self, context_can_die: bool) -> bool {
        context_can_die && self.faulty
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn of(name: &str) -> ReplayPolicy {
        ReplayPolicy::of(&Trace::open(Path::new(&format!("traces/{name}.gtape"))).unwrap())
    }

    #[test]
    fn decided_from_what_each_fixture_records() {
        let clean = of("mock_two_streams");
        assert_eq!(
            clean,
            ReplayPolicy {
                faulty: false,
                sticky: false,
                redzone_hits: false
            }
        );
        assert!(clean.as_graph(true) && !clean.as_graph(false));
        assert!(!clean.redzones(false) && clean.redzones(true));
        assert!(!clean.isolate(true));
        let illegal = of("mock_tiny_async_illegal_step4");
        assert!(illegal.faulty && illegal.sticky && !illegal.redzone_hits);
        assert!(!illegal.as_graph(true), "a fault replays eagerly");
        assert!(illegal.redzones(false) && illegal.isolate(true) && !illegal.isolate(false));
        let overrun = of("h200_tiny_redzone_step4");
        assert!(overrun.faulty && !overrun.sticky && overrun.redzone_hits);
        assert!(overrun.redzones(false));
    }
}
