//! The record codec: bincode 2 over serde, standard (varint) configuration. The only file that
//! names bincode, so the codec can be swapped without touching the format around it.

use super::frame::Frame;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(String);

/// Append `frame`'s encoding to `out` (which the caller reuses, so the hot path allocates
/// nothing once the buffer has grown).
pub fn encode_into(frame: &Frame, out: &mut Vec<u8>) -> Result<(), CodecError> {
    bincode::serde::encode_into_std_write(frame, out, bincode::config::standard())
        .map(|_| ())
        .map_err(|e| CodecError(e.to_string()))
}

/// Decode exactly one frame from `bytes`; trailing bytes are an error.
pub fn decode(bytes: &[u8]) -> Result<Frame, CodecError> {
    let (f, used): (Frame, usize) =
        bincode::serde::decode_from_slice(bytes, bincode::config::standard())
            .map_err(|e| CodecError(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError(format!(
            "{} trailing bytes after the record",
            bytes.len() - used
        )));
    }
    Ok(f)
}
