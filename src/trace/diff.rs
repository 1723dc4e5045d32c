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
            Call::Launch {
                head: LaunchHead { kernel, .. },
                ..
            }
            | Call::LaunchTyped {
                head: LaunchHead { kernel, .. },
                ..
            } => {
                let name = t.kernel_name(*kernel);
                *launches.entry(name).or_default() += 1;
            }
            other if other.is_host_sync() => syncs += 1,
            _ => {}
        }
    }
    (allocs, bytes, syncs, launches)
}

/// What the two recordings' calls returned, compared: errors, readback bytes, counts, the
/// buffer hashes at syncs, and the initial snapshot. Two recordings of one step whose readbacks
/// differ are different recordings, whatever their call lists say.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ResultDiff {
    /// Calls whose results were compared (those before the first call difference).
    pub calls: usize,
    /// Readbacks compared byte for byte.
    pub readbacks: usize,
    /// Syncs whose buffer hashes were compared.
    pub sync_hashes: usize,
    /// Initial buffers compared.
    pub initial: usize,
    /// The first difference, if any.
    pub difference: Option<ResultDifference>,
}

/// One result that differs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ResultDifference {
    /// Index in the call lists (`None`: the initial snapshot).
    pub index: Option<usize>,
    /// The call's seq in trace A (`None` for the initial snapshot).
    pub seq_a: Option<u64>,
    /// The call's seq in trace B (`None` for the initial snapshot).
    pub seq_b: Option<u64>,
    /// The call as trace A recorded it.
    pub call: String,
    /// What differs, in words.
    pub what: String,
    /// For readbacks: by how much (bytes differing, the largest numeric difference and where).
    pub detail: Option<String>,
}

impl ResultDiff {
    /// The results' verdict; `partial` when the call lists differ, so only the calls before
    /// the difference were compared.
    fn text(&self, partial: bool) -> String {
        match &self.difference {
            None => format!(
                "results {}are identical ({} readbacks, {} sync hashes, {} initial buffers compared)\n",
                match partial {
                    true => format!("of the {} calls before that ", self.calls),
                    false => String::new(),
                },
                self.readbacks,
                self.sync_hashes,
                self.initial
            ),
            Some(d) => {
                let at = match (d.index, d.seq_a, d.seq_b) {
                    (Some(i), Some(x), Some(y)) => format!("call index {i} (A #{x}, B #{y})"),
                    _ => "the initial snapshot".into(),
                };
                let mut s = format!("first result difference at {at}: {}\n  {}\n", d.call, d.what);
                if let Some(x) = &d.detail {
                    s.push_str(&format!("  {x}\n"));
                }
                s
            }
        }
    }
}

/// What a call returned that can be compared across recordings (ids, which differ by
/// allocation order, are not).
fn comparable(t: &Trace, c: &CallRecord) -> Option<String> {
    Some(match &c.ret {
        None => "(unfinished)".into(),
        Some(Err(e)) => format!("error {}", e.code.map_or("?".into(), |c| c.to_string())),
        Some(Ok(v)) => match v {
            Value::Bytes(b) => format!("bytes {}", b.hex()),
            Value::Count(n) => format!("{n}"),
            Value::OptCount(n) => format!("{n:?}"),
            Value::Bool(b) => format!("{b}"),
            Value::Text(x) => format!("{x:?}"),
            _ if matches!(c.call, Call::CopyD2HAsync { .. }) => {
                format!("bytes {}", t.d2h_async.get(&c.seq)?.hex())
            }
            _ => return None,
        },
    })
}

/// Where two readbacks' bytes differ, and by how much as the element type the buffer's
/// kernels use (raw bytes where none is known).
fn bytes_detail(a: &Trace, c: &CallRecord, x: &[u8], y: &[u8]) -> String {
    let differing = x.iter().zip(y).filter(|(p, q)| p != q).count() + x.len().abs_diff(y.len());
    let first = x
        .iter()
        .zip(y)
        .position(|(p, q)| p != q)
        .unwrap_or(x.len().min(y.len()));
    let mut s = format!(
        "{differing} of {} bytes differ, the first at byte {first}",
        x.len().max(y.len())
    );
    let elem = c.call.readback_src().and_then(|d| match d {
        DevAddr::Buf { buf, .. } => super::elem_of(a, *buf, c.seq),
        _ => None,
    });
    let Some(e) = elem else {
        return s;
    };
    let val = |b: &[u8], i: usize| -> f64 {
        let w = e.size() as usize;
        b.get(i * w..)
            .and_then(|c| e.decode(c))
            .map_or(f64::NAN, |(v, _)| v)
    };
    let n = x.len().min(y.len()) / e.size() as usize;
    let mut worst: Option<(usize, f64, f64)> = None;
    for i in 0..n {
        let (p, q) = (val(x, i), val(y, i));
        if p.to_bits() == q.to_bits() {
            continue;
        }
        let d = if p.is_nan() || q.is_nan() {
            f64::INFINITY
        } else {
            (p - q).abs()
        };
        if worst.is_none_or(|(_, _, w)| d > w) {
            worst = Some((i, p, d));
        }
    }
    if let Some((i, p, d)) = worst {
        let q = val(y, i);
        s.push_str(&format!(
            "; as {}, the largest difference is {d} at element {i} ({p} in A, {q} in B)",
            e.name()
        ));
    }
    s
}

/// Compare results over the first `same` calls (those whose call text matches), then the
/// initial snapshots.
pub fn result_diff(a: &Trace, b: &Trace, same: usize) -> ResultDiff {
    let mut r = ResultDiff {
        calls: same,
        ..Default::default()
    };
    let (ia, ib) = (&a.initial, &b.initial);
    r.initial = ia.len().min(ib.len());
    let init_diff = ia.len() != ib.len()
        || ia
            .iter()
            .zip(ib)
            .any(|(x, y)| x.bytes != y.bytes || x.data != y.data);
    for i in 0..same {
        let (Some(ca), Some(cb)) = (a.calls.get(i), b.calls.get(i)) else {
            break;
        };
        let (ra, rb) = (comparable(a, ca), comparable(b, cb));
        if ca.call.readback_src().is_some() {
            r.readbacks += 1;
        }
        let hashes = (a.sync_hashes.get(&ca.seq), b.sync_hashes.get(&cb.seq));
        if let (Some(ha), Some(hb)) = hashes {
            r.sync_hashes += 1;
            let blobs = |h: &Vec<(BufferId, BlobId)>| h.iter().map(|(_, b)| *b).collect::<Vec<_>>();
            if blobs(ha) != blobs(hb) {
                r.difference = Some(ResultDifference {
                    index: Some(i),
                    seq_a: Some(ca.seq),
                    seq_b: Some(cb.seq),
                    call: call_text(a, &ca.call),
                    what: "the device buffers' hashes at this sync differ".into(),
                    detail: None,
                });
                return r;
            }
        }
        if ra == rb {
            continue;
        }
        let detail = match (&ca.ret, &cb.ret) {
            (Some(Ok(_)), Some(Ok(_))) => {
                let bytes = |t: &Trace, c: &CallRecord| -> Option<Vec<u8>> {
                    t.try_blob(t.readback_blob(c)?)
                        .ok()
                        .flatten()
                        .map(|b| b.to_vec())
                };
                match (bytes(a, ca), bytes(b, cb)) {
                    (Some(x), Some(y)) => Some(bytes_detail(a, ca, &x, &y)),
                    _ => None,
                }
            }
            _ => None,
        };
        r.difference = Some(ResultDifference {
            index: Some(i),
            seq_a: Some(ca.seq),
            seq_b: Some(cb.seq),
            call: call_text(a, &ca.call),
            what: format!(
                "A returned {}, B returned {}",
                ret_text(&ca.ret),
                ret_text(&cb.ret)
            ),
            detail,
        });
        return r;
    }
    if init_diff {
        r.difference = Some(ResultDifference {
            index: None,
            seq_a: None,
            seq_b: None,
            call: "initial snapshot".into(),
            what: format!(
                "the initial contents differ ({} buffers in A, {} in B)",
                ia.len(),
                ib.len()
            ),
            detail: None,
        });
    }
    r
}

/// A call as the diff shows it: canonical text, site, seq.
type Shown = Option<(String, String, u64)>;

/// The first call index where the two call lists differ (ids renamed in order of use), with
/// each side's call there.
fn first_call_difference(a: &Trace, b: &Trace) -> Option<(usize, Shown, Shown)> {
    let (mut ca, mut cb) = (Canon::default(), Canon::default());
    for i in 0..a.calls.len().max(b.calls.len()) {
        let ta = a
            .calls
            .get(i)
            .map(|c| (ca.text(a, &c.call), a.site(c.site), c.seq));
        let tb = b
            .calls
            .get(i)
            .map(|c| (cb.text(b, &c.call), b.site(c.site), c.seq));
        if ta.as_ref().map(|x| &x.0) != tb.as_ref().map(|x| &x.0) {
            return Some((i, ta, tb));
        }
    }
    None
}

/// How many leading calls the two traces share (their results are then comparable).
pub fn same_calls(a: &Trace, b: &Trace) -> usize {
    first_call_difference(a, b).map_or(a.calls.len().max(b.calls.len()), |(i, _, _)| i)
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
    let n = a.calls.len().max(b.calls.len());
    let first = first_call_difference(a, b);
    differs |= first.is_some();
    // Results, over the calls both traces share before the first call difference.
    let same = first.as_ref().map_or(n, |(i, _, _)| *i);
    let results = result_diff(a, b, same);
    differs |= results.difference.is_some();
    let partial = first.is_some();
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
            let show = |t: &Trace, x: &Shown| match x {
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
    let _ = write!(s, "{}", results.text(partial));
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
