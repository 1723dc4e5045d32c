//! The driver shim's call log: one file per process that called the CUDA driver under
//! `gputape run -o`, written by gputape's `libcuda.so.1` as calls return and read by gputape,
//! which turns it into a trace. One crate for both sides, so the writer and the reader cannot
//! disagree on a byte; it depends on nothing, so the shim stays small.
//!
//! The shim writes what it saw and nothing it would have to work out (which buffer an address
//! falls in, what a kernel is called when demangled): it runs inside the recorded program, on
//! its threads, and must stay cheap. Everything else is done afterwards, by the reader.
//!
//! Layout, little-endian throughout:
//!
//! ```text
//! file   := MAGIC (8) version:u16 pid:u32 driver_version:i32  record*
//! record := body_len:u32 tag:u8 t_ns:u64 thread:u32 status:i32 stack:u32 body
//! bytes  := len:u64 data      string := len:u32 utf8-ish data
//! ```
//!
//! `body_len` counts the bytes after itself. A process killed mid-write leaves a record cut
//! short at the end: the reader stops there with [`LogError::Cut`] and keeps every record
//! before it. A record of an unknown tag is refused (the reader is from an older build);
//! every length is checked against the bytes that are left, so a damaged file can ask for no
//! allocation larger than itself.

use std::fmt;

pub mod entry;
pub mod env;
mod record;
mod wire;

pub use record::Rec;
use wire::Fields;

/// The file's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"GTSHMLOG";
/// The layout this build writes. 2 added each record's `stack` (the calling Python thread's
/// frames, `Rec::Stack`) and the `Code` and `Stack` records; a layout-1 log reads as one whose
/// records have no stack.
pub const VERSION: u16 = 2;
/// The oldest layout this build reads.
pub const OLDEST_READ: u16 = 1;
/// Bytes before the first record.
pub const HEADER_LEN: usize = 8 + 2 + 4 + 4;
/// Bytes of a record's fixed part after `body_len`: tag, time, thread, status, stack.
const FIXED: usize = 1 + 8 + 4 + 4 + 4;
/// The fixed part in layout 1, which had no stack.
const FIXED_V1: usize = FIXED - 4;
/// A record's `stack` when the call's Python frames are not known: no Python in the process,
/// a thread Python never ran on, lines off, or a layout-1 log.
pub const NO_STACK: u32 = 0;

/// A record's status when the call's result is not known: an opaque call, logged before it
/// ran.
pub const STATUS_UNKNOWN: i32 = i32::MIN;
/// A launch record's type byte (`Rec::tag`), for code that accounts launches before it has
/// built the record.
pub const TAG_LAUNCH: u8 = 14;
/// A record's status when the call had not returned: a flight dump taken for a hang writes the
/// blocked calls so, just before its `Dump` record.
pub const STATUS_NOT_RETURNED: i32 = i32::MIN + 1;

/// How a hang's dump reason begins (the same words the trace's hang dumps begin with).
pub const HANG_PREFIX: &str = "hang: ";

/// Where a flight directory's notes between processes live: peers' announcements, and
/// `gputape dump PID`'s requests (`ask_path`).
pub const PEERS_DIR: &str = ".peers";

/// The file in a recording's directory where processes that exported memory through file
/// descriptors list the shim's duplicates of them, a line `PID FD` each, for the processes
/// that import it to find (the shim's `record/shareable.rs`).
pub const SHARED_FDS: &str = ".gputape-shared-fds";

/// The request `gputape dump PID` writes for process `pid` in flight directory `dir` (its text
/// is the reason): the shim's peers thread and a trait-level recorder's watcher look for it.
pub fn ask_path(dir: &std::path::Path, pid: u32) -> std::path::PathBuf {
    dir.join(PEERS_DIR).join(ask_name(pid))
}

/// The name of `ask_path`'s file, in `PEERS_DIR`.
pub fn ask_name(pid: u32) -> String {
    format!("ask.{pid}")
}

/// What the file says about the process that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The process.
    pub pid: u32,
    /// `cuDriverGetVersion`'s answer, 0 when it was not asked.
    pub driver_version: i32,
}

/// One driver call, as the shim saw it return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Nanoseconds since the process's first recorded call.
    pub t_ns: u64,
    /// The calling thread (`gettid`).
    pub thread: u32,
    /// What the driver returned (`CUresult`; 0 is success).
    pub status: i32,
    /// The calling thread's Python frames when it called (a `Rec::Stack` written before), or
    /// [`NO_STACK`].
    pub stack: u32,
    /// Which call, and its arguments and results.
    pub call: Rec<'a>,
}

/// What every record's fixed part holds besides its type: (time, thread, status, stack), as
/// in [`Record`].
pub type Head = (u64, u32, i32, u32);

/// Where a copy or memset ran: `stream` is the handle passed; `sync` says the call was the
/// blocking form (no stream argument: the legacy stream, or the per-thread one through a
/// `_ptds` form, and the host waits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct On {
    /// The stream handle as passed (0 for the blocking forms); 0 through a `_ptsz`/`_ptds`
    /// form is logged as `CU_STREAM_PER_THREAD` (2).
    pub stream: u64,
    /// The blocking form of the call.
    pub sync: bool,
}

/// The `NativeFrame` ids of a `Rec::NativeStack`'s `frames`, innermost first.
pub fn native_frames(frames: &[u8]) -> impl Iterator<Item = u32> + '_ {
    frames
        .chunks_exact(4)
        .map(|p| u32::from_le_bytes(p.try_into().expect("4 bytes")))
}

/// Whether a native module (a path) is one a program calls the driver through rather than
/// the program itself: CUDA's own libraries, PyTorch's, the C and C++ runtimes and the
/// loader. A native site names the innermost frame outside them.
pub fn native_library(module: &[u8]) -> bool {
    const LIBRARIES: [&[u8]; 22] = [
        b"libcuda.",
        b"libcudart",
        b"libcublas",
        b"libcudnn",
        b"libnccl",
        b"libnvrtc",
        b"libnvJitLink",
        b"libcufft",
        b"libcurand",
        b"libcusparse",
        b"libcusolver",
        b"libnvToolsExt",
        b"libnvperf",
        b"libcupti",
        b"libtorch",
        b"libc10",
        b"libstdc++",
        b"libc.so",
        b"libgcc_s",
        b"libgomp",
        b"ld-linux",
        b"libpython",
    ];
    let name = module
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(module, |i| &module[i + 1..]);
    LIBRARIES.iter().any(|l| name.starts_with(l))
}

/// The (code id, instruction index) pairs of a `Rec::Stack`'s `frames`, innermost first.
pub fn stack_frames(frames: &[u8]) -> impl Iterator<Item = (u32, u32)> + '_ {
    frames.chunks_exact(8).map(|p| {
        (
            u32::from_le_bytes(p[..4].try_into().expect("4 bytes")),
            u32::from_le_bytes(p[4..].try_into().expect("4 bytes")),
        )
    })
}

/// The file's header bytes.
pub fn header(h: Header) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8..10].copy_from_slice(&VERSION.to_le_bytes());
    out[10..14].copy_from_slice(&h.pid.to_le_bytes());
    out[14..18].copy_from_slice(&h.driver_version.to_le_bytes());
    out
}

/// Appends `r`'s bytes to `out`.
pub fn encode(r: &Record<'_>, out: &mut Vec<u8>) {
    let start = begin(out, r.call.tag(), (r.t_ns, r.thread, r.status, r.stack));
    record::encode_body(&r.call, out);
    end(out, start);
}

/// A record's framing and common fields: its length (filled in by `end`), type byte, time,
/// thread, status and stack. Returns where it starts.
fn begin(out: &mut Vec<u8>, tag: u8, (t_ns, thread, status, stack): Head) -> usize {
    let start = out.len();
    let mut h = [0u8; 25];
    h[4] = tag;
    h[5..13].copy_from_slice(&t_ns.to_le_bytes());
    h[13..17].copy_from_slice(&thread.to_le_bytes());
    h[17..21].copy_from_slice(&status.to_le_bytes());
    h[21..25].copy_from_slice(&stack.to_le_bytes());
    out.extend_from_slice(&h);
    start
}

/// The record begun at `start` is complete: its length.
fn end(out: &mut [u8], start: usize) {
    let body = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&body.to_le_bytes());
}

/// What a launch record holds besides its parameters' layout and bytes.
#[derive(Clone, Copy, Debug)]
pub struct LaunchHead {
    pub func: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: u64,
    pub cluster: [u32; 3],
}

/// `encode` of a `Rec::Launch` made of `h`, `layout` and `len` parameter bytes that `fill`
/// writes (into zeroed bytes: what it leaves alone is padding), without the record being
/// built first: the bytes `encode` writes for it. The flight recorder's hot path gathers the
/// parameters straight into its ring this way, with no buffer between.
pub fn encode_launch(
    out: &mut Vec<u8>,
    head: Head,
    h: &LaunchHead,
    layout: Option<&[(u32, u32)]>,
    len: usize,
    fill: impl FnOnce(&mut [u8]),
) {
    let start = begin(out, TAG_LAUNCH, head);
    launch_body(out, h, layout, len, fill);
    end(out, start);
}

/// A launch record's fields after the common ones.
fn launch_body(
    out: &mut Vec<u8>,
    h: &LaunchHead,
    layout: Option<&[(u32, u32)]>,
    len: usize,
    fill: impl FnOnce(&mut [u8]),
) {
    // The fixed part in one piece: launches are most of a log, and each small write checks
    // the buffer's capacity again.
    let mut f = [0u8; 60];
    f[..8].copy_from_slice(&h.func.to_le_bytes());
    for (i, v) in h.grid.iter().chain(&h.block).chain(&h.cluster).enumerate() {
        f[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    f[44..48].copy_from_slice(&h.shared_mem.to_le_bytes());
    f[48..56].copy_from_slice(&h.stream.to_le_bytes());
    let n = layout.map_or(u32::MAX, |l| l.len() as u32);
    f[56..60].copy_from_slice(&n.to_le_bytes());
    let pairs = layout.unwrap_or(&[]);
    out.reserve(f.len() + 8 * pairs.len() + len);
    out.extend_from_slice(&f);
    for (o, s) in pairs {
        let mut p = [0u8; 8];
        p[..4].copy_from_slice(&o.to_le_bytes());
        p[4..].copy_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&p);
    }
    wire::put::u64(out, &(len as u64));
    let at = out.len();
    out.resize(at + len, 0);
    fill(&mut out[at..]);
}

/// Why a log could not be read (past a point): what, and at which byte of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogError {
    /// The file does not begin with [`MAGIC`].
    NotALog,
    /// Written in a layout this build does not read.
    Version { found: u16 },
    /// The file ends inside the record that starts at `offset` (the process died writing it):
    /// every record before it was read.
    Cut { offset: u64 },
    /// The record at `offset` has a tag this build does not know.
    UnknownTag { offset: u64, tag: u8 },
    /// A field of the record at `offset` does not fit inside it.
    Field { offset: u64, what: &'static str },
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::NotALog => write!(f, "not a driver shim call log (no {:?} magic)", "GTSHMLOG"),
            LogError::Version { found } => write!(
                f,
                "call log layout {found}, this build reads layouts {OLDEST_READ} to {VERSION}"
            ),
            LogError::Cut { offset } => write!(
                f,
                "the log ends inside the record at byte {offset} (the process stopped while writing it)"
            ),
            LogError::UnknownTag { offset, tag } => {
                write!(f, "record at byte {offset}: unknown call tag {tag}")
            }
            LogError::Field { offset, what } => write!(
                f,
                "record at byte {offset}: its {what} runs past the record's end"
            ),
        }
    }
}

impl std::error::Error for LogError {}

/// Reads a log's header and records from its bytes.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    failed: bool,
    /// The fixed part's length in this file's layout.
    fixed: usize,
}

impl<'a> Reader<'a> {
    /// The header, and a reader positioned at the first record.
    pub fn new(bytes: &'a [u8]) -> Result<(Header, Reader<'a>), LogError> {
        if bytes.len() < 8 || bytes[..8] != MAGIC {
            return Err(LogError::NotALog);
        }
        if bytes.len() < HEADER_LEN {
            return Err(LogError::Cut { offset: 0 });
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if !(OLDEST_READ..=VERSION).contains(&version) {
            return Err(LogError::Version { found: version });
        }
        let h = Header {
            pid: u32::from_le_bytes(bytes[10..14].try_into().expect("4 bytes")),
            driver_version: i32::from_le_bytes(bytes[14..18].try_into().expect("4 bytes")),
        };
        Ok((
            h,
            Reader {
                bytes,
                pos: HEADER_LEN,
                failed: false,
                fixed: if version == 1 { FIXED_V1 } else { FIXED },
            },
        ))
    }

    /// The byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn next_record(&mut self) -> Result<Record<'a>, LogError> {
        let offset = self.pos as u64;
        let rest = &self.bytes[self.pos..];
        if rest.len() < 4 {
            return Err(LogError::Cut { offset });
        }
        let body_len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        if rest.len() - 4 < body_len {
            return Err(LogError::Cut { offset });
        }
        if body_len < self.fixed {
            return Err(LogError::Field {
                offset,
                what: "fixed part",
            });
        }
        let body = &rest[4..4 + body_len];
        let mut f = Fields {
            b: body,
            at: 0,
            offset,
        };
        let tag = f.u8("tag")?;
        let t_ns = f.u64("time")?;
        let thread = f.u32("thread")?;
        let status = f.u32("status")? as i32;
        let stack = if self.fixed == FIXED {
            f.u32("stack")?
        } else {
            NO_STACK
        };
        let call = record::decode_body(tag, &mut f)?;
        self.pos += 4 + body_len;
        Ok(Record {
            t_ns,
            thread,
            status,
            stack,
            call,
        })
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Record<'a>, LogError>;

    /// The next record; after an error, nothing more (a reader does not guess where the next
    /// record of a damaged file begins).
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.bytes.len() {
            return None;
        }
        let r = self.next_record();
        self.failed = r.is_err();
        Some(r)
    }
}

#[cfg(test)]
mod tests;
