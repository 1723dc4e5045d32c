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
            ranges.insert(*a, (a + size.max(1), *b));
        }
    }
    if ranges.is_empty() {
        return Vec::new();
    }
    let (lo, hi) = (
        *ranges.keys().next().expect("non-empty"),
        ranges.values().map(|r| r.0).max().expect("non-empty"),
    );
    let mut out = Vec::new();
    let mut scan = |holder: BufferId, base_off: u64, bytes: &[u8], seq: Option<u64>| {
        for (i, w) in bytes.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(w.try_into().expect("8"));
            if v < MIN_ADDR || v < lo || v >= hi {
                continue;
            }
            if let Some((_, (end, target))) = ranges.range(..=v).next_back() {
                if v < *end {
                    out.push(HiddenPointer {
                        holder,
                        offset: base_off + i as u64 * 8,
                        target: *target,
                        seq,
                    });
                }
            }
        }
    };
    // Part by part: a buffer of gigabytes is scanned without being held. A part that cannot
    // be read is the restore's error to report, not this scan's.
    for i in &t.initial {
        let _ = t.blobs.for_each_part(&i.data, &mut |at, b| {
            scan(i.buf, at, b, None);
            Ok(())
        });
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
                // Only aligned words of the destination are candidates (parts are whole
                // multiples of 8 bytes long, so each is as far from alignment as the first).
                let skip = ((8 - off % 8) % 8) as usize;
                let _ = t.blobs.for_each_part(data, &mut |at, b| {
                    if b.len() > skip {
                        scan(*buf, off + at + skip as u64, &b[skip..], Some(c.seq));
                    }
                    Ok(())
                });
            }
            _ => {}
        }
    }
    out
}
