//! Reading frames back: from a slice, or from a file through a window so that opening a
//! trace reads its frame headers and small frames and leaves its large blobs where they are.
//! Its own room beside `format.rs` (the framing and the writers): what it trusts of a file is
//! what it has checked.

use super::codec;
use super::format::{
    Cut, TraceError, FILE_HEADER_LEN, FRAME_HEADER_LEN, FRAME_HEADER_LEN_V1, MAX_FRAME,
};
use super::frame::{Frame, FORMAT_VERSION, MAGIC};
use std::fs::File;
use std::path::Path;

/// Where a reader's bytes come from: a slice in memory, or a file read through a window, so
/// that opening a trace reads its frame headers and small frames and skips its large blobs.
pub trait Source {
    /// Bytes in all.
    fn len(&self) -> u64;
    /// No bytes at all: an empty file, which is no trace.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `n` bytes at `off`; callers keep `off + n <= len()`.
    fn get(&mut self, off: u64, n: usize) -> std::io::Result<&[u8]>;
}

impl Source for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn get(&mut self, off: u64, n: usize) -> std::io::Result<&[u8]> {
        Ok(&self[off as usize..off as usize + n])
    }
}

/// How far `zero_from` looks before it calls the rest zero padding: a recorder's padding is
/// at most its last growth step, and scanning gigabytes to name a cut is not worth it.
const ZERO_SCAN: u64 = 64 << 20;

/// A file read in windows of `WINDOW` bytes (a frame larger than that gets a window its size).
pub struct FileSource {
    file: std::sync::Arc<File>,
    len: u64,
    win: Vec<u8>,
    win_off: u64,
}

const WINDOW: usize = 1 << 20;

impl FileSource {
    /// A source over `file`, its length taken now; nothing is read until asked.
    pub fn new(file: std::sync::Arc<File>) -> std::io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(FileSource {
            file,
            len,
            win: Vec::new(),
            win_off: 0,
        })
    }
}

impl Source for FileSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn get(&mut self, off: u64, n: usize) -> std::io::Result<&[u8]> {
        use std::os::unix::fs::FileExt;
        let have = off >= self.win_off && off + n as u64 <= self.win_off + self.win.len() as u64;
        if !have {
            let want = (n.max(WINDOW) as u64).min(self.len - off) as usize;
            self.win.clear();
            self.win.try_reserve_exact(want).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::OutOfMemory,
                    format!("a {want}-byte frame does not fit in memory"),
                )
            })?;
            self.win.resize(want, 0);
            self.file.read_exact_at(&mut self.win, off)?;
            self.win_off = off;
        }
        let at = (off - self.win_off) as usize;
        Ok(&self.win[at..at + n])
    }
}

/// Whether everything from `off` on (as far as `ZERO_SCAN` looks) is zero.
fn zero_from<S: Source>(src: &mut S, off: u64) -> std::io::Result<bool> {
    let end = src.len().min(off.saturating_add(ZERO_SCAN));
    let mut at = off;
    while at < end {
        let n = ((end - at) as usize).min(WINDOW);
        if src.get(at, n)?.iter().any(|&b| b != 0) {
            return Ok(false);
        }
        at += n as u64;
    }
    Ok(true)
}

/// The offset of the first frame header at or after `from` (within `ZERO_SCAN` bytes) whose
/// header checksum holds, whose length is plausible and whose sequence number comes after
/// frame `idx`. Random bytes pass the header checksum once in 2^32 positions.
fn next_frame_header<S: Source>(src: &mut S, from: u64, idx: u64) -> std::io::Result<Option<u64>> {
    let hlen = FRAME_HEADER_LEN as u64;
    let end = src.len().min(from.saturating_add(ZERO_SCAN));
    let mut at = from;
    while at + hlen <= end {
        let n = ((end - at) as usize).min(WINDOW);
        let win = src.get(at, n)?;
        for i in 0..=(n.saturating_sub(FRAME_HEADER_LEN)) {
            let h = &win[i..i + FRAME_HEADER_LEN];
            let word = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4"));
            if super::crc::crc32c(&h[0..12]) != word(12) || h[0..12].iter().all(|&b| b == 0) {
                continue;
            }
            let seq = u64::from_le_bytes(h[4..12].try_into().expect("8"));
            if (word(0) as usize) <= MAX_FRAME && seq > idx {
                return Ok(Some(at + i as u64));
            }
        }
        // The next window starts where a header could begin that did not fit in this one.
        at += (n as u64).saturating_sub(hlen - 1).max(1);
    }
    Ok(None)
}

/// A blob frame left in its file when a trace was opened: where it is, and what its head
/// says. Its payload is checked (checksum, decoding, hash) when it is first read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LazyBlob {
    /// The blob, as its frame's head names it.
    pub id: super::BlobId,
    /// Its size uncompressed, in bytes.
    pub len: u64,
    /// The frame's index in the file, for error messages.
    pub frame: u64,
    /// Byte offset of the frame's payload in the file.
    pub payload_at: u64,
    /// Bytes of payload (compressed, if the blob is).
    pub payload_len: u32,
    /// The frame's recorded CRC32C, checked when the payload is read.
    pub crc: u32,
}

/// What `FrameReader::next_item` yields. (A frame is large, as `Frame` is, and yielded by
/// value like every frame the reader gives.)
#[allow(clippy::large_enum_variant)]
pub enum Item {
    /// A frame, read and decoded.
    Frame(Frame),
    /// A blob frame of at least the reader's lazy size, not read.
    Lazy(LazyBlob),
}

/// Reads frames one at a time. After the iterator ends, `cut` says whether (and where) the
/// bytes stopped short; a corrupt frame is yielded as an error and ends the iteration.
pub struct FrameReader<'a, S: Source = &'a [u8]> {
    path: &'a Path,
    src: S,
    len: u64,
    off: u64,
    idx: u64,
    done: bool,
    /// Format 1 frame layout (no header checksum).
    v1: bool,
    /// Blob frames of at least this many payload bytes are yielded as `Item::Lazy`.
    lazy_min: Option<usize>,
    /// Where the frame yielded last begins.
    last_at: u64,
    /// Where the bytes stopped short of a clean end, once the iteration has reached it.
    pub cut: Option<Cut>,
}

impl<'a> FrameReader<'a> {
    /// Check the file header. A clean cut inside it yields no frames and a cut.
    pub fn new(path: &'a Path, bytes: &'a [u8]) -> Result<Self, TraceError> {
        FrameReader::with_source(path, bytes)
    }
}

impl<'a, S: Source> FrameReader<'a, S> {
    /// A reader over any source; the file header is checked here.
    pub fn with_source(path: &'a Path, mut src: S) -> Result<Self, TraceError> {
        let p = || path.to_path_buf();
        let len = src.len();
        if len == 0 {
            return Err(TraceError::Empty { path: p() });
        }
        let io = |source| TraceError::Io {
            what: "read",
            path: p(),
            source,
        };
        let head = src
            .get(0, (len as usize).min(FILE_HEADER_LEN))
            .map_err(io)?;
        let n = head.len().min(8);
        if head[..n] != MAGIC[..n] {
            return Err(TraceError::BadMagic {
                path: p(),
                found: head[..n].to_vec(),
            });
        }
        let mut r = FrameReader {
            path,
            src,
            len,
            off: FILE_HEADER_LEN as u64,
            idx: 0,
            done: false,
            v1: false,
            lazy_min: None,
            last_at: 0,
            cut: None,
        };
        if len < FILE_HEADER_LEN as u64 {
            r.done = true;
            r.cut = Some(Cut {
                offset: 0,
                frames: 0,
                reason: format!("file is {len} bytes, shorter than its 16-byte header"),
            });
            return Ok(r);
        }
        let head = r.src.get(0, FILE_HEADER_LEN).map_err(io)?;
        let format = u16::from_le_bytes([head[8], head[9]]);
        let min_reader = u16::from_le_bytes([head[10], head[11]]);
        if min_reader > FORMAT_VERSION {
            return Err(TraceError::TooNew {
                path: p(),
                format,
                min_reader,
                ours: FORMAT_VERSION,
            });
        }
        r.v1 = format <= 1;
        Ok(r)
    }

    /// Leave blob frames of at least `bytes` in the source (`Item::Lazy`).
    pub fn lazy_blobs(mut self, bytes: usize) -> Self {
        self.lazy_min = Some(bytes);
        self
    }

    /// The byte offset of the frame yielded last, so that what is found wrong in a decoded
    /// frame later (a blob that does not match its hash, say) names where it is.
    pub fn last_offset(&self) -> u64 {
        self.last_at
    }

    /// Where the source ends.
    pub fn end(&self) -> u64 {
        self.len
    }

    /// Whether the source is zero from `off` on (a stopped trace padded with zeros is whole).
    pub fn zero_after(&mut self, off: u64) -> bool {
        zero_from(&mut self.src, off).unwrap_or(false)
    }

    fn stop_cut(&mut self, reason: String) -> Option<Result<Item, TraceError>> {
        self.done = true;
        self.cut = Some(Cut {
            offset: self.off,
            frames: self.idx,
            reason,
        });
        None
    }

    /// A frame that fails its checks. Followed by nothing that reads as a frame, it is a torn
    /// tail (a copy cut short, a disk that filled mid-write, garbage after a kill): the frames
    /// before it stand, and the trace is cut there. Followed by a valid frame, the damage is
    /// in the middle of the trace, which is corrupt.
    fn damaged(&mut self, detail: String) -> Option<Result<Item, TraceError>> {
        if self.v1 {
            return self.corrupt(detail);
        }
        match next_frame_header(&mut self.src, self.off + 1, self.idx) {
            Ok(None) => {
                let idx = self.idx;
                self.stop_cut(format!(
                    "frame {idx} is torn ({detail}) and nothing after it reads as a frame: the trace was cut there"
                ))
            }
            Ok(Some(at)) => self.corrupt(format!(
                "{detail} (a valid frame follows at byte {at}: the damage is inside the trace)"
            )),
            Err(e) => self.io_failed(e),
        }
    }

    fn corrupt(&mut self, detail: String) -> Option<Result<Item, TraceError>> {
        self.done = true;
        Some(Err(TraceError::Corrupt {
            path: self.path.to_path_buf(),
            frame: self.idx,
            offset: self.off,
            detail,
        }))
    }

    fn io_failed(&mut self, source: std::io::Error) -> Option<Result<Item, TraceError>> {
        self.done = true;
        Some(Err(TraceError::Io {
            what: "read",
            path: self.path.to_path_buf(),
            source,
        }))
    }

    /// The next frame, or a large blob left where it is.
    pub fn next_item(&mut self) -> Option<Result<Item, TraceError>> {
        if self.done || self.off >= self.len {
            return None;
        }
        let idx = self.idx;
        let rest = self.len - self.off;
        let hlen = if self.v1 {
            FRAME_HEADER_LEN_V1
        } else {
            FRAME_HEADER_LEN
        };
        const PADDING: &str = "zero padding: the recording process did not close the trace";
        if rest < hlen as u64 {
            let reason = match zero_from(&mut self.src, self.off) {
                Ok(true) => PADDING.to_string(),
                Ok(false) => format!("frame {idx}'s header is cut after {rest} of {hlen} bytes"),
                Err(e) => return self.io_failed(e),
            };
            return self.stop_cut(reason);
        }
        let mut head = [0u8; FRAME_HEADER_LEN];
        match self.src.get(self.off, hlen) {
            Ok(h) => head[..hlen].copy_from_slice(h),
            Err(e) => return self.io_failed(e),
        }
        let head = &head[..hlen];
        let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().expect("4"));
        let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().expect("8"));
        let (len, seq, crc) = if self.v1 {
            (u32_at(0) as usize, u64_at(8), u32_at(4))
        } else {
            (u32_at(0) as usize, u64_at(4), u32_at(16))
        };
        if head.iter().all(|&b| b == 0) {
            return match zero_from(&mut self.src, self.off) {
                Ok(true) => self.stop_cut(PADDING.into()),
                // Writers store the header after the payload: a zero header with bytes after
                // it is a frame whose writer died while copying it.
                Ok(false) => self.stop_cut(format!(
                    "frame {idx}'s header was never written (its writer stopped while storing the payload after it)"
                )),
                Err(e) => self.io_failed(e),
            };
        }
        if !self.v1 {
            let hcrc = super::crc::crc32c(&head[0..12]);
            if hcrc != u32_at(12) {
                return self.damaged(format!(
                    "header checksum {hcrc:#010x} does not match the recorded {:#010x} (length or sequence damaged)",
                    u32_at(12)
                ));
            }
        }
        if len > MAX_FRAME {
            return self.damaged(format!("length field {len} is implausible"));
        }
        if rest < (hlen + len) as u64 {
            let have = rest - hlen as u64;
            return self.stop_cut(format!(
                "frame {idx} is cut: {have} of {len} payload bytes present"
            ));
        }
        if !self.v1 && self.lazy_min.is_some_and(|m| len >= m) {
            let peek = match self.src.get(self.off + hlen as u64, len.min(64)) {
                Ok(p) => p,
                Err(e) => return self.io_failed(e),
            };
            if let Some(b) = codec::blob_shape(peek) {
                if seq != idx {
                    return self.corrupt(format!("sequence number {seq}, expected {idx}"));
                }
                // Its payload is checked when first read; its lengths now, so that nothing
                // sized from them (a whole chunked blob, say) trusts a lie until then.
                let holds = (len - b.data_at) as u64;
                let lie = if b.data_len != holds {
                    Some(format!(
                        "blob {} says its data is {} bytes, and its frame holds {holds}",
                        b.id, b.data_len
                    ))
                } else if !b.zstd && b.len != holds {
                    Some(format!(
                        "blob {} declares {} bytes, and its frame holds {holds}",
                        b.id, b.len
                    ))
                } else if b.zstd && b.len > super::blobs::MAX_BLOB {
                    Some(format!(
                        "blob {} declares {} bytes unpacked, more than a blob frame may hold ({})",
                        b.id,
                        b.len,
                        super::blobs::MAX_BLOB
                    ))
                } else {
                    None
                };
                if let Some(detail) = lie {
                    return self.damaged(detail);
                }
                let lazy = LazyBlob {
                    id: b.id,
                    len: b.len,
                    frame: idx,
                    payload_at: self.off + hlen as u64,
                    payload_len: len as u32,
                    crc,
                };
                self.last_at = self.off;
                self.off += (hlen + len) as u64;
                self.idx += 1;
                return Some(Ok(Item::Lazy(lazy)));
            }
        }
        let v1 = self.v1;
        let frame = match self.src.get(self.off, hlen + len) {
            Ok(all) => {
                let (checked, payload) = if v1 {
                    (&all[8..hlen + len], &all[hlen..hlen + len])
                } else {
                    (&all[hlen..hlen + len], &all[hlen..hlen + len])
                };
                let actual = super::crc::crc32c(checked);
                if actual != crc {
                    Err(format!(
                        "checksum {actual:#010x} does not match the recorded {crc:#010x}"
                    ))
                } else if seq != idx {
                    Err(format!("sequence number {seq}, expected {idx}"))
                } else {
                    codec::decode(payload).map_err(|e| format!("undecodable: {e}"))
                }
            }
            Err(e) => return self.io_failed(e),
        };
        match frame {
            Ok(frame) => {
                self.last_at = self.off;
                self.off += (hlen + len) as u64;
                self.idx += 1;
                Some(Ok(Item::Frame(frame)))
            }
            Err(detail) => self.damaged(detail),
        }
    }
}

impl<S: Source> Iterator for FrameReader<'_, S> {
    type Item = Result<Frame, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        // Without `lazy_blobs` every item is a frame.
        match self.next_item()? {
            Ok(Item::Frame(f)) => Some(Ok(f)),
            Ok(Item::Lazy(l)) => Some(Err(TraceError::Corrupt {
                path: self.path.to_path_buf(),
                frame: l.frame,
                offset: l.payload_at,
                detail: "a lazy blob reached a reader that reads frames only".into(),
            })),
            Err(e) => Some(Err(e)),
        }
    }
}

/// Read every complete frame of `bytes`. A clean cut (at any byte) ends the list and is
/// reported; a frame whose checksum or encoding is wrong is an error naming it.
pub fn read_frames(path: &Path, bytes: &[u8]) -> Result<(Vec<Frame>, Option<Cut>), TraceError> {
    let mut r = FrameReader::new(path, bytes)?;
    let frames = r.by_ref().collect::<Result<Vec<_>, _>>()?;
    Ok((frames, r.cut))
}
