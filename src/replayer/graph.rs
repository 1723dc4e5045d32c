//! Replaying a step as CUDA graphs, through the trait: the same code captures on the driver and
//! on the mock's emulation.
//!
//! A step is cut into segments. A graph segment begins at asynchronous device work (or an
//! upload) on some stream and takes in what a capture takes in: more work on the capturing
//! streams, events recorded on them, and waits on those events, which fork the waiting stream
//! into the capture (the replay joins it back before ending the capture). Everything else (host
//! syncs, synchronous copies, allocation) runs eagerly between graphs. Each call that forced a
//! cut is reported with the capture rule that makes it uncapturable. If an event recorded in a
//! graph is used after it, the plan falls back to one stream per graph.

use super::{Outcome, ReplayError, Replayer};
use crate::backend::{
    decide, CaptureContext, CaptureMode, GpuBackend, GraphHandle, Relation, StreamKind, Verdict,
};
use crate::trace::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// A run of calls replayed one way.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Segment {
    /// Indices into `Trace::calls`.
    pub calls: Vec<usize>,
    /// The stream a graph segment's capture begins on; `None` for an eager segment.
    pub stream: Option<StreamRef>,
    /// Other streams the capture forked into (each waited on an event recorded inside it). The
    /// replay joins each back into `stream` before ending the capture, and after every launch
    /// makes each wait for the graph, as the recorded program's later calls expect.
    #[serde(default)]
    pub forked: Vec<StreamRef>,
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
/// recorded stay eager: their lifetime is the trace's own business.)
fn graphable(c: &Call) -> Option<StreamRef> {
    match c {
        Call::Launch { stream, .. }
        | Call::LaunchTyped { stream, .. }
        | Call::MemsetAsync { stream, .. }
        | Call::CopyD2DAsync { stream, .. }
        | Call::CopyD2D2DAsync { stream, .. } => Some(*stream).filter(|s| *s != StreamRef::Legacy),
        _ => None,
    }
}

/// Calls with no device effect, which neither join nor break a segment.
fn neutral(c: &Call) -> bool {
    c.is_query() || matches!(c, Call::Kernel { .. })
}

/// Resource lifetime calls. A graph holds the addresses it was captured with, so a graph replay
/// creates resources once (the build pass), never frees them between launches, and frees them
/// all at the end.
fn creates(c: &Call) -> bool {
    matches!(
        c,
        Call::Alloc { .. }
            | Call::AllocManaged { .. }
            | Call::AllocHostPinned { .. }
            | Call::CreateStream
            | Call::CreateEvent
            | Call::HostPtrToDevice { .. }
    )
}

fn destroys(c: &Call) -> bool {
    matches!(
        c,
        Call::Free { .. }
            | Call::FreeHostPinned { .. }
            | Call::DestroyEvent { .. }
            | Call::SweepUnreleased
    )
}

/// Cut calls `[a, b)` into segments, and name every call that keeps the range from being one
/// graph of its main stream (the stream with the most capturable work), with the rule that
/// decides it (global mode and a blocking stream: the defaults, and the strictest).
pub fn plan_segments(t: &Trace, range: (u64, u64)) -> SegmentPlan {
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
        if let (Some(s), false) = (graphable(&c.call), inside) {
            *counts.entry(s).or_default() += 1;
        }
    }
    let main = counts
        .iter()
        .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))
        .map(|(s, _)| *s);
    let forked = forked_segments(&calls);
    let segments = if events_stay_inside(t, &forked) {
        forked
    } else {
        single_stream_segments(&calls)
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
        if inside || in_graph.contains(&i) {
            continue;
        }
        let (op, stream) = c.call.capture_op(&|_| false);
        let relation = match stream {
            None => Relation::NoStream,
            Some(StreamRef::Legacy) => Relation::Legacy,
            Some(s) if s == main => Relation::Capturing,
            Some(_) => Relation::Other,
        };
        let rule = decide(
            op,
            CaptureContext {
                relation,
                kind: StreamKind::Blocking,
                mode: CaptureMode::Global,
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
fn single_stream_segments(calls: &[(usize, &CallRecord, bool)]) -> Vec<Segment> {
    let mut out = vec![];
    let mut cur: Option<Segment> = None;
    for &(i, c, inside) in calls {
        let g = if inside { None } else { graphable(&c.call) };
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
fn forked_segments(calls: &[(usize, &CallRecord, bool)]) -> Vec<Segment> {
    let mut out = vec![];
    let mut eager: Option<Segment> = None;
    let mut graph: Option<(Segment, Vec<StreamRef>, Vec<EventId>)> = None;
    for &(i, c, inside) in calls {
        let start = if inside {
            None
        } else {
            graphable(&c.call).or(match &c.call {
                Call::CopyH2DAsync { stream, .. } if *stream != StreamRef::Legacy => Some(*stream),
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

/// A graph built from one segment, with what its launch needs.
struct Built {
    g: GraphHandle,
    /// The origin stream, where the graph is launched.
    raw: u64,
    /// Streams forked into the capture; after each launch they wait for the graph.
    forked: Vec<u64>,
    join: Option<u64>,
    after: Option<u64>,
}

impl Built {
    fn launch(&self, gpu: &dyn GpuBackend) -> anyhow::Result<()> {
        gpu.launch_graph(self.g, self.raw)?;
        if let Some(after) = self.after {
            gpu.record_event(after, self.raw)?;
            for &f in &self.forked {
                gpu.stream_wait_event(f, after)?;
            }
        }
        Ok(())
    }
}

fn median(ms: &[f64]) -> f64 {
    let mut v = ms.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The result of a graph replay.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GraphReport {
    pub plan: SegmentPlan,
    /// Wall time of each launch of the whole step (graphs plus the eager calls between them).
    pub loop_ms: Vec<f64>,
    /// The captured calls alone, each run followed by a sync of their streams: as graphs, and
    /// issued eagerly. Separates what graphs buy from the eager calls around them (uploads,
    /// readbacks), which cost the same either way.
    pub graphs_only_ms: Vec<f64>,
    pub captured_eager_ms: Vec<f64>,
    pub d2h_checked: u64,
    pub d2h_matched: u64,
    pub first_mismatch: Option<String>,
}

impl GraphReport {
    /// The captured calls alone, as graphs against eager (timings: not for snapshots).
    pub fn captured_timing(&self) -> Option<String> {
        if self.graphs_only_ms.is_empty() || self.captured_eager_ms.is_empty() {
            return None;
        }
        let (g, e) = (
            median(&self.graphs_only_ms),
            median(&self.captured_eager_ms),
        );
        let nodes: usize = self
            .plan
            .segments
            .iter()
            .filter(|s| s.stream.is_some())
            .map(|s| s.calls.len())
            .sum();
        // Per call: a graph's floor is the device's per-node cost plus each kernel's run time;
        // eager's is the host's launch cost. Their ratio bounds what graphs can gain here.
        Some(format!(
            "captured calls alone, median of {}: as graph(s) {g:.3} ms, eager {e:.3} ms ({:.2}x); \
             per call {:.2} us as graph nodes, {:.2} us eager ({nodes} calls)\n",
            self.graphs_only_ms.len(),
            e / g,
            g * 1e3 / nodes.max(1) as f64,
            e * 1e3 / nodes.max(1) as f64,
        ))
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} segment(s): {} graph(s), {} eager; {} call(s) keep the range from being one graph\n",
            self.plan.segments.len(),
            self.plan.graph_count(),
            self.plan.segments.len() - self.plan.graph_count(),
            self.plan.breakers.len()
        );
        for b in &self.plan.breakers {
            s.push_str(&format!(
                "  #{} {} ({}): rule {}: {}\n",
                b.seq, b.call, b.site, b.rule, b.why
            ));
        }
        s.push_str(&format!(
            "graph replay device-to-host results: {} of {} match the recording{}\n",
            self.d2h_matched,
            self.d2h_checked,
            self.first_mismatch
                .as_ref()
                .map(|m| format!(" (first mismatch: {m})"))
                .unwrap_or_default()
        ));
        s
    }
}

impl Replayer<'_> {
    /// Build the step's graphs once (launching each right after capture, so the eager calls
    /// between them see its results), then launch the whole step `launches` times, checking the
    /// device-to-host results of every launch against the recording.
    pub fn run_as_graph(
        &self,
        gpu: &dyn GpuBackend,
        range: Option<(u64, u64)>,
        launches: usize,
        loader: Option<super::ModuleLoader<'_>>,
    ) -> Result<GraphReport, ReplayError> {
        let (a, b) = range.unwrap_or((0, u64::MAX));
        let plan = plan_segments(self.trace, (a, b));
        let kernels = self.kernels(gpu, loader)?;
        let mut guard = super::Guard {
            r: self,
            gpu,
            st: super::State::new(&kernels),
        };
        self.setup(gpu, &mut guard.st)?;
        let st = &mut guard.st;
        let mut report = GraphReport {
            plan,
            ..Default::default()
        };
        let fail = |c: &CallRecord, what: &str, e: String| ReplayError::Unsupported {
            seq: c.seq,
            site: self.trace.site(c.site),
            msg: format!("{what}: {e}"),
        };
        // Calls before the range rebuild the state.
        for c in self.trace.calls.iter().filter(|c| c.seq < a) {
            if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                return Err(fail(c, "fast-forward", format!("{e:#}")));
            }
        }
        // Build.
        let mut graphs = Vec::new();
        for seg in &report.plan.segments {
            match seg.stream {
                Some(s) => {
                    let first = &self.trace.calls[seg.calls[0]];
                    let raw = super::resolve_stream(st, s, first)?;
                    let forked = seg
                        .forked
                        .iter()
                        .map(|f| super::resolve_stream(st, *f, first))
                        .collect::<Result<Vec<_>, _>>()?;
                    // Replay-owned events: one joins the forked streams back into the origin
                    // (inside the capture), one orders them after each launch.
                    let helper = || {
                        gpu.create_event()
                            .map_err(|e| fail(first, "create_event", format!("{e:#}")))
                    };
                    let (join, after) = if forked.is_empty() {
                        (None, None)
                    } else {
                        (Some(helper()?), Some(helper()?))
                    };
                    gpu.begin_capture(raw)
                        .map_err(|e| fail(first, "begin_capture", format!("{e:#}")))?;
                    for &i in &seg.calls {
                        let c = &self.trace.calls[i];
                        if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                            gpu.abort_capture_if_active(raw);
                            return Err(fail(c, "capturing", format!("{e:#}")));
                        }
                    }
                    if let Some(join) = join {
                        for &f in &forked {
                            let joined = gpu
                                .record_event(join, f)
                                .and_then(|()| gpu.stream_wait_event(raw, join));
                            if let Err(e) = joined {
                                gpu.abort_capture_if_active(raw);
                                return Err(fail(
                                    first,
                                    "joining a forked stream",
                                    format!("{e:#}"),
                                ));
                            }
                        }
                    }
                    let g = gpu
                        .end_capture(raw)
                        .map_err(|e| fail(first, "end_capture", format!("{e:#}")))?;
                    let built = Built {
                        g,
                        raw,
                        forked,
                        join,
                        after,
                    };
                    built
                        .launch(gpu)
                        .map_err(|e| fail(first, "launch_graph", format!("{e:#}")))?;
                    graphs.push(Some(built));
                }
                None => {
                    for &i in &seg.calls {
                        let c = &self.trace.calls[i];
                        if destroys(&c.call) {
                            continue; // deferred to the end: the graphs still use it
                        }
                        if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                            if !matches!(c.ret, Some(Err(_))) {
                                return Err(fail(c, "eager call", format!("{e:#}")));
                            }
                        }
                    }
                    graphs.push(None);
                }
            }
        }
        // Launch.
        for _ in 0..launches {
            let t0 = Instant::now();
            for (seg, g) in report.plan.segments.iter().zip(&graphs) {
                match g {
                    Some(g) => g.launch(gpu).map_err(|e| {
                        fail(
                            &self.trace.calls[seg.calls[0]],
                            "launch_graph",
                            format!("{e:#}"),
                        )
                    })?,
                    None => {
                        for &i in &seg.calls {
                            let c = &self.trace.calls[i];
                            if creates(&c.call) || destroys(&c.call) {
                                continue;
                            }
                            match self.issue(gpu, st, c, true)? {
                                Outcome::Ok { checked, mismatch } => {
                                    report.d2h_checked += checked as u64;
                                    match mismatch {
                                        None if checked => report.d2h_matched += 1,
                                        Some((buf, off, d)) if report.first_mismatch.is_none() => {
                                            report.first_mismatch = Some(format!(
                                                "call #{} buffer {:?} byte {:?}: {d}",
                                                c.seq, buf, off
                                            ))
                                        }
                                        _ => {}
                                    }
                                }
                                Outcome::Failed(e) if !matches!(c.ret, Some(Err(_))) => {
                                    return Err(fail(c, "eager call", format!("{e:#}")))
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
            let _ = gpu.synchronize(gpu.default_stream());
            report.loop_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        // The captured part alone: the graphs, then the same calls eagerly.
        let captured: Vec<(&Segment, &Built)> = report
            .plan
            .segments
            .iter()
            .zip(&graphs)
            .filter_map(|(seg, g)| g.as_ref().map(|g| (seg, g)))
            .collect();
        let sync_all = |st: &[(&Segment, &Built)]| {
            for (_, b) in st {
                for raw in std::iter::once(&b.raw).chain(&b.forked) {
                    let _ = gpu.synchronize(*raw);
                }
            }
        };
        for _ in 0..if captured.is_empty() { 0 } else { launches } {
            let t0 = Instant::now();
            for (seg, b) in &captured {
                b.launch(gpu).map_err(|e| {
                    fail(
                        &self.trace.calls[seg.calls[0]],
                        "launch_graph",
                        format!("{e:#}"),
                    )
                })?;
            }
            sync_all(&captured);
            report.graphs_only_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            let t0 = Instant::now();
            for (seg, _) in &captured {
                for &i in &seg.calls {
                    let c = &self.trace.calls[i];
                    if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                        return Err(fail(c, "eager run of a captured call", format!("{e:#}")));
                    }
                }
            }
            sync_all(&captured);
            report
                .captured_eager_ms
                .push(t0.elapsed().as_secs_f64() * 1e3);
        }
        for b in graphs.into_iter().flatten() {
            let _ = gpu.destroy_graph(b.g);
            for e in [b.join, b.after].into_iter().flatten() {
                let _ = gpu.destroy_event(e);
            }
        }
        drop(guard);
        Ok(report)
    }
}
