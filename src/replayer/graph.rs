//! Replaying a step as CUDA graphs, through the trait: the same code captures on the driver and
//! on the mock's emulation. The plan (segments, forks, breakers) comes from
//! `analysis::plan_segments`; this file builds the graphs, launches them and checks the results.

use super::{Divergence, Outcome, ReplayError, Replayer};
use crate::analysis::{plan_segments, Segment, SegmentPlan};
use crate::backend::{GpuBackend, GraphHandle};
use crate::trace::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;

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
    /// How the replayed range was split into graphs and eager calls, and which calls broke it up.
    pub plan: SegmentPlan,
    /// Wall time of each launch of the whole step (graphs plus the eager calls between them).
    pub loop_ms: Vec<f64>,
    /// The captured calls alone, each run followed by a sync of their streams: as graphs, and
    /// issued eagerly. Separates what graphs buy from the eager calls around them (uploads,
    /// readbacks), which cost the same either way.
    pub graphs_only_ms: Vec<f64>,
    /// The same captured calls issued eagerly, each run followed by a sync, in milliseconds: what
    /// `graphs_only_ms` is compared with.
    pub captured_eager_ms: Vec<f64>,
    /// The whole step replayed eagerly in the same process right after (filled by the caller
    /// that wants the ratio, as `replay --as-graph --loop N` does): the host's speed drifts
    /// between processes, so a ratio across two runs can be off by a fifth.
    #[serde(default)]
    pub eager_step_ms: Vec<f64>,
    /// The step's wall time as the program ran it (its first call's start to its last call's
    /// end, in the recording), in milliseconds: what the user would compare with.
    #[serde(default)]
    pub recorded_ms: Option<f64>,
    /// For an eager program (its work on the legacy stream), how its step was chosen and moved
    /// to a stream of the replay's own.
    #[serde(default)]
    pub eager: Option<String>,
    /// The calls replayed as the step, when the replay chose them (an eager program's step):
    /// what an eager replay to compare with should replay too.
    #[serde(default)]
    pub step_range: Option<(u64, u64)>,
    /// Device-to-host results compared with the recording, over all launches of the step.
    pub d2h_checked: u64,
    /// How many of the checked device-to-host results matched the recording.
    pub d2h_matched: u64,
    /// The first device-to-host result that differed: the call, the buffer and the byte.
    pub first_mismatch: Option<Divergence>,
}

impl GraphReport {
    /// Every checked device-to-host result matched the recording.
    pub fn passed(&self) -> bool {
        self.first_mismatch.is_none() && self.d2h_checked == self.d2h_matched
    }

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

    /// Graph replay against the eager replay of the same step (timings: not for snapshots).
    pub fn step_ratio(&self) -> Option<String> {
        if self.loop_ms.is_empty() || self.eager_step_ms.is_empty() {
            return None;
        }
        let (g, e) = (median(&self.loop_ms), median(&self.eager_step_ms));
        let recorded = self
            .recorded_ms
            .map(|r| format!("; as recorded {r:.3} ms (the program's own run of it)"))
            .unwrap_or_default();
        Some(format!(
            "whole step, same process: graph replay {g:.3} ms, eager replay {e:.3} ms (median of {} and {}): graph {:.2}x faster{recorded}\n",
            self.loop_ms.len(),
            self.eager_step_ms.len(),
            e / g
        ))
    }

    /// A short human summary of the plan and the checks (stable: no times), for snapshots and the
    /// CLI.
    pub fn summary(&self) -> String {
        let mut s = self
            .eager
            .as_ref()
            .map(|n| format!("{n}\n"))
            .unwrap_or_default();
        s += &format!(
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
                .map(|m| format!(
                    " (first mismatch: call #{} buffer {} byte {}: {})",
                    m.seq,
                    m.buffer.as_deref().unwrap_or("?"),
                    m.byte_offset.map_or("?".to_string(), |o| o.to_string()),
                    m.detail
                ))
                .unwrap_or_default()
        ));
        s
    }
}

/// An eager program's step, chosen for a graph replay, and how.
struct EagerChoice {
    range: (u64, u64),
    note: String,
}

/// When the range (or, with none asked for, the trace) is an eager program's, the step to
/// capture: the asked range, or the step it repeats between host syncs.
fn eager_step_of(t: &crate::trace::Trace, range: Option<(u64, u64)>) -> Option<EagerChoice> {
    let moved = "its work, on the legacy stream (which no capture can begin on), moved to a \
                 stream of the replay's as torch.cuda.graph moves it";
    if let Some(r) = range {
        return crate::analysis::is_eager(t, r).then(|| EagerChoice {
            range: r,
            note: format!("an eager program's calls {}..{}: {moved}", r.0, r.1),
        });
    }
    if !crate::analysis::is_eager(t, (0, u64::MAX)) {
        return None;
    }
    Some(match crate::analysis::eager_step(t) {
        Some(s) => EagerChoice {
            range: s.range,
            note: format!(
                "an eager program: its step, calls {}..{} (repeated {} times between host syncs; \
                 --range for another), {moved}",
                s.range.0, s.range.1, s.times
            ),
        },
        None => EagerChoice {
            range: (0, u64::MAX),
            note: format!("an eager program (no step repeats; --range to pick one): {moved}"),
        },
    })
}

/// The wall time calls `range` took as recorded: the first one's start to the last one's end.
fn recorded_ms(t: &crate::trace::Trace, (a, b): (u64, u64)) -> Option<f64> {
    let mut calls = t.calls.iter().filter(|c| c.seq >= a && c.seq < b);
    let first = calls.next()?;
    let end = std::iter::once(first)
        .chain(calls)
        .map(|c| c.t_ns + c.dur_ns.unwrap_or(0))
        .max()?;
    Some(end.saturating_sub(first.t_ns) as f64 / 1e6)
}

impl Replayer<'_> {
    /// Build the step's graphs once (launching each right after capture, so the eager calls
    /// between them see its results), then launch the whole step `launches` times, checking the
    /// device-to-host results of every launch against the recording; then time the captured
    /// part alone, as graphs and as the same calls issued eagerly.
    pub fn run_as_graph(
        &self,
        gpu: &dyn GpuBackend,
        range: Option<(u64, u64)>,
        launches: usize,
        loader: Option<super::ModuleLoader<'_>>,
    ) -> Result<GraphReport, ReplayError> {
        let eager = eager_step_of(self.trace, range);
        let (a, b) = eager
            .as_ref()
            .map(|e| e.range)
            .or(range)
            .unwrap_or((0, u64::MAX));
        // Captured in the backend's mode, global unless configured otherwise: judged as global.
        let plan = plan_segments(
            self.trace,
            (a, b),
            (
                crate::backend::CaptureMode::Global,
                crate::backend::StreamKind::Blocking,
            ),
            eager.is_some(),
        );
        let mut guard = self.set_up(gpu, loader)?;
        let st = &mut guard.st;
        let mut report = GraphReport {
            plan,
            recorded_ms: recorded_ms(self.trace, (a, b)),
            step_range: eager.as_ref().map(|e| e.range),
            eager: eager.map(|e| e.note),
            ..Default::default()
        };
        // Calls before the range rebuild the state.
        for c in self.trace.calls.iter().filter(|c| c.seq < a) {
            if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                return Err(self.graph_failure(c, "fast-forward", e));
            }
        }
        // An eager program's work goes to a stream of the replay's, where a capture can begin
        // (the legacy stream's implicit ordering with blocking streams keeps what stays eager
        // ordered with it).
        let side = if report.eager.is_some() {
            let s = gpu.create_stream().map_err(|e| ReplayError::Unsupported {
                seq: a,
                site: String::new(),
                msg: format!("a stream for the eager step: {e:#}"),
            })?;
            st.legacy = s;
            Some(s)
        } else {
            None
        };
        // The plan is the report's, lent to the phases that read it while they fill the rest.
        let segments = std::mem::take(&mut report.plan.segments);
        let graphs = self.build_segments(gpu, st, &segments)?;
        for _ in 0..launches {
            let t0 = Instant::now();
            self.launch_step(gpu, st, &segments, &graphs, &mut report)?;
            let _ = gpu.synchronize(gpu.default_stream());
            if let Some(s) = side {
                let _ = gpu.synchronize(s);
            }
            report.loop_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        self.time_captured_part(gpu, st, &segments, &graphs, launches, &mut report)?;
        report.plan.segments = segments;
        for b in graphs.into_iter().flatten() {
            let _ = gpu.destroy_graph(b.g);
            for e in [b.join, b.after].into_iter().flatten() {
                let _ = gpu.destroy_event(e);
            }
        }
        // The stream lives as long as the backend, as every stream a replay makes does (the
        // trait has no call that destroys one).
        if let Some(s) = side {
            let _ = gpu.synchronize(s);
            guard.st.legacy = 0;
        }
        drop(guard);
        Ok(report)
    }

    fn graph_failure(&self, c: &CallRecord, what: &str, e: impl std::fmt::Display) -> ReplayError {
        ReplayError::Unsupported {
            seq: c.seq,
            site: self.trace.site(c.site),
            msg: format!("{what}: {e:#}"),
        }
    }

    /// The build pass: each captured segment becomes a graph, launched once at once; the
    /// segments between them run eagerly (their frees deferred to the end: the graphs still
    /// use what they free). `None` stands for an eager segment.
    fn build_segments(
        &self,
        gpu: &dyn GpuBackend,
        st: &mut super::State,
        segments: &[Segment],
    ) -> Result<Vec<Option<Built>>, ReplayError> {
        let mut graphs = Vec::new();
        for seg in segments {
            match seg.stream {
                Some(s) => graphs.push(Some(self.capture_segment(gpu, st, seg, s)?)),
                None => {
                    for &i in &seg.calls {
                        let c = &self.trace.calls[i];
                        if destroys(&c.call) {
                            continue;
                        }
                        if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                            if !matches!(c.ret, Some(Err(_))) {
                                return Err(self.graph_failure(c, "eager call", e));
                            }
                        }
                    }
                    graphs.push(None);
                }
            }
        }
        Ok(graphs)
    }

    /// Capture one segment on its origin stream (its forked streams joined back inside the
    /// capture) and launch the graph once.
    fn capture_segment(
        &self,
        gpu: &dyn GpuBackend,
        st: &mut super::State,
        seg: &Segment,
        origin: StreamRef,
    ) -> Result<Built, ReplayError> {
        let first = &self.trace.calls[seg.calls[0]];
        let fail = |what: &str, e: anyhow::Error| self.graph_failure(first, what, e);
        let raw = super::resolve_stream(st, origin, first)?;
        let forked = seg
            .forked
            .iter()
            .map(|f| super::resolve_stream(st, *f, first))
            .collect::<Result<Vec<_>, _>>()?;
        // Replay-owned events: one joins the forked streams back into the origin (inside the
        // capture), one orders them after each launch.
        let helper = || gpu.create_event().map_err(|e| fail("create_event", e));
        let (join, after) = if forked.is_empty() {
            (None, None)
        } else {
            (Some(helper()?), Some(helper()?))
        };
        gpu.begin_capture(raw)
            .map_err(|e| fail("begin_capture", e))?;
        for &i in &seg.calls {
            let c = &self.trace.calls[i];
            if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                gpu.abort_capture_if_active(raw);
                return Err(self.graph_failure(c, "capturing", e));
            }
        }
        if let Some(join) = join {
            for &f in &forked {
                let joined = gpu
                    .record_event(join, f)
                    .and_then(|()| gpu.stream_wait_event(raw, join));
                if let Err(e) = joined {
                    gpu.abort_capture_if_active(raw);
                    return Err(fail("joining a forked stream", e));
                }
            }
        }
        let g = gpu.end_capture(raw).map_err(|e| fail("end_capture", e))?;
        let built = Built {
            g,
            raw,
            forked,
            join,
            after,
        };
        built.launch(gpu).map_err(|e| fail("launch_graph", e))?;
        Ok(built)
    }

    /// One launch of the whole step: each graph launched, each eager segment's calls issued
    /// (creations and frees skipped: the build pass made what the graphs hold), its reads
    /// back checked against the recording.
    fn launch_step(
        &self,
        gpu: &dyn GpuBackend,
        st: &mut super::State,
        segments: &[Segment],
        graphs: &[Option<Built>],
        report: &mut GraphReport,
    ) -> Result<(), ReplayError> {
        for (seg, g) in segments.iter().zip(graphs) {
            if let Some(g) = g {
                let first = &self.trace.calls[seg.calls[0]];
                g.launch(gpu)
                    .map_err(|e| self.graph_failure(first, "launch_graph", e))?;
                continue;
            }
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
                                report.first_mismatch = Some(Divergence {
                                    seq: c.seq,
                                    site: self.trace.site(c.site),
                                    call: c.call.kind().name().to_string(),
                                    buffer: buf.map(|b| b.to_string()),
                                    byte_offset: off,
                                    last_writer: None,
                                    detail: d,
                                })
                            }
                            _ => {}
                        }
                    }
                    Outcome::Failed(e) if !matches!(c.ret, Some(Err(_))) => {
                        return Err(self.graph_failure(c, "eager call", e));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The captured part alone, `launches` times: the graphs, then the same calls eagerly.
    fn time_captured_part(
        &self,
        gpu: &dyn GpuBackend,
        st: &mut super::State,
        segments: &[Segment],
        graphs: &[Option<Built>],
        launches: usize,
        report: &mut GraphReport,
    ) -> Result<(), ReplayError> {
        let captured: Vec<(&Segment, &Built)> = segments
            .iter()
            .zip(graphs)
            .filter_map(|(seg, g)| g.as_ref().map(|g| (seg, g)))
            .collect();
        if captured.is_empty() {
            return Ok(());
        }
        let sync_all = || {
            for (_, b) in &captured {
                for raw in std::iter::once(&b.raw).chain(&b.forked) {
                    let _ = gpu.synchronize(*raw);
                }
            }
        };
        for _ in 0..launches {
            let t0 = Instant::now();
            for (seg, b) in &captured {
                let first = &self.trace.calls[seg.calls[0]];
                b.launch(gpu)
                    .map_err(|e| self.graph_failure(first, "launch_graph", e))?;
            }
            sync_all();
            report.graphs_only_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            let t0 = Instant::now();
            for (seg, _) in &captured {
                for &i in &seg.calls {
                    let c = &self.trace.calls[i];
                    if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                        return Err(self.graph_failure(c, "eager run of a captured call", e));
                    }
                }
            }
            sync_all();
            report
                .captured_eager_ms
                .push(t0.elapsed().as_secs_f64() * 1e3);
        }
        Ok(())
    }
}
