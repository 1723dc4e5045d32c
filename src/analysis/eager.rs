//! Which capture the verdicts judge when none was asked for (`capture_of`): a program's own
//! first capture, or, for an eager program, its step as `torch.cuda.graph` would capture it.
//!
//! Capture verdicts for an eager program: one whose device work all runs on the legacy stream
//! (PyTorch's default), which no capture can begin on. `torch.cuda.graph` captures such a step
//! by making a side stream current, so the same work goes there: the verdicts judge the legacy
//! stream's calls as that side stream's (`CaptureQuery::moved`). Judged on one step: the
//! weights a program uploads first would otherwise be the first breaker every time, and a
//! driver-level recording has no step markers, so the step is found as the run of calls
//! between two host syncs that repeats most (`eager_step`).

use std::collections::{BTreeMap, HashMap};

use super::{main_stream, CaptureQuery};
use crate::trace::{Call, KernelId, StreamRef, Trace};

/// The step an eager program repeats: calls `range.0..range.1`, seen `times` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerStep {
    pub range: (u64, u64),
    pub times: usize,
}

/// Whether the range's device work is all the legacy stream's (none on a stream of the
/// program's own), and there is some.
pub fn is_eager(t: &Trace, range: (u64, u64)) -> bool {
    super::main_stream(t, range).is_none() && super::has_work(t, StreamRef::Legacy, range)
}

/// The last occurrence of the run of calls between host syncs (the sync that ends it
/// included) that the trace repeats most, among those with a launch and seen at least twice:
/// a loop's step. `None` when nothing repeats.
pub fn eager_step(t: &Trace) -> Option<EagerStep> {
    // What a call is, for comparing steps: its kind, and the kernel for a launch.
    type Token = (&'static str, Option<KernelId>);
    let mut runs: Vec<((u64, u64), Vec<Token>, bool)> = Vec::new();
    let mut cur: Vec<Token> = Vec::new();
    let (mut start, mut launches) = (None, false);
    for c in &t.calls {
        start.get_or_insert(c.seq);
        cur.push((c.call.kind().name(), c.call.launch().map(|(k, _)| k)));
        launches |= matches!(c.call, Call::Launch { .. } | Call::LaunchTyped { .. });
        if c.call.is_host_sync() {
            let from = start.take().expect("set above");
            runs.push(((from, c.seq + 1), std::mem::take(&mut cur), launches));
            launches = false;
        }
    }
    let mut seen: HashMap<&[Token], (usize, usize)> = HashMap::new();
    for (i, (_, tokens, launches)) in runs.iter().enumerate() {
        if *launches {
            let e = seen.entry(tokens.as_slice()).or_insert((0, i));
            e.0 += 1;
            e.1 = i;
        }
    }
    // Most repeated; of those, the longest step, then the latest.
    if let Some((_, &(times, last))) = seen
        .iter()
        .filter(|(_, (n, _))| *n >= 2)
        .max_by_key(|(tokens, (n, last))| (*n, tokens.len(), *last))
    {
        return Some(EagerStep {
            range: runs[last].0,
            times,
        });
    }
    // Steps without a host sync of their own: a loop's work between two syncs (or before the
    // end) ends with copies of its step.
    let ((from, _), tokens, _) = runs.iter().filter(|r| r.2).max_by_key(|r| r.1.len())?;
    // The run's closing sync is the loop's, not the step's.
    let body = &tokens[..tokens.len() - 1];
    let (p, times) = tail_period(body, |t| t.1.is_some())?;
    let end = from + body.len() as u64;
    Some(EagerStep {
        range: (end - p as u64, end),
        times,
    })
}

/// The shortest period `p` (holding an element `keep` accepts) that `s` ends with at least
/// twice, and how many times in a row it ends with it. Only the last `MAX_SCAN` elements are
/// looked at.
fn tail_period<T: PartialEq>(s: &[T], keep: impl Fn(&T) -> bool) -> Option<(usize, usize)> {
    const MAX_SCAN: usize = 1 << 16;
    let s = &s[s.len().saturating_sub(MAX_SCAN)..];
    let n = s.len();
    let p =
        (1..=n / 2).find(|&p| s[n - 2 * p..n - p] == s[n - p..] && s[n - p..].iter().any(&keep))?;
    let mut times = 2;
    while (times + 1) * p <= n && s[n - (times + 1) * p..n - times * p] == s[n - p..] {
        times += 1;
    }
    Some((p, times))
}

/// The capture the verdicts judge, and a note on how it was chosen when the trace is an eager
/// program's (`eager.rs`): its legacy-stream work judged as a side stream's, on its repeated
/// step unless a range was asked for.
pub(super) fn capture_of(t: &Trace, q: CaptureQuery) -> (CaptureQuery, Option<String>) {
    if let (None, (0, u64::MAX), Some((stream, range, n))) = (q.stream, q.range, own_capture(t)) {
        let site = t
            .calls
            .iter()
            .find(|c| c.seq + 1 == range.0)
            .map(|c| t.site(c.site))
            .unwrap_or_default();
        let note = format!(
            "the program captures its graphs itself ({n} capture(s) recorded): judged is its first, \
             of {stream}, calls {}..{} (begun at {site}); --stream and --range for another",
            range.0 - 1,
            range.1
        );
        return (
            CaptureQuery {
                range,
                stream: Some(stream),
                ..q
            },
            Some(note),
        );
    }
    if q.stream.is_some() || !is_eager(t, q.range) {
        let stream = q.stream.or_else(|| main_stream(t, q.range));
        return (CaptureQuery { stream, ..q }, None);
    }
    let step = (q.range == (0, u64::MAX)).then(|| eager_step(t)).flatten();
    let range = step.map_or(q.range, |s| s.range);
    let on = match step {
        Some(s) => format!(
            "on the step it repeats (calls {}..{}, seen {} times between host syncs; --range for another)",
            s.range.0, s.range.1, s.times
        ),
        None if q.range == (0, u64::MAX) => {
            "on every call (no step repeats between host syncs; --range to judge one)".into()
        }
        None => format!("on calls {}..{}", q.range.0, q.range.1),
    };
    let note = format!(
        "an eager program: its work runs on the legacy stream, which no capture can begin on; \
         judged as torch.cuda.graph captures it (the step's work moved to a side stream, \
         allocations in relaxed mode as PyTorch's allocator makes them), {on}"
    );
    (
        CaptureQuery {
            range,
            stream: Some(StreamRef::Legacy),
            ..q
        },
        Some(note),
    )
}

/// The first capture the program made itself and ended without error: its stream, its calls
/// (after `BeginCapture`, to `EndCapture` included) and how many such captures the trace holds.
fn own_capture(t: &Trace) -> Option<(StreamRef, (u64, u64), usize)> {
    let mut found = Vec::new();
    let mut open: BTreeMap<StreamRef, u64> = BTreeMap::new();
    for c in &t.calls {
        match (&c.call, &c.ret) {
            (Call::BeginCapture { stream }, Some(Ok(_))) => {
                open.insert(*stream, c.seq);
            }
            (Call::EndCapture { stream }, Some(Ok(_))) => {
                if let Some(b) = open.remove(stream) {
                    // The calls inside it, and its end (where the verdicts stop).
                    found.push((*stream, (b + 1, c.seq + 1)));
                }
            }
            _ => {}
        }
    }
    let (stream, range) = *found.first()?;
    Some((stream, range, found.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_period_is_the_shortest_repeat_the_sequence_ends_with() {
        let s = b"xyzabcabcabc";
        assert_eq!(tail_period(s, |_| true), Some((3, 3)));
        assert_eq!(tail_period(b"aaaa", |_| true), Some((1, 4)));
        // The period must hold an element `keep` accepts (a launch).
        assert_eq!(tail_period(b"xbabab", |c| *c == b'b'), Some((2, 2)));
        assert_eq!(tail_period(b"abcd", |_| true), None);
        assert_eq!(tail_period(b"", |_| true), None);
    }
}
