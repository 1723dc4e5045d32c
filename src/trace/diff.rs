//! Comparing two traces' call lists with ids renamed away.

use super::*;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Renames ids by order of first appearance, so two recordings of the same program compare
/// equal even if one made an extra allocation earlier.
#[derive(Default)]
struct Canon {
    map: BTreeMap<(u8, u32), u32>,
}

impl Canon {
    fn id(&mut self, ns: u8, raw: u32) -> u32 {
        let n = self.map.len() as u32;
        *self.map.entry((ns, raw)).or_insert(n)
    }

    fn text(&mut self, t: &Trace, c: &Call) -> String {
        // Reuse the canonical rendering, then rename the ids it prints.
        let s = render::call_text(t, c);
        let mut out = String::new();
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let prefixes: [(&str, u8); 6] = [
                ("buf", 0),
                ("ev", 1),
                ("graph", 2),
                ("host", 3),
                ("s", 4),
                ("k", 5),
            ];
            let mut matched = false;
            let word_start = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
            if word_start {
                for (p, ns) in prefixes {
                    if s[i..].starts_with(p) {
                        let j = i + p.len();
                        let k = j + s[j..].bytes().take_while(|b| b.is_ascii_digit()).count();
                        if k > j && (k == bytes.len() || !bytes[k].is_ascii_alphanumeric()) {
                            let raw: u32 = s[j..k].parse().unwrap_or(0);
                            let _ = write!(out, "{p}{}", self.id(ns, raw));
                            i = k;
                            matched = true;
                            break;
                        }
                    }
                }
            }
            if !matched {
                out.push(bytes[i] as char);
                i += 1;
            }
        }
        out
    }
}

fn stats(t: &Trace) -> (usize, u64, usize, BTreeMap<String, usize>) {
    let mut allocs = 0;
    let mut bytes = 0;
    let mut syncs = 0;
    let mut launches = BTreeMap::new();
    for c in &t.calls {
        match &c.call {
            Call::Alloc { bytes: b } | Call::AllocManaged { bytes: b } => {
                allocs += 1;
                bytes += b;
            }
            Call::Launch { kernel, .. } | Call::LaunchTyped { kernel, .. } => {
                let name = t.kernel_name(*kernel);
                *launches.entry(name).or_default() += 1;
            }
            other if other.is_host_sync() => syncs += 1,
            _ => {}
        }
    }
    (allocs, bytes, syncs, launches)
}

/// A human report: the first differing call (with both sites), then the count deltas.
pub fn diff(a: &Trace, b: &Trace) -> String {
    diff_report(a, b).0
}

/// The diff's text, and whether the traces differ at all: in their calls, in what the calls
/// added up to, or in either being cut or ending inside a call (a cut trace is not a whole
/// recording, so it counts as a difference even against itself).
pub fn diff_report(a: &Trace, b: &Trace) -> (String, bool) {
    let mut s = String::new();
    let mut differs = false;
    for (name, t) in [("A", a), ("B", b)] {
        if let Some(c) = &t.cut {
            differs = true;
            let _ = writeln!(
                s,
                "{name} is cut after {} frames at byte {}: {}",
                c.frames, c.offset, c.reason
            );
        }
        if let Some(c) = t.unfinished() {
            differs = true;
            let _ = writeln!(
                s,
                "{name} ends inside call #{} ({})",
                c.seq,
                c.call.kind().name()
            );
        }
    }
    let (mut ca, mut cb) = (Canon::default(), Canon::default());
    let n = a.calls.len().max(b.calls.len());
    let mut first = None;
    for i in 0..n {
        let ta = a
            .calls
            .get(i)
            .map(|c| (ca.text(a, &c.call), a.site(c.site), c.seq));
        let tb = b
            .calls
            .get(i)
            .map(|c| (cb.text(b, &c.call), b.site(c.site), c.seq));
        if ta.as_ref().map(|x| &x.0) != tb.as_ref().map(|x| &x.0) {
            first = Some((i, ta, tb));
            break;
        }
    }
    differs |= first.is_some();
    match first {
        None => {
            let _ = writeln!(
                s,
                "call lists are identical ({} calls, ids renamed)",
                a.calls.len()
            );
        }
        Some((i, ta, tb)) => {
            let _ = writeln!(
                s,
                "first difference at call index {i} (compared with ids renamed in order of use; shown with the ids each trace recorded, as `show` prints them):"
            );
            // The calls as recorded, so `buf32` here is `buf32` in `show`.
            let show = |t: &Trace, x: &Option<(String, String, u64)>| match x {
                Some((_, site, seq)) => {
                    let c = t.calls.iter().find(|c| c.seq == *seq).expect("listed");
                    format!("#{seq} {} @ {site}", super::call_text(t, &c.call))
                }
                None => "(trace ended)".to_string(),
            };
            let _ = writeln!(s, "  A: {}", show(a, &ta));
            let _ = writeln!(s, "  B: {}", show(b, &tb));
        }
    }
    let (aa, ab, asy, al) = stats(a);
    let (ba, bb, bsy, bl) = stats(b);
    let d = |x: i64| {
        if x == 0 {
            "=".to_string()
        } else {
            format!("{x:+}")
        }
    };
    let _ = writeln!(
        s,
        "allocations: {aa} -> {ba} ({}), bytes {ab} -> {bb} ({})",
        d(ba as i64 - aa as i64),
        d(bb as i64 - ab as i64)
    );
    let _ = writeln!(
        s,
        "host syncs: {asy} -> {bsy} ({})",
        d(bsy as i64 - asy as i64)
    );
    let kernels: std::collections::BTreeSet<&String> = al.keys().chain(bl.keys()).collect();
    for k in kernels {
        let (x, y) = (
            al.get(k).copied().unwrap_or(0),
            bl.get(k).copied().unwrap_or(0),
        );
        if x != y {
            let _ = writeln!(
                s,
                "launches of {k}: {x} -> {y} ({})",
                d(y as i64 - x as i64)
            );
        }
    }
    (s, differs)
}
