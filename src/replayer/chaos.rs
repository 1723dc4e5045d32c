//! Why a launch's output changed when only the schedule and the contents of fresh memory did
//! (`replay --chaos`, and any lockstep that finds a difference): a dependency between streams
//! that no event or host sync gives (the race the analyses find, `analysis::races`, that
//! involves the launch), or bytes the launch reads that no call wrote since their allocation
//! (read off the trace: every call before it, graphs' captured calls in their launches'
//! places, and the initial snapshot, which writes what it holds).

use super::{LaunchDifference, Replayer};
use crate::analysis::{accesses, races, DepGraph};
use crate::backend::StreamKind;
use crate::trace::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Why a launch's output may change from one run to the next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Cause {
    /// The launch and a call on another stream touch the same bytes, at least one writing,
    /// and no event or host sync orders the two (`analyze`'s race between them).
    MissingDependency {
        /// The call the trace issues first, as `#seq kernel` (or `#seq call`), with its site.
        before: String,
        /// Its stream.
        before_stream: String,
        /// The call issued second.
        after: String,
        /// Its stream.
        after_stream: String,
        /// The buffer both touch.
        buffer: String,
        /// `read-write` or `write-write`.
        race: &'static str,
    },
    /// The launch reads bytes that no call had written since their allocation: what they hold
    /// is whatever the allocator left (the chaos mock's poison, a zero on the plain mock).
    NeverWritten {
        /// The buffer.
        buffer: String,
        /// The first byte never written.
        start: u64,
        /// One past the last.
        end: u64,
    },
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::MissingDependency {
                before,
                before_stream,
                after,
                after_stream,
                buffer,
                race,
            } => write!(
                f,
                "missing dependency: {before} on {before_stream} -> {after} on {after_stream} \
                 ({race} on {buffer}, and no event or sync orders them)"
            ),
            Cause::NeverWritten { buffer, start, end } => {
                write!(f, "reads never-written memory: {buffer}+{start}..{end}")
            }
        }
    }
}

/// `#seq kernel` for a launch, `#seq call` for anything else, and where it was made.
fn short(t: &Trace, c: &CallRecord) -> String {
    let what = match c.call.launch() {
        Some((k, _)) => t.kernel_name(k),
        None => c.call.kind().name().to_string(),
    };
    format!("#{} {what} ({})", c.seq, t.site(c.site))
}

fn stream_of(c: &CallRecord) -> String {
    c.call
        .work_stream()
        .map_or_else(|| "the host".to_string(), |s| s.to_string())
}

impl Replayer<'_> {
    /// What the trace says about why launch `d` may differ between runs (see the module docs):
    /// each race it takes part in, the ones where it comes second (it read or overwrote what
    /// another stream wrote) first, then each range it reads that nothing had written.
    pub(super) fn explain(&self, d: &LaunchDifference) -> Vec<Cause> {
        let t = self.trace;
        let Some(&me) = self.by_seq.get(&d.seq) else {
            return Vec::new();
        };
        let mine = accesses(t, &me.call);
        let mut out = self.missing_dependencies(me, &mine);
        out.extend(self.never_written(d.at, &mine));
        out
    }

    fn missing_dependencies(
        &self,
        me: &CallRecord,
        mine: &[crate::analysis::Access],
    ) -> Vec<Cause> {
        let t = self.trace;
        let bufs: BTreeSet<String> = mine.iter().map(|a| a.buf.to_string()).collect();
        let g = DepGraph::build(t, (0, u64::MAX), StreamKind::Blocking);
        let site = t.site(me.site);
        let by_seq = |seq: u64| self.by_seq.get(&seq).copied();
        // The analysis reports each pair of sites once per buffer, so a launch repeated in a
        // loop may find its race under an earlier iteration: then the partner is the call at
        // the other site nearest to this one, on the same side of it.
        let partner = |other_site: &str, earlier: bool| {
            let near = t.calls.iter().filter(|c| {
                (if earlier {
                    c.seq < me.seq
                } else {
                    c.seq > me.seq
                }) && t.site(c.site) == other_site
            });
            if earlier {
                near.last()
            } else {
                near.min_by_key(|c| c.seq)
            }
        };
        let mut out: Vec<(bool, Cause)> = Vec::new();
        let mut seen = BTreeSet::new();
        for r in races(t, &g).iter().filter(|r| bufs.contains(&r.buffer)) {
            let (before, after, second) = if r.second.0 == me.seq {
                (by_seq(r.first.0), Some(me), true)
            } else if r.first.0 == me.seq {
                (Some(me), by_seq(r.second.0), false)
            } else if r.second.2 == site {
                (partner(&r.first.2, true), Some(me), true)
            } else if r.first.2 == site {
                (Some(me), partner(&r.second.2, false), false)
            } else {
                continue;
            };
            let (Some(before), Some(after)) = (before, after) else {
                continue;
            };
            if !seen.insert((before.seq, after.seq, r.buffer.clone())) {
                continue;
            }
            out.push((
                !second,
                Cause::MissingDependency {
                    before: short(t, before),
                    before_stream: stream_of(before),
                    after: short(t, after),
                    after_stream: stream_of(after),
                    buffer: r.buffer.clone(),
                    race: r.kind,
                },
            ));
        }
        out.sort_by_key(|(later, _)| *later);
        out.into_iter().map(|(_, c)| c).collect()
    }

    /// The ranges the launch at `at` (in `eager_calls` order) reads that no call before it
    /// wrote since the buffer's allocation.
    fn never_written(&self, at: usize, mine: &[crate::analysis::Access]) -> Vec<Cause> {
        let t = self.trace;
        // Device memory the trace allocated; a pinned region's device alias is host memory.
        let allocated: BTreeSet<BufferId> = t
            .calls
            .iter()
            .filter(|c| matches!(c.call, Call::Alloc { .. } | Call::AllocManaged { .. }))
            .filter_map(|c| match &c.ret {
                Some(Ok(Value::Buffer(b))) => Some(*b),
                _ => None,
            })
            .collect();
        let wanted: BTreeSet<BufferId> = mine
            .iter()
            .filter(|a| !a.write && !a.freed && allocated.contains(&a.buf))
            .map(|a| a.buf)
            .collect();
        if wanted.is_empty() {
            return Vec::new();
        }
        let size = |b: BufferId| t.buffer_size(b).unwrap_or(0);
        let mut written: BTreeMap<BufferId, Vec<(u64, u64)>> = BTreeMap::new();
        for i in t.initial.iter().filter(|i| wanted.contains(&i.buf)) {
            written.entry(i.buf).or_default().push((0, i.bytes));
        }
        for (c, _) in self.eager_calls().into_iter().take(at) {
            for a in accesses(t, &c.call) {
                if a.write && wanted.contains(&a.buf) {
                    written
                        .entry(a.buf)
                        .or_default()
                        .push((a.start, a.end.min(size(a.buf))));
                }
            }
        }
        let mut gaps: BTreeMap<BufferId, Vec<(u64, u64)>> = BTreeMap::new();
        for a in mine.iter().filter(|a| !a.write && wanted.contains(&a.buf)) {
            let end = a.end.min(size(a.buf));
            let mut w = written.get(&a.buf).cloned().unwrap_or_default();
            w.sort_unstable();
            let mut from = a.start;
            for (s, e) in w {
                if e <= from {
                    continue;
                }
                if s >= end {
                    break;
                }
                if s > from {
                    gaps.entry(a.buf).or_default().push((from, s));
                }
                from = from.max(e);
            }
            if from < end {
                gaps.entry(a.buf).or_default().push((from, end));
            }
        }
        let mut out = Vec::new();
        for (b, mut g) in gaps {
            g.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (s, e) in g {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            for (start, end) in merged {
                out.push(Cause::NeverWritten {
                    buffer: b.to_string(),
                    start,
                    end,
                });
            }
        }
        out
    }
}
