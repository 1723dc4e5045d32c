//! A trace's blobs: held in memory, left in the trace file until read (a large blob of an
//! opened trace), in a shared blob store, or made of parts (a chunked blob). Opening a trace
//! of many gigabytes reads its frame headers and small frames only; a blob is read, checked
//! and (if compressed) unpacked when it is first asked for, and a chunked one can be read one
//! part at a time (`for_each_part`) so a replay restoring it holds a part, not the buffer.

use super::format::TraceError;
use super::frame::Frame;
use super::reader::LazyBlob;
use super::BlobId;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Where a blob's bytes are.
#[derive(Clone, Debug)]
enum Entry {
    Owned(Vec<u8>),
    /// In the trace file; read (and kept) on first use.
    InFile(LazyBlob, OnceLock<Vec<u8>>),
    /// In the shared blob store; read (and kept) on first use.
    Stored(u64, OnceLock<Vec<u8>>),
    /// The concatenation of other blobs; put together (and kept) only if asked for whole.
    Chunked(u64, Vec<BlobId>, OnceLock<Vec<u8>>),
}

/// The file a trace was opened from, shared by its lazy blobs.
#[derive(Clone, Debug)]
struct Backing {
    path: PathBuf,
    file: Arc<File>,
}

/// What `for_each_part` calls with each part: its offset in the blob and its bytes.
pub type PartFn<'f> = dyn FnMut(u64, &[u8]) -> Result<(), TraceError> + 'f;

/// Every blob of a trace, by id.
#[derive(Clone, Debug, Default)]
pub struct BlobStore {
    entries: HashMap<BlobId, Entry>,
    file: Option<Backing>,
    /// The shared blob store `Frame::Stored` blobs are in.
    store: Option<PathBuf>,
}

/// A part read for a restore (`BlobStore::read_part`).
pub enum Part<'s> {
    /// In the staging buffer given, at this range.
    Staged(std::ops::Range<usize>),
    /// Held by the trace already.
    Held(&'s [u8]),
    /// Read into memory of its own (too big for the buffer, or compressed).
    Read(Vec<u8>),
}

impl Part<'_> {
    /// The bytes, given the staging buffer `read_part` was passed.
    pub fn bytes<'x>(&'x self, staging: &'x [u8]) -> &'x [u8] {
        match self {
            Part::Staged(r) => &staging[r.clone()],
            Part::Held(b) => b,
            Part::Read(v) => v,
        }
    }
}

/// A blob store directory's file for `id`.
pub fn store_path(dir: &Path, id: BlobId) -> PathBuf {
    let hex = id.hex();
    dir.join(&hex[..2]).join(format!("{hex}.blob"))
}

/// Blobs at least this big go to a shared store when a recording has one; smaller ones stay
/// in the trace (a file per few bytes costs more than it saves).
pub const STORE_MIN: usize = 64 << 10;

/// Put a blob into the store at `dir` unless it is there: `record` is its encoded `Blob`
/// record and `crc` the record's checksum. The file is a one-blob trace, written under a
/// name of its own and renamed into place, so readers see it whole or not at all and two
/// recorders storing the same bytes at once do not mix them.
pub fn store_put(dir: &Path, id: BlobId, record: &[u8], crc: u32) -> Result<(), TraceError> {
    let path = store_path(dir, id);
    if path.exists() {
        return Ok(());
    }
    let io = |what, p: &Path| {
        let p = p.to_path_buf();
        move |source| TraceError::Io {
            what,
            path: p,
            source,
        }
    };
    let parent = path.parent().expect("a store path has a parent");
    std::fs::create_dir_all(parent).map_err(io("create the directory of", &path))?;
    let tmp = parent.join(format!(
        ".{}.{}-{:?}.tmp",
        id.hex(),
        std::process::id(),
        std::thread::current().id()
    ));
    let file = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
    // Straight into the file: a copy in memory first cost each snapshot worker a part's bytes.
    let written = (|| -> Result<(), TraceError> {
        let mut w = super::TraceWriter::new(Box::new(FileSink(file))).map_err(io("write", &tmp))?;
        w.write(&Frame::Header(super::TraceHeader {
            format: super::FORMAT_VERSION,
            min_reader: super::MIN_READER_VERSION,
            gputape: env!("CARGO_PKG_VERSION").to_string(),
            backend: "blob store".into(),
            device_ordinal: 0,
            device_name: None,
            sm_count: None,
            total_memory: None,
            driver_version: None,
        }))?;
        w.write_encoded(super::FrameClass::Definition, record, crc)?;
        w.write(&Frame::Stop)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("rename into", &path)(e)
    })
}

/// A store file's sink: the file itself (a store file is whole or, at its temporary name,
/// nothing: the rename publishes it).
struct FileSink(std::fs::File);

impl super::Sink for FileSink {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        std::io::Write::write_all(&mut self.0, bytes)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The most a blob frame's data may unpack to. What a frame holds is bounded by `MAX_FRAME`;
/// a compressed blob's declared length is not, so it is held to the same bound: writers
/// compress a blob to save space in its one frame, and store anything larger than a part
/// (`CHUNK_BYTES`) as parts. A declared length past it is a lie, refused before anything is
/// sized by it.
pub const MAX_BLOB: u64 = super::format::MAX_FRAME as u64;

/// How much of a compressed blob's declared length is reserved before it is unpacked: a
/// part's worth and more (a part then unpacks into memory reserved once), while a frame that
/// declares a gigabyte and unpacks to a few bytes reserves no gigabyte. Past it the buffer
/// grows as bytes come out, fallibly.
const RESERVE_AHEAD: u64 = 64 << 20;

/// Check a blob frame's contents against its id and length, unpacking it if compressed.
pub(crate) fn verified(id: BlobId, len: u64, zstd: bool, data: Vec<u8>) -> Result<Vec<u8>, String> {
    let data = if zstd {
        unpacked(id, len, &data)?
    } else {
        data
    };
    if data.len() as u64 != len || BlobId::of(&data) != id {
        return Err(format!("blob {id} does not match its hash or length"));
    }
    Ok(data)
}

/// A compressed blob's bytes. Its declared length is checked against `MAX_BLOB` and against
/// the length its zstd frame declares (when it does) before any memory is sized by it, and
/// unpacking stops one byte past it: what a frame holds, not what it claims, decides the
/// memory used, and running out of it is this blob's error, not an abort.
fn unpacked(id: BlobId, len: u64, packed: &[u8]) -> Result<Vec<u8>, String> {
    if len > MAX_BLOB {
        return Err(format!(
            "blob {id} declares {len} bytes unpacked, more than a blob frame may hold ({MAX_BLOB})"
        ));
    }
    match zstd::zstd_safe::get_frame_content_size(packed) {
        Ok(Some(n)) if n != len => {
            return Err(format!(
                "blob {id} declares {len} bytes, and its zstd frame {n}"
            ))
        }
        Ok(_) => {}
        Err(_) => return Err(format!("blob {id}'s data does not begin a zstd frame")),
    }
    let mut out: Vec<u8> = Vec::new();
    let ahead = len.min(RESERVE_AHEAD) as usize;
    out.try_reserve_exact(ahead).map_err(|_| {
        format!("blob {id}: {ahead} bytes to unpack it into are more than this process can have")
    })?;
    // std's read_to_end grows the buffer with try_reserve: out of memory is an error.
    use std::io::Read;
    zstd::stream::read::Decoder::new(packed)
        .and_then(|d| d.take(len.saturating_add(1)).read_to_end(&mut out))
        .map_err(|e| format!("blob {id} does not decompress: {e}"))?;
    Ok(out)
}

impl BlobStore {
    /// Read lazy blobs from `file` (the trace at `path`).
    pub(crate) fn backed_by(path: &Path, file: Arc<File>) -> Self {
        BlobStore {
            file: Some(Backing {
                path: path.to_path_buf(),
                file,
            }),
            ..Default::default()
        }
    }

    /// Look for stored blobs in `dir`.
    pub fn set_store(&mut self, dir: PathBuf) {
        self.store = Some(dir);
    }

    /// Where stored blobs are looked for, if anywhere: `set_store`'s, else the trace's own
    /// `Frame::BlobStore`.
    pub fn store_dir(&self) -> Option<&Path> {
        self.store.as_deref()
    }

    /// Hold `bytes` as blob `id`, replacing any entry. The caller vouches that `id` is their
    /// id (`insert_content` computes it).
    pub fn insert(&mut self, id: BlobId, bytes: Vec<u8>) {
        self.entries.insert(id, Entry::Owned(bytes));
    }

    /// Store `bytes` under their id (chunked, as the recorder stores them, when larger than
    /// `CHUNK_BYTES`) and return it.
    pub fn insert_content(&mut self, bytes: Vec<u8>) -> BlobId {
        if bytes.len() <= super::CHUNK_BYTES {
            let id = BlobId::of(&bytes);
            self.insert(id, bytes);
            return id;
        }
        let parts: Vec<BlobId> = bytes
            .chunks(super::CHUNK_BYTES)
            .map(|c| {
                let id = BlobId::of(c);
                self.insert(id, c.to_vec());
                id
            })
            .collect();
        let id = BlobId::chunked(bytes.len() as u64, &parts);
        self.insert_chunked(id, bytes.len() as u64, parts);
        id
    }

    pub(crate) fn insert_lazy(&mut self, l: LazyBlob) {
        self.entries.insert(l.id, Entry::InFile(l, OnceLock::new()));
    }

    pub(crate) fn insert_stored(&mut self, id: BlobId, len: u64) {
        self.entries.insert(id, Entry::Stored(len, OnceLock::new()));
    }

    pub(crate) fn insert_chunked(&mut self, id: BlobId, len: u64, parts: Vec<BlobId>) {
        self.entries
            .insert(id, Entry::Chunked(len, parts, OnceLock::new()));
    }

    /// Whether the trace defines `id` (its bytes may still be in the file or the store).
    pub fn contains(&self, id: &BlobId) -> bool {
        self.entries.contains_key(id)
    }

    /// Blobs defined, parts included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No blob defined.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every blob id, parts included, in id order.
    pub fn ids(&self) -> Vec<BlobId> {
        let mut v: Vec<BlobId> = self.entries.keys().copied().collect();
        v.sort();
        v
    }

    /// The blob's length, without reading it.
    pub fn len_of(&self, id: &BlobId) -> Option<u64> {
        Some(match self.entries.get(id)? {
            Entry::Owned(v) => v.len() as u64,
            Entry::InFile(l, _) => l.len,
            Entry::Stored(len, _) | Entry::Chunked(len, _, _) => *len,
        })
    }

    /// One line on how the blobs are kept, when any is chunked or in a store (traces of
    /// small buffers have neither, and say nothing).
    pub fn summary(&self) -> Option<String> {
        let (mut chunked, mut parts, mut stored, mut bytes) = (0usize, 0usize, 0usize, 0u64);
        for e in self.entries.values() {
            match e {
                Entry::Chunked(len, p, _) => {
                    chunked += 1;
                    parts += p.len();
                    bytes += len;
                }
                Entry::Stored(..) => stored += 1,
                Entry::Owned(_) | Entry::InFile(..) => {}
            }
        }
        if chunked == 0 && stored == 0 {
            return None;
        }
        let mut line = format!(
            "blobs {} ({chunked} chunked: {parts} parts, {bytes} bytes",
            self.len()
        );
        if stored > 0 {
            let at = self
                .store
                .as_ref()
                .map_or("an unknown store".to_string(), |d| d.display().to_string());
            line.push_str(&format!("; {stored} in the blob store {at}"));
        }
        line.push(')');
        Some(line)
    }

    /// The parts of a chunked blob (`None` for any other).
    pub fn parts(&self, id: &BlobId) -> Option<&[BlobId]> {
        match self.entries.get(id)? {
            Entry::Chunked(_, parts, _) => Some(parts),
            _ => None,
        }
    }

    /// The blob whole: `Ok(None)` if the trace does not define it, an error naming the frame
    /// if its bytes are damaged. Read bytes are kept for the trace's lifetime; restoring a
    /// large buffer goes through `for_each_part` instead.
    pub fn get(&self, id: &BlobId) -> Result<Option<&[u8]>, TraceError> {
        let Some(e) = self.entries.get(id) else {
            return Ok(None);
        };
        Ok(Some(match e {
            Entry::Owned(v) => v,
            Entry::InFile(l, cell) => cached(cell, || self.read_in_file(l))?,
            Entry::Stored(len, cell) => cached(cell, || self.read_stored(id, *len))?,
            Entry::Chunked(len, parts, cell) => cached(cell, || {
                // The parts must add up to the declared length before it sizes anything.
                self.layout(id)?;
                let mut all = Vec::new();
                all.try_reserve_exact(*len as usize)
                    .map_err(|_| self.damaged(id, format!("{len} bytes do not fit in memory")))?;
                self.parts_of(id, *len, parts, &mut |_, b| {
                    all.extend_from_slice(b);
                    Ok(())
                })?;
                Ok(all)
            })?,
        }))
    }

    /// Call `f(offset, bytes)` for each part of the blob in order (the whole blob once if it
    /// is not chunked), reading each as it goes and keeping none. `Ok(false)` if the trace
    /// does not define it.
    pub fn for_each_part(&self, id: &BlobId, f: &mut PartFn<'_>) -> Result<bool, TraceError> {
        match self.entries.get(id) {
            None => Ok(false),
            Some(Entry::Chunked(len, parts, _)) => {
                self.parts_of(id, *len, parts, f)?;
                Ok(true)
            }
            Some(_) => {
                let part = self.read_part(id, &mut [])?;
                f(0, part.bytes(&[])).map(|_| true)
            }
        }
    }

    /// The parts of blob `id` in order, with where each starts: the parts of a chunked blob,
    /// or the blob itself at 0. `Ok(None)` if the trace does not define it; an error if a
    /// chunked blob's parts do not hash to its id or do not add up to its length (a restore
    /// writes each part at its offset: they must stay inside the blob).
    pub fn layout(&self, id: &BlobId) -> Result<Option<Vec<(BlobId, u64)>>, TraceError> {
        let Some(e) = self.entries.get(id) else {
            return Ok(None);
        };
        let Entry::Chunked(len, parts, _) = e else {
            return Ok(Some(vec![(*id, 0)]));
        };
        if BlobId::chunked(*len, parts) != *id {
            return Err(self.damaged(id, "its parts do not hash to its id".into()));
        }
        let mut off = 0u64;
        let mut v = Vec::with_capacity(parts.len());
        for p in parts {
            let n = self
                .len_of(p)
                .ok_or_else(|| self.damaged(id, format!("its part {p} is not in the trace")))?;
            v.push((*p, off));
            off = off.saturating_add(n);
        }
        if off != *len {
            return Err(self.damaged(id, format!("its parts hold {off} of its {len} bytes")));
        }
        Ok(Some(v))
    }

    /// Blob `id` (not a chunked one) read for a restore, into `buf` where it fits (a page-locked
    /// staging buffer, say: the upload from there runs at the link's speed) and is not held
    /// already; nothing read is kept.
    pub fn read_part(&self, id: &BlobId, buf: &mut [u8]) -> Result<Part<'_>, TraceError> {
        match self.entries.get(id) {
            None => Err(self.damaged(id, "it is not in the trace".into())),
            Some(Entry::Chunked(..)) => Err(self.damaged(id, "a part is itself chunked".into())),
            Some(Entry::Owned(v)) => Ok(Part::Held(v)),
            Some(Entry::InFile(l, cell)) => match cell.get() {
                Some(v) => Ok(Part::Held(v)),
                None if (l.payload_len as usize) <= buf.len() => self.read_in_file_into(l, buf),
                None => Ok(Part::Read(self.read_in_file(l)?)),
            },
            Some(Entry::Stored(len, cell)) => match cell.get() {
                Some(v) => Ok(Part::Held(v)),
                None => self.read_stored_into(id, *len, buf),
            },
        }
    }

    fn read_in_file_into(&self, l: &LazyBlob, buf: &mut [u8]) -> Result<Part<'_>, TraceError> {
        let Some(b) = &self.file else {
            return Err(self.damaged(&l.id, "its trace file is not open".into()));
        };
        use std::os::unix::fs::FileExt;
        let payload = &mut buf[..l.payload_len as usize];
        b.file
            .read_exact_at(payload, l.payload_at)
            .map_err(|source| TraceError::Io {
                what: "read",
                path: b.path.clone(),
                source,
            })?;
        let corrupt = |detail: String| TraceError::Corrupt {
            path: b.path.clone(),
            frame: l.frame,
            offset: l.payload_at,
            detail,
        };
        let actual = super::crc::crc32c(payload);
        if actual != l.crc {
            return Err(corrupt(format!(
                "checksum {actual:#010x} does not match the recorded {:#010x}",
                l.crc
            )));
        }
        match super::codec::blob_record(payload) {
            Some((id, len, false, at)) if id == l.id && len == l.len => {
                let data = &buf[at.clone()];
                if data.len() as u64 != len || BlobId::of(data) != id {
                    return Err(corrupt(format!(
                        "blob {id} does not match its hash or length"
                    )));
                }
                Ok(Part::Staged(at))
            }
            Some((id, len, true, at)) if id == l.id && len == l.len => {
                verified(id, len, true, buf[at].to_vec())
                    .map(Part::Read)
                    .map_err(corrupt)
            }
            _ => Err(corrupt(format!("blob {}'s frame no longer holds it", l.id))),
        }
    }

    fn parts_of(
        &self,
        id: &BlobId,
        len: u64,
        parts: &[BlobId],
        f: &mut PartFn<'_>,
    ) -> Result<(), TraceError> {
        if BlobId::chunked(len, parts) != *id {
            return Err(self.damaged(id, "its parts do not hash to its id".into()));
        }
        let mut off = 0u64;
        for p in parts {
            // Read as a restore reads it, keeping nothing; a part that is itself chunked is
            // refused there (the recorder makes parts of plain blobs), so nothing recurses.
            let part = self.read_part(p, &mut [])?;
            let bytes = part.bytes(&[]);
            if off + bytes.len() as u64 > len {
                return Err(self.damaged(id, format!("its parts run past its {len} bytes")));
            }
            f(off, bytes)?;
            off += bytes.len() as u64;
        }
        if off != len {
            return Err(self.damaged(id, format!("its parts hold {off} of its {len} bytes")));
        }
        Ok(())
    }

    fn damaged(&self, id: &BlobId, detail: String) -> TraceError {
        TraceError::Blob {
            path: self
                .file
                .as_ref()
                .map(|b| b.path.clone())
                .unwrap_or_else(|| "<trace>".into()),
            id: id.to_string(),
            detail,
        }
    }

    fn read_in_file(&self, l: &LazyBlob) -> Result<Vec<u8>, TraceError> {
        // The frame's length was checked against the file's when the trace was opened; the
        // allocation is still this blob's error if it cannot be made.
        let n = l.payload_len as usize;
        let mut buf = Vec::new();
        buf.try_reserve_exact(n).map_err(|_| {
            self.damaged(&l.id, format!("its {n}-byte frame does not fit in memory"))
        })?;
        buf.resize(n, 0);
        Ok(match self.read_in_file_into(l, &mut buf)? {
            // The data is the record less its head of a few bytes.
            Part::Staged(at) => {
                buf.truncate(at.end);
                buf.drain(..at.start);
                buf
            }
            Part::Read(v) => v,
            Part::Held(b) => b.to_vec(),
        })
    }

    fn read_stored(&self, id: &BlobId, len: u64) -> Result<Vec<u8>, TraceError> {
        let mut none: [u8; 0] = [];
        match self.read_stored_into(id, len, &mut none)? {
            Part::Read(v) => Ok(v),
            Part::Held(b) => Ok(b.to_vec()),
            Part::Staged(_) => unreachable!("nothing fits in an empty buffer"),
        }
    }

    /// Stored blob `id` read from its store file, into `buf` where it fits.
    fn read_stored_into(
        &self,
        id: &BlobId,
        len: u64,
        buf: &mut [u8],
    ) -> Result<Part<'_>, TraceError> {
        let Some(dir) = &self.store else {
            return Err(self.damaged(
                id,
                "it is in a shared blob store, and no store is known (pass --blobs DIR)".into(),
            ));
        };
        let path = store_path(dir, *id);
        if !path.exists() {
            return Err(self.damaged(
                id,
                format!(
                    "it is in a shared blob store, and {} has no {} (--blobs DIR says where the store is)",
                    dir.display(),
                    path.strip_prefix(dir).unwrap_or(&path).display()
                ),
            ));
        }
        let cannot = |e: TraceError| {
            self.damaged(
                id,
                format!("the blob store {} cannot give it: {e}", dir.display()),
            )
        };
        let t = super::Trace::open(&path).map_err(cannot)?;
        if t.blobs.len_of(id) != Some(len) {
            return Err(self.damaged(
                id,
                format!("{} does not hold it ({len} bytes)", path.display()),
            ));
        }
        match t.blobs.entries.get(id) {
            // A part of a store is a one-frame file: read straight into the staging buffer.
            Some(Entry::InFile(l, _)) if l.payload_len as usize <= buf.len() => {
                match t.blobs.read_in_file_into(l, buf).map_err(cannot)? {
                    Part::Staged(r) => Ok(Part::Staged(r)),
                    Part::Read(v) => Ok(Part::Read(v)),
                    Part::Held(b) => Ok(Part::Read(b.to_vec())),
                }
            }
            Some(Entry::InFile(l, _)) => Ok(Part::Read(t.blobs.read_in_file(l).map_err(cannot)?)),
            _ => match t.blobs.get(id).map_err(cannot)? {
                Some(b) => Ok(Part::Read(b.to_vec())),
                None => Err(self.damaged(id, format!("{} does not hold it", path.display()))),
            },
        }
    }

    /// Copy blob `id` (and, for a chunked blob, its parts) into `out`: what `minimize` and
    /// `trim` keep of the trace they cut from.
    pub fn copy_to(&self, id: &BlobId, out: &mut BlobStore) -> Result<(), TraceError> {
        if let Some(parts) = self.parts(id) {
            for p in parts {
                if let Some(b) = self.get(p)? {
                    out.insert(*p, b.to_vec());
                }
            }
            let len = self.len_of(id).unwrap_or(0);
            out.insert_chunked(*id, len, parts.to_vec());
        } else if let Some(b) = self.get(id)? {
            out.insert(*id, b.to_vec());
        }
        Ok(())
    }

    /// The frames that define every blob, parts before the chunked blobs made of them, in id
    /// order: what writing a loaded trace back out stores.
    pub fn frames(&self) -> impl Iterator<Item = Result<Frame, TraceError>> + '_ {
        let ids = self.ids();
        let (chunked, plain): (Vec<BlobId>, Vec<BlobId>) =
            ids.into_iter().partition(|id| self.parts(id).is_some());
        plain
            .into_iter()
            .map(move |id| {
                let b = self.get(&id)?.expect("listed");
                Ok(super::blob_frame(id, b))
            })
            .chain(chunked.into_iter().map(move |id| {
                Ok(Frame::Chunked {
                    id,
                    len: self.len_of(&id).expect("listed"),
                    parts: self.parts(&id).expect("chunked").to_vec(),
                })
            }))
    }
}

/// `get_or_try_init` for a `OnceLock` (not stable): the value is computed at most once per
/// winner; a failure is returned and not kept.
fn cached(
    cell: &OnceLock<Vec<u8>>,
    f: impl FnOnce() -> Result<Vec<u8>, TraceError>,
) -> Result<&[u8], TraceError> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let v = f()?;
    Ok(cell.get_or_init(|| v))
}
