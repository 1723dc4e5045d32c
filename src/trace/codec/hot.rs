//! The hand-written hot records: their own room, as they bypass serde and name variants by index.

use super::super::call::{
    Arg, ArgBytes, Args, BlobId, BufferId, Call, DevAddr, KernelId, LaunchHead, Ret, SiteId,
    StreamId, StreamRef, Value,
};
use super::super::frame::{ArgRef, Begin, BeginRef, End, Frame, LaunchRef};
use super::de::Reader;
use super::ser::{varint, Writer};
use super::CodecError;
use serde::Serialize;

/// Positions of the variants these records use, in declaration order of their enums.
/// `Frame::Blob`'s position among `Frame`'s variants.
const FRAME_BLOB: u8 = 2;
const FRAME_BEGIN: u8 = 7;
const FRAME_END: u8 = 8;
const CALL_LAUNCH: u8 = 6;
const CALL_LAUNCH_TYPED: u8 = 7;
const ARG_BUF: u8 = 0;
const ARG_VAL: u8 = 1;
const ADDR_NULL: u8 = 0;
const ADDR_BUF: u8 = 1;
const ADDR_FREED: u8 = 2;
const ADDR_UNKNOWN: u8 = 3;
const STREAM_LEGACY: u8 = 0;
const STREAM_ID: u8 = 1;
/// `Ok(Value::Unit)`: `Result::Ok`'s index, then `Value::Unit`'s.
const RET_UNIT: [u8; 2] = [0, 0];

/// Append a launch's Begin frame: `head` with `launch` as its call.
#[inline]
pub fn append_launch_begin<'a, F: Fn(usize) -> ArgRef<'a>>(
    head: &BeginRef<'_, ()>,
    launch: &LaunchRef<F>,
    out: &mut Vec<u8>,
) {
    // One reservation for the usual record: 16 varints before the arguments, and ~12 bytes
    // per argument. (Writing by index into bytes sized ahead was tried: more instructions.)
    out.reserve(96 + 12 * launch.n_args);
    out.push(FRAME_BEGIN);
    varint(out, head.seq);
    varint(out, head.thread.into());
    varint(out, head.site.0.into());
    varint(out, head.t_ns);
    out.push(if launch.typed {
        CALL_LAUNCH_TYPED
    } else {
        CALL_LAUNCH
    });
    let h = &launch.head;
    varint(out, h.kernel.0.into());
    for v in h.grid.iter().chain(&h.block) {
        varint(out, (*v).into());
    }
    varint(out, h.shared_mem.into());
    match h.stream {
        StreamRef::Legacy => out.push(STREAM_LEGACY),
        StreamRef::Id(s) => {
            out.push(STREAM_ID);
            varint(out, s.0.into());
        }
    }
    varint(out, launch.n_args as u64);
    for i in 0..launch.n_args {
        match (launch.arg)(i) {
            ArgRef::Buf(a) => {
                out.push(ARG_BUF);
                dev_addr(out, a);
            }
            ArgRef::Val(b) => {
                out.push(ARG_VAL);
                varint(out, b.len() as u64);
                out.extend_from_slice(b);
            }
        }
    }
}

#[inline(always)]
fn dev_addr(out: &mut Vec<u8>, a: DevAddr) {
    let (buf, off) = match a {
        DevAddr::Null => return out.push(ADDR_NULL),
        DevAddr::Unknown { near: None } => return out.extend_from_slice(&[ADDR_UNKNOWN, 0]),
        DevAddr::Buf { buf, off } => {
            out.push(ADDR_BUF);
            (buf, off)
        }
        DevAddr::Freed { buf, off } => {
            out.push(ADDR_FREED);
            (buf, off)
        }
        DevAddr::Unknown {
            near: Some((buf, off)),
        } => {
            out.extend_from_slice(&[ADDR_UNKNOWN, 1]);
            (buf, off)
        }
    };
    varint(out, buf.0.into());
    varint(out, off);
}

/// Append a call's End frame.
#[inline]
pub fn append_end(seq: u64, dur_ns: u64, ret: &Ret, out: &mut Vec<u8>) -> Result<(), CodecError> {
    out.reserve(24);
    out.push(FRAME_END);
    varint(out, seq);
    varint(out, dur_ns);
    match ret {
        Ok(Value::Unit) => {
            out.extend_from_slice(&RET_UNIT);
            Ok(())
        }
        other => other.serialize(Writer { out }),
    }
}

/// Where a Begin record's parts lie: its seq and time, and the byte ranges of what is left
/// (thread and site, then the call), so a flight recorder can keep a call once and name it
/// again with another seq and time.
pub struct BeginSplit {
    /// The record's seq.
    pub seq: u64,
    /// The record's time, in nanoseconds since recording started.
    pub t_ns: u64,
    /// The thread and site fields, as encoded.
    pub head: std::ops::Range<usize>,
    /// The call, as encoded, to the end of the record.
    pub call: std::ops::Range<usize>,
}

/// Split a Begin record (any call) into its parts; `None` for any other record.
pub fn split_begin(bytes: &[u8]) -> Option<BeginSplit> {
    let mut r = Reader { bytes, pos: 0 };
    if r.byte().ok()? != FRAME_BEGIN {
        return None;
    }
    let seq = r.varint(64).ok()?;
    let head_at = r.pos;
    r.varint(16).ok()?;
    r.varint(32).ok()?;
    let head_end = r.pos;
    let t_ns = r.varint(64).ok()?;
    (r.pos < bytes.len()).then_some(BeginSplit {
        seq,
        t_ns,
        head: head_at..head_end,
        call: r.pos..bytes.len(),
    })
}

/// Where each inline argument's bytes lie in a typed launch's call, as `split_begin` gives
/// it (offset, length), in argument order; `None` for any other call or a damaged one.
pub fn launch_val_spans(call: &[u8]) -> Option<Vec<(usize, usize)>> {
    let mut r = Reader {
        bytes: call,
        pos: 0,
    };
    if r.byte().ok()? != CALL_LAUNCH_TYPED {
        return None;
    }
    // Kernel, grid, block, shared memory.
    for _ in 0..8 {
        u32v(&mut r)?;
    }
    match r.byte().ok()? {
        STREAM_LEGACY => {}
        STREAM_ID => {
            u32v(&mut r)?;
        }
        _ => return None,
    }
    let n = r.count().ok()?;
    let mut spans = Vec::new();
    spans.try_reserve(n).ok()?;
    for _ in 0..n {
        match r.byte().ok()? {
            ARG_BUF => {
                read_dev_addr(&mut r)?;
            }
            ARG_VAL => {
                let len = r.len().ok()?;
                spans.push((r.pos, len));
                r.take(len).ok()?;
            }
            _ => return None,
        }
    }
    (r.pos == call.len()).then_some(spans)
}

/// A Begin record from the parts `split_begin` gave.
pub fn append_begin_split(seq: u64, t_ns: u64, head: &[u8], call: &[u8], out: &mut Vec<u8>) {
    out.reserve(20 + head.len() + call.len());
    out.push(FRAME_BEGIN);
    varint(out, seq);
    out.extend_from_slice(head);
    varint(out, t_ns);
    out.extend_from_slice(call);
}

/// An End record's seq, and whether it says `Ok(Value::Unit)` (the usual result, which a
/// flight recorder keeps as one bit); `None` for any other record.
pub fn end_seq(bytes: &[u8]) -> Option<(u64, bool)> {
    let mut r = Reader { bytes, pos: 0 };
    if r.byte().ok()? != FRAME_END {
        return None;
    }
    let seq = r.varint(64).ok()?;
    r.varint(64).ok()?;
    let unit = bytes.get(r.pos..) == Some(&RET_UNIT[..]);
    Some((seq, unit))
}

/// Decode `bytes` into `out` if it is one of the hot records, whole and well-formed; on
/// `false` the serde decoder takes it (and `out` holds nothing of value). The frame is
/// built in place: a launch's inline arguments are a few hundred bytes, and moving them
/// from a local into the call, the call into the frame and the frame into the result was a
/// third of a decode.
#[inline]
pub fn decode_into(bytes: &[u8], out: &mut Frame) -> bool {
    let mut r = Reader { bytes, pos: 0 };
    let whole = match r.byte() {
        Ok(FRAME_BEGIN) => launch_begin(&mut r, out).is_some(),
        Ok(FRAME_END) => end(&mut r, out).is_some(),
        // A blob's bytes in one copy, not serde's element by element.
        Ok(FRAME_BLOB) => match blob_record(bytes) {
            Some((id, len, zstd, at)) => {
                *out = Frame::Blob {
                    id,
                    len,
                    zstd,
                    data: bytes[at].to_vec(),
                };
                return true;
            }
            None => false,
        },
        _ => false,
    };
    whole && r.pos == bytes.len()
}

/// Append a `Frame::Blob` record for `data` (compressed or not, as `zstd` says), exactly as
/// serde encodes the frame, without building it: the recorder encodes gigabytes of chunks
/// this way, on worker threads, with one copy of the bytes.
pub fn append_blob(id: BlobId, len: u64, zstd: bool, data: &[u8], out: &mut Vec<u8>) {
    out.reserve(data.len() + 32);
    out.push(FRAME_BLOB);
    out.extend_from_slice(&id.0);
    varint(out, len);
    out.push(zstd as u8);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// The id and declared length of a `Frame::Blob` from the first bytes of its record, without
/// its data: a trace is opened with its large blobs left in the file. `None` for any other
/// record (or too few bytes to tell).
pub fn blob_head(bytes: &[u8]) -> Option<(BlobId, u64)> {
    let mut r = Reader { bytes, pos: 0 };
    if r.byte().ok()? != FRAME_BLOB {
        return None;
    }
    let id = BlobId(r.take(16).ok()?.try_into().ok()?);
    let len = r.varint(64).ok()?;
    Some((id, len))
}

/// What the head of a `Frame::Blob` record says of it, read from its first bytes without its
/// data (a blob left in the file when a trace is opened is checked against this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobShape {
    /// The blob's content id.
    pub id: BlobId,
    /// The blob's declared length (unpacked).
    pub len: u64,
    /// Whether its data is zstd-compressed.
    pub zstd: bool,
    /// Where the data starts in the record.
    pub data_at: usize,
    /// How many data bytes the record says it holds.
    pub data_len: u64,
}

/// The head of a `Frame::Blob` record: `None` for any other record, or too few bytes to tell.
pub fn blob_shape(bytes: &[u8]) -> Option<BlobShape> {
    let mut r = Reader { bytes, pos: 0 };
    if r.byte().ok()? != FRAME_BLOB {
        return None;
    }
    let id = BlobId(r.take(16).ok()?.try_into().ok()?);
    let len = r.varint(64).ok()?;
    let zstd = match r.byte().ok()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let data_len = r.varint(64).ok()?;
    Some(BlobShape {
        id,
        len,
        zstd,
        data_at: r.pos,
        data_len,
    })
}

/// A whole `Frame::Blob` record read in place: its id, declared length, whether its data is
/// compressed, and where the data lies in `bytes`. `None` unless `bytes` is exactly one
/// well-formed blob record.
pub fn blob_record(bytes: &[u8]) -> Option<(BlobId, u64, bool, std::ops::Range<usize>)> {
    let mut r = Reader { bytes, pos: 0 };
    if r.byte().ok()? != FRAME_BLOB {
        return None;
    }
    let id = BlobId(r.take(16).ok()?.try_into().ok()?);
    let len = r.varint(64).ok()?;
    let zstd = match r.byte().ok()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let n = r.len().ok()?;
    let start = r.pos;
    (start.checked_add(n)? == bytes.len()).then_some((id, len, zstd, start..bytes.len()))
}

fn end(r: &mut Reader<'_>, out: &mut Frame) -> Option<()> {
    let seq = r.varint(64).ok()?;
    let dur_ns = r.varint(64).ok()?;
    if r.take(2).ok()? != RET_UNIT {
        return None;
    }
    *out = Frame::End(End {
        seq,
        dur_ns,
        ret: Ok(Value::Unit),
    });
    Some(())
}

#[inline(always)]
fn u32v(r: &mut Reader<'_>) -> Option<u32> {
    r.varint(32).ok().map(|v| v as u32)
}

fn launch_begin(r: &mut Reader<'_>, out: &mut Frame) -> Option<()> {
    let seq = r.varint(64).ok()?;
    let thread = r.varint(16).ok()? as u16;
    let site = SiteId(u32v(r)?);
    let t_ns = r.varint(64).ok()?;
    let typed = match r.byte().ok()? {
        CALL_LAUNCH => false,
        CALL_LAUNCH_TYPED => true,
        _ => return None,
    };
    let kernel = KernelId(u32v(r)?);
    let grid = [u32v(r)?, u32v(r)?, u32v(r)?];
    let block = [u32v(r)?, u32v(r)?, u32v(r)?];
    let shared_mem = u32v(r)?;
    let stream = match r.byte().ok()? {
        STREAM_LEGACY => StreamRef::Legacy,
        STREAM_ID => StreamRef::Id(StreamId(u32v(r)?)),
        _ => return None,
    };
    let n = r.count().ok()?;
    let call = Call::new_launch(
        typed,
        LaunchHead {
            kernel,
            grid,
            block,
            shared_mem,
            stream,
        },
        Args::new(),
    );
    *out = Frame::Begin(Begin {
        seq,
        thread,
        site,
        t_ns,
        call,
    });
    let Frame::Begin(Begin {
        call: Call::Launch { args, .. } | Call::LaunchTyped { args, .. },
        ..
    }) = out
    else {
        unreachable!("a launch was just stored")
    };
    // No more than the record's bytes (`count`), and fallibly: a count that lies is serde's
    // to report, never an abort here.
    args.try_reserve(n).ok()?;
    for _ in 0..n {
        args.push(match r.byte().ok()? {
            ARG_BUF => Arg::Buf(read_dev_addr(r)?),
            ARG_VAL => {
                let len = r.len().ok()?;
                Arg::Val(ArgBytes::from(r.take(len).ok()?))
            }
            _ => return None,
        });
    }
    Some(())
}

#[inline(always)]
fn read_dev_addr(r: &mut Reader<'_>) -> Option<DevAddr> {
    let tag = r.byte().ok()?;
    #[inline(always)]
    fn near(r: &mut Reader<'_>) -> Option<(BufferId, u64)> {
        Some((BufferId(u32v(r)?), r.varint(64).ok()?))
    }
    Some(match tag {
        ADDR_NULL => DevAddr::Null,
        ADDR_BUF => {
            let (buf, off) = near(r)?;
            DevAddr::Buf { buf, off }
        }
        ADDR_FREED => {
            let (buf, off) = near(r)?;
            DevAddr::Freed { buf, off }
        }
        ADDR_UNKNOWN => match r.byte().ok()? {
            0 => DevAddr::Unknown { near: None },
            1 => DevAddr::Unknown {
                near: Some(near(r)?),
            },
            _ => return None,
        },
        _ => return None,
    })
}
