//! `gputape report`: one self-contained HTML page for the person who would rather look than
//! read. No scripts, no network: the timeline and the dependency graph are inline SVG, the
//! rest tables, all generated from the trace and its analysis.

use super::{analyze, Agent, CaptureQuery, DepGraph, EdgeKind, Report, Sections};
use crate::trace::*;
use petgraph::visit::EdgeRef;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Text safe inside HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Nodes drawn at most in the timeline and graph (a page stays light to open).
const MAX_DRAWN: usize = 600;

fn lane_name(a: Agent) -> String {
    match a {
        Agent::Host => "host".into(),
        Agent::Stream(s) => s.to_string(),
    }
}

fn call_name(t: &Trace, c: &CallRecord) -> String {
    match c.call.launch() {
        Some((k, _)) => t.kernel_name(k),
        None => c.call.kind().name().to_string(),
    }
}

/// The page for `t`, titled `title` (the trace's path, say).
pub fn html(t: &Trace, title: &str) -> String {
    page(t, title).0
}

/// The page, and the analysis it shows (what `report --json` counts, without analysing the
/// trace twice).
pub fn page(t: &Trace, title: &str) -> (String, Report) {
    let q = CaptureQuery::default();
    let r = analyze(
        t,
        q,
        Sections {
            capture: true,
            races: true,
            leaks: true,
        },
    );
    let g = DepGraph::build(t, q.range, q.kind);
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>gputape: {}</title><style>{}</style></head><body>\n",
        esc(title),
        STYLE
    );
    header(&mut s, t, title);
    faults(&mut s, t);
    timeline(&mut s, t, &g);
    capture(&mut s, &r);
    races_and_leaks(&mut s, &r);
    graph(&mut s, t, &g);
    s.push_str("</body></html>\n");
    (s, r)
}

const STYLE: &str = "body{font:13px/1.4 system-ui,sans-serif;margin:24px;color:#222}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ccc}\
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;\
vertical-align:top}th{background:#f4f4f4}.ok{color:#176f2c}.bad{color:#b00020;font-weight:600}\
code{font-size:12px}svg{border:1px solid #ddd;background:#fff}";

fn header(s: &mut String, t: &Trace, title: &str) {
    let _ = write!(
        s,
        "<h1>gputape report: <code>{}</code></h1>\n<p>",
        esc(title)
    );
    if let Some(h) = &t.header {
        let _ = write!(
            s,
            "recorded on <b>{}</b> {}{}, gputape {}, trace format {}<br>",
            esc(&h.backend),
            esc(h.device_name.as_deref().unwrap_or("")),
            h.driver_version
                .map(|v| format!(", driver API {}.{}", v / 1000, (v % 1000) / 10))
                .unwrap_or_default(),
            esc(&h.gputape),
            h.format
        );
    }
    if let Some(d) = &t.dump {
        let _ = write!(s, "flight dump: {}<br>", esc(&d.reason));
    }
    if let Some(p) = &t.provenance {
        let _ = write!(
            s,
            "recorded at {} by <code>{}</code> (pid {}{})<br>",
            esc(&p.recorded_at()),
            esc(&p.command()),
            p.pid,
            esc(&p
                .host
                .as_deref()
                .map(|h| format!(" on {h}"))
                .unwrap_or_default())
        );
    }
    let failed = t
        .calls
        .iter()
        .filter(|c| matches!(c.ret, Some(Err(_))))
        .count();
    let _ = writeln!(
        s,
        "{} calls ({} failed), {} initial buffers ({} bytes), {} kernels{}</p>",
        t.calls.len(),
        failed,
        t.initial.len(),
        t.initial
            .iter()
            .fold(0u64, |a, i| a.saturating_add(i.bytes)),
        t.kernels.len(),
        match &t.cut {
            Some(c) => format!(
                "; <span class=\"bad\">cut after {} frames: {}</span>",
                c.frames,
                esc(&c.reason)
            ),
            None => String::new(),
        }
    );
}

fn faults(s: &mut String, t: &Trace) {
    s.push_str("<h2 id=\"faults\">Faults</h2>\n");
    let windows = super::window::fault_windows(t);
    let captured = super::window::captured_work(t);
    let by = super::window::by_seq(t);
    if windows.is_empty() {
        s.push_str("<p class=\"ok\">No call failed and no red zone was found written.</p>\n");
        return;
    }
    s.push_str(
        "<table><tr><th>call</th><th>site</th><th>recorded</th><th>may have been raised by \
         (its window)</th></tr>\n",
    );
    for w in windows {
        let Some(c) = t.calls.iter().find(|c| c.seq == w.observed) else {
            continue;
        };
        let what = match &c.ret {
            Some(Err(e)) => e.message.clone(),
            Some(Ok(Value::Count(n))) => format!("{n} red zone(s) written"),
            _ => "the process died in this call".into(),
        };
        // Launches and graph launches alike: a fault raised inside a graph is raised by one of
        // its nodes, named here from the calls it was captured from.
        let launches: Vec<String> = t
            .calls
            .iter()
            .filter(|x| w.contains(x.seq))
            .filter_map(|x| match &x.call {
                Call::LaunchGraph { graph, .. } => {
                    let nodes: Vec<String> = captured
                        .get(graph)
                        .map(|n| {
                            n.iter()
                                .filter_map(|seq| by.get(seq))
                                .filter(|n| n.call.launch().is_some())
                                .map(|n| format!("{} ({})", call_name(t, n), t.site(n.site)))
                                .collect()
                        })
                        .unwrap_or_default();
                    Some(format!(
                        "#{} {graph} ({}) with node(s) {}",
                        x.seq,
                        t.site(x.site),
                        if nodes.is_empty() {
                            "not recorded".into()
                        } else {
                            nodes.join("; ")
                        }
                    ))
                }
                c if c.launch().is_some() => Some(format!(
                    "#{} {} ({})",
                    x.seq,
                    call_name(t, x),
                    t.site(x.site)
                )),
                _ => None,
            })
            .collect();
        let _ = writeln!(
            s,
            "<tr><td class=\"bad\">#{} {}</td><td><code>{}</code></td><td>{}</td><td>calls #{}..=#{}: \
             {} launch(es){}</td></tr>",
            c.seq,
            esc(c.call.kind().name()),
            esc(&t.site(c.site)),
            esc(&what),
            w.start,
            w.observed,
            launches.len(),
            if launches.is_empty() {
                String::new()
            } else {
                format!(
                    " ({}{})",
                    esc(&launches.iter().take(8).cloned().collect::<Vec<_>>().join(", ")),
                    if launches.len() > 8 { ", ..." } else { "" }
                )
            }
        );
    }
    s.push_str(
        "</table>\n<p><code>gputape replay</code> pins each one to the launch that raised it.</p>\n",
    );
}

fn timeline(s: &mut String, t: &Trace, g: &DepGraph) {
    s.push_str(
        "<h2 id=\"timeline\">Timeline</h2>\n<p>One lane per stream and one for host calls; \
         each box is a call at the host time it was issued, as long as the call took on the \
         host (device time is not in a trace). Red: failed.</p>\n",
    );
    let nodes: Vec<_> = g.graph.node_indices().take(MAX_DRAWN).collect();
    let mut lanes: BTreeMap<Agent, usize> = BTreeMap::new();
    for n in &nodes {
        let k = lanes.len();
        lanes.entry(g.graph[*n].agent).or_insert(k);
    }
    let t0 = nodes
        .iter()
        .map(|n| t.calls[g.graph[*n].call].t_ns)
        .min()
        .unwrap_or(0);
    let t1 = nodes
        .iter()
        .map(|n| {
            let c = &t.calls[g.graph[*n].call];
            c.t_ns.saturating_add(c.dur_ns.unwrap_or(0))
        })
        .max()
        .unwrap_or(1)
        .max(t0.saturating_add(1));
    let (w, lane_h, left) = (1100.0, 28.0, 90.0);
    let h = lane_h * lanes.len().max(1) as f64 + 30.0;
    let x =
        |ns: u64| left + ns.saturating_sub(t0) as f64 / (t1 - t0).max(1) as f64 * (w - left - 10.0);
    let _ = writeln!(
        s,
        "<svg id=\"timeline-svg\" width=\"{w}\" height=\"{h}\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    for (a, i) in &lanes {
        let _ = writeln!(
            s,
            "<text x=\"4\" y=\"{}\" font-size=\"11\">{}</text>",
            i * lane_h as usize + 18,
            esc(&lane_name(*a))
        );
    }
    for n in &nodes {
        let c = &t.calls[g.graph[*n].call];
        let lane = lanes[&g.graph[*n].agent] as f64;
        let x0 = x(c.t_ns);
        let x1 = x(c.t_ns.saturating_add(c.dur_ns.unwrap_or(0))).max(x0 + 1.5);
        let fill = match (&c.ret, c.call.launch()) {
            (Some(Err(_)) | None, _) => "#d32f2f",
            (_, Some(_)) => "#1976d2",
            _ if c.call.is_host_sync() => "#f9a825",
            _ => "#90a4ae",
        };
        let _ = writeln!(
            s,
            "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"18\" fill=\"{fill}\"><title>#{} {} ({})</title></rect>",
            lane * lane_h + 4.0,
            x1 - x0,
            c.seq,
            esc(&call_name(t, c)),
            esc(&t.site(c.site))
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"{}\" font-size=\"10\">{:.3} ms from the first call drawn; blue: launch, amber: host sync, grey: other</text></svg>",
        h - 6.0,
        t1.saturating_sub(t0) as f64 / 1e6
    );
    if g.graph.node_count() > MAX_DRAWN {
        let _ = writeln!(
            s,
            "<p>The first {MAX_DRAWN} of {} calls are drawn.</p>",
            g.graph.node_count()
        );
    }
}

fn capture(s: &mut String, r: &Report) {
    s.push_str("<h2 id=\"capture\">Capture into a CUDA graph</h2>\n");
    let Some(st) = &r.capture_stream else {
        s.push_str("<p>No device work to capture.</p>\n");
        return;
    };
    let bad: Vec<_> = r
        .verdicts
        .iter()
        .filter(|v| matches!(v.category, "fails" | "outside-graph" | "hazard"))
        .collect();
    let _ = writeln!(
        s,
        "<p>Capturing {} ({} mode, {} streams): {}</p>",
        esc(st),
        r.capture_mode,
        r.stream_kind,
        if bad.is_empty() {
            "<span class=\"ok\">the whole trace captures into one graph.</span>".to_string()
        } else {
            format!(
                "<span class=\"bad\">{} call(s) break or escape the capture.</span>",
                bad.len()
            )
        }
    );
    if let Some(note) = &r.capture_note {
        let _ = writeln!(s, "<p>{}</p>", esc(note));
    }
    if bad.is_empty() {
        return;
    }
    s.push_str(
        "<table><tr><th>call</th><th>site</th><th>verdict</th><th>rule</th><th>why</th></tr>\n",
    );
    for v in bad.iter().take(200) {
        let _ = writeln!(
            s,
            "<tr><td>#{} {}</td><td><code>{}</code></td><td class=\"bad\">{}</td><td><code>{}</code></td><td>{}</td></tr>",
            v.seq,
            esc(&v.call),
            esc(&v.site),
            v.category,
            v.rule,
            esc(&v.detail)
        );
    }
    s.push_str("</table>\n");
}

fn races_and_leaks(s: &mut String, r: &Report) {
    s.push_str("<h2 id=\"races\">Races</h2>\n");
    if r.races.is_empty() {
        s.push_str("<p class=\"ok\">No cross-stream races found.</p>\n");
    } else {
        s.push_str("<table><tr><th>buffer</th><th>kind</th><th>first</th><th>second</th></tr>\n");
        for x in &r.races {
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td class=\"bad\">{}</td><td>#{} {} <code>{}</code></td><td>#{} {} <code>{}</code></td></tr>",
                esc(&x.buffer),
                x.kind,
                x.first.0,
                esc(&x.first.1),
                esc(&x.first.2),
                x.second.0,
                esc(&x.second.1),
                esc(&x.second.2)
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str("<h2 id=\"leaks\">Leaks and use after free</h2>\n");
    let held = r.lifetimes.iter().filter(|l| !l.is_problem()).count();
    if held > 0 {
        let _ = writeln!(
            s,
            "<p>{held} buffer(s) held until exit: the program frees nothing it allocates, as a \
             caching allocator (PyTorch's) keeps its memory, or the trace is a dump, taken \
             before the program ended. Not leaks.</p>"
        );
    }
    if !r.lifetimes.iter().any(|l| l.is_problem()) {
        s.push_str("<p class=\"ok\">None found.</p>\n");
        return;
    }
    s.push_str(
        "<table><tr><th>kind</th><th>buffer</th><th>call</th><th>site</th><th>detail</th></tr>\n",
    );
    for l in r.lifetimes.iter().filter(|l| l.is_problem()) {
        let _ = writeln!(
            s,
            "<tr><td class=\"bad\">{}</td><td>{}</td><td>#{}</td><td><code>{}</code></td><td>{}</td></tr>",
            l.kind,
            esc(&l.buffer),
            l.seq,
            esc(&l.site),
            esc(&l.detail)
        );
    }
    s.push_str("</table>\n");
}

fn graph(s: &mut String, t: &Trace, g: &DepGraph) {
    s.push_str(
        "<h2 id=\"graph\">Dependency graph</h2>\n<p>A column per lane, calls top to bottom in \
         issue order (program order is implied by the column). Blue: event edges, amber: host \
         syncs, orange: legacy-stream ordering, grey: data.</p>\n",
    );
    let nodes: Vec<_> = g.graph.node_indices().take(MAX_DRAWN).collect();
    let mut lanes: BTreeMap<Agent, usize> = BTreeMap::new();
    for n in &nodes {
        let k = lanes.len();
        lanes.entry(g.graph[*n].agent).or_insert(k);
    }
    let (col_w, row_h) = (260.0, 22.0);
    let pos = |n: petgraph::graph::NodeIndex| {
        let lane = lanes.get(&g.graph[n].agent).copied().unwrap_or(0) as f64;
        (20.0 + lane * col_w, 30.0 + n.index() as f64 * row_h)
    };
    let w = 40.0 + lanes.len().max(1) as f64 * col_w;
    let h = 50.0 + nodes.len() as f64 * row_h;
    let _ = writeln!(
        s,
        "<svg id=\"graph-svg\" width=\"{w}\" height=\"{h}\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    for (a, i) in &lanes {
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"16\" font-size=\"12\" font-weight=\"600\">{}</text>",
            20.0 + *i as f64 * col_w,
            esc(&lane_name(*a))
        );
    }
    for e in g.graph.edge_references() {
        if e.source().index() >= MAX_DRAWN || e.target().index() >= MAX_DRAWN {
            continue;
        }
        let color = match e.weight() {
            EdgeKind::Program => continue,
            EdgeKind::Event => "#1565c0",
            EdgeKind::HostSync => "#f9a825",
            EdgeKind::Legacy => "#ef6c00",
            EdgeKind::Data => "#bdbdbd",
        };
        let ((x0, y0), (x1, y1)) = (pos(e.source()), pos(e.target()));
        let _ = writeln!(
            s,
            "<line x1=\"{:.0}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"{color}\" stroke-width=\"1\"/>",
            x0 + 110.0,
            y0 + 7.0,
            x1 + 110.0,
            y1 - 7.0
        );
    }
    for n in &nodes {
        let c = &t.calls[g.graph[*n].call];
        let (x, y) = pos(*n);
        let bad = matches!(c.ret, Some(Err(_)) | None);
        let _ = writeln!(
            s,
            "<g><rect x=\"{x:.0}\" y=\"{:.0}\" width=\"220\" height=\"16\" rx=\"3\" fill=\"{}\" stroke=\"#90a4ae\"/>\
             <text x=\"{:.0}\" y=\"{:.0}\" font-size=\"10\">#{} {}</text><title>{}</title></g>",
            y - 8.0,
            if bad { "#ffcdd2" } else { "#eceff1" },
            x + 4.0,
            y + 4.0,
            c.seq,
            esc(&call_name(t, c)),
            esc(&t.site(c.site))
        );
    }
    s.push_str("</svg>\n");
}
