//! The record codec. The wire format is bincode 2's standard configuration (little-endian
//! varints) over serde: bincode defines it, and this module is the only code that encodes and
//! decodes records, so the codec can be swapped without touching the format around it. Two
//! other files know a little of it: `trace/frame.rs` holds the format versions and repeats
//! `Begin`'s variant index (`FRAME_BEGIN_INDEX`) for its borrowed view, and `trace/format.rs`
//! holds the framing each record travels in.
//!
//! bincode defines the format; this module carries a serde serializer (`append`) and deserializer
//! (`decode`) of our own for it. On the recorder's hot path bincode's serializer (a writer
//! abstraction, an error check and an out-of-line varint call per field) cost about 1,600
//! instructions for a 51-byte launch record, a third of a recorded launch; its deserializer kept
//! the reader at about half the writer's speed on the H200 host. Ours are inlined end to end
//! into one function per record type. Both are checked against bincode: byte for byte on
//! encode, value for value (and error for error) on decode, over hand-made values at every
//! varint boundary, every frame of every trace in traces/, and mutated frames (the tests here
//! and in tests/recorder.rs).
//!
//! The two most frequent records, a launch's Begin and a unit End, are also written and read
//! without serde (`hot`), in the same bytes and under the same tests.
//!
//! The rooms:
//! - `mod.rs` (here): the public API (`append`, `encode_to_vec`, `decode` and their bincode
//!   references), `CodecError`, and bincode's varint markers, which both directions share.
//! - `hot.rs`: the hand-written launch `Begin` and unit `End` records.
//! - `ser.rs`: the serde serializer (`Writer`, and `CodecError` as its error) and the varint
//!   writers.
//! - `de.rs`: the serde deserializer (`Reader`, `Elements`, the access impls, and `CodecError`
//!   as its error).
//! - `tests.rs`: every encoder and decoder against bincode.

mod de;
/// The two records that make up most of a trace, a launch's Begin and a call's End, written
/// and read without serde, in the same bytes.
///
/// Through serde (even our own serializer) a 6-argument launch's Begin frame cost ~1,400
/// instructions to write, and reading a frame ~1,200 (a visitor per field, and the frame moved
/// through several return slots): the recorder's launch stayed above its 0.3 µs budget and the
/// reader slower than the writer on the H200 host. Here each field is one varint.
///
/// The variant indices below are what ties these bytes to the serde types: the tests encode
/// every variant both ways and decode both ways. The decoder is only a fast path: anything it
/// does not expect (another record, a non-canonical index, a damaged byte) it hands back to the
/// serde decoder, so its errors are always serde's, and its values are checked against it.
mod hot;
mod ser;
#[cfg(test)]
mod tests;

use super::frame::Frame;
use de::Reader;
use ser::Writer;
use serde::{Deserialize, Serialize};

/// bincode's standard configuration (little-endian varints). Fixed-width integers were tried:
/// records grew 2.2x and the recorder got no faster.
const CONFIG: bincode::config::Configuration = bincode::config::standard();

/// A record that could not be encoded or decoded, with bincode's or serde's reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(String);

/// Append the encoding of `frame` (a `Frame`, or a borrowed view that encodes like one) to
/// `out`. Fails only for a type the format cannot express (a sequence of unknown length).
#[inline]
pub fn append<F: Serialize + ?Sized>(frame: &F, out: &mut Vec<u8>) -> Result<(), CodecError> {
    frame.serialize(Writer { out })
}

/// Encode `frame` into a new buffer.
pub fn encode_to_vec<F: Serialize + ?Sized>(frame: &F) -> Result<Vec<u8>, CodecError> {
    let mut v = Vec::new();
    append(frame, &mut v)?;
    Ok(v)
}

/// bincode's own encoding of `frame`: the reference `append` is tested against.
pub fn encode_with_bincode<F: Serialize + ?Sized>(frame: &F) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(frame, CONFIG).map_err(|e| CodecError(e.to_string()))
}

/// Decode exactly one frame from `bytes`; trailing bytes are an error.
pub fn decode(bytes: &[u8]) -> Result<Frame, CodecError> {
    let mut f = Frame::Stop;
    if hot::decode_into(bytes, &mut f) {
        return Ok(f);
    }
    let mut r = Reader { bytes, pos: 0 };
    let f = Frame::deserialize(&mut r)?;
    trailing(bytes.len(), r.pos)?;
    Ok(f)
}

/// bincode's own decoding of one frame: the reference `decode` is tested against.
pub fn decode_with_bincode(bytes: &[u8]) -> Result<Frame, CodecError> {
    let (f, used): (Frame, usize) =
        bincode::serde::decode_from_slice(bytes, CONFIG).map_err(|e| CodecError(e.to_string()))?;
    trailing(bytes.len(), used)?;
    Ok(f)
}

fn trailing(len: usize, used: usize) -> Result<(), CodecError> {
    if used != len {
        return Err(CodecError(format!(
            "{} trailing bytes after the record",
            len - used
        )));
    }
    Ok(())
}

pub use hot::{
    append_begin_split, append_blob, append_end, append_launch_begin, blob_head, blob_record,
    blob_shape, end_seq, launch_val_spans, split_begin, BeginSplit, BlobShape,
};

// bincode's varint markers: values up to 250 are one byte; above, a marker byte and then the
// value as a little-endian u16, u32, u64 or u128.
const SINGLE_BYTE_MAX: u64 = 250;
const U16_MARK: u8 = 251;
const U32_MARK: u8 = 252;
const U64_MARK: u8 = 253;
const U128_MARK: u8 = 254;
