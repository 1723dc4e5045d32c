//! Pictures of a trace: Chrome/Perfetto trace-event JSON (one track per stream, flows for event
//! edges, capture breakers marked) and Graphviz DOT of the dependency graph.

use super::{capture_verdicts, Agent, CaptureQuery, DepGraph, EdgeKind};
use crate::trace::*;
use petgraph::visit::EdgeRef;
use serde_json::{json, Value as J};
use std::collections::{BTreeMap, BTreeSet};

/// One track per agent. The times are the host's (when each call was issued, how long the
/// call took on the host), so the tracks say so: device time is not in a trace.
fn track(a: Agent) -> (u64, String) {
    match a {
        Agent::Host => (0, "host calls".into()),
        Agent::Stream(StreamRef::Legacy) => (1, "legacy stream: calls issued (host time)".into()),
        Agent::Stream(StreamRef::Id(s)) => {
            (2 + s.0 as u64, format!("{s}: calls issued (host time)"))
        }
    }
}

/// Device work as a replay measured it: (seq, start in µs from the replay's first call,
/// duration in µs), and what measured it. A trace holds host times only (when each call was
/// issued and how long the call took on the host); `gputape replay --perfetto` syncs after
/// each call and brings these.
pub struct DeviceSpans<'a> {
    /// `cuda, sync after each call`, say: shown in the tracks' names.
    pub measured_by: String,
    pub spans: &'a [(u64, f64, f64)],
}

/// Trace-event JSON (the format chrome://tracing and ui.perfetto.dev load). Times are the
/// recording's host times: when each call was issued and how long the call took.
pub fn perfetto(t: &Trace, q: CaptureQuery) -> J {
    perfetto_with_device(t, q, None)
}

/// `perfetto`, plus one track per stream of device work as a replay timed it (a second
/// process in the viewer, since its clock is the replay's, not the recording's).
pub fn perfetto_with_device(t: &Trace, q: CaptureQuery, device: Option<DeviceSpans<'_>>) -> J {
    let g = DepGraph::build(t, q.range, q.kind);
    let breakers: BTreeSet<u64> = capture_verdicts(t, q)
        .into_iter()
        .filter(|v| matches!(v.category, "fails" | "outside-graph" | "hazard"))
        .map(|v| v.seq)
        .collect();
    let mut events = Vec::new();
    let mut tracks = BTreeMap::new();
    for n in g.graph.node_indices() {
        let node = &g.graph[n];
        let c = &t.calls[node.call];
        let (tid, name) = track(node.agent);
        tracks.insert(tid, name);
        // A launch is named by its kernel, the way a profiler names it.
        let name = match c.call.launch() {
            Some((k, _)) => t.kernel_name(k),
            None => c.call.kind().name().to_string(),
        };
        let mut ev = json!({
            "name": name,
            "cat": if breakers.contains(&c.seq) { "capture-breaker" } else { "call" },
            "ph": "X",
            "ts": c.t_ns as f64 / 1e3,
            "dur": (c.dur_ns.unwrap_or(0) as f64 / 1e3).max(0.001),
            "pid": 1,
            "tid": tid,
            "args": { "seq": c.seq, "site": t.site(c.site), "call": super::super::trace::call_text(t, &c.call) },
        });
        if breakers.contains(&c.seq) {
            ev["cname"] = json!("terrible");
        }
        events.push(ev);
    }
    // Event edges as flows from the record to the wait.
    for (id, e) in g
        .graph
        .edge_references()
        .filter(|e| *e.weight() == EdgeKind::Event)
        .enumerate()
    {
        for (ph, n) in [("s", e.source()), ("f", e.target())] {
            let c = &t.calls[g.graph[n].call];
            let mut ev = json!({
                "name": "event", "cat": "event", "ph": ph, "id": id,
                "ts": c.t_ns as f64 / 1e3, "pid": 1, "tid": track(g.graph[n].agent).0,
            });
            if ph == "f" {
                ev["bp"] = json!("e");
            }
            events.push(ev);
        }
    }
    for (tid, name) in tracks {
        events.push(
            json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}}),
        );
    }
    events.push(
        json!({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "recording: host calls (host time)"}}),
    );
    if let Some(d) = device {
        let by_seq: BTreeMap<u64, &CallRecord> = t.calls.iter().map(|c| (c.seq, c)).collect();
        let mut dtracks = BTreeMap::new();
        for &(seq, start, us) in d.spans {
            let Some(c) = by_seq.get(&seq) else { continue };
            // Only calls that put work on a stream; a sync's span is the host waiting.
            let Some(stream) = c.call.work_stream() else {
                continue;
            };
            if matches!(
                c.call,
                Call::RecordEvent { .. } | Call::StreamWaitEvent { .. }
            ) {
                continue;
            }
            let (tid, name) = track(Agent::Stream(stream));
            dtracks.insert(tid, name.replace("calls issued (host time)", "device work"));
            let name = match c.call.launch() {
                Some((k, _)) => t.kernel_name(k),
                None => c.call.kind().name().to_string(),
            };
            events.push(json!({
                "name": name, "cat": "device", "ph": "X", "ts": start, "dur": us.max(0.001),
                "pid": 2, "tid": tid,
                "args": { "seq": seq, "site": t.site(c.site) },
            }));
        }
        for (tid, name) in dtracks {
            events.push(
                json!({"name": "thread_name", "ph": "M", "pid": 2, "tid": tid, "args": {"name": name}}),
            );
        }
        events.push(json!({"name": "process_name", "ph": "M", "pid": 2,
            "args": {"name": format!("replay: device work ({}; each span includes launch and sync latency)", d.measured_by)}}));
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ns" })
}

/// Graphviz DOT of the dependency graph: one cluster per stream, edges styled by kind.
pub fn dot(t: &Trace, q: CaptureQuery) -> String {
    let g = DepGraph::build(t, q.range, q.kind);
    let mut s =
        String::from("digraph gputape {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n");
    let mut by_agent: BTreeMap<Agent, Vec<petgraph::graph::NodeIndex>> = BTreeMap::new();
    for n in g.graph.node_indices() {
        by_agent.entry(g.graph[n].agent).or_default().push(n);
    }
    for (i, (a, nodes)) in by_agent.iter().enumerate() {
        s.push_str(&format!(
            "  subgraph cluster_{i} {{\n    label=\"{}\";\n",
            track(*a).1
        ));
        for n in nodes {
            let c = &t.calls[g.graph[*n].call];
            let what = match c.call.launch() {
                Some((k, _)) => t.kernel_name(k),
                None => c.call.kind().name().to_string(),
            };
            let label = format!("#{} {what}\\n{}", c.seq, t.site(c.site)).replace('"', "'");
            s.push_str(&format!("    n{} [label=\"{label}\"];\n", n.index()));
        }
        s.push_str("  }\n");
    }
    // What the edges mean; program order within a lane is implied by the lane, kept only as
    // an invisible edge so the layout follows it.
    s.push_str(
        "  subgraph cluster_legend {\n    label=\"legend\"; fontsize=10;\n    \
         l1 [shape=plaintext, label=\"blue: event (record -> wait)\\nred dashed: host sync\\n\
         orange dotted: legacy-stream ordering\\ngray dotted: data (read/write of a buffer)\\n\
         top to bottom within a lane: program order\"];\n  }\n",
    );
    for e in g.graph.edge_references() {
        let style = match e.weight() {
            EdgeKind::Program => "style=invis",
            EdgeKind::Event => "color=blue, penwidth=2",
            EdgeKind::HostSync => "color=red, style=dashed",
            EdgeKind::Legacy => "color=orange, style=dotted",
            EdgeKind::Data => "color=gray, style=dotted",
        };
        s.push_str(&format!(
            "  n{} -> n{} [{style}];\n",
            e.source().index(),
            e.target().index()
        ));
    }
    s.push_str("}\n");
    s
}
