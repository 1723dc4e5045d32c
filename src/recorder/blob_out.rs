//! How a recording names and writes blobs (the bytes its calls carry): once per recording,
//! a large one as parts under a `Chunked` frame, big ones into the shared store when there
//! is one, and under a flight recorder into its store by a provisional id. A room of its own
//! beside `state.rs`: these are `RecState`'s methods, but they touch only the writer, the
//! blob set and the store, never the handle maps.

use super::state::RecState;
use crate::trace::*;

impl RecState {
    /// Store `bytes` as a blob (once per recording) and return its id. Larger than
    /// `CHUNK_BYTES`, they are stored as parts and a `Chunked` frame naming them.
    pub fn blob(&mut self, bytes: &[u8]) -> BlobId {
        self.blob_as(bytes, false)
    }

    /// `blob` for the bytes a device-to-host copy returned: under a flight recorder named by
    /// a number, not hashed at all (see `BlobId::numbered`; a dump names them by their hash).
    pub fn readback(&mut self, bytes: &[u8]) -> BlobId {
        self.blob_as(bytes, true)
    }

    fn blob_as(&mut self, bytes: &[u8], readback: bool) -> BlobId {
        if bytes.len() <= crate::trace::CHUNK_BYTES {
            return self.blob_part(bytes, readback);
        }
        let parts: Vec<BlobId> = bytes
            .chunks(crate::trace::CHUNK_BYTES)
            .map(|c| self.blob_part(c, readback))
            .collect();
        self.chunked(bytes.len() as u64, parts)
    }

    /// The `Chunked` frame of a blob made of `parts` (each stored already).
    pub fn chunked(&mut self, len: u64, parts: Vec<BlobId>) -> BlobId {
        let id = BlobId::chunked(len, &parts);
        if let (true, Some(f)) = (self.recording, self.flight.as_deref_mut()) {
            f.note_chunked(id, len, parts);
            return id;
        }
        if self.recording && self.blobs.insert(id) {
            self.emit(&Frame::Chunked { id, len, parts });
        }
        id
    }

    /// A blob part a snapshot worker encoded (`payload` is its `Blob` record, `crc` that
    /// record's checksum): written unless this recording has it already. Returns the payload
    /// buffer for reuse when it was not kept.
    pub fn blob_encoded(&mut self, id: BlobId, payload: Vec<u8>, crc: u32) -> Option<Vec<u8>> {
        if !self.recording {
            return Some(payload);
        }
        if let Some(f) = self.flight.as_deref_mut() {
            return f.note_blob_payload(id, payload);
        }
        if self.blobs.insert(id) {
            let len = codec::blob_head(&payload).map_or(0, |(_, len)| len);
            if self.store_takes(len) {
                self.put_in_store(id, len, &payload, crc);
            } else {
                self.emit_with(|w| w.write_encoded(FrameClass::Definition, &payload, crc));
            }
        }
        Some(payload)
    }

    /// The shared store a snapshot worker may put blobs of at least `STORE_MIN` bytes into
    /// itself, in parallel (`blob_stored` then names them): none for a flight recorder, which
    /// keeps its blobs in memory, or when not recording.
    pub fn store_for_workers(&self) -> Option<std::path::PathBuf> {
        match (self.recording, &self.flight) {
            (true, None) => self.store.clone(),
            _ => None,
        }
    }

    /// A part a snapshot worker put into the shared store (`put` is how that went; `payload`
    /// its `Blob` record, handed back for reuse): named in the trace by a `Stored` frame
    /// unless this recording has it already; a failed put stops the recording as a full disk
    /// does.
    pub fn blob_stored(
        &mut self,
        id: BlobId,
        payload: Vec<u8>,
        put: Result<(), TraceError>,
    ) -> Option<Vec<u8>> {
        if self.recording && self.blobs.insert(id) {
            let len = codec::blob_head(&payload).map_or(0, |(_, len)| len);
            self.stored(id, len, put);
        }
        Some(payload)
    }

    /// Blob `id` went into the shared store, or failed to (`put`): a `Stored` frame names it
    /// in the trace, or the recording stops as a full disk stops it (the engine goes on).
    fn stored(&mut self, id: BlobId, len: u64, put: Result<(), TraceError>) {
        match put {
            Ok(()) => self.emit(&Frame::Stored { id, len }),
            Err(e) => self.write_failed(e),
        }
    }

    /// Whether a blob of `len` bytes goes to the shared store rather than the trace.
    fn store_takes(&self, len: u64) -> bool {
        self.store.is_some() && len >= STORE_MIN as u64
    }

    /// Blob `id` into the shared store (`stored` says how that went in the trace).
    fn put_in_store(&mut self, id: BlobId, len: u64, record: &[u8], crc: u32) {
        let Some(dir) = &self.store else { return };
        let put = store_put(dir, id, record, crc);
        self.stored(id, len, put);
    }

    /// The id `blob` names these bytes by: a provisional one under a flight recorder (see
    /// `BlobId::quick`), their hash otherwise.
    pub fn blob_id(&self, bytes: &[u8]) -> BlobId {
        match (self.recording, &self.flight) {
            (true, Some(_)) => BlobId::quick(bytes),
            _ => BlobId::of(bytes),
        }
    }

    fn blob_part(&mut self, bytes: &[u8], readback: bool) -> BlobId {
        let id = match (readback, self.recording, &self.flight) {
            (true, true, Some(_)) => {
                self.readbacks += 1;
                BlobId::numbered(self.readbacks)
            }
            _ => self.blob_id(bytes),
        };
        if let (true, Some(f)) = (self.recording, self.flight.as_deref_mut()) {
            // Kept by the flight store for as long as a kept span names it; not compressed:
            // zstd on a step's readback cost a short step a fifth of its time. Nor hashed by
            // blake3: a dump names it by its hash.
            f.note_provisional(id, bytes);
            return id;
        }
        if self.recording && self.blobs.insert(id) {
            let f = crate::trace::blob_frame(id, bytes);
            if self.store_takes(bytes.len() as u64) {
                let mut record = Vec::new();
                if codec::append(&f, &mut record).is_ok() {
                    let crc = crate::trace::crc::crc32c(&record);
                    self.put_in_store(id, bytes.len() as u64, &record, crc);
                }
            } else {
                self.emit(&f);
            }
        }
        id
    }
}
