//! Device addresses hidden inside buffer contents.
//!
//! The replayer rewrites every address a call passes, but not the bytes a call copies: a buffer
//! that holds pointers (a block table of device addresses, a pointer array for a batched GEMM)
//! would point into the recorded process's memory. With the recorded addresses in the trace,
//! such words can be found; the replay must then put the pointed-to buffers back at their
//! recorded addresses, or refuse.

use crate::trace::*;
use std::collections::BTreeMap;

/// One device address found in recorded bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HiddenPointer {
    /// The buffer whose contents hold the address, and where.
    pub holder: BufferId,
    /// Where in the holder the address lies, in bytes from its start.
    pub offset: u64,
    /// The buffer it points into.
    pub target: BufferId,
    /// The call that wrote it (`None`: the initial snapshot).
    pub seq: Option<u64>,
}

/// Addresses below this are small integers, not pointers.
const MIN_ADDR: u64 = 1 << 32;

/// Every 8-byte-aligned word of bytes the trace puts on the device that falls inside a
/// recorded buffer. Empty when the trace has no recorded addresses.
pub fn hidden_pointers(t: &Trace) -> Vec<HiddenPointer> {
    let mut ranges: BTreeMap<u64, (u64, BufferId)> = BTreeMap::new();
    for (b, a) in &t.addresses {
        if let Some(size) = t.buffer_size(*b) {
            // A size no buffer at this address can have (the trace says so; it is untrusted)
            // ends at the top of the address space.
            ranges.insert(*a, (a.saturating_add(size.max(1)), *b));
        }
    }
    if ranges.is_empty() {
        return Vec::new();
    }
    let (lo, hi) = (
        *ranges.keys().next().expect("non-empty"),
        ranges.values().map(|r| r.0).max().expect("non-empty"),
    );
    // What to scan: each initial buffer's parts, and each copy into a buffer, as (holder,
    // where the part starts in it, the part's blob, bytes to skip to the first aligned word,
    // the call). Parts are whole multiples of 8 bytes long, so every part of a copy is as far
    // from alignment as its first.
    let mut jobs: Vec<(BufferId, u64, BlobId, usize, Option<u64>)> = Vec::new();
    for i in &t.initial {
        for (part, at) in t.blobs.layout(&i.data).ok().flatten().unwrap_or_default() {
            jobs.push((i.buf, at, part, 0, None));
        }
    }
    for c in &t.calls {
        match &c.call {
            Call::CopyH2D {
                dst: DevAddr::Buf { buf, off },
                data,
                ..
            }
            | Call::CopyH2DAsync {
                dst: DevAddr::Buf { buf, off },
                data,
                ..
            }
            | Call::CopyH2DAsyncRetained {
                dst: DevAddr::Buf { buf, off },
                data,
                ..
            } => {
                let skip = ((8 - off % 8) % 8) as usize;
                for (part, at) in t.blobs.layout(data).ok().flatten().unwrap_or_default() {
                    jobs.push((*buf, off.saturating_add(at), part, skip, Some(c.seq)));
                }
            }
            _ => {}
        }
    }
    let scan = |holder: BufferId, base_off: u64, bytes: &[u8], seq: Option<u64>| {
        let mut out = Vec::new();
        for (i, w) in bytes.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(w.try_into().expect("8"));
            if v < MIN_ADDR || v < lo || v >= hi {
                continue;
            }
            if let Some((_, (end, target))) = ranges.range(..=v).next_back() {
                if v < *end {
                    out.push(HiddenPointer {
                        holder,
                        offset: base_off.saturating_add(i as u64 * 8),
                        target: *target,
                        seq,
                    });
                }
            }
        }
        out
    };
    // On several threads, a part at a time: a trace of gigabytes is read at the disk's pace,
    // and never held. A part that cannot be read is the restore's error to report, not this
    // scan's.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = crate::backend::cores().clamp(1, 8).min(jobs.len().max(1));
    let mut found: Vec<(usize, Vec<HiddenPointer>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    let mut buf = Vec::new();
                    loop {
                        let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(holder, at, part, skip, seq)) = jobs.get(j) else {
                            return mine;
                        };
                        let room = t.blobs.len_of(&part).unwrap_or(0).min(CHUNK_BYTES as u64);
                        buf.resize(room as usize + 4096, 0);
                        if let Ok(p) = t.blobs.read_part(&part, &mut buf) {
                            let bytes = p.bytes(&buf);
                            if bytes.len() > skip {
                                let hits = scan(
                                    holder,
                                    at.saturating_add(skip as u64),
                                    &bytes[skip..],
                                    seq,
                                );
                                if !hits.is_empty() {
                                    mine.push((j, hits));
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a scan thread does not panic"))
            .collect()
    });
    // In the order of the trace: initial buffers, then calls, each part ascending.
    found.sort_by_key(|(j, _)| *j);
    found.into_iter().flat_map(|(_, h)| h).collect()
}
