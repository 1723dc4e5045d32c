//! The file format: a 16-byte file header, then framed records.
//!
//! ```text
//! file      := magic[8] format:u16 min_reader:u16 reserved:u32  frame*
//! frame v2  := len:u32 seq:u64 hcrc:u32 crc:u32 payload[len]
//!              (hcrc: CRC32C of len and seq; crc: CRC32C of the payload; all little-endian)
//! frame v1  := len:u32 crc:u32 seq:u64 payload[len]          (crc over seq and payload)
//! ```
//!
//! Format 2 added the header checksum: with it a damaged length field is reported as
//! corruption, where format 1 could only see "the frame runs past the end" and call it a cut.
//! Format 1 files stay readable.
//!
//! Frames are written as calls happen. The file sink writes through a memory map, so a frame
//! is in the page cache the moment it is copied: a process that dies mid-call (the case a fault
//! reproducer exists for) leaves every frame it wrote, followed by zero padding that the reader
//! recognises as "cut here". Each frame's payload is stored before its header, so a process
//! killed while copying a large payload leaves a zero header there: the reader stops at it as
//! a cut and every earlier frame stays readable. The file's blocks are reserved (fallocate)
//! before they are mapped, so a full disk is a write error that stops recording, never a SIGBUS
//! in the recorded process (where the file system supports `fallocate`; on one that does not,
//! the file grows sparse, as it did before). A file sink writes to `NAME.partial` and renames it to `NAME` when
//! it is finished, so a trace that was there is replaced only by a complete one.

use super::call::Ret;
use super::codec;
use super::frame::{ArgRef, BeginRef, Frame, LaunchRef, FORMAT_VERSION, MAGIC, MIN_READER_VERSION};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Bytes before the first frame: magic, format, oldest reader, 4 reserved.
pub const FILE_HEADER_LEN: usize = 16;
/// Frame header size of the format this build writes.
pub const FRAME_HEADER_LEN: usize = 20;
pub(super) const FRAME_HEADER_LEN_V1: usize = 16;
/// No single record is this big; a length field beyond it is corruption.
pub const MAX_FRAME: usize = 1 << 30;

/// Why a trace could not be opened, read or written. Each names the file; a damaged frame
/// names its index and offset too. A cut (a file that just stops) is not an error: it is
/// `Trace::cut`.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Asked for a trace whose recording never finished: only its `.partial` file exists.
    #[error("{path} does not exist, but {partial} does: a recording that did not finish (its process died, or it is still running); open that")]
    OnlyPartial {
        /// The path asked for.
        path: PathBuf,
        /// The unfinished file beside it, which can be opened.
        partial: PathBuf,
    },
    /// The file system refused.
    #[error("cannot {what} trace {path}")]
    Io {
        /// What was being done: "read", "write"...
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file of 0 bytes.
    #[error("{path}: empty file, not a trace")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file has frames (or none) but no header frame.
    #[error("{path}: no trace header, so nothing was recorded ({reason})")]
    NoHeader {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// The first 8 bytes are not `MAGIC`.
    #[error("{path}: not a gputape trace (magic {found:02x?}, expected \"GPUTAPE\\0\")")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The bytes found there.
        found: Vec<u8>,
    },
    /// Written by a newer gputape, in a format this build cannot read.
    #[error("{path}: written in trace format {format}, which needs a reader of version {min_reader} or newer; this gputape reads format {ours}")]
    TooNew {
        /// The file.
        path: PathBuf,
        /// Its format.
        format: u16,
        /// The oldest reader it allows.
        min_reader: u16,
        /// This build's `FORMAT_VERSION`.
        ours: u16,
    },
    /// A frame whose checksum or record does not hold: damage, not a cut.
    #[error("{path}: frame {frame} at byte offset {offset} is corrupt: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The frame's index, from 0.
        frame: u64,
        /// Its byte offset in the file.
        offset: u64,
        /// What was wrong.
        detail: String,
    },
    /// A blob that could not be given: damaged, short, or missing from its store.
    #[error("{path}: blob {id}: {detail}")]
    Blob {
        /// The trace file.
        path: PathBuf,
        /// The blob, as `BlobId` prints it.
        id: String,
        /// What was wrong.
        detail: String,
    },
    /// A record the codec could not encode.
    #[error("cannot encode a trace record: {0}")]
    Encode(#[from] codec::CodecError),
}

/// Where a trace stops short of a clean end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Byte offset of the first byte not part of a complete frame.
    pub offset: u64,
    /// Number of complete frames before it.
    pub frames: u64,
    /// What was found there, in words: zero padding, a header never written, a payload cut
    /// short.
    pub reason: String,
}

/// What a frame is to a sink that keeps only part of a recording (the flight recorder):
/// definitions are kept for good, checkpoint frames belong to the checkpoint being taken, call
/// frames to the span of calls after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameClass {
    /// Header, sites, modules, kernels, blobs.
    Definition,
    /// A checkpoint of device state: initial buffers, their addresses, adopted resources.
    Checkpoint,
    /// A call's Begin and End, and what its sync revealed (async results, hashes, findings).
    Call,
}

impl FrameClass {
    fn of(f: &Frame) -> FrameClass {
        match f {
            Frame::Header(_)
            | Frame::Provenance(_)
            | Frame::Site { .. }
            | Frame::Blob { .. }
            | Frame::Chunked { .. }
            | Frame::Stored { .. }
            | Frame::BlobStore { .. }
            | Frame::Dumped(_)
            | Frame::Module(_)
            | Frame::Kernel { .. }
            | Frame::KernelElems { .. }
            | Frame::ModuleImage { .. }
            | Frame::Clock { .. }
            | Frame::Stack { .. }
            | Frame::Global { .. }
            | Frame::KernelCluster { .. }
            | Frame::KernelCooperative { .. }
            | Frame::Shared { .. } => FrameClass::Definition,
            Frame::Initial { .. } | Frame::Adopt(_) | Frame::Address { .. } => {
                FrameClass::Checkpoint
            }
            Frame::Begin(_)
            | Frame::End(_)
            | Frame::D2HResult { .. }
            | Frame::Finding(_)
            | Frame::Stop
            | Frame::Restart(_)
            | Frame::SyncHashes { .. } => FrameClass::Call,
        }
    }
}

/// Where frames go.
pub trait Sink: Send {
    /// Append bytes: the file header, or a frame's parts.
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Make what was written durable against this process dying (not the machine).
    fn flush(&mut self) -> std::io::Result<()>;
    /// Write one frame. The default writes header then payload; a sink that a dying process
    /// may leave half-written stores the payload first (see the module docs).
    fn write_frame(&mut self, header: &[u8], payload: &[u8]) -> std::io::Result<()> {
        self.write_all(header)?;
        self.write_all(payload)
    }
    /// Whether the frames written here must carry their checksums (they are kept as they
    /// are). A sink that keeps payloads only and writes them out again through a writer of its
    /// own says no, and the writer skips computing them.
    fn checksums(&self) -> bool {
        true
    }
    /// Write one frame, knowing what it is. Default: `write_frame`.
    fn write_classed(
        &mut self,
        _class: FrameClass,
        header: &[u8],
        payload: &[u8],
    ) -> std::io::Result<()> {
        self.write_frame(header, payload)
    }
    /// Trim and close.
    fn finish(&mut self) -> std::io::Result<()>;
}

/// An in-memory sink, for tests and benchmarks.
#[derive(Default)]
pub struct VecSink(pub std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);

impl Sink for VecSink {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.lock().extend_from_slice(bytes);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A file written through a growing memory map, at `NAME.partial` until finished.
pub struct MmapSink {
    file: File,
    map: Option<memmap2::MmapMut>,
    len: usize,
    cap: usize,
    /// Pages below this have been let go of (`release_written`).
    released: usize,
    /// Where the trace is written, and where it goes when finished.
    partial: PathBuf,
    path: PathBuf,
    /// Faults the map in ahead of the writer (`None`: no thread could be made).
    prefault: Option<super::prefault::Prefault>,
    /// Where the writer is when the helper is next moved on.
    lead_at: usize,
}

/// Where a file sink writes `path` until the recording finishes.
pub fn partial_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".partial");
    path.with_file_name(name)
}

const GROW: usize = 8 << 20;
/// How far past the end a grown map is faulted in for writing at once (the rest faults in as
/// it is written; its blocks are reserved either way).
const POPULATE: usize = 256 << 20;
/// How far ahead of the writer the prefault helper keeps, and how often it is moved on. Not
/// far: pages faulted in long before they are written are zeros the kernel writes back, and
/// written back they fault again on their first store.
const LEAD: usize = 32 << 20;
const LEAD_STEP: usize = 4 << 20;
/// The writer's encode scratch; a bigger frame grows it for as long as it is written.
const SCRATCH: usize = 64 << 10;

impl MmapSink {
    /// Create `NAME.partial` for `path` (truncating one a dead recording left) and reserve
    /// and map its first blocks; `finish` renames it to `path`.
    pub fn create(path: &Path) -> Result<Self, TraceError> {
        let io = |what| {
            move |source| TraceError::Io {
                what,
                path: path.to_path_buf(),
                source,
            }
        };
        let partial = partial_path(path);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&partial)
            .map_err(io("create"))?;
        let mut s = MmapSink {
            file,
            map: None,
            len: 0,
            cap: 0,
            released: 0,
            partial,
            path: path.to_path_buf(),
            prefault: super::prefault::Prefault::start(),
            lead_at: 0,
        };
        if let Err(e) = s.grow(FILE_HEADER_LEN + FRAME_HEADER_LEN) {
            let _ = std::fs::remove_file(&s.partial);
            return Err(io("reserve space for")(e));
        }
        Ok(s)
    }

    /// Reserve the file's blocks from `self.cap` to `cap`: a mapped page without a block behind
    /// it raises SIGBUS when stored to on a full disk.
    fn reserve(&self, cap: usize) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on a file descriptor this sink owns; no memory is passed.
        let r = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                self.cap as libc::off_t,
                (cap - self.cap) as libc::off_t,
            )
        };
        match r {
            0 => Ok(()),
            // A file system without fallocate: glibc emulates it; others say so. Fall back to
            // a sparse extension (the old behaviour) rather than refusing to record.
            libc::EOPNOTSUPP | libc::ENOSYS => Ok(()),
            e => Err(std::io::Error::from_raw_os_error(e)),
        }
    }

    fn grow(&mut self, need: usize) -> std::io::Result<()> {
        // Doubling, up to a gigabyte a step: a 16 GB snapshot must not reserve (or fault in)
        // another 16 GB ahead of what it writes.
        let step = self.cap.min(1 << 30);
        let want = need.max(self.cap + step).max(GROW).next_multiple_of(GROW);
        // Reserve before touching the map, so a failure leaves the current mapping (and every
        // frame in it) as it was. Short of space, try for just what this write needs.
        let cap = match self.reserve(want) {
            Ok(()) => want,
            Err(_) => {
                let exact = need.next_multiple_of(64 << 10).max(self.cap + 1);
                self.reserve(exact)?;
                exact
            }
        };
        self.let_go_of_map();
        if let Some(m) = self.map.take() {
            m.flush_async()?;
        }
        self.file.set_len(cap as u64)?;
        // SAFETY: the file is ours (created and truncated above, opened read-write) and is only
        // modified through this map while it exists; the map is dropped before any resize.
        let map = unsafe { memmap2::MmapOptions::new().map_mut(&self.file)? };
        // Fault the new pages in for writing ahead of the writer, not one by one on recorded
        // calls: on the helper's thread, else (no helper) here and now. A read populate is not
        // enough: a shared file page still takes a second, write-protect fault on its first
        // store. Kernels before 5.14 lack the advice; they fault lazily instead.
        match &self.prefault {
            Some(p) => {
                let base = map.as_ptr() as usize + self.len;
                p.retarget(base, base + (cap - self.len).min(LEAD));
                self.lead_at = self.len + LEAD_STEP;
            }
            None => {
                let ahead = (cap - self.len).min(POPULATE);
                if map
                    .advise_range(memmap2::Advice::PopulateWrite, self.len, ahead)
                    .is_err()
                {
                    map.advise_range(memmap2::Advice::WillNeed, self.len, ahead)
                        .ok();
                }
            }
        }
        self.map = Some(map);
        self.cap = cap;
        Ok(())
    }

    /// Stop the helper faulting in the current map (it is about to go), waiting for the
    /// chunk it is inside.
    fn let_go_of_map(&self) {
        if let Some(p) = &self.prefault {
            p.retarget(0, 0);
        }
    }
}

impl Sink for MmapSink {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.len + bytes.len() > self.cap {
            self.grow(self.len + bytes.len())?;
        }
        let m = self.map.as_mut().expect("mapped");
        m[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        Ok(())
    }

    fn write_frame(&mut self, header: &[u8], payload: &[u8]) -> std::io::Result<()> {
        let total = header.len() + payload.len();
        if self.len + total > self.cap {
            self.grow(self.len + total)?;
        }
        let m = self.map.as_mut().expect("mapped");
        let at = self.len;
        if payload.len() >= PWRITE_FROM {
            // A large payload goes in by pwrite: the kernel copies it into the same page cache
            // the map shows, without a page fault per 4 KiB of it (a gigabyte snapshot through
            // the map spent most of its time faulting). In the page cache on return, as a
            // store through the map is, so a kill after it keeps it.
            use std::os::unix::fs::FileExt;
            self.file
                .write_all_at(payload, (at + header.len()) as u64)?;
        } else {
            m[at + header.len()..at + total].copy_from_slice(payload);
        }
        // The header last: until it is stored the frame reads as a zero header, a cut.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        m[at..at + header.len()].copy_from_slice(header);
        self.len += total;
        self.keep_ahead();
        self.release_written();
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        // The bytes are already in the page cache; schedule writeback without waiting.
        match &self.map {
            Some(m) => m.flush_async(),
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.close()?;
        std::fs::rename(&self.partial, &self.path)
    }
}

/// Payloads at least this big are written with pwrite rather than through the map.
const PWRITE_FROM: usize = 1 << 20;

/// Written pages are let go of in steps of this many bytes (see `release_written`).
const RELEASE: usize = 64 << 20;

impl MmapSink {
    /// Let go of the pages written so far: they stay in the page cache and go to the file as
    /// they would, but stop counting in this process's resident memory, so a recording that
    /// writes gigabytes (a snapshot of an engine's weights) does not hold them all.
    /// Move the prefault helper on, `LEAD` ahead of the writer, every `LEAD_STEP` written.
    #[inline]
    fn keep_ahead(&mut self) {
        if self.len < self.lead_at {
            return;
        }
        self.lead_at = self.len + LEAD_STEP;
        if let (Some(m), Some(p)) = (&self.map, &self.prefault) {
            p.extend(m.as_ptr() as usize + self.cap.min(self.len + LEAD));
        }
    }

    fn release_written(&mut self) {
        const PAGE: usize = 4096;
        let end = self.len / PAGE * PAGE;
        if end < self.released + RELEASE {
            return;
        }
        if let Some(m) = &self.map {
            // SAFETY: a shared mapping of our own file; DONTNEED drops this process's page
            // table entries for [released, end) only, and the kernel keeps their contents in
            // the page cache and the file (reading them again would see the same bytes). The
            // range lies inside the map, and nothing holds a reference into it.
            let _ = unsafe {
                m.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.released,
                    end - self.released,
                )
            };
        }
        self.released = end;
    }

    /// Flush and trim the file, leaving it at its `.partial` name.
    fn close(&mut self) -> std::io::Result<()> {
        self.let_go_of_map();
        if let Some(m) = self.map.take() {
            m.flush()?;
        }
        self.file.set_len(self.len as u64)?;
        self.file.sync_data()
    }
}

/// Dropped unfinished (a recorder dropped without `stop`, an error path): what was written
/// stays readable at the `.partial` name, and whatever trace had the real name is untouched.
impl Drop for MmapSink {
    fn drop(&mut self) {
        if self.map.is_some() {
            let _ = self.close();
        }
    }
}

/// A frame header for a payload of `len` bytes at `seq`: with checksums (the header's, and
/// the payload's from `crc`, asked for only then) where the sink keeps them.
#[inline]
fn fill_header(
    header: &mut [u8],
    len: usize,
    seq: u64,
    checksummed: bool,
    crc: impl FnOnce() -> u32,
) {
    header[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    header[4..12].copy_from_slice(&seq.to_le_bytes());
    if checksummed {
        let hcrc = super::crc::crc32c(&header[0..12]);
        header[12..16].copy_from_slice(&hcrc.to_le_bytes());
        header[16..20].copy_from_slice(&crc().to_le_bytes());
    }
}

/// One framed record into the sink.
#[inline]
fn send(
    sink: &mut dyn Sink,
    class: FrameClass,
    header: &[u8],
    payload: &[u8],
) -> Result<(), TraceError> {
    sink.write_classed(class, header, payload)
        .map_err(|source| TraceError::Io {
            what: "write",
            path: PathBuf::from("<trace sink>"),
            source,
        })
}

/// Frames a stream of records into a sink.
pub struct TraceWriter {
    sink: Box<dyn Sink>,
    buf: Vec<u8>,
    next_seq: u64,
    /// Bytes handed to the sink so far, file header included.
    pub bytes_written: u64,
    /// The sink keeps frames as they are (a file): they carry their checksums. A sink that
    /// re-frames what it keeps (the flight recorder's) does not need them computed.
    checksummed: bool,
    /// Keep each frame for `take_last` (`keep_last`), and what the last one was.
    keep_last: bool,
    last: Option<FrameClass>,
}

impl TraceWriter {
    /// A writer over `sink`, which gets the file header at once.
    pub fn new(mut sink: Box<dyn Sink>) -> std::io::Result<Self> {
        let checksummed = sink.checksums();
        let mut head = [0u8; FILE_HEADER_LEN];
        head[..8].copy_from_slice(&MAGIC);
        head[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        head[10..12].copy_from_slice(&MIN_READER_VERSION.to_le_bytes());
        sink.write_all(&head)?;
        Ok(TraceWriter {
            sink,
            buf: Vec::with_capacity(SCRATCH),
            next_seq: 0,
            bytes_written: FILE_HEADER_LEN as u64,
            checksummed,
            keep_last: false,
            last: None,
        })
    }

    /// Keep each frame written until the next, for `take_last`: a recorder that keeps its
    /// frames in a store of its own (the flight recorder's) writes through a sink that keeps
    /// nothing, and takes each frame from here.
    pub fn keep_last(&mut self) {
        self.keep_last = true;
    }

    /// The class and payload of the frame written last, once (`keep_last` only).
    pub fn take_last(&mut self) -> Option<(FrameClass, &[u8])> {
        let class = self.last.take()?;
        Some((class, self.buf.get(FRAME_HEADER_LEN..)?))
    }

    /// Encode and write one frame. Allocation-free once the scratch buffer has grown.
    pub fn write(&mut self, frame: &Frame) -> Result<(), TraceError> {
        let class = FrameClass::of(frame);
        self.write_with(class, |buf| codec::append(frame, buf))
    }

    /// Write a frame already encoded (a payload kept by a sink that re-frames it).
    pub fn write_payload(&mut self, class: FrameClass, payload: &[u8]) -> Result<(), TraceError> {
        self.write_with(class, |buf| {
            buf.extend_from_slice(payload);
            Ok(())
        })
    }

    /// Write a record already encoded, with the payload checksum `crc` computed by whoever
    /// encoded it (the recorder's snapshot workers): the payload is copied once, into the
    /// sink, and not checksummed again here.
    pub fn write_encoded(
        &mut self,
        class: FrameClass,
        payload: &[u8],
        crc: u32,
    ) -> Result<(), TraceError> {
        self.last = None;
        let mut header = [0u8; FRAME_HEADER_LEN];
        fill_header(
            &mut header,
            payload.len(),
            self.next_seq,
            self.checksummed,
            || crc,
        );
        send(self.sink.as_mut(), class, &header, payload)?;
        if self.keep_last {
            self.buf.clear();
            self.buf.extend_from_slice(&header);
            self.buf.extend_from_slice(payload);
            self.last = Some(class);
        }
        self.next_seq += 1;
        self.bytes_written += (FRAME_HEADER_LEN + payload.len()) as u64;
        Ok(())
    }

    /// Write a call's Begin frame from a borrowed call (the recorder's hot path).
    pub fn write_begin<C: serde::Serialize + ?Sized>(
        &mut self,
        begin: &BeginRef<'_, C>,
    ) -> Result<(), TraceError> {
        self.write_with(FrameClass::Call, |buf| codec::append(begin, buf))
    }

    /// Write a launch's Begin frame: `head` with `launch` as its call.
    #[inline]
    pub fn write_launch_begin<'a, F: Fn(usize) -> ArgRef<'a>>(
        &mut self,
        head: &BeginRef<'_, ()>,
        launch: &LaunchRef<F>,
    ) -> Result<(), TraceError> {
        self.write_with(FrameClass::Call, |buf| {
            codec::append_launch_begin(head, launch, buf);
            Ok(())
        })
    }

    /// Write a call's End frame.
    #[inline]
    pub fn write_end(&mut self, seq: u64, dur_ns: u64, ret: &Ret) -> Result<(), TraceError> {
        self.write_with(FrameClass::Call, |buf| {
            codec::append_end(seq, dur_ns, ret, buf)
        })
    }

    /// Frame the record `encode` appends.
    #[inline]
    fn write_with(
        &mut self,
        class: FrameClass,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(), codec::CodecError>,
    ) -> Result<(), TraceError> {
        if self.buf.capacity() > 4 * SCRATCH {
            // A big blob passed through: do not hold its size for the rest of the recording.
            self.buf = Vec::with_capacity(SCRATCH);
        }
        self.last = None;
        let buf = &mut self.buf;
        buf.clear();
        buf.resize(FRAME_HEADER_LEN, 0);
        let encoded = encode(buf);
        let len = buf.len() - FRAME_HEADER_LEN;
        encoded?;
        let total = buf.len() as u64;
        let (header, payload) = buf.split_at_mut(FRAME_HEADER_LEN);
        fill_header(header, len, self.next_seq, self.checksummed, || {
            super::crc::crc32c(payload)
        });
        send(self.sink.as_mut(), class, header, payload)?;
        self.next_seq += 1;
        self.bytes_written += total;
        if self.keep_last {
            self.last = Some(class);
        }
        Ok(())
    }

    /// `Sink::flush`: what was written survives this process dying.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.sink.flush()
    }

    /// `Sink::finish`: trim and close; a file sink renames `NAME.partial` to `NAME`.
    pub fn finish(&mut self) -> std::io::Result<()> {
        self.sink.finish()
    }
}
