//! Offline analysis of a trace: the dependency graph and what is computed on it (capture
//! legality, cross-stream races, lifetimes, critical path), and exports (Perfetto, DOT).
//!
//! Everything is judged from the trace alone, with the same capture rule table the mock
//! emulates and the GPU suite checks against the driver.

mod access;
mod eager;
pub mod export;
mod idle;
mod lifetimes;
mod plan;
pub mod ranks;
pub mod report;
pub mod timeline;
pub mod window;

use eager::capture_of;
pub use eager::{eager_step, is_eager, EagerStep};
pub use idle::{idle_capture, IdleCapture, IdleVerdicts};

pub use access::{accesses, Access};
pub use lifetimes::{lifetimes, Lifetime};
pub use plan::{plan_segments, Breaker, Segment, SegmentPlan};

use crate::backend::{
    decide, CaptureContext, CaptureMode, CaptureOp, Relation, StreamKind, Verdict,
};
use crate::trace::*;
use petgraph::graph::{DiGraph, NodeIndex};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Who performs a node's work: a stream, or the host thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Agent {
    Host,
    Stream(StreamRef),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EdgeKind {
    /// Program order on one stream (or the host's issue order).
    Program,
    /// An event recorded on one stream and waited on by another (or by the host).
    Event,
    /// The host waited for the device, then issued what follows.
    HostSync,
    /// The legacy stream's implicit synchronisation with blocking streams.
    Legacy,
    /// Read-after-write, write-after-read or write-after-write on a buffer.
    Data,
}

#[derive(Clone, Debug, Serialize)]
pub struct Node {
    /// Index into `Trace::calls`.
    pub call: usize,
    pub seq: u64,
    pub agent: Agent,
}

/// Calls with no device effect and no ordering role; left out of the graph.
fn neutral(c: &Call) -> bool {
    c.is_query()
        || matches!(
            c,
            Call::Kernel { .. } | Call::BindToThread | Call::CreateStream | Call::CreateEvent
        )
}

/// Does the host wait in this call for device work (so that everything it issues later is
/// ordered after that work)?
fn host_waits(c: &Call) -> bool {
    c.is_host_sync() || matches!(c, Call::ScanRedzones | Call::PoisonRedzones { .. })
}

/// A buffer's accesses that a later one may still depend on or race with. An access whose
/// bytes a later write covers (and that `settled` says is ordered before it) is dropped: anything
/// after that write that touches those bytes meets the write first. So weights read every step
/// and scratch rewritten every step keep these lists short, and the analyses stay linear.
#[derive(Default)]
struct Live {
    reads: Vec<(NodeIndex, Access)>,
    writes: Vec<(NodeIndex, Access)>,
}

impl Live {
    /// Add access `a` of node `n`. `reads_stand_in`: a read covering an earlier read that
    /// `settled` orders before it stands in for it against later writes (sound for races; the
    /// dependency graph keeps every read, so each write still gets an edge from each).
    fn push(
        &mut self,
        n: NodeIndex,
        a: Access,
        reads_stand_in: bool,
        settled: impl Fn(NodeIndex, NodeIndex) -> bool,
    ) {
        let covers = |x: &Access| a.start <= x.start && x.end <= a.end;
        if a.write {
            self.reads.retain(|(p, x)| !(covers(x) && settled(*p, n)));
            self.writes.retain(|(p, x)| !(covers(x) && settled(*p, n)));
            self.writes.push((n, a));
        } else {
            if reads_stand_in {
                self.reads.retain(|(p, x)| !(covers(x) && settled(*p, n)));
            }
            self.reads.push((n, a));
        }
    }
}

/// The dependency graph of a range of calls.
pub struct DepGraph {
    pub graph: DiGraph<Node, EdgeKind>,
    /// Vector clocks over agents, per node: the happens-before relation.
    clocks: Vec<Vec<u32>>,
    agents: Vec<Agent>,
    by_call: HashMap<usize, NodeIndex>,
}

impl DepGraph {
    /// Build the graph of calls `[a, b)`. Streams are taken to be `kind` (blocking streams wait
    /// for the legacy stream and it for them).
    pub fn build(t: &Trace, range: (u64, u64), kind: StreamKind) -> DepGraph {
        let mut g: DiGraph<Node, EdgeKind> = DiGraph::new();
        let mut by_call = HashMap::new();
        let mut last_on: BTreeMap<Agent, NodeIndex> = BTreeMap::new();
        let mut last_host_wait: Option<NodeIndex> = None;
        let mut last_legacy: Option<NodeIndex> = None;
        let mut recorded: HashMap<EventId, NodeIndex> = HashMap::new();
        let mut live: HashMap<BufferId, Live> = HashMap::new();
        for (i, c) in t.calls.iter().enumerate() {
            // The recording tool's own calls are not the engine's: no part of its graph.
            if c.seq < range.0 || c.seq >= range.1 || neutral(&c.call) || t.is_tools_own(c) {
                continue;
            }
            let agent = c.call.work_stream().map_or(Agent::Host, Agent::Stream);
            let n = g.add_node(Node {
                call: i,
                seq: c.seq,
                agent,
            });
            by_call.insert(i, n);
            let edge = |g: &mut DiGraph<Node, EdgeKind>, from: Option<NodeIndex>, k| {
                if let Some(f) = from {
                    if f != n && !g.contains_edge(f, n) {
                        g.add_edge(f, n, k);
                    }
                }
            };
            edge(&mut g, last_on.get(&agent).copied(), EdgeKind::Program);
            edge(&mut g, last_host_wait, EdgeKind::HostSync);
            if agent == Agent::Host {
                // Host calls follow the host's own issue order.
                edge(
                    &mut g,
                    last_on.get(&Agent::Host).copied(),
                    EdgeKind::Program,
                );
            }
            if kind == StreamKind::Blocking {
                match agent {
                    Agent::Stream(StreamRef::Legacy) => {
                        let others: Vec<NodeIndex> = last_on
                            .iter()
                            .filter(|(a, _)| matches!(a, Agent::Stream(StreamRef::Id(_))))
                            .map(|(_, n)| *n)
                            .collect();
                        for o in others {
                            edge(&mut g, Some(o), EdgeKind::Legacy);
                        }
                    }
                    Agent::Stream(StreamRef::Id(_)) => edge(&mut g, last_legacy, EdgeKind::Legacy),
                    Agent::Host => {}
                }
            }
            match &c.call {
                Call::RecordEvent { event, .. } => {
                    recorded.insert(*event, n);
                }
                Call::StreamWaitEvent { event, .. } | Call::EventSynchronize { event } => {
                    edge(&mut g, recorded.get(event).copied(), EdgeKind::Event);
                }
                Call::Synchronize { stream } => {
                    edge(
                        &mut g,
                        last_on.get(&Agent::Stream(*stream)).copied(),
                        EdgeKind::HostSync,
                    );
                }
                _ => {}
            }
            for a in accesses(t, &c.call) {
                let l = live.entry(a.buf).or_default();
                // A read depends on the writes before it; a write on the reads and writes.
                let before = l
                    .writes
                    .iter()
                    .chain(if a.write { &l.reads[..] } else { &[] });
                let deps: Vec<NodeIndex> = before
                    .filter(|(_, pa)| pa.overlaps(&a))
                    .map(|(p, _)| *p)
                    .collect();
                for p in deps {
                    edge(&mut g, Some(p), EdgeKind::Data);
                }
                l.push(n, a, false, |_, _| true);
            }
            last_on.insert(agent, n);
            if agent == Agent::Stream(StreamRef::Legacy) {
                last_legacy = Some(n);
            }
            if host_waits(&c.call) || agent == Agent::Host {
                last_host_wait = Some(n);
            }
        }
        // Vector clocks over the ordering edges (data edges are dependencies, not ordering).
        let agents: Vec<Agent> = {
            let s: BTreeSet<Agent> = g.node_weights().map(|n| n.agent).collect();
            s.into_iter().collect()
        };
        let ai: HashMap<Agent, usize> = agents.iter().enumerate().map(|(i, a)| (*a, i)).collect();
        let mut clocks = vec![vec![0u32; agents.len()]; g.node_count()];
        for n in g.node_indices() {
            let mut vc = vec![0u32; agents.len()];
            for e in g.edges_directed(n, petgraph::Direction::Incoming) {
                if *e.weight() == EdgeKind::Data {
                    continue;
                }
                use petgraph::visit::EdgeRef;
                for (x, y) in vc.iter_mut().zip(&clocks[e.source().index()]) {
                    *x = (*x).max(*y);
                }
            }
            let me = ai[&g[n].agent];
            vc[me] += 1;
            clocks[n.index()] = vc;
        }
        DepGraph {
            graph: g,
            clocks,
            agents,
            by_call,
        }
    }

    fn agent_index(&self, a: Agent) -> usize {
        self.agents
            .iter()
            .position(|x| *x == a)
            .expect("known agent")
    }

    /// Is `a` ordered before `b` (through program order, events, host syncs)?
    pub fn happens_before(&self, a: NodeIndex, b: NodeIndex) -> bool {
        let i = self.agent_index(self.graph[a].agent);
        a == b || self.clocks[a.index()][i] <= self.clocks[b.index()][i]
    }

    pub fn node_of_call(&self, call: usize) -> Option<NodeIndex> {
        self.by_call.get(&call).copied()
    }

    /// Longest chain of device work through all edges, and total device work (in calls).
    pub fn critical_path(&self) -> (usize, usize) {
        let mut longest = vec![0usize; self.graph.node_count()];
        let mut work = 0;
        for n in self.graph.node_indices() {
            let is_work = matches!(self.graph[n].agent, Agent::Stream(_));
            work += is_work as usize;
            let best = self
                .graph
                .neighbors_directed(n, petgraph::Direction::Incoming)
                .map(|p| longest[p.index()])
                .max()
                .unwrap_or(0);
            longest[n.index()] = best + is_work as usize;
        }
        (longest.into_iter().max().unwrap_or(0), work)
    }
}

/// One call's fate in a hypothetical capture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CaptureVerdict {
    pub seq: u64,
    pub site: String,
    pub call: String,
    /// captured, host, outside-graph, fails, hazard
    pub category: &'static str,
    pub rule: &'static str,
    pub detail: String,
}

/// The capture to imagine.
#[derive(Clone, Copy, Debug)]
pub struct CaptureQuery {
    pub range: (u64, u64),
    /// The stream that would begin the capture; default: the stream with the most device work.
    pub stream: Option<StreamRef>,
    pub mode: CaptureMode,
    pub kind: StreamKind,
}

impl Default for CaptureQuery {
    fn default() -> Self {
        CaptureQuery {
            range: (0, u64::MAX),
            stream: None,
            mode: CaptureMode::Global,
            kind: StreamKind::Blocking,
        }
    }
}

/// The stream with the most device work in the range.
pub fn main_stream(t: &Trace, range: (u64, u64)) -> Option<StreamRef> {
    let mut n: BTreeMap<StreamRef, usize> = BTreeMap::new();
    for c in t
        .calls
        .iter()
        .filter(|c| c.seq >= range.0 && c.seq < range.1)
    {
        if let Some(s @ StreamRef::Id(_)) = c.call.work_stream() {
            if !matches!(
                c.call,
                Call::RecordEvent { .. } | Call::StreamWaitEvent { .. }
            ) {
                *n.entry(s).or_default() += 1;
            }
        }
    }
    n.into_iter()
        .max_by_key(|(s, k)| (*k, std::cmp::Reverse(*s)))
        .map(|(s, _)| s)
}

/// Whether the trace does device work on `s` in `range` (events recorded and waited on
/// count: they are work a capture takes in).
pub fn has_work(t: &Trace, s: StreamRef, range: (u64, u64)) -> bool {
    t.calls
        .iter()
        .any(|c| c.seq >= range.0 && c.seq < range.1 && c.call.work_stream() == Some(s))
}

/// Which thread an imagined capture begins on, for thread-local mode (which refuses calls
/// only on that thread).
#[derive(Clone, Copy, PartialEq, Eq)]
enum CaptureThread {
    /// The thread of the range's first call: a capture of a stream with work begins where
    /// that work is issued.
    FirstCall,
    /// Each call's own: nothing in the trace says which thread would capture a stream it
    /// does no work on, so each call is judged as if its thread were the capturing one.
    EachCall,
}

/// Give every call in the range a verdict under a hypothetical capture.
pub fn capture_verdicts(t: &Trace, q: CaptureQuery) -> Vec<CaptureVerdict> {
    verdicts(t, q, CaptureThread::FirstCall)
}

fn verdicts(t: &Trace, q: CaptureQuery, who: CaptureThread) -> Vec<CaptureVerdict> {
    let Some(origin) = q.stream.or_else(|| main_stream(t, q.range)) else {
        return Vec::new();
    };
    let mut capturing: BTreeSet<StreamRef> = BTreeSet::from([origin]);
    let mut captured_events: BTreeSet<EventId> = BTreeSet::new();
    // Forked streams not yet joined back into the origin: stream -> (last call on it, site).
    let mut unjoined: BTreeMap<StreamRef, (u64, String, String)> = BTreeMap::new();
    // Where each captured event was recorded, and how much work its stream had done then.
    let mut recorded_on: BTreeMap<EventId, (StreamRef, u64)> = BTreeMap::new();
    let mut work_seen: BTreeMap<StreamRef, u64> = BTreeMap::new();
    let mut thread = None;
    let changed: BTreeSet<u64> = t
        .findings
        .iter()
        .filter_map(|f| match f {
            Finding::RetainedSourceChanged { seq, .. } => Some(*seq),
            Finding::ArgsNotRecorded { .. } | Finding::Sanitizer { .. } => None,
        })
        .collect();
    let mut out = Vec::new();
    for c in t
        .calls
        .iter()
        .filter(|c| c.seq >= q.range.0 && c.seq < q.range.1 && !t.is_tools_own(c))
    {
        let capture_thread = *thread.get_or_insert(c.thread);
        let (op, stream) = c.call.capture_op(&|e| captured_events.contains(&e));
        // An eager program's step judged as torch.cuda.graph captures it: PyTorch's allocator
        // switches its thread to relaxed mode around each allocation it makes meanwhile.
        let allocator = origin == StreamRef::Legacy
            && matches!(op, CaptureOp::DeviceAlloc | CaptureOp::DeviceFree);
        let relation = match stream {
            None => Relation::NoStream,
            Some(s) if capturing.contains(&s) => Relation::Capturing,
            Some(StreamRef::Legacy) => Relation::Legacy,
            Some(_) => Relation::Other,
        };
        let rule = decide(
            op,
            CaptureContext {
                relation,
                kind: q.kind,
                mode: if allocator {
                    CaptureMode::Relaxed
                } else {
                    q.mode
                },
                same_thread: who == CaptureThread::EachCall || c.thread == capture_thread,
            },
        );
        let (mut category, mut detail) = match rule.verdict {
            Verdict::Captured | Verdict::Joins => ("captured", rule.why.to_string()),
            Verdict::Host => ("host", rule.why.to_string()),
            Verdict::Eager => (
                "outside-graph",
                format!("{}; a replayed graph skips it", rule.why),
            ),
            Verdict::Fails { .. } => ("fails", format!("{}: {}", rule.verdict.name(), rule.why)),
        };
        if allocator {
            detail = format!(
                "PyTorch's caching allocator allocates in relaxed mode while capturing: {detail}"
            );
        }
        if category == "captured" {
            if let Some(h) = rule.hazard {
                category = "hazard";
                detail = h.to_string();
            }
            if changed.contains(&c.seq) {
                category = "hazard";
                detail = "a retained source that changed before the sync: the graph would copy whatever it holds at launch".into();
            }
        }
        if let (Some(st), Verdict::Captured | Verdict::Joins) = (stream, rule.verdict) {
            *work_seen.entry(st).or_default() += 1;
            if st != origin {
                unjoined.insert(
                    st,
                    (c.seq, t.site(c.site), c.call.kind().name().to_string()),
                );
            }
        }
        match (&c.call, rule.verdict) {
            (Call::RecordEvent { event, stream }, Verdict::Captured) => {
                captured_events.insert(*event);
                recorded_on.insert(
                    *event,
                    (*stream, work_seen.get(stream).copied().unwrap_or(0)),
                );
            }
            (Call::StreamWaitEvent { stream, event }, Verdict::Captured) if *stream == origin => {
                // The origin waiting on a forked stream's latest point joins that stream back.
                if let Some((from, at)) = recorded_on.get(event) {
                    if work_seen.get(from).copied().unwrap_or(0) == *at {
                        unjoined.remove(from);
                    }
                }
            }
            (Call::RecordEvent { event, .. }, _) => {
                captured_events.remove(event);
            }
            (Call::StreamWaitEvent { stream, .. }, Verdict::Joins) => {
                capturing.insert(*stream);
            }
            _ => {}
        }
        out.push(CaptureVerdict {
            seq: c.seq,
            site: t.site(c.site),
            call: c.call.kind().name().to_string(),
            category,
            rule: rule.id,
            detail,
        });
        if matches!(&c.call, Call::EndCapture { stream } if *stream == origin) {
            break;
        }
    }
    // The capture ends here: every fork still open makes end_capture fail.
    for (s, (seq, site, call)) in unjoined {
        out.push(CaptureVerdict {
            seq,
            site,
            call,
            category: "fails",
            rule: "end-unjoined",
            detail: format!(
                "{s} forked into the capture and was never joined back into {origin}: end_capture fails with CUDA_ERROR_STREAM_CAPTURE_UNJOINED (904)"
            ),
        });
    }
    out
}

/// A race: two accesses to overlapping bytes, at least one a write, on different streams, with
/// no ordering between them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Race {
    pub buffer: String,
    pub first: (u64, String, String),
    pub second: (u64, String, String),
    pub kind: &'static str,
}

/// Each access is checked against the earlier accesses of its buffer that are still live (see
/// `Live`): one ordered before a later covering access can only race with what that access
/// also races with, so dropping it loses no race, only a duplicate report of it.
pub fn races(t: &Trace, g: &DepGraph) -> Vec<Race> {
    let mut live: BTreeMap<BufferId, Live> = BTreeMap::new();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for nb in g.graph.node_indices() {
        let cb = &t.calls[g.graph[nb].call];
        for ab in accesses(t, &cb.call) {
            let l = live.entry(ab.buf).or_default();
            let before = l
                .writes
                .iter()
                .chain(if ab.write { &l.reads[..] } else { &[] });
            for (na, aa) in before {
                let na = *na;
                if na == nb
                    || !aa.overlaps(&ab)
                    || g.graph[na].agent == g.graph[nb].agent
                    || g.happens_before(na, nb)
                    || g.happens_before(nb, na)
                {
                    continue;
                }
                let ca = &t.calls[g.graph[na].call];
                if !seen.insert((ca.site, cb.site, ab.buf)) {
                    continue;
                }
                let desc =
                    |c: &CallRecord| (c.seq, c.call.kind().name().to_string(), t.site(c.site));
                out.push((
                    ab.buf,
                    Race {
                        buffer: ab.buf.to_string(),
                        first: desc(ca),
                        second: desc(cb),
                        kind: if aa.write && ab.write {
                            "write-write"
                        } else {
                            "read-write"
                        },
                    },
                ));
            }
            l.push(nb, ab, true, |p, n| g.happens_before(p, n));
        }
    }
    out.sort_by(|(a, x), (b, y)| (a, x.first.0, x.second.0).cmp(&(b, y.first.0, y.second.0)));
    out.into_iter().map(|(_, r)| r).collect()
}

/// Offenders are grouped by (category, site, call, rule).
type GroupKey<'a> = (&'a str, &'a str, &'a str, &'a str);

/// Everything `gputape analyze` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub calls: usize,
    pub critical_path: usize,
    pub device_work: usize,
    pub capture_stream: Option<String>,
    pub capture_mode: &'static str,
    pub stream_kind: &'static str,
    pub verdicts: Vec<CaptureVerdict>,
    /// When the capture asked about is of a stream the trace does no work on: what breaks it
    /// in each mode.
    pub idle_capture: Option<IdleCapture>,
    /// The graph replay's plan: captures that follow forks across streams (none for an
    /// eager program: a replay does not move its legacy-stream work).
    pub graph_plan: Option<SegmentPlan>,
    /// How the capture judged was chosen, when the trace is an eager program's.
    pub capture_note: Option<String>,
    /// The calls the capture verdicts judge.
    pub capture_range: (u64, u64),
    pub races: Vec<Race>,
    pub lifetimes: Vec<Lifetime>,
    /// What was asked for: a section not asked for is absent, not "nothing found".
    pub sections: Sections,
}

/// Which sections to compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Sections {
    pub capture: bool,
    pub races: bool,
    pub leaks: bool,
}

pub fn analyze(t: &Trace, q: CaptureQuery, s: Sections) -> Report {
    let g = DepGraph::build(t, q.range, q.kind);
    let (cp, work) = g.critical_path();
    let (cq, capture_note) = capture_of(t, q);
    let stream = cq.stream;
    Report {
        calls: t
            .calls
            .iter()
            .filter(|c| c.seq >= q.range.0 && c.seq < q.range.1)
            .count(),
        critical_path: cp,
        device_work: work,
        capture_stream: stream.map(|s| s.to_string()),
        capture_mode: q.mode.name(),
        stream_kind: q.kind.name(),
        verdicts: if s.capture {
            capture_verdicts(t, cq)
        } else {
            vec![]
        },
        idle_capture: s.capture.then(|| idle_capture(t, cq)).flatten(),
        graph_plan: s
            .capture
            .then(|| plan_segments(t, q.range, (q.mode, q.kind), false))
            .filter(|_| cq.stream != Some(StreamRef::Legacy)),
        capture_note: capture_note.filter(|_| s.capture),
        capture_range: cq.range,
        races: if s.races { races(t, &g) } else { vec![] },
        lifetimes: if s.leaks {
            lifetimes(t, &g, q.range)
        } else {
            vec![]
        },
        sections: s,
    }
}

/// Verdicts grouped by (category, site, call, rule), one line each with its count and first
/// call, so an engineer sees the lines to change rather than every call.
fn grouped<'a>(verdicts: impl Iterator<Item = &'a CaptureVerdict>, indent: &str) -> String {
    let mut groups: BTreeMap<GroupKey<'a>, (usize, u64, &'a str)> = BTreeMap::new();
    for v in verdicts {
        groups
            .entry((v.category, v.site.as_str(), v.call.as_str(), v.rule))
            .or_insert((0, v.seq, &v.detail))
            .0 += 1;
    }
    let mut s = String::new();
    for ((cat, site, call, rule), (n, first, detail)) in groups {
        s.push_str(&format!(
            "{indent}{cat:<13} {call} at {site} (x{n}, first #{first}): [{rule}] {detail}\n"
        ));
    }
    s
}

impl Report {
    /// The short human report: offenders grouped by site and rule, so an engineer sees the
    /// lines to change rather than every call.
    pub fn render(&self) -> String {
        let mut s = format!(
            "{} calls; device work {} calls, critical path {} (parallelism {:.2})\n",
            self.calls,
            self.device_work,
            self.critical_path,
            if self.critical_path > 0 {
                self.device_work as f64 / self.critical_path as f64
            } else {
                0.0
            }
        );
        if let Some(idle) = &self.idle_capture {
            s.push_str(&idle.render());
        } else if let (true, Some(st)) = (self.sections.capture, &self.capture_stream) {
            let count = |cat: &str| self.verdicts.iter().filter(|v| v.category == cat).count();
            s.push_str(&format!(
                "capture of {st} ({} mode, {} streams): {} captured, {} fail, {} outside the graph, {} hazards, {} host-only\n",
                self.capture_mode,
                self.stream_kind,
                count("captured"),
                count("fails"),
                count("outside-graph"),
                count("hazard"),
                count("host")
            ));
            let offenders = grouped(
                self.verdicts
                    .iter()
                    .filter(|v| matches!(v.category, "fails" | "outside-graph" | "hazard")),
                "  ",
            );
            if let Some(note) = &self.capture_note {
                s.push_str(&format!("  {note}\n"));
            }
            if let Some(v) = self.verdicts.iter().find(|v| v.category == "fails") {
                s.push_str(&format!(
                    "  first to break it: #{} {} at {}: [{}] {}\n",
                    v.seq, v.call, v.site, v.rule, v.detail
                ));
            }
            if offenders.is_empty() && !self.verdicts.is_empty() {
                s.push_str("  the whole range captures into one graph\n");
            }
            s.push_str(&offenders);
        }
        if let Some(p) = &self.graph_plan {
            // The verdicts above judge one capture of one stream; a capture that forks into the
            // streams the step waits on (as `replay --as-graph` builds it) can take in more.
            let forked: BTreeSet<String> = p
                .segments
                .iter()
                .flat_map(|seg| seg.forked.iter().map(|f| f.to_string()))
                .collect();
            s.push_str(&format!(
                "as graphs, following forks across streams (replay --as-graph): {} graph(s), {} eager segment(s){}; {} call(s) kept out\n",
                p.graph_count(),
                p.segments.len() - p.graph_count(),
                if forked.is_empty() {
                    String::new()
                } else {
                    format!(", forking {}", forked.into_iter().collect::<Vec<_>>().join(", "))
                },
                p.breakers.len()
            ));
            let mut kept: BTreeMap<(&str, &str, &str), (usize, u64)> = BTreeMap::new();
            for b in &p.breakers {
                kept.entry((b.call.as_str(), b.site.as_str(), b.rule.as_str()))
                    .or_insert((0, b.seq))
                    .0 += 1;
            }
            for ((call, site, rule), (n, first)) in kept {
                s.push_str(&format!(
                    "  kept out      {call} at {site} (x{n}, first #{first}): [{rule}]\n"
                ));
            }
        }
        if self.sections.races && self.races.is_empty() {
            s.push_str("no cross-stream races found\n");
        }
        if !self.races.is_empty() {
            s.push_str(&format!("{} race(s):\n", self.races.len()));
            for r in &self.races {
                s.push_str(&format!(
                    "  {} on {}: #{} {} ({}) and #{} {} ({}) are unordered\n",
                    r.kind,
                    r.buffer,
                    r.first.0,
                    r.first.1,
                    r.first.2,
                    r.second.0,
                    r.second.1,
                    r.second.2
                ));
            }
        }
        if self.sections.leaks && !self.lifetimes.iter().any(Lifetime::is_problem) {
            s.push_str("no leaks or use-after-free found\n");
        }
        for l in self.lifetimes.iter().filter(|l| l.is_problem()) {
            s.push_str(&format!(
                "{} {} at #{} ({}): {}\n",
                l.kind, l.buffer, l.seq, l.site, l.detail
            ));
        }
        let held: Vec<&Lifetime> = self.lifetimes.iter().filter(|l| !l.is_problem()).collect();
        if let Some(first) = held.first() {
            s.push_str(&format!(
                "{} buffer(s) live at the end and no leak, first {} at #{} ({}): {}\n",
                held.len(),
                first.buffer,
                first.seq,
                first.site,
                first.detail
            ));
        }
        s
    }
}
