//! Where a recorded fault may have been raised, and what a recorded graph ran.
//!
//! A kernel's device fault (an illegal address, say) is raised while the kernel runs, after its
//! launch returned, and reported by the first call that waits for the device afterwards: a
//! stream sync, a blocking copy, an event sync. So a fault recorded at call N was raised by
//! some launch after the last host sync that succeeded before N: that span is N's *window*.
//! The replayer synchronises after every launch inside a window, which makes the fault show at
//! the launch that raised it; a replayed error inside the window with the recorded code is the
//! recorded fault reproduced. Red-zone hits work the same way, between two scans.

use crate::trace::{Call, CallRecord, EventId, GraphId, StreamRef, Trace, Value};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Codes a device raises asynchronously, while a kernel runs.
pub fn is_async_fault(code: u32) -> bool {
    crate::backend::is_sticky(code)
}

/// What kind of recorded fault a window belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowKind {
    /// A call returned an asynchronous device error (or never returned).
    Error,
    /// A red-zone scan found guard bands written.
    Redzone,
}

/// The calls that may have raised the fault recorded at `observed`: `start..=observed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultWindow {
    /// The first call (seq) that may have raised it: the one after the last host sync (or red-zone
    /// scan) that succeeded before it.
    pub start: u64,
    /// The call at which the recording saw the fault (its seq).
    pub observed: u64,
    /// Whether a call returned an error or a red-zone scan found a band written.
    pub kind: WindowKind,
    /// The recorded driver code (errors only).
    pub code: Option<u32>,
}

impl FaultWindow {
    /// Whether call `seq` lies in the window, both ends included.
    pub fn contains(&self, seq: u64) -> bool {
        (self.start..=self.observed).contains(&seq)
    }
}

/// Calls after which the host knows every earlier launch on the legacy stream (and the stream
/// it names) has finished, so a fault raised before them would have been reported by them.
/// Device-to-device copies and memsets are left out: the driver may return from them early.
fn waits_for_device(c: &Call) -> bool {
    matches!(
        c,
        Call::Synchronize { .. }
            | Call::EventSynchronize { .. }
            | Call::CopyD2H { .. }
            | Call::CopyD2HOnStream { .. }
            | Call::CopyH2D { .. }
    )
}

/// Where a replay that stopped making progress is stuck, given the last call it finished
/// (`None`: none): the call it was blocked in (the next one), and the launches since the last
/// call that waited for the device, none of which is known to have completed: the hung
/// kernel is among them.
pub fn stuck_at(trace: &Trace, finished: Option<u64>) -> (Option<&CallRecord>, Vec<&CallRecord>) {
    let blocked = trace
        .calls
        .iter()
        .find(|c| finished.is_none_or(|f| c.seq > f));
    let upto = blocked.map_or(u64::MAX, |c| c.seq);
    let mut launches = Vec::new();
    for c in trace.calls.iter().take_while(|c| c.seq < upto) {
        if waits_for_device(&c.call) && matches!(c.ret, Some(Ok(_))) {
            launches.clear();
        } else if c.call.launch().is_some() || matches!(c.call, Call::LaunchGraph { .. }) {
            launches.push(c);
        }
    }
    (blocked, launches)
}

/// Every recorded fault's window, in trace order.
pub fn fault_windows(trace: &Trace) -> Vec<FaultWindow> {
    let mut out = Vec::new();
    let mut since_sync = trace.calls.first().map_or(0, |c| c.seq);
    let mut since_scan = since_sync;
    // A dump stops cleanly, but the calls it names as in flight had not returned: a hang.
    let in_flight = |seq: u64| trace.dump.as_ref().is_some_and(|d| d.was_in_flight(seq));
    for c in &trace.calls {
        match &c.ret {
            Some(Err(e)) if e.code.is_some_and(is_async_fault) => out.push(FaultWindow {
                start: since_sync,
                observed: c.seq,
                kind: WindowKind::Error,
                code: e.code,
            }),
            // The process died (or hung) inside this call: whatever killed it may have been
            // raised since the last sync.
            None if !trace.stopped || in_flight(c.seq) => out.push(FaultWindow {
                start: since_sync,
                observed: c.seq,
                kind: WindowKind::Error,
                code: None,
            }),
            Some(Ok(_)) if waits_for_device(&c.call) => since_sync = c.seq.saturating_add(1),
            _ => {}
        }
        if let Call::ScanRedzones = c.call {
            if matches!(c.ret, Some(Ok(Value::Count(n))) if n > 0) {
                out.push(FaultWindow {
                    start: since_scan,
                    observed: c.seq,
                    kind: WindowKind::Redzone,
                    code: None,
                });
            }
            since_scan = c.seq.saturating_add(1);
        }
    }
    // A hang's dump whose every call returned: the recorder's own wait (a checkpoint draining
    // the streams) is what hung, after the last call, on work queued since the last sync.
    let hang = trace.dump.as_ref().filter(|d| d.is_hang());
    if let (Some(d), Some(last)) = (hang, trace.calls.last()) {
        if since_sync <= last.seq && !out.iter().any(|w| d.was_in_flight(w.observed)) {
            out.push(FaultWindow {
                start: since_sync,
                observed: last.seq,
                kind: WindowKind::Error,
                code: None,
            });
        }
    }
    out
}

/// The device work each recorded graph was captured from, in capture order: launches, async
/// copies and memsets on the capturing stream and on the streams forked into the capture.
/// Replaying these eagerly, with a sync after each launch, pins a fault raised inside a graph
/// launch to the node that raised it.
pub fn captured_work(trace: &Trace) -> HashMap<GraphId, Vec<u64>> {
    let mut out = HashMap::default();
    // Open captures by origin stream: (streams in the capture, events recorded in it, calls).
    type Open = (HashSet<StreamRef>, HashSet<EventId>, Vec<u64>);
    let mut open: HashMap<StreamRef, Open> = HashMap::default();
    for c in &trace.calls {
        match &c.call {
            Call::BeginCapture { stream } => {
                open.insert(
                    *stream,
                    (
                        HashSet::from_iter([*stream]),
                        HashSet::default(),
                        Vec::new(),
                    ),
                );
            }
            Call::EndCapture { stream } => {
                if let (Some((_, _, calls)), Some(Ok(Value::Graph(g)))) =
                    (open.remove(stream), &c.ret)
                {
                    out.insert(*g, calls);
                }
            }
            Call::RecordEvent { event, stream } => {
                for (streams, events, _) in open.values_mut() {
                    if streams.contains(stream) {
                        events.insert(*event);
                    }
                }
            }
            Call::StreamWaitEvent { stream, event } => {
                for (streams, events, _) in open.values_mut() {
                    if events.contains(event) {
                        streams.insert(*stream);
                    }
                }
            }
            other => {
                let device_work = other.launch().is_some()
                    || matches!(
                        other,
                        Call::MemsetAsync { .. }
                            | Call::CopyH2DAsync { .. }
                            | Call::CopyH2DAsyncRetained { .. }
                            | Call::CopyD2HAsync { .. }
                            | Call::CopyD2DAsync { .. }
                            | Call::CopyD2D2DAsync { .. }
                    );
                if let (true, Some(s)) = (device_work, other.work_stream()) {
                    for (streams, _, calls) in open.values_mut() {
                        if streams.contains(&s) {
                            calls.push(c.seq);
                        }
                    }
                }
            }
        }
    }
    out
}

/// The calls of `trace` by seq, for lookups of captured work.
pub fn by_seq(trace: &Trace) -> HashMap<u64, &CallRecord> {
    trace.calls.iter().map(|c| (c.seq, c)).collect()
}
