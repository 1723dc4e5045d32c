//! The stream-capture rules, as one table.
//!
//! Whether a call made while a stream captures is recorded into the graph, runs eagerly outside
//! it, or fails (and whether that failure poisons the capture) depends on what the call is, how
//! its stream relates to the capture, the capture mode and whether the capturing stream
//! synchronises with the legacy stream. The mock emulates capture from this table, the offline
//! analysis gives verdicts from it, and the GPU suite checks every row against the driver, so
//! there is exactly one place to fix when the driver disagrees.
//!
//! Rows were first written from the CUDA programming guide's stream-capture section and
//! `cuThreadExchangeStreamCaptureMode`'s documentation, then corrected where the driver
//! disagreed (H200, driver 580, CUDA 13.0; `tests/gpu.rs::capture_rules_match_the_driver` runs
//! every row as a call pattern). What the driver taught us: during a global capture (or this
//! thread's thread-local one) synchronising *any* stream or event from the host is refused and
//! kills the capture, and beginning or ending a capture on the legacy stream also kills a
//! blocking capture.

use super::types::{CaptureMode, StreamKind};
use serde::{Deserialize, Serialize};

/// What a call is, as far as capture is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum CaptureOp {
    /// Asynchronous device work enqueued on a stream: launch, async D2D/D2H copy, async memset,
    /// graph launch.
    StreamWork,
    /// An asynchronous host-to-device copy: stream work whose source lives in host memory.
    AsyncH2D,
    /// A synchronous copy or memset: work on the legacy stream followed by a host wait.
    SyncCopy,
    /// Enqueue a copy on a stream, then wait for the stream (`copy_d2h_on_stream`).
    CopyThenWait,
    /// `synchronize(stream)`.
    StreamSync,
    /// `record_event(event, stream)`.
    EventRecord,
    /// `stream_wait_event` on an event last recorded inside the capture.
    WaitCapturedEvent,
    /// `stream_wait_event` on an event recorded outside any capture.
    WaitExternalEvent,
    /// `event_synchronize` on an event last recorded inside the capture.
    SyncCapturedEvent,
    /// `event_synchronize` on an event recorded outside any capture.
    SyncExternalEvent,
    /// `alloc`, `alloc_managed`.
    DeviceAlloc,
    /// `free`.
    DeviceFree,
    /// `alloc_host_pinned`, `free_host_pinned`.
    PinnedHost,
    /// `begin_capture` on a stream.
    BeginCapture,
    /// `end_capture` on a stream.
    EndCapture,
    /// Host-side bookkeeping: stream and event creation, queries, kernel lookup.
    HostOnly,
}

/// How the call's stream relates to the active capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum Relation {
    /// The stream is capturing (it began the capture or joined it through an event).
    Capturing,
    /// The legacy NULL stream (handle 0); synchronous copies run there.
    Legacy,
    /// Some other stream, not part of the capture.
    Other,
    /// The call names no stream.
    NoStream,
}

/// What happens to the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Verdict {
    /// Recorded into the graph; not executed now.
    Captured,
    /// A stream that was not capturing joins the capture (a fork); the call is captured.
    Joins,
    /// Device work that executes now, outside the graph: a replayed graph silently skips it.
    Eager,
    /// Host-side only; allowed and irrelevant to the graph.
    Host,
    /// The call fails with this driver error; `invalidates` says whether the capture is dead
    /// (its `end_capture` then fails with 901).
    Fails {
        /// The driver's `CUresult`, as a number (`cuda_error_name` gives its name).
        code: u32,
        /// The capture is dead: its `end_capture` fails with 901.
        invalidates: bool,
    },
}

impl Verdict {
    /// The verdict as reports and the rule table print it: "captured", or "fails
    /// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900), invalidates capture".
    pub fn name(&self) -> String {
        match self {
            Verdict::Captured => "captured".into(),
            Verdict::Joins => "joins capture".into(),
            Verdict::Eager => "runs outside graph".into(),
            Verdict::Host => "host only".into(),
            Verdict::Fails { code, invalidates } => format!(
                "fails {} ({code}){}",
                cuda_error_name(*code),
                if *invalidates {
                    ", invalidates capture"
                } else {
                    ""
                }
            ),
        }
    }
}

/// One row of the table. `None` in a condition column matches anything.
#[derive(Clone, Copy, Debug)]
pub struct CaptureRule {
    /// A stable name ("begin-on-legacy"): how verdicts, reports and the GPU suite cite the row.
    pub id: &'static str,
    /// The call this row judges.
    pub op: CaptureOp,
    /// The call's stream against the capture; `None` matches any.
    pub relation: Option<Relation>,
    /// The capturing stream's kind (blocking or not against the legacy stream); `None`
    /// matches any.
    pub kind: Option<StreamKind>,
    /// `Some(true)`: applies only where "potentially unsafe" calls are prohibited for the
    /// calling thread (global mode, or thread-local on the capturing thread).
    pub prohibited: Option<bool>,
    /// What happens to a call this row matches.
    pub verdict: Verdict,
    /// A captured call that is still a trap: say why.
    pub hazard: Option<&'static str>,
    /// The reason, in a line: what analysis verdicts print beside the rule's id.
    pub why: &'static str,
}

/// The stream is in the wrong capture state for the call: a capture begun on a stream already
/// capturing, or ended on one that is not.
pub const CUDA_ERROR_ILLEGAL_STATE: u32 = 401;
/// The call is not permitted while the stream (or, in global mode, any stream) captures.
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: u32 = 900;
/// The capture was killed by an earlier refused call; `end_capture` reports it.
pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: u32 = 901;
/// A stream forked into the capture was never joined back into the origin stream before
/// `end_capture`.
pub const CUDA_ERROR_STREAM_CAPTURE_UNJOINED: u32 = 904;
/// A dependency would cross the capture's boundary: a capturing stream waiting on an event
/// recorded outside it, say.
pub const CUDA_ERROR_STREAM_CAPTURE_ISOLATION: u32 = 905;
/// The call would make the legacy stream wait on a capturing blocking stream.
pub const CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: u32 = 906;
/// The call is not permitted on an event last recorded inside a capture (a host wait on it:
/// the event completes only when the graph runs).
pub const CUDA_ERROR_CAPTURED_EVENT: u32 = 907;
/// A non-relaxed capture was ended from a thread other than the one that began it.
pub const CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: u32 = 908;

/// A device-side `assert` failed in a kernel: reported at the next call that waits, sticky.
pub const CUDA_ERROR_ASSERT: u32 = 710;

/// Errors after which the CUDA context is unusable: every later call fails with the same code,
/// so a replay that reproduces one has nothing more to learn in that process. (700 illegal
/// address, 702 launch timeout, 710 device assert, 714-719 the other kernel exceptions.)
pub fn is_sticky(code: u32) -> bool {
    matches!(code, 700 | 702 | 710 | 714 | 715 | 716 | 717 | 718 | 719)
}

/// Whether a replay that got `replayed` reproduced a recorded `recorded`: the same code, or
/// both a kernel's access to an address it may not touch. CUDA reports such an access as
/// CUDA_ERROR_ILLEGAL_ADDRESS (700) or CUDA_ERROR_INVALID_ADDRESS_SPACE (717) depending on
/// where the address points, which a replay that puts buffers elsewhere changes (seen on the
/// H200: a wild read recorded as 717 replayed as 700); the mock reports 700.
pub fn same_fault(recorded: u32, replayed: u32) -> bool {
    const BAD_ADDRESS: [u32; 2] = [700, 717];
    recorded == replayed || (BAD_ADDRESS.contains(&recorded) && BAD_ADDRESS.contains(&replayed))
}

/// The symbolic name of the driver error codes the capture rules (and the mock) produce.
pub fn cuda_error_name(code: u32) -> &'static str {
    match code {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        401 => "CUDA_ERROR_ILLEGAL_STATE",
        500 => "CUDA_ERROR_NOT_FOUND",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        100 => "CUDA_ERROR_NO_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
        709 => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
        710 => "CUDA_ERROR_ASSERT",
        714 => "CUDA_ERROR_HARDWARE_STACK_ERROR",
        715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
        717 => "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        718 => "CUDA_ERROR_INVALID_PC",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        900 => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        901 => "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        902 => "CUDA_ERROR_STREAM_CAPTURE_MERGE",
        903 => "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
        904 => "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
        905 => "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
        906 => "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
        907 => "CUDA_ERROR_CAPTURED_EVENT",
        908 => "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "CUDA_ERROR_(other)",
    }
}

const fn fails(code: u32, invalidates: bool) -> Verdict {
    Verdict::Fails { code, invalidates }
}

use CaptureOp as O;
use Relation as R;
use StreamKind as K;

macro_rules! rule {
    ($id:literal, $op:expr, $rel:expr, $kind:expr, $pro:expr, $v:expr, $why:literal) => {
        CaptureRule {
            id: $id,
            op: $op,
            relation: $rel,
            kind: $kind,
            prohibited: $pro,
            verdict: $v,
            hazard: None,
            why: $why,
        }
    };
}

/// The table. First matching row wins, so specific rows come before general ones.
pub static CAPTURE_RULES: &[CaptureRule] = &[
    rule!(
        "begin-on-legacy-vs-blocking",
        O::BeginCapture,
        Some(R::Legacy),
        Some(K::Blocking),
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "the legacy stream cannot be captured, and touching it joins a blocking capture"
    ),
    rule!(
        "begin-on-legacy",
        O::BeginCapture,
        Some(R::Legacy),
        None,
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, false),
        "the legacy NULL stream cannot be captured"
    ),
    rule!(
        "begin-while-capturing",
        O::BeginCapture,
        Some(R::Capturing),
        None,
        None,
        fails(CUDA_ERROR_ILLEGAL_STATE, false),
        "a stream already in capture cannot begin another"
    ),
    rule!(
        "begin-other",
        O::BeginCapture,
        None,
        None,
        None,
        Verdict::Host,
        "a second, independent capture may start on another stream"
    ),
    rule!(
        "end-not-capturing",
        O::EndCapture,
        Some(R::Other),
        None,
        None,
        fails(CUDA_ERROR_ILLEGAL_STATE, false),
        "end_capture on a stream that is not capturing"
    ),
    rule!(
        "end-on-legacy-vs-blocking",
        O::EndCapture,
        Some(R::Legacy),
        Some(K::Blocking),
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "end_capture on the legacy stream, which also joins a blocking capture"
    ),
    rule!(
        "end-on-legacy",
        O::EndCapture,
        Some(R::Legacy),
        None,
        None,
        fails(CUDA_ERROR_ILLEGAL_STATE, false),
        "end_capture on the legacy stream"
    ),
    rule!(
        "end-capture",
        O::EndCapture,
        None,
        None,
        None,
        Verdict::Host,
        "end_capture on the capturing stream ends it"
    ),
    CaptureRule {
        id: "h2d-async-captured",
        op: O::AsyncH2D,
        relation: Some(R::Capturing),
        kind: None,
        prohibited: None,
        verdict: Verdict::Captured,
        hazard: Some(
            "the graph's memcpy node reads the host source when the graph is launched, \
             not when it was captured",
        ),
        why: "async host-to-device copy on the capturing stream becomes a memcpy node",
    },
    rule!(
        "work-captured",
        O::StreamWork,
        Some(R::Capturing),
        None,
        None,
        Verdict::Captured,
        "async work on a capturing stream becomes a graph node"
    ),
    rule!(
        "event-record-captured",
        O::EventRecord,
        Some(R::Capturing),
        None,
        None,
        Verdict::Captured,
        "an event recorded on a capturing stream marks a capture point"
    ),
    rule!(
        "wait-captured-event-joins",
        O::WaitCapturedEvent,
        Some(R::Other),
        None,
        None,
        Verdict::Joins,
        "waiting on a captured event pulls the stream into the capture (fork)"
    ),
    rule!(
        "wait-captured-event-capturing",
        O::WaitCapturedEvent,
        Some(R::Capturing),
        None,
        None,
        Verdict::Captured,
        "a dependency inside the capture"
    ),
    rule!(
        "wait-captured-event-legacy",
        O::WaitCapturedEvent,
        Some(R::Legacy),
        None,
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "the legacy stream cannot join a capture"
    ),
    rule!(
        "wait-external-event-capturing",
        O::WaitExternalEvent,
        Some(R::Capturing),
        None,
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, true),
        "a capturing stream may not depend on work recorded outside the capture"
    ),
    rule!(
        "sync-capturing",
        O::StreamSync,
        Some(R::Capturing),
        None,
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true),
        "a capturing stream has nothing to wait for: synchronising it is an error"
    ),
    rule!(
        "copy-wait-capturing",
        O::CopyThenWait,
        Some(R::Capturing),
        None,
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true),
        "the copy is captured, then the wait on the capturing stream fails"
    ),
    rule!(
        "legacy-vs-blocking",
        O::StreamWork,
        Some(R::Legacy),
        Some(K::Blocking),
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "legacy-stream work implicitly waits for every blocking stream, the capturing one too"
    ),
    rule!(
        "legacy-h2d-vs-blocking",
        O::AsyncH2D,
        Some(R::Legacy),
        Some(K::Blocking),
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "legacy-stream work implicitly waits for every blocking stream, the capturing one too"
    ),
    rule!(
        "sync-copy-vs-blocking",
        O::SyncCopy,
        None,
        Some(K::Blocking),
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "a synchronous copy runs on the legacy stream, which implicitly joins a blocking capture"
    ),
    rule!(
        "record-legacy-vs-blocking",
        O::EventRecord,
        Some(R::Legacy),
        Some(K::Blocking),
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "legacy-stream work implicitly waits for every blocking stream, the capturing one too"
    ),
    rule!(
        "legacy-sync-vs-blocking",
        O::StreamSync,
        Some(R::Legacy),
        Some(K::Blocking),
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "waiting on the legacy stream waits on the capturing blocking stream"
    ),
    rule!(
        "copy-wait-legacy-vs-blocking",
        O::CopyThenWait,
        Some(R::Legacy),
        Some(K::Blocking),
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "legacy-stream work implicitly waits for every blocking stream, the capturing one too"
    ),
    rule!(
        "wait-external-legacy-vs-blocking",
        O::WaitExternalEvent,
        Some(R::Legacy),
        Some(K::Blocking),
        None,
        fails(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true),
        "legacy-stream work implicitly waits for every blocking stream, the capturing one too"
    ),
    rule!(
        "sync-prohibited",
        O::StreamSync,
        None,
        None,
        Some(true),
        fails(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true),
        "synchronising any stream is potentially unsafe during a global (or this thread's) capture"
    ),
    rule!(
        "copy-wait-prohibited",
        O::CopyThenWait,
        None,
        None,
        Some(true),
        fails(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true),
        "the wait after the copy synchronises a stream: potentially unsafe during a strict capture"
    ),
    rule!(
        "event-sync-prohibited",
        O::SyncExternalEvent,
        None,
        None,
        Some(true),
        fails(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true),
        "waiting on an event from the host is potentially unsafe during a strict capture"
    ),
    rule!(
        "sync-copy-eager",
        O::SyncCopy,
        None,
        Some(K::NonBlocking),
        None,
        Verdict::Eager,
        "a non-blocking capture does not see the legacy stream: the copy runs now"
    ),
    rule!(
        "work-elsewhere-eager",
        O::StreamWork,
        None,
        None,
        None,
        Verdict::Eager,
        "work on a stream outside the capture runs now"
    ),
    rule!(
        "h2d-elsewhere-eager",
        O::AsyncH2D,
        None,
        None,
        None,
        Verdict::Eager,
        "work on a stream outside the capture runs now"
    ),
    rule!(
        "copy-wait-elsewhere",
        O::CopyThenWait,
        None,
        None,
        None,
        Verdict::Eager,
        "relaxed mode: a copy and wait on a stream outside the capture runs now"
    ),
    rule!(
        "record-elsewhere",
        O::EventRecord,
        None,
        None,
        None,
        Verdict::Eager,
        "an event recorded outside the capture is an ordinary record"
    ),
    rule!(
        "sync-elsewhere",
        O::StreamSync,
        None,
        None,
        None,
        Verdict::Host,
        "relaxed mode: synchronising a stream outside the capture is ordinary"
    ),
    rule!(
        "wait-external-elsewhere",
        O::WaitExternalEvent,
        None,
        None,
        None,
        Verdict::Eager,
        "an ordinary cross-stream wait outside the capture"
    ),
    rule!(
        "event-sync-captured",
        O::SyncCapturedEvent,
        None,
        None,
        None,
        fails(CUDA_ERROR_CAPTURED_EVENT, true),
        "an event recorded inside a capture never completes before the graph runs"
    ),
    rule!(
        "event-sync-external",
        O::SyncExternalEvent,
        None,
        None,
        None,
        Verdict::Host,
        "relaxed mode: waiting on an event recorded outside the capture is ordinary"
    ),
    rule!(
        "alloc-prohibited",
        O::DeviceAlloc,
        None,
        None,
        Some(true),
        fails(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true),
        "cuMemAlloc is potentially unsafe during a global (or this thread's) capture"
    ),
    rule!(
        "alloc-tolerated",
        O::DeviceAlloc,
        None,
        None,
        None,
        Verdict::Host,
        "relaxed mode (or another thread's thread-local capture) tolerates allocation"
    ),
    rule!(
        "free-prohibited",
        O::DeviceFree,
        None,
        None,
        Some(true),
        fails(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true),
        "cuMemFree is potentially unsafe during a global (or this thread's) capture"
    ),
    rule!(
        "free-tolerated",
        O::DeviceFree,
        None,
        None,
        None,
        Verdict::Host,
        "relaxed mode (or another thread's thread-local capture) tolerates free"
    ),
    rule!(
        "pinned-prohibited",
        O::PinnedHost,
        None,
        None,
        Some(true),
        fails(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true),
        "page-locked host allocation is potentially unsafe during a strict capture"
    ),
    rule!(
        "pinned-tolerated",
        O::PinnedHost,
        None,
        None,
        None,
        Verdict::Host,
        "relaxed mode tolerates page-locked host allocation"
    ),
    rule!(
        "host-only",
        O::HostOnly,
        None,
        None,
        None,
        Verdict::Host,
        "host-side bookkeeping does not interact with capture"
    ),
];

/// The table as Markdown: one row per rule, `*` where a condition matches anything.
pub fn render_rules() -> String {
    let any = |x: Option<String>| x.unwrap_or_else(|| "*".into());
    let mut s = String::from(
        "| rule | call | stream | capturing stream | strict mode | verdict |\n|---|---|---|---|---|---|\n",
    );
    for r in CAPTURE_RULES {
        s.push_str(&format!(
            "| {} | {:?} | {} | {} | {} | {} |\n",
            r.id,
            r.op,
            any(r.relation.map(|x| format!("{x:?}"))),
            any(r.kind.map(|k| k.name().to_string())),
            any(r
                .prohibited
                .map(|p| if p { "yes" } else { "no" }.to_string())),
            r.verdict.name()
        ));
    }
    s
}

/// The conditions a call is judged under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CaptureContext {
    /// The call's stream against the capture.
    pub relation: Relation,
    /// The kind of the capturing stream.
    pub kind: StreamKind,
    /// The capture's mode, which decides which threads' unsafe calls it refuses.
    pub mode: CaptureMode,
    /// Whether the calling thread is the one that began the capture.
    pub same_thread: bool,
}

impl CaptureContext {
    /// Are "potentially unsafe" calls prohibited for this thread?
    pub fn prohibited(&self) -> bool {
        match self.mode {
            CaptureMode::Global => true,
            CaptureMode::ThreadLocal => self.same_thread,
            CaptureMode::Relaxed => false,
        }
    }
}

/// The rule that decides `op` under `ctx`. Every op has a catch-all row, so this always finds
/// one; the test below keeps it that way.
pub fn decide(op: CaptureOp, ctx: CaptureContext) -> &'static CaptureRule {
    let prohibited = ctx.prohibited();
    CAPTURE_RULES
        .iter()
        .find(|r| {
            r.op == op
                && r.relation.is_none_or(|x| x == ctx.relation)
                && r.kind.is_none_or(|x| x == ctx.kind)
                && r.prohibited.is_none_or(|x| x == prohibited)
        })
        .unwrap_or(&FALLBACK)
}

static FALLBACK: CaptureRule = rule!(
    "unknown",
    O::HostOnly,
    None,
    None,
    None,
    Verdict::Host,
    "no rule matched (a gap in the table)"
);

impl CaptureOp {
    /// Every op, for tests and probes that walk the table.
    pub const ALL: [CaptureOp; 16] = [
        O::StreamWork,
        O::AsyncH2D,
        O::SyncCopy,
        O::CopyThenWait,
        O::StreamSync,
        O::EventRecord,
        O::WaitCapturedEvent,
        O::WaitExternalEvent,
        O::SyncCapturedEvent,
        O::SyncExternalEvent,
        O::DeviceAlloc,
        O::DeviceFree,
        O::PinnedHost,
        O::BeginCapture,
        O::EndCapture,
        O::HostOnly,
    ];
}

impl CaptureOp {
    /// Whether the call names a stream (the rest are judged with `Relation::NoStream`).
    pub fn takes_stream(self) -> bool {
        !matches!(
            self,
            O::DeviceAlloc | O::DeviceFree | O::PinnedHost | O::HostOnly | O::SyncCopy
        )
    }
}

impl Relation {
    /// Every relation, for tests and probes that walk the table.
    pub const ALL: [Relation; 4] = [R::Capturing, R::Legacy, R::Other, R::NoStream];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_combination_has_a_real_rule() {
        for op in CaptureOp::ALL {
            for relation in Relation::ALL {
                if op.takes_stream() == (relation == Relation::NoStream) {
                    continue;
                }
                for kind in StreamKind::ALL {
                    for mode in CaptureMode::ALL {
                        for same_thread in [true, false] {
                            let ctx = CaptureContext {
                                relation,
                                kind,
                                mode,
                                same_thread,
                            };
                            let r = decide(op, ctx);
                            assert_ne!(r.id, "unknown", "{op:?} {ctx:?} has no rule");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn rule_ids_are_unique() {
        let mut ids: Vec<_> = CAPTURE_RULES.iter().map(|r| r.id).collect();
        ids.sort();
        let n = ids.len();
        ids.dedup();
        assert_eq!(n, ids.len());
    }
}
