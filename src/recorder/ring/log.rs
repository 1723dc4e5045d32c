//! One span's calls and frames as the flight recorder holds them: a tag byte, LEB128 slot
//! and seq, the time as a zigzag delta; a delta record adds the bytes that patch its
//! template's call.

const KIND_CALL: u8 = 0;
const KIND_FRAME: u8 = 1;
const KIND_DELTA: u8 = 2;
/// The call returned `Ok(())`: its End record is implied.
const OK: u8 = 4;
/// The seq is written, not implied.
const SEQ: u8 = 8;

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The `n` bytes at `at`, moving `at` past them.
fn take<'a>(bytes: &'a [u8], at: &mut usize, n: u64) -> Option<&'a [u8]> {
    let end = at.checked_add(usize::try_from(n).ok()?)?;
    let r = bytes.get(*at..end)?;
    *at = end;
    Some(r)
}

fn get(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// One span's calls and frames, in the order they were recorded.
pub(crate) struct Log {
    bytes: Vec<u8>,
    calls: usize,
    /// Before the first record: what seqs and times are counted from.
    base: (u64, u64),
    last: (u64, u64),
    /// The newest call record whose End may still be folded into it: its tag's offset and
    /// its seq.
    foldable: Option<(usize, u64)>,
    /// Where the delta records that may write other buffers than their template begin:
    /// only they need reading when a checkpoint asks what the span wrote, and an engine that
    /// marks its steps makes one per step (the marker's step number), so they are found
    /// without reading the span.
    rewrite_at: Vec<usize>,
}

/// A record of a `Log`.
pub(crate) enum Record<'a> {
    Call {
        slot: u32,
        seq: u64,
        t_ns: u64,
        /// Returned `Ok(())`: its End record is implied.
        ok: bool,
    },
    /// Any other frame's payload, as encoded.
    Frame(&'a [u8]),
    /// A call made as template `slot` with `bytes` at offset `at` of its call.
    Delta {
        slot: u32,
        seq: u64,
        t_ns: u64,
        ok: bool,
        at: usize,
        bytes: &'a [u8],
    },
}

impl Log {
    /// A log whose first call follows seq `prev_seq` at time `prev_t` (a new recording:
    /// `u64::MAX`, so the first seq, 0, is implied).
    pub fn after(prev_seq: u64, prev_t: u64) -> Self {
        Log {
            bytes: Vec::new(),
            calls: 0,
            base: (prev_seq, prev_t),
            last: (prev_seq, prev_t),
            foldable: None,
            rewrite_at: Vec::new(),
        }
    }

    /// The seq and time its last call had (the next log counts from them).
    pub fn last(&self) -> (u64, u64) {
        self.last
    }

    /// A call of template `slot`.
    #[inline]
    pub fn push_call(&mut self, slot: u32, seq: u64, t_ns: u64, ok: bool) {
        let at = self.bytes.len();
        let implied = seq == self.last.0.wrapping_add(1);
        self.bytes
            .push(KIND_CALL | if ok { OK } else { 0 } | if implied { 0 } else { SEQ });
        if !implied {
            put(&mut self.bytes, seq);
        }
        put(&mut self.bytes, u64::from(slot));
        // Times are read under the recorder's lock, so they rarely go back; when they do,
        // zigzag keeps the difference small.
        let dt = t_ns.wrapping_sub(self.last.1) as i64;
        put(&mut self.bytes, ((dt << 1) ^ (dt >> 63)) as u64);
        self.last = (seq, t_ns);
        self.calls += 1;
        self.foldable = (!ok).then_some((at, seq));
    }

    /// A call kept as template `base` with `bytes` at offset `at` of its call; `ok` as for
    /// `push_call`; `scalar`: the bytes lie in its scalar arguments only.
    pub fn push_delta(
        &mut self,
        base: u32,
        (seq, t_ns, ok): (u64, u64, bool),
        (at, bytes, scalar): (usize, &[u8], bool),
    ) {
        let tag_at = self.bytes.len();
        self.push_call(base, seq, t_ns, ok);
        self.bytes[tag_at] |= KIND_DELTA;
        if !scalar {
            self.rewrite_at.push(tag_at);
        }
        put(&mut self.bytes, at as u64);
        put(&mut self.bytes, bytes.len() as u64);
        self.bytes.extend_from_slice(bytes);
    }

    /// Any other frame.
    pub fn push_frame(&mut self, payload: &[u8]) {
        self.bytes.push(KIND_FRAME);
        put(&mut self.bytes, payload.len() as u64);
        self.bytes.extend_from_slice(payload);
        self.foldable = None;
    }

    /// Call `seq` returned `Ok(())`: if it is the newest record, say so in its tag and
    /// return `true`; the caller keeps the End record otherwise.
    pub fn fold_ok(&mut self, seq: u64) -> bool {
        match self.foldable {
            Some((at, s)) if s == seq => {
                self.bytes[at] |= OK;
                self.foldable = None;
                true
            }
            _ => false,
        }
    }

    pub fn calls(&self) -> usize {
        self.calls
    }

    pub fn held_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The delta records not known to change scalar arguments only, as (template, offset, bytes); their seqs
    /// and times are not known, as those count from the records before.
    pub fn rewrite_patches(&self) -> impl Iterator<Item = (u32, usize, &[u8])> {
        self.rewrite_at.iter().filter_map(|&at| {
            let mut at = at;
            match self.read(&mut at, &mut (0, 0))? {
                Record::Delta {
                    slot, at, bytes, ..
                } => Some((slot, at, bytes)),
                Record::Call { .. } | Record::Frame(_) => None,
            }
        })
    }

    /// The records, oldest first; stops at one it cannot read.
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> {
        let mut at = 0;
        let mut last = self.base;
        std::iter::from_fn(move || self.read(&mut at, &mut last))
    }

    /// The record at offset `at` (moved past it), after a call with seq and time `last`
    /// (updated when it is a call); `None` where it cannot be read.
    fn read(&self, at: &mut usize, last: &mut (u64, u64)) -> Option<Record<'_>> {
        let b = &self.bytes;
        let tag = *b.get(*at)?;
        *at += 1;
        if tag & 3 == 3 {
            // No such kind: damaged.
            return None;
        }
        if tag & 3 == KIND_FRAME {
            let n = get(b, at)?;
            return Some(Record::Frame(take(b, at, n)?));
        }
        let seq = if tag & SEQ != 0 {
            get(b, at)?
        } else {
            last.0.wrapping_add(1)
        };
        let slot = u32::try_from(get(b, at)?).ok()?;
        let z = get(b, at)?;
        let dt = ((z >> 1) as i64) ^ -((z & 1) as i64);
        let t_ns = last.1.wrapping_add(dt as u64);
        *last = (seq, t_ns);
        let ok = tag & OK != 0;
        if tag & 3 != KIND_DELTA {
            return Some(Record::Call {
                slot,
                seq,
                t_ns,
                ok,
            });
        }
        let off = usize::try_from(get(b, at)?).ok()?;
        let n = get(b, at)?;
        Some(Record::Delta {
            slot,
            seq,
            t_ns,
            ok,
            at: off,
            bytes: take(b, at, n)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_gives_back_what_was_pushed() {
        let mut log = Log::after(u64::MAX, 0);
        log.push_call(3, 0, 1000, true);
        log.push_call(300, 1, 900, false);
        assert!(log.fold_ok(1));
        log.push_frame(b"frame");
        log.push_call(7, 9, 5000, false);
        assert!(!log.fold_ok(8), "only the newest call folds");
        let got: Vec<String> = log
            .records()
            .map(|r| match r {
                Record::Call {
                    slot,
                    seq,
                    t_ns,
                    ok,
                } => format!("{slot}/{seq}/{t_ns}/{ok}"),
                Record::Frame(p) => String::from_utf8_lossy(p).into_owned(),
                Record::Delta { .. } => "delta".into(),
            })
            .collect();
        assert_eq!(
            got,
            ["3/0/1000/true", "300/1/900/true", "frame", "7/9/5000/false"]
        );
        assert_eq!(log.calls(), 3);
        // A repeated call with an implied seq, 2 µs after the last: tag, slot, two bytes of time.
        let mut log = Log::after(0, 0);
        log.push_call(5, 1, 2000, true);
        assert_eq!(log.held_bytes(), 4);
    }

    #[test]
    fn only_deltas_that_may_rewrite_buffers_are_read_back_for_a_checkpoint() {
        let mut log = Log::after(u64::MAX, 0);
        log.push_call(1, 0, 10, true);
        log.push_delta(2, (1, 20, true), (4, b"pos", true));
        log.push_frame(b"frame");
        log.push_delta(3, (2, 30, false), (8, b"buf", false));
        log.push_call(1, 3, 40, true);
        let got: Vec<_> = log.rewrite_patches().collect();
        assert_eq!(got, [(3, 8, &b"buf"[..])]);
        assert_eq!(
            log.records().count(),
            5,
            "the scalar delta is still a record"
        );
    }

    #[test]
    fn a_damaged_log_stops_instead_of_reading_past_its_end() {
        let mut log = Log::after(u64::MAX, 0);
        log.push_frame(&[1, 2, 3]);
        log.bytes[1] = 0xff; // the length now runs past the end
        assert_eq!(log.records().count(), 0);
    }
}
