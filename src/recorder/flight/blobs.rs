//! What the flight store holds of blobs: each held while a kept span names it or something
//! pins it (a device checkpoint's chunks, a live graph's uploads), on disk when large, and
//! dropped with the spans that named it.

use super::{FlightStore, Held, PINNED};
use crate::trace::BlobId;

impl FlightStore {
    /// Blobs a live graph's capture names (and their parts): kept while the graph lives.
    pub(super) fn graph_blobs(&self) -> rustc_hash::FxHashSet<BlobId> {
        let mut set = rustc_hash::FxHashSet::default();
        for g in self.graphs.values() {
            for b in &g.blobs {
                set.insert(*b);
                set.extend(self.parts.get(b).into_iter().flatten().copied());
            }
        }
        set
    }

    /// Blobs no span from `oldest` on names, and nothing pins, go (from the spill file too).
    pub(super) fn evict_before(&mut self, oldest: u64) {
        let keep = self.named_in.split_off(&oldest);
        let old = std::mem::replace(&mut self.named_in, keep);
        let graphs = self.graph_blobs();
        for id in old.into_values().flatten() {
            let stale = self
                .blobs
                .get(&id)
                .is_some_and(|(_, last)| *last < oldest && !graphs.contains(&id));
            if !stale {
                continue;
            }
            if let Some((Held::Disk(_), _)) = self.blobs.remove(&id) {
                self.spill.remove(id);
            }
            self.parts.remove(&id);
            self.provisional.remove(&id);
        }
    }

    /// Name blob `id` (held already) in span `no`, unless it is pinned.
    fn rename(&mut self, id: BlobId, no: u64) {
        if let Some(e) = self.blobs.get_mut(&id) {
            if e.1 != PINNED && e.1 != no {
                e.1 = no;
                self.named_in.entry(no).or_default().push(id);
            }
        }
    }

    /// Hold blob `id` (`payload`, its encoded frame, if it is not held yet) for as long as
    /// an unpin has not matched this pin: the device checkpoint's chunks are held so,
    /// however many checkpoints name them.
    /// A chunked blob's parts are pinned with it. False: not held, and no payload given.
    pub fn pin(&mut self, id: BlobId, payload: impl FnOnce() -> Option<Vec<u8>>) -> bool {
        if !self.blobs.contains_key(&id) {
            let Some(p) = payload() else { return false };
            self.hold(id, p, PINNED);
        }
        self.pin_held(id);
        true
    }

    /// `pin` of a blob held already (a missing part is left alone: the dump names it).
    fn pin_held(&mut self, id: BlobId) {
        if let Some(e) = self.blobs.get_mut(&id) {
            e.1 = PINNED;
        }
        *self.pins.entry(id).or_default() += 1;
        self.each_part(id, Self::pin_held);
    }

    /// `f` on each part of blob `id`, if it is chunked (parts are never chunked themselves,
    /// so `f` never needs `id`'s own list, which is lent out meanwhile).
    fn each_part(&mut self, id: BlobId, mut f: impl FnMut(&mut Self, BlobId)) {
        if let Some(parts) = self.parts.remove(&id) {
            for p in &parts {
                f(self, *p);
            }
            self.parts.insert(id, parts);
        }
    }

    /// `pin` for a chunked blob of `parts` (each pinned by its holder).
    pub fn pin_chunked(&mut self, id: BlobId, len: u64, parts: &[BlobId]) {
        if !self.blobs.contains_key(&id) {
            self.chunked_of(id, parts);
            let frame = crate::trace::Frame::Chunked {
                id,
                len,
                parts: parts.to_vec(),
            };
            self.parts.insert(id, parts.to_vec());
            let mut payload = Vec::new();
            if crate::trace::codec::append(&frame, &mut payload).is_err() {
                return;
            }
            self.pin(id, || Some(payload));
            return;
        }
        self.pin(id, || None);
    }

    /// One holder of blob `id` lets go: with the last, the blob is named by the current span
    /// (older checkpoints still name it) and goes with it.
    pub fn unpin(&mut self, id: BlobId) {
        self.each_part(id, Self::unpin);
        let Some(n) = self.pins.get_mut(&id) else {
            return;
        };
        *n -= 1;
        if *n > 0 {
            return;
        }
        self.pins.remove(&id);
        let no = self.span_no;
        if let Some(e) = self.blobs.get_mut(&id) {
            e.1 = no;
            self.named_in.entry(no).or_default().push(id);
        }
    }

    /// The parts of chunked blob `id`, if it is one held here.
    pub fn parts_of(&self, id: &BlobId) -> Option<&[BlobId]> {
        self.parts.get(id).map(Vec::as_slice)
    }

    /// Blob `id` is named by the current span; `frame` encodes it (only encoded if new). A
    /// chunked blob's parts are named with it.
    pub fn note_blob(&mut self, id: BlobId, frame: impl FnOnce() -> crate::trace::Frame) {
        self.note_encoded(id, 0, |p| crate::trace::codec::append(&frame(), p).is_ok());
    }

    /// `note_blob` for bytes held as they are under their provisional id (`BlobId::quick`
    /// or `numbered`, renamed by a dump), encoded straight from the caller's slice: a readback's bytes are
    /// copied once, not into a frame and again into its record.
    pub fn note_provisional(&mut self, id: BlobId, bytes: &[u8]) {
        // The record is the bytes and a header of a few dozen: one allocation, not a small
        // one grown twice (a step's readback is a new blob at every step).
        let mut new = false;
        self.note_encoded(id, bytes.len() + 64, |p| {
            crate::trace::codec::append_blob(id, bytes.len() as u64, false, bytes, p);
            new = true;
            true
        });
        if new {
            self.provisional.insert(id);
        }
    }

    /// A blob the span names: renamed into it if held, else encoded by `encode` (`false`:
    /// it could not be; `reserve`: about how many bytes it will write) and held.
    fn note_encoded(
        &mut self,
        id: BlobId,
        reserve: usize,
        encode: impl FnOnce(&mut Vec<u8>) -> bool,
    ) {
        if let Some(c) = self.capture.as_mut() {
            c.blobs.push(id);
        }
        let no = self.span_no;
        match self.blobs.contains_key(&id) {
            true => {
                self.rename(id, no);
                self.each_part(id, |f, p| f.rename(p, no));
            }
            false => {
                let mut payload = Vec::with_capacity(reserve);
                if encode(&mut payload) {
                    self.hold(id, payload, no);
                }
            }
        }
    }

    /// Keep new blob `id`, on disk if it is large enough and the write succeeds; gives the
    /// payload back when it went to disk.
    pub(super) fn hold(&mut self, id: BlobId, payload: Vec<u8>, no: u64) -> Option<Vec<u8>> {
        if no != PINNED {
            self.named_in.entry(no).or_default().push(id);
        }
        if self.spill.put(id, &payload) {
            self.blobs.insert(id, (Held::Disk(payload.len()), no));
            return Some(payload);
        }
        self.blobs.insert(id, (Held::Mem(payload), no));
        None
    }

    /// `note_blob` for a part already encoded; gives the buffer back for reuse unless it now
    /// holds the blob in memory.
    pub fn note_blob_payload(&mut self, id: BlobId, payload: Vec<u8>) -> Option<Vec<u8>> {
        let no = self.span_no;
        match self.blobs.contains_key(&id) {
            true => {
                self.rename(id, no);
                Some(payload)
            }
            false => self.hold(id, payload, no),
        }
    }

    /// A chunked blob of `parts` (each noted already), named by the current span.
    pub fn note_chunked(&mut self, id: BlobId, len: u64, parts: Vec<BlobId>) {
        self.chunked_of(id, &parts);
        let frame = crate::trace::Frame::Chunked {
            id,
            len,
            parts: parts.clone(),
        };
        self.parts.insert(id, parts);
        self.note_blob(id, || frame);
    }

    /// Chunked blob `id` is provisional if any of its `parts` is (a device checkpoint
    /// names a copy's upload, held under its provisional id, as a part of its buffer).
    fn chunked_of(&mut self, id: BlobId, parts: &[BlobId]) {
        if parts.iter().any(|p| self.provisional.contains(p)) {
            self.provisional.insert(id);
        }
    }
}
