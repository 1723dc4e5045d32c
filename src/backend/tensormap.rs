//! Tensor maps: the 128-byte descriptors Hopper's TMA unit reads, passed to kernels by value.
//!
//! A tensor map holds a global address inside an opaque blob, so for record and replay it is a
//! device pointer hidden in a kernel parameter: replaying the recorded bytes would point the
//! kernel at wherever the buffer lived in the recorded process. The engine therefore builds
//! maps through the backend (`GpuBackend::encode_tensor_map`) with a [`TensorMapDesc`] (what
//! `cuTensorMapEncodeTiled` takes, less the address), the recorder keeps the description
//! with the buffer it points into, and the replayer encodes the map again for the buffer's
//! replay address.

use serde::{Deserialize, Serialize};

/// Bytes in an encoded tensor map (`CUtensorMap`), which kernels take 64-byte aligned.
pub const TENSOR_MAP_BYTES: usize = 128;

/// An encoded tensor map, as a kernel takes it.
pub type TensorMapImage = [u8; TENSOR_MAP_BYTES];

/// Element types a tensor map can describe (a subset of `CUtensorMapDataType`, with the
/// driver's numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TensorMapDtype {
    /// Unsigned 8-bit integers (driver code 0).
    U8,
    /// Unsigned 16-bit integers (1).
    U16,
    /// Unsigned 32-bit integers (2).
    U32,
    /// Signed 32-bit integers (3).
    I32,
    /// Unsigned 64-bit integers (4).
    U64,
    /// Signed 64-bit integers (5).
    I64,
    /// IEEE binary16 (6).
    F16,
    /// IEEE binary32 (7).
    F32,
    /// IEEE binary64 (8).
    F64,
    /// bfloat16 (9).
    Bf16,
}

impl TensorMapDtype {
    /// The type of driver code `c` (`CUtensorMapDataType`); `None` for the codes this
    /// description has no variant for (FTZ, TF32, packed 4- and 6-bit types).
    pub fn from_driver(c: u32) -> Option<TensorMapDtype> {
        use TensorMapDtype::*;
        Some(match c {
            0 => U8,
            1 => U16,
            2 => U32,
            3 => I32,
            4 => U64,
            5 => I64,
            6 => F16,
            7 => F32,
            8 => F64,
            9 => Bf16,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        use TensorMapDtype::*;
        match self {
            U8 => 1,
            U16 | F16 | Bf16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
        }
    }

    /// `CUtensorMapDataType`'s value for this type.
    pub fn driver_code(self) -> u32 {
        use TensorMapDtype::*;
        match self {
            U8 => 0,
            U16 => 1,
            U32 => 2,
            I32 => 3,
            U64 => 4,
            I64 => 5,
            F16 => 6,
            F32 => 7,
            F64 => 8,
            Bf16 => 9,
        }
    }

    fn from_driver_code(c: u32) -> Option<Self> {
        use TensorMapDtype::*;
        Some(match c {
            0 => U8,
            1 => U16,
            2 => U32,
            3 => I32,
            4 => U64,
            5 => I64,
            6 => F16,
            7 => F32,
            8 => F64,
            9 => Bf16,
            _ => return None,
        })
    }
}

/// A tiled tensor map, less its global address: everything `cuTensorMapEncodeTiled` takes
/// besides the pointer. Dimension 0 is the innermost (contiguous) one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorMapDesc {
    /// The element type; sets the byte width behind `dims` and `box_dims`.
    pub dtype: TensorMapDtype,
    /// Elements per dimension (1 to 5 dimensions).
    pub dims: Vec<u64>,
    /// Bytes between consecutive elements of dimensions 1.. (one fewer than `dims`).
    pub strides: Vec<u64>,
    /// The tile a copy moves, in elements per dimension.
    pub box_dims: Vec<u32>,
    /// Traversal stride per dimension (1 = every element).
    pub element_strides: Vec<u32>,
    /// `CUtensorMapInterleave` (0 = none).
    pub interleave: u32,
    /// `CUtensorMapSwizzle` (0 = none).
    pub swizzle: u32,
    /// `CUtensorMapL2promotion` (0 = none).
    pub l2_promotion: u32,
    /// `CUtensorMapFloatOOBfill` (0 = zeros).
    pub oob_fill: u32,
}

/// Why a tensor map cannot be encoded: the driver's rules, checked before it is asked, so the
/// mock refuses what CUDA refuses and the message says which rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorMapError {
    /// `dims` has this many entries; the driver takes 1 to 5.
    #[error("a tensor map has 1 to 5 dimensions, not {0}")]
    Rank(usize),
    /// A per-dimension list whose length does not fit the rank.
    #[error("{what} has {got} entries; a rank-{rank} map needs {want}")]
    Shape {
        /// The field: `strides`, `box_dims` or `element_strides`.
        what: &'static str,
        /// Entries it has.
        got: usize,
        /// Entries the rank needs (`rank - 1` for `strides`).
        want: usize,
        /// The map's rank, `dims.len()`.
        rank: usize,
    },
    /// The global address (here) is not a multiple of 16.
    #[error("global address {0:#x} is not 16-byte aligned")]
    Unaligned(u64),
    /// A stride is 0 or not a multiple of 16 bytes.
    #[error("stride {index} ({stride} bytes) is not a multiple of 16")]
    Stride {
        /// Its index in `strides` (dimension `index + 1`).
        index: usize,
        /// Its value, in bytes.
        stride: u64,
    },
    /// A box dimension outside 1 to 256 elements.
    #[error("box dimension {index} is {size}; each must be 1 to 256")]
    Box {
        /// The dimension.
        index: usize,
        /// Its value, in elements.
        size: u32,
    },
    /// The box's innermost extent, in bytes (here), is not a multiple of 16 (without
    /// interleave).
    #[error("the box's inner dimension is {0} bytes; it must be a multiple of 16")]
    InnerBox(u64),
    /// A traversal stride outside 1 to 8.
    #[error("element stride {index} is {stride}; each must be 1 to 8")]
    ElementStride {
        /// The dimension.
        index: usize,
        /// Its value, in elements.
        stride: u32,
    },
    /// A dimension of 0 elements or more than 2^32.
    #[error("dimension {index} is {size} elements; each must be 1 to 2^32")]
    Dim {
        /// The dimension.
        index: usize,
        /// Its value, in elements.
        size: u64,
    },
    /// An enum setting (interleave, swizzle, L2 promotion, out-of-bounds fill) past the
    /// driver's last value.
    #[error("{what} {value} is not one the driver defines (0 to {max})")]
    Setting {
        /// The setting, in words.
        what: &'static str,
        /// The value given.
        value: u32,
        /// The driver's largest value for it.
        max: u32,
    },
    /// The map reaches past the end of the buffer its address lies in.
    #[error("the map spans {span} bytes from its address, past the {bytes}-byte buffer")]
    PastBuffer {
        /// Bytes from the map's address to one past its last element (`TensorMapDesc::span`).
        span: u64,
        /// The buffer's size, in bytes.
        bytes: u64,
    },
}

impl TensorMapDesc {
    /// A plain 2-D tile map over a row-major matrix of `rows` x `cols` elements.
    pub fn tiled_2d(
        dtype: TensorMapDtype,
        rows: u64,
        cols: u64,
        box_rows: u32,
        box_cols: u32,
    ) -> Self {
        TensorMapDesc {
            dtype,
            dims: vec![cols, rows],
            strides: vec![cols * dtype.size()],
            box_dims: vec![box_cols, box_rows],
            element_strides: vec![1, 1],
            interleave: 0,
            swizzle: 0,
            l2_promotion: 0,
            oob_fill: 0,
        }
    }

    /// Number of dimensions, 1 to 5 in a valid map.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The driver's rules for a tiled map at `addr` (without interleave, the common case).
    pub fn validate(&self, addr: u64) -> Result<(), TensorMapError> {
        let rank = self.rank();
        if !(1..=5).contains(&rank) {
            return Err(TensorMapError::Rank(rank));
        }
        for (what, got, want) in [
            ("strides", self.strides.len(), rank - 1),
            ("box_dims", self.box_dims.len(), rank),
            ("element_strides", self.element_strides.len(), rank),
        ] {
            if got != want {
                return Err(TensorMapError::Shape {
                    what,
                    got,
                    want,
                    rank,
                });
            }
        }
        if addr % 16 != 0 {
            return Err(TensorMapError::Unaligned(addr));
        }
        for (index, &size) in self.dims.iter().enumerate() {
            if size == 0 || size > 1 << 32 {
                return Err(TensorMapError::Dim { index, size });
            }
        }
        for (index, &stride) in self.strides.iter().enumerate() {
            if stride % 16 != 0 || stride == 0 {
                return Err(TensorMapError::Stride { index, stride });
            }
        }
        for (index, &size) in self.box_dims.iter().enumerate() {
            if size == 0 || size > 256 {
                return Err(TensorMapError::Box { index, size });
            }
        }
        let inner = self.box_dims[0] as u64 * self.dtype.size();
        if self.interleave == 0 && inner % 16 != 0 {
            return Err(TensorMapError::InnerBox(inner));
        }
        for (index, &stride) in self.element_strides.iter().enumerate() {
            if !(1..=8).contains(&stride) {
                return Err(TensorMapError::ElementStride { index, stride });
            }
        }
        for (what, value, max) in [
            ("interleave", self.interleave, 2),
            ("swizzle", self.swizzle, 3),
            ("L2 promotion", self.l2_promotion, 3),
            ("out-of-bounds fill", self.oob_fill, 1),
        ] {
            if value > max {
                return Err(TensorMapError::Setting { what, value, max });
            }
        }
        Ok(())
    }

    /// Bytes from the map's address to one past its last element: what must lie inside the
    /// buffer it points into.
    pub fn span(&self) -> u64 {
        let last_inner = (self.dims[0].saturating_sub(1)).saturating_mul(self.dtype.size());
        let outer: u64 = self
            .dims
            .iter()
            .skip(1)
            .zip(&self.strides)
            .map(|(d, s)| d.saturating_sub(1).saturating_mul(*s))
            .fold(0u64, |a, b| a.saturating_add(b));
        last_inner
            .saturating_add(outer)
            .saturating_add(self.dtype.size())
    }

    /// Byte offset of element `index` (one coordinate per dimension) from the map's address.
    /// Saturating: a description from a trace is untrusted, and an offset past any buffer is
    /// refused by the access that uses it.
    pub fn offset_of(&self, index: &[u64]) -> u64 {
        let mut off = index
            .first()
            .copied()
            .unwrap_or(0)
            .saturating_mul(self.dtype.size());
        for (i, s) in index.iter().skip(1).zip(&self.strides) {
            off = off.saturating_add(i.saturating_mul(*s));
        }
        off
    }
}

/// The mock's encoding of a tensor map: a magic tag, the address and the description, so its
/// CPU twins can read one back (`decode_mock_image`). CUDA's encoding is the driver's own.
pub fn mock_image(addr: u64, d: &TensorMapDesc) -> TensorMapImage {
    let mut img = [0u8; TENSOR_MAP_BYTES];
    let mut w = 0usize;
    let mut put = |bytes: &[u8]| {
        img[w..w + bytes.len()].copy_from_slice(bytes);
        w += bytes.len();
    };
    put(b"GTMAP\0");
    put(&[d.rank() as u8, d.dtype.driver_code() as u8]);
    put(&addr.to_le_bytes());
    // 5 dims x 8, 4 strides x 8, 5 box x 2, 5 element strides x 1: 6+2+8+40+32+10+5 = 103.
    for i in 0..5 {
        put(&d.dims.get(i).copied().unwrap_or(0).to_le_bytes());
    }
    for i in 0..4 {
        put(&d.strides.get(i).copied().unwrap_or(0).to_le_bytes());
    }
    for i in 0..5 {
        put(&(d.box_dims.get(i).copied().unwrap_or(0) as u16).to_le_bytes());
    }
    for i in 0..5 {
        put(&[d.element_strides.get(i).copied().unwrap_or(0) as u8]);
    }
    put(&[
        d.interleave as u8,
        d.swizzle as u8,
        d.l2_promotion as u8,
        d.oob_fill as u8,
    ]);
    img
}

/// The address and description in a mock-encoded map; `None` for any other bytes.
pub fn decode_mock_image(img: &[u8]) -> Option<(u64, TensorMapDesc)> {
    if img.len() != TENSOR_MAP_BYTES || &img[..6] != b"GTMAP\0" {
        return None;
    }
    let rank = img[6] as usize;
    let dtype = TensorMapDtype::from_driver_code(img[7] as u32)?;
    if !(1..=5).contains(&rank) {
        return None;
    }
    let u64_at = |o: usize| u64::from_le_bytes(img[o..o + 8].try_into().expect("8 bytes"));
    let addr = u64_at(8);
    let dims = (0..rank).map(|i| u64_at(16 + 8 * i)).collect();
    let strides = (0..rank - 1).map(|i| u64_at(56 + 8 * i)).collect();
    let box_dims = (0..rank)
        .map(|i| u16::from_le_bytes([img[88 + 2 * i], img[89 + 2 * i]]) as u32)
        .collect();
    let element_strides = (0..rank).map(|i| img[98 + i] as u32).collect();
    Some((
        addr,
        TensorMapDesc {
            dtype,
            dims,
            strides,
            box_dims,
            element_strides,
            interleave: img[103] as u32,
            swizzle: img[104] as u32,
            l2_promotion: img[105] as u32,
            oob_fill: img[106] as u32,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mock_image_round_trips_and_the_rules_are_the_driver_s() {
        let d = TensorMapDesc::tiled_2d(TensorMapDtype::F32, 32, 64, 8, 32);
        assert_eq!(d.validate(0x1000), Ok(()));
        assert_eq!(d.span(), 32 * 64 * 4);
        assert_eq!(d.offset_of(&[3, 2]), (2 * 64 + 3) * 4);
        let img = mock_image(0x7f00_0000_1000, &d);
        assert_eq!(decode_mock_image(&img), Some((0x7f00_0000_1000, d.clone())));
        assert_eq!(decode_mock_image(&[0u8; 128]), None);
        assert_eq!(d.validate(0x1008), Err(TensorMapError::Unaligned(0x1008)));
        let mut bad = d.clone();
        bad.box_dims[0] = 3; // 12 bytes
        assert_eq!(bad.validate(0x1000), Err(TensorMapError::InnerBox(12)));
        let mut bad = d.clone();
        bad.strides[0] = 100;
        assert!(matches!(
            bad.validate(0),
            Err(TensorMapError::Stride { .. })
        ));
        let mut bad = d;
        bad.box_dims.pop();
        assert!(matches!(
            bad.validate(0),
            Err(TensorMapError::Shape {
                what: "box_dims",
                ..
            })
        ));
    }
}
