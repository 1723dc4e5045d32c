//! The record codec: bincode 2 over serde, standard (varint) configuration. The only file that
//! names bincode, so the codec can be swapped without touching the format around it.

use super::frame::Frame;

/// bincode's standard configuration (little-endian varints). Fixed-width integers were tried:
/// records grew 2.2x and the recorder got no faster.
const CONFIG: bincode::config::Configuration = bincode::config::standard();

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(String);

/// Encode `frame` into `out`, returning the bytes used, or `None` if it does not fit (the
/// caller then uses `encode_to_vec`). Writing into a slice is much cheaper per field than
/// going through `io::Write`, which matters on the recorder's hot path.
pub fn encode_into_slice(frame: &Frame, out: &mut [u8]) -> Option<usize> {
    bincode::serde::encode_into_slice(frame, out, CONFIG).ok()
}

/// Encode `frame` into a new buffer (for frames too big for the writer's scratch).
pub fn encode_to_vec(frame: &Frame) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(frame, CONFIG).map_err(|e| CodecError(e.to_string()))
}

/// Decode exactly one frame from `bytes`; trailing bytes are an error.
pub fn decode(bytes: &[u8]) -> Result<Frame, CodecError> {
    let (f, used): (Frame, usize) =
        bincode::serde::decode_from_slice(bytes, CONFIG).map_err(|e| CodecError(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError(format!(
            "{} trailing bytes after the record",
            bytes.len() - used
        )));
    }
    Ok(f)
}
