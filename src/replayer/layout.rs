//! A replay's allocation and ordering as the mock carried them out: what it allocated (size,
//! the trace's buffer, where relative to the replay's other allocations and to the
//! recording's), what it freed, and per stream the work it ran in the order it ran it, with
//! the events recorded and waited for between. Read from the mock's execution log
//! (`MockGpuBackend::log_execution`), named through what the replay made (`Seen`), so a
//! replay that allocates, frees or orders otherwise than its recording shows here; the
//! trace is consulted only for names and sites. Sites keep their file, not their line, so
//! the text does not move when an unrelated line does: it is made for snapshots.

use super::{ReplayOptions, Replayer, Seen};
use crate::mock::{Executed, MockGpuBackend, Ran};
use crate::trace::{BufferId, Call, Trace, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

/// `t` replayed once on `mock` (which has the kernels the trace needs) with its execution
/// logged: the log rendered, the replay's own summary line first, and the replay's report.
pub fn replay_layout(
    t: &Trace,
    mock: &MockGpuBackend,
) -> Result<(String, super::ReplayReport), super::ReplayError> {
    mock.log_execution();
    let report = Replayer::new(t).run(mock, &ReplayOptions::default(), None, |_| {})?;
    let (log, dropped) = mock.execution_log();
    let first = report.summary().lines().next().unwrap_or("").to_string();
    let text = format!("{first}\n{}", render_layout(t, &report.seen, &log, dropped));
    Ok((text, report))
}

/// The log rendered (see the module's doc).
pub fn render_layout(t: &Trace, seen: &Seen, log: &[Executed], dropped: u64) -> String {
    let names = Names::new(t, seen);
    let mut s = String::new();
    let allocs: Vec<(u64, usize)> = log
        .iter()
        .filter_map(|e| match e {
            Executed::Alloc { base, size } => Some((*base, *size)),
            _ => None,
        })
        .collect();
    let origin = allocs.iter().map(|a| a.0).min().unwrap_or(0);
    let recorded_origin = t.addresses.values().min().copied();
    let _ = writeln!(
        s,
        "allocated ({}; at offsets from the replay's lowest address{}):",
        allocs.len(),
        if recorded_origin.is_some() {
            ", and the recording's from its lowest"
        } else {
            ""
        }
    );
    for (base, size) in &allocs {
        let placed = format!("+{:#x}", base - origin);
        match names.buf_at.get(base) {
            Some(&(id, _)) => {
                let recorded = match (t.addresses.get(&id), recorded_origin) {
                    (Some(a), Some(o)) => format!(" (recorded +{:#x})", a - o),
                    _ => String::new(),
                };
                let _ = writeln!(
                    s,
                    "  {:<7} {size:>10} B  {placed}{recorded}  {}",
                    id.to_string(),
                    names.alloc_site(id)
                );
            }
            None => {
                let _ = writeln!(s, "  {:<6} {size:>10} B  {placed}  the replay's own", "-");
            }
        }
    }
    let frees: Vec<String> = log
        .iter()
        .filter_map(|e| match e {
            Executed::Free { base } => Some(names.addr(*base)),
            _ => None,
        })
        .collect();
    let _ = writeln!(s, "freed ({}): {}", frees.len(), frees.join(", "));
    // Each stream's work in the order it ran; a number says where each item fell in the
    // whole run, so the interleaving between streams shows too.
    let mut per: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut n = 0usize;
    for e in log {
        let (stream, what) = match e {
            Executed::Alloc { .. } | Executed::Free { .. } => continue,
            Executed::Ran { stream, work } => (*stream, names.work(work)),
            Executed::Recorded { event, stream } => {
                (*stream, format!("record {}", names.event(*event)))
            }
            Executed::Waited { stream, event } => {
                (*stream, format!("wait {}", names.event(*event)))
            }
        };
        n += 1;
        per.entry(names.stream(stream))
            .or_default()
            .push(format!("{n}. {what}"));
    }
    let _ = writeln!(s, "ran, per stream ({n} in all):");
    for (stream, items) in &per {
        let _ = writeln!(s, "  {stream}:");
        for i in items {
            let _ = writeln!(s, "    {i}");
        }
    }
    if dropped > 0 {
        let _ = writeln!(s, "({dropped} more not logged)");
    }
    s
}

/// The trace's names for what the mock's log holds.
struct Names<'a> {
    seen: &'a Seen,
    /// Each placed buffer by base address: (id, bytes).
    buf_at: BTreeMap<u64, (BufferId, u64)>,
    /// Where the trace made each buffer: the call that made it, its file.
    made: std::collections::HashMap<BufferId, String>,
}

impl<'a> Names<'a> {
    fn new(t: &'a Trace, seen: &'a Seen) -> Self {
        let buf_at = seen.bufs.iter().map(|&(id, a, n)| (a, (id, n))).collect();
        let file = |site: String| site.split(':').next().unwrap_or("").to_string();
        let mut made: std::collections::HashMap<BufferId, String> = t
            .calls
            .iter()
            .filter_map(|c| match (&c.call, &c.ret) {
                (
                    Call::Alloc { .. } | Call::AllocManaged { .. } | Call::HostPtrToDevice { .. },
                    Some(Ok(Value::Buffer(b))),
                ) => Some((
                    *b,
                    format!("{} at {}", c.call.kind().name(), file(t.site(c.site))),
                )),
                _ => None,
            })
            .collect();
        for i in &t.initial {
            made.insert(i.buf, format!("initial, {}", file(t.site(i.site))));
        }
        Names { seen, buf_at, made }
    }

    /// `bufN+off` for an address inside a placed buffer (the mock never reuses addresses),
    /// else the address.
    fn addr(&self, a: u64) -> String {
        match self.buf_at.range(..=a).next_back() {
            Some((base, (id, _))) if a == *base => id.to_string(),
            Some((base, (id, n))) if a - base < *n => format!("{id}+{}", a - base),
            _ => format!("{a:#x}"),
        }
    }

    fn stream(&self, raw: u64) -> String {
        match self.seen.streams.get(&raw) {
            Some(id) => id.to_string(),
            None if raw == crate::backend::LEGACY_STREAM => "legacy".into(),
            None => format!("stream {raw} (the replay's own)"),
        }
    }

    fn event(&self, raw: u64) -> String {
        self.seen
            .events
            .get(&raw)
            .map_or_else(|| format!("event {raw}"), |e| e.to_string())
    }

    /// Where the trace allocated `id`, its file only; `initial` for a snapshot's buffer.
    fn alloc_site(&self, id: BufferId) -> String {
        self.made.get(&id).cloned().unwrap_or_default()
    }

    fn work(&self, w: &Ran) -> String {
        match w {
            Ran::Launch {
                kernel,
                grid,
                block,
            } => format!("launch {kernel} {grid:?}x{block:?}"),
            Ran::H2D { dst, len } => format!("h2d {} ({len} B)", self.addr(*dst)),
            Ran::D2H { src, len } => format!("d2h {} ({len} B)", self.addr(*src)),
            Ran::D2D { src, dst, len } => {
                format!("d2d {} -> {} ({len} B)", self.addr(*src), self.addr(*dst))
            }
            Ran::Memset { dst, value, len } => {
                format!("memset {} = {value:#04x} ({len} B)", self.addr(*dst))
            }
            Ran::Graph { graph } => format!("graph launch (graph {graph}), its nodes:"),
            Ran::Collective => "collective".into(),
        }
    }
}
