//! A rank set's traces on one time line, as Chrome/Perfetto trace-event JSON: each trace a
//! process of its own, its calls where they fell on the wall clock, and each collective
//! joined by a flow to the same collective on the other ranks. Where one rank sat in an
//! all-reduce while another was still computing, or never came, the picture shows it.
//!
//! A trace's call times count from its recorder's own start; `Trace::clock_epoch_ns` (trace
//! format 11) says when on the wall clock that was, to the nanosecond the host clock gives.
//! An older trace has only its provenance's millisecond (said in the process's name), and a
//! trace with neither is laid at the earliest one's start.

use super::ranks::{exchanges, joined_comms};
use super::CaptureQuery;
use crate::backend::{CommUniqueId, Exchange};
use crate::trace::Trace;
use serde_json::{json, Value as J};
use std::collections::BTreeMap;

/// One rank's slice of a collective on the time line: (rank, pid, tid, ts in µs).
type Slice = (u32, u64, u64, f64);

/// Where a trace's time 0 fell, in nanoseconds since the Unix epoch, and how it is known.
fn epoch(t: &Trace) -> (Option<u64>, &'static str) {
    match (t.clock_epoch_ns, &t.provenance) {
        (Some(ns), _) => (Some(ns), "clock"),
        (None, Some(p)) => (Some(p.unix_ms.saturating_mul(1_000_000)), "to the ms"),
        (None, None) => (None, "no clock: laid at the earliest start"),
    }
}

/// `traces` (one per rank, any order; `names` what to call each, a file name say) on one time
/// line: process `i + 1` holds trace `i`'s host calls as `export::perfetto` draws them, named
/// by its rank in the first communicator it joined.
pub fn perfetto_ranks(traces: &[&Trace], names: &[String]) -> J {
    let epochs: Vec<(Option<u64>, &str)> = traces.iter().map(|t| epoch(t)).collect();
    let earliest = epochs.iter().filter_map(|e| e.0).min().unwrap_or(0);
    let mut events = Vec::new();
    let mut met: BTreeMap<(CommUniqueId, Exchange), Vec<Slice>> = BTreeMap::new();
    for (i, t) in traces.iter().enumerate() {
        let pid = i as u64 + 1;
        // Microseconds: trace-event times are.
        let shift = epochs[i].0.map_or(0.0, |e| (e - earliest) as f64 / 1e3);
        let rank = joined_comms(t).first().map(|j| j.rank);
        let j = super::export::perfetto(t, CaptureQuery::default());
        let mut at_seq: BTreeMap<u64, (u64, f64)> = BTreeMap::new();
        for mut ev in j["traceEvents"].as_array().cloned().unwrap_or_default() {
            ev["pid"] = json!(pid);
            if ev["name"] == "process_name" && ev["ph"] == "M" {
                let who = rank.map_or(format!("trace {i}"), |r| format!("rank {r}"));
                let name = names.get(i).map_or("", String::as_str);
                ev["args"]["name"] = json!(format!("{who}: host calls ({name}; {})", epochs[i].1));
            }
            if let Some(ts) = ev["ts"].as_f64() {
                ev["ts"] = json!(ts + shift);
                if let (Some(seq), Some(tid), "X") = (
                    ev["args"]["seq"].as_u64(),
                    ev["tid"].as_u64(),
                    ev["ph"].as_str().unwrap_or(""),
                ) {
                    at_seq.insert(seq, (tid, ts + shift));
                }
            }
            events.push(ev);
        }
        for x in exchanges(t) {
            let seq = t.calls[x.at].seq;
            if let Some(&(tid, ts)) = at_seq.get(&seq) {
                met.entry((x.unique, x.exchange))
                    .or_default()
                    .push((x.rank, pid, tid, ts));
            }
        }
    }
    // Each collective's ranks joined in rank order: start, steps, finish.
    let mut flow = 0u64;
    for ((unique, x), mut at) in met {
        if at.len() < 2 {
            continue;
        }
        at.sort_by_key(|a| a.0);
        flow += 1;
        let last = at.len() - 1;
        for (k, (_, pid, tid, ts)) in at.into_iter().enumerate() {
            let ph = match k {
                0 => "s",
                k if k == last => "f",
                _ => "t",
            };
            let name = match x {
                Exchange::Group(n) => format!("collective #{n} of {unique}"),
                Exchange::Pair { from, to, seq } => {
                    format!("send #{seq} from rank {from} to rank {to} on {unique}")
                }
            };
            events.push(json!({
                "name": name, "cat": "collective", "ph": ph, "id": flow,
                "ts": ts, "pid": pid, "tid": tid, "bp": "e",
            }));
        }
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ns" })
}
