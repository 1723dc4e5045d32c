//! Planning a graph replay: which calls of a range become CUDA graphs and which run eagerly
//! between them, and which calls keep the range from being one graph (with the capture rule
//! that decides each). Pure functions of the trace: `gputape analyze` reports the plan, the
//! replayer (`replay --as-graph`) carries it out.
//!
//! A graph segment begins at asynchronous device work (or an upload) on some stream and takes
//! in what a capture takes in: more work on the capturing streams, events recorded on them, and
//! waits on those events, which fork the waiting stream into the capture (the replay joins it
//! back before ending the capture). Everything else (host syncs, synchronous copies,
//! allocation) runs eagerly between graphs. If an event recorded in a graph is used after it,
//! the plan falls back to one stream per graph.

use crate::backend::{decide, CaptureContext, CaptureMode, Relation, StreamKind, Verdict};
use crate::trace::*;
use serde::{Deserialize, Serialize};

/// A run of calls replayed one way.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Segment {
    /// Indices into `Trace::calls`.
    pub calls: Vec<usize>,
    /// The stream a graph segment's capture begins on; `None` for an eager segment.
    #[serde(with = "stream_name")]
    pub stream: Option<StreamRef>,
    /// Other streams the capture forked into (each waited on an event recorded inside it). The
    /// replay joins each back into `stream` before ending the capture, and after every launch
    /// makes each wait for the graph, as the recorded program's later calls expect.
    #[serde(default, with = "stream_names")]
    pub forked: Vec<StreamRef>,
}

/// Streams in JSON as the reports name them (`s1`, `legacy`), not as Rust enums.
mod stream_name {
    use crate::trace::{StreamId, StreamRef};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn parse(s: &str) -> Option<StreamRef> {
        match s {
            "legacy" => Some(StreamRef::Legacy),
            _ => s
                .strip_prefix('s')?
                .parse()
                .ok()
                .map(|n| StreamRef::Id(StreamId(n))),
        }
    }

    pub fn serialize<S: Serializer>(v: &Option<StreamRef>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(r) => s.serialize_str(&r.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StreamRef>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(t) => parse(&t)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("{t:?} is not a stream"))),
        }
    }
}

mod stream_names {
    use crate::trace::StreamRef;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[StreamRef], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|r| r.to_string()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<StreamRef>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|t| {
                super::stream_name::parse(t)
                    .ok_or_else(|| serde::de::Error::custom(format!("{t:?} is not a stream")))
            })
            .collect()
    }
}

/// A call that kept the step out of one graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaker {
    pub seq: u64,
    pub site: String,
    pub call: String,
    pub rule: String,
    pub why: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SegmentPlan {
    pub segments: Vec<Segment>,
    pub breakers: Vec<Breaker>,
}

impl SegmentPlan {
    pub fn graph_count(&self) -> usize {
        self.segments.iter().filter(|s| s.stream.is_some()).count()
    }
}

/// Device work that can sit in a graph on the given stream. (Launches of graphs the trace
/// recorded stay eager: their lifetime is the trace's own business.) The legacy stream's work
/// can when it is `moved` to a stream of the replay's (an eager program's step).
fn graphable(c: &Call, moved: bool) -> Option<StreamRef> {
    match c {
        Call::Launch {
            head: LaunchHead { stream, .. },
            ..
        }
        | Call::LaunchTyped {
            head: LaunchHead { stream, .. },
            ..
        }
        | Call::MemsetAsync { stream, .. }
        | Call::CopyD2DAsync { stream, .. }
        | Call::CopyD2D2DAsync { stream, .. } => {
            Some(*stream).filter(|s| moved || *s != StreamRef::Legacy)
        }
        _ => None,
    }
}

/// Calls with no device effect, which neither join nor break a segment.
fn neutral(c: &Call) -> bool {
    c.is_query() || matches!(c, Call::Kernel { .. })
}

/// Cut calls `[a, b)` into segments, and name every call that keeps the range from being one
/// graph of its main stream (the stream with the most capturable work), with the rule that
/// decides it for a capture in `mode` on a stream of `kind` (a replay's: global and blocking,
/// the defaults and the strictest; `analyze`'s: the ones asked for). With `moved`, the legacy
/// stream's work is judged as a stream of the replay's own, which it is moved to (as
/// `torch.cuda.graph` moves an eager step to a side stream).
pub fn plan_segments(
    t: &Trace,
    range: (u64, u64),
    (mode, kind): (CaptureMode, StreamKind),
    moved: bool,
) -> SegmentPlan {
    // Calls inside a capture the trace itself recorded are replayed as recorded (re-captured),
    // in eager segments, and are not reported: they are already in a graph.
    let mut open: std::collections::BTreeSet<StreamRef> = Default::default();
    let calls: Vec<(usize, &CallRecord, bool)> = t
        .calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.seq >= range.0 && c.seq < range.1 && !neutral(&c.call))
        .map(|(i, c)| {
            let was_open = !open.is_empty();
            match &c.call {
                Call::BeginCapture { stream } => {
                    open.insert(*stream);
                }
                Call::EndCapture { stream } => {
                    open.remove(stream);
                }
                _ => {}
            }
            (i, c, was_open || !open.is_empty())
        })
        .collect();
    let mut counts: std::collections::BTreeMap<StreamRef, usize> = Default::default();
    for (_, c, inside) in &calls {
        if let (Some(s), false) = (graphable(&c.call, moved), inside) {
            *counts.entry(s).or_default() += 1;
        }
    }
    let main = counts
        .iter()
        .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))
        .map(|(s, _)| *s);
    let forked = forked_segments(&calls, moved);
    let segments = if events_stay_inside(t, &forked) {
        forked
    } else {
        single_stream_segments(&calls, moved)
    };
    let in_graph: std::collections::HashSet<usize> = segments
        .iter()
        .filter(|s| s.stream.is_some())
        .flat_map(|s| s.calls.iter().copied())
        .collect();
    let mut plan = SegmentPlan {
        segments,
        breakers: vec![],
    };
    let Some(main) = main else { return plan };
    for (i, c, inside) in calls {
        // The recording tool's own calls stay in the plan (a replay issues them) but keep
        // nothing of the engine's out of a graph.
        if inside || in_graph.contains(&i) || t.is_tools_own(c) {
            continue;
        }
        let (op, stream) = c.call.capture_op(&|_| false);
        let relation = match stream {
            None => Relation::NoStream,
            Some(s) if s == main => Relation::Capturing,
            Some(StreamRef::Legacy) => Relation::Legacy,
            Some(_) => Relation::Other,
        };
        let rule = decide(
            op,
            CaptureContext {
                relation,
                kind,
                mode,
                same_thread: true,
            },
        );
        // Host-side calls are legal inside a capture; only device work outside the graph and
        // calls that would fail keep the range from being one graph.
        if matches!(
            rule.verdict,
            Verdict::Host | Verdict::Captured | Verdict::Joins
        ) {
            continue;
        }
        plan.breakers.push(Breaker {
            seq: c.seq,
            site: t.site(c.site),
            call: c.call.kind().name().to_string(),
            rule: rule.id.to_string(),
            why: format!("{} ({})", rule.why, rule.verdict.name()),
        });
    }
    plan
}

/// Runs of asynchronous device work on one stream each: graphs; everything else eager.
fn single_stream_segments(calls: &[(usize, &CallRecord, bool)], moved: bool) -> Vec<Segment> {
    let mut out = vec![];
    let mut cur: Option<Segment> = None;
    for &(i, c, inside) in calls {
        let g = if inside {
            None
        } else {
            graphable(&c.call, moved)
        };
        if g != cur.as_ref().and_then(|s| s.stream) {
            out.extend(cur.take());
        }
        cur.get_or_insert_with(|| Segment {
            calls: vec![],
            stream: g,
            forked: vec![],
        })
        .calls
        .push(i);
    }
    out.extend(cur);
    out
}

/// Like `single_stream_segments`, but a graph also takes in what a capture takes in across
/// streams: an upload on a capturing stream (the replay's source bytes are the trace's own,
/// stable for the graph's life), an event recorded on a capturing stream, and a wait on such an
/// event, which forks the waiting stream into the capture. This is how an engine's step with a
/// copy stream (upload, record, compute waits) becomes one graph.
fn forked_segments(calls: &[(usize, &CallRecord, bool)], moved: bool) -> Vec<Segment> {
    let mut out = vec![];
    let mut eager: Option<Segment> = None;
    let mut graph: Option<(Segment, Vec<StreamRef>, Vec<EventId>)> = None;
    for &(i, c, inside) in calls {
        let start = if inside {
            None
        } else {
            graphable(&c.call, moved).or(match &c.call {
                Call::CopyH2DAsync { stream, .. } if moved || *stream != StreamRef::Legacy => {
                    Some(*stream)
                }
                _ => None,
            })
        };
        if let Some((seg, capturing, events)) = graph.as_mut() {
            let joins = !inside
                && match &c.call {
                    Call::RecordEvent { event, stream } if capturing.contains(stream) => {
                        events.push(*event);
                        true
                    }
                    Call::StreamWaitEvent { stream, event } if events.contains(event) => {
                        if *stream != StreamRef::Legacy && !capturing.contains(stream) {
                            capturing.push(*stream);
                            seg.forked.push(*stream);
                        }
                        *stream != StreamRef::Legacy
                    }
                    _ => start.is_some_and(|s| capturing.contains(&s)),
                };
            if joins {
                seg.calls.push(i);
                continue;
            }
            out.extend(graph.take().map(|(seg, ..)| seg));
        }
        match start {
            Some(s) => {
                out.extend(eager.take());
                graph = Some((
                    Segment {
                        calls: vec![i],
                        stream: Some(s),
                        forked: vec![],
                    },
                    vec![s],
                    vec![],
                ));
            }
            None => eager
                .get_or_insert_with(|| Segment {
                    calls: vec![],
                    stream: None,
                    forked: vec![],
                })
                .calls
                .push(i),
        }
    }
    out.extend(graph.map(|(seg, ..)| seg));
    out.extend(eager);
    out
}

/// An event recorded inside a capture exists only as an edge of that capture's graph; the plan
/// holds only if no call after the graph uses such an event before recording it again.
fn events_stay_inside(t: &Trace, segments: &[Segment]) -> bool {
    let event_of = |c: &Call| match c {
        Call::RecordEvent { event, .. }
        | Call::StreamWaitEvent { event, .. }
        | Call::EventSynchronize { event }
        | Call::DestroyEvent { event } => Some(*event),
        _ => None,
    };
    segments.iter().filter(|s| s.stream.is_some()).all(|seg| {
        let last = *seg.calls.last().expect("segments are not empty");
        seg.calls
            .iter()
            .filter_map(|&i| match &t.calls[i].call {
                Call::RecordEvent { event, .. } => Some(*event),
                _ => None,
            })
            .all(|e| {
                let next = t.calls[last + 1..]
                    .iter()
                    .find(|c| event_of(&c.call) == Some(e));
                matches!(
                    next.map(|c| &c.call),
                    None | Some(Call::RecordEvent { .. } | Call::DestroyEvent { .. })
                )
            })
    })
}
