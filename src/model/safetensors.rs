//! A reader for `.safetensors` checkpoints, written for files that cannot be trusted.
//!
//! The format: an 8-byte little-endian header length `N`, `N` bytes of UTF-8 JSON
//! `{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//! "__metadata__": {"key": "value", ...}}`, then the data section, which the offsets index
//! (relative to its start).
//!
//! Everything in the header is checked before any of it is believed: `N` against the file and
//! a 100 MB cap (the reference implementation's), the JSON streamed through typed visitors (no
//! intermediate `serde_json::Value`, so a header of a million tiny numbers costs what its text
//! costs, within a small factor), every shape's element count times its dtype's size
//! (overflow-checked) against its offsets, every range against the data section, and no two
//! ranges overlapping. After [`SafeTensors::open`] succeeds, [`SafeTensors::read`] allocates at
//! most a size already proven to lie inside the file. Nothing in here panics on any input; every
//! refusal is a [`SafeTensorsError`] naming the tensor and field.
//!
//! Gaps between tensors and bytes after the last one are allowed (they are harmless, and
//! padding writers exist); overlap is not (two names for one storage would make a loader's
//! per-tensor accounting lie).

use super::hf::{HfConfig, TorchDtype};
use parking_lot::Mutex;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Largest header accepted, in bytes (the reference implementation's limit).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Most dimensions a tensor's shape may have. Real checkpoints use at most 5 or so; the cap
/// bounds what one hostile shape can make the parser hold.
pub const MAX_RANK: usize = 64;

/// Element types of the safetensors format (the byte-sized ones; sub-byte types are refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    Bool,
    U8,
    I8,
    F8E5M2,
    F8E4M3,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    F64,
    I64,
    U64,
}

impl Dtype {
    const ALL: [(Dtype, &'static str); 15] = [
        (Dtype::Bool, "BOOL"),
        (Dtype::U8, "U8"),
        (Dtype::I8, "I8"),
        (Dtype::F8E5M2, "F8_E5M2"),
        (Dtype::F8E4M3, "F8_E4M3"),
        (Dtype::I16, "I16"),
        (Dtype::U16, "U16"),
        (Dtype::F16, "F16"),
        (Dtype::BF16, "BF16"),
        (Dtype::I32, "I32"),
        (Dtype::U32, "U32"),
        (Dtype::F32, "F32"),
        (Dtype::F64, "F64"),
        (Dtype::I64, "I64"),
        (Dtype::U64, "U64"),
    ];

    pub fn parse(s: &str) -> Option<Dtype> {
        Self::ALL.iter().find(|(_, n)| *n == s).map(|(d, _)| *d)
    }

    /// The name the format uses (`"BF16"`, `"F8_E4M3"`, ...).
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(d, _)| *d == self)
            .map(|(_, n)| *n)
            .unwrap_or("?")
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::Bool | Dtype::U8 | Dtype::I8 | Dtype::F8E5M2 | Dtype::F8E4M3 => 1,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::F64 | Dtype::I64 | Dtype::U64 => 8,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<TorchDtype> for Dtype {
    fn from(d: TorchDtype) -> Dtype {
        match d {
            TorchDtype::BFloat16 => Dtype::BF16,
            TorchDtype::Float16 => Dtype::F16,
            TorchDtype::Float32 => Dtype::F32,
        }
    }
}

/// Why a safetensors file was refused, or a tensor could not be had from it.
#[derive(Debug, Error)]
pub enum SafeTensorsError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("file is {len} bytes, too short for the 8-byte header length")]
    TooShort { len: u64 },
    #[error("header length {len} is over the {max}-byte limit")]
    HeaderTooLarge { len: u64, max: u64 },
    #[error("header length {len} runs past the end of the {file_len}-byte file")]
    HeaderPastEnd { len: u64, file_len: u64 },
    #[error("header is not UTF-8 (valid up to byte {valid_up_to})")]
    HeaderNotUtf8 { valid_up_to: usize },
    #[error("header is not valid JSON: {0}")]
    HeaderJson(String),
    #[error("tensor {0:?} appears twice in the header")]
    DuplicateTensor(String),
    #[error("tensor {tensor:?}: expected an object, found {found}")]
    NotAnObject { tensor: String, found: String },
    #[error("tensor {tensor:?}: no `{field}`")]
    MissingField { tensor: String, field: &'static str },
    #[error("tensor {tensor:?}: `{field}` must be {expected}, found {found}")]
    BadField {
        tensor: String,
        field: &'static str,
        expected: &'static str,
        found: String,
    },
    #[error("tensor {tensor:?}: unknown dtype {dtype:?}")]
    UnknownDtype { tensor: String, dtype: String },
    #[error("tensor {tensor:?}: shape {shape:?} of {dtype} is too many bytes to address")]
    SizeOverflow {
        tensor: String,
        dtype: Dtype,
        shape: Vec<u64>,
    },
    #[error("tensor {tensor:?}: `data_offsets` [{begin}, {end}] run backwards")]
    OffsetsReversed {
        tensor: String,
        begin: u64,
        end: u64,
    },
    #[error(
        "tensor {tensor:?}: `data_offsets` end {end} is past the {data_len}-byte data section"
    )]
    OffsetsPastEnd {
        tensor: String,
        end: u64,
        data_len: u64,
    },
    #[error(
        "tensor {tensor:?}: shape {shape:?} of {dtype} is {expected} bytes but `data_offsets` \
         span {found}"
    )]
    SizeMismatch {
        tensor: String,
        dtype: Dtype,
        shape: Vec<u64>,
        expected: u64,
        found: u64,
    },
    #[error("tensors {tensor:?} and {other:?} overlap in the data section")]
    Overlap { tensor: String, other: String },
    #[error("`__metadata__`: {0}")]
    BadMetadata(String),
    #[error("{0:?} is a reserved name, not a tensor")]
    ReservedName(String),
    #[error("no tensor named {0:?}")]
    NotFound(String),
    #[error("expected tensor {0:?} is missing")]
    MissingTensor(String),
    #[error("tensor {tensor:?} has shape {found:?}, expected {expected:?}")]
    WrongShape {
        tensor: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor {tensor:?} is {found}, expected {expected} (the config's torch_dtype)")]
    WrongDtype {
        tensor: String,
        expected: Dtype,
        found: Dtype,
    },
}

type Result<T, E = SafeTensorsError> = std::result::Result<T, E>;

/// One tensor as the (validated) header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Where its bytes lie, as absolute offsets in the file (header included), so a loader can
    /// `pread` or map them directly. Checked to lie inside the file.
    pub range: Range<u64>,
}

impl TensorInfo {
    pub fn byte_len(&self) -> u64 {
        self.range.end - self.range.start
    }
}

/// An open safetensors file: the validated header in memory, the data left on disk.
pub struct SafeTensors {
    path: PathBuf,
    file: Mutex<File>,
    file_len: u64,
    header_len: u64,
    /// Sorted by name.
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    metadata: BTreeMap<String, String>,
}

impl fmt::Debug for SafeTensors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SafeTensors")
            .field("path", &self.path)
            .field("file_len", &self.file_len)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// The header as parsed, before cross-checks.
struct RawTensor {
    name: String,
    dtype: String,
    shape: Vec<u64>,
    offsets: [u64; 2],
}

#[derive(Default)]
struct RawHeader {
    tensors: Vec<RawTensor>,
    metadata: BTreeMap<String, String>,
}

/// Where a visitor leaves a typed error before handing serde a string one.
type Slot<'a> = &'a RefCell<Option<SafeTensorsError>>;

fn fail<E: de::Error>(slot: Slot<'_>, e: SafeTensorsError) -> E {
    let msg = e.to_string();
    let mut s = slot.borrow_mut();
    if s.is_none() {
        *s = Some(e);
    }
    E::custom(msg)
}

/// A shortened rendering of a string for an error message.
fn clip(s: &str) -> String {
    if s.len() <= 64 {
        return format!("{s:?}");
    }
    let mut end = 61;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}...", &s[..end])
}

struct HeaderSeed<'a> {
    slot: Slot<'a>,
}

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = RawHeader;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawHeader, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = RawHeader;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of tensors")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
        let mut h = RawHeader::default();
        let mut seen: HashSet<String> = HashSet::new();
        let mut seen_meta = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" {
                if seen_meta {
                    return Err(fail(
                        self.slot,
                        SafeTensorsError::BadMetadata("appears twice".into()),
                    ));
                }
                seen_meta = true;
                h.metadata = map.next_value_seed(MetaSeed { slot: self.slot })?;
                continue;
            }
            if !seen.insert(key.clone()) {
                return Err(fail(self.slot, SafeTensorsError::DuplicateTensor(key)));
            }
            let t = map.next_value_seed(TensorSeed {
                name: key,
                slot: self.slot,
            })?;
            h.tensors.push(t);
        }
        Ok(h)
    }
}

struct MetaSeed<'a> {
    slot: Slot<'a>,
}

impl<'de> DeserializeSeed<'de> for MetaSeed<'_> {
    type Value = BTreeMap<String, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed<'_> {
    type Value = BTreeMap<String, String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut m = BTreeMap::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(Scalar {
                slot: self.slot,
                on_bad: Box::new({
                    let k = k.clone();
                    move |found| {
                        SafeTensorsError::BadMetadata(format!(
                            "value of {} must be a string, found {found}",
                            clip(&k)
                        ))
                    }
                }),
            })?;
            let ScalarValue::Str(v) = v else {
                let found = v.describe();
                return Err(fail(
                    self.slot,
                    SafeTensorsError::BadMetadata(format!(
                        "value of {} must be a string, found {found}",
                        clip(&k)
                    )),
                ));
            };
            m.insert(k, v);
        }
        Ok(m)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(fail(
            self.slot,
            SafeTensorsError::BadMetadata("must be an object, found an array".into()),
        ))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Err(fail(
            self.slot,
            SafeTensorsError::BadMetadata("must be an object, found a string".into()),
        ))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Err(fail(
            self.slot,
            SafeTensorsError::BadMetadata("must be an object, found a number".into()),
        ))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.visit_u64(v as u64)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        self.visit_u64(0)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Err(fail(
            self.slot,
            SafeTensorsError::BadMetadata("must be an object, found a boolean".into()),
        ))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        // `"__metadata__": null` is harmless.
        Ok(BTreeMap::new())
    }
}

/// A JSON leaf: what a field held, kept only as far as an error message needs.
enum ScalarValue {
    U64(u64),
    Neg(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    Null,
}

impl ScalarValue {
    fn describe(&self) -> String {
        match self {
            ScalarValue::U64(n) => n.to_string(),
            ScalarValue::Neg(n) => n.to_string(),
            ScalarValue::Float(x) => format!("{x:?}"),
            ScalarValue::Str(s) => clip(s),
            ScalarValue::Bool(b) => b.to_string(),
            ScalarValue::Null => "null".into(),
        }
    }
}

/// Reads one JSON leaf; an array or object here is refused through `on_bad` (without building
/// it).
struct Scalar<'a> {
    slot: Slot<'a>,
    on_bad: Box<dyn Fn(String) -> SafeTensorsError + 'a>,
}

impl<'de> DeserializeSeed<'de> for Scalar<'_> {
    type Value = ScalarValue;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ScalarValue, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scalar<'_> {
    type Value = ScalarValue;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON scalar")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<ScalarValue, E> {
        Ok(ScalarValue::U64(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<ScalarValue, E> {
        Ok(if v >= 0 {
            ScalarValue::U64(v as u64)
        } else {
            ScalarValue::Neg(v)
        })
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<ScalarValue, E> {
        Ok(ScalarValue::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<ScalarValue, E> {
        Ok(ScalarValue::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<ScalarValue, E> {
        Ok(ScalarValue::Str(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<ScalarValue, E> {
        Ok(ScalarValue::Bool(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<ScalarValue, E> {
        Ok(ScalarValue::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<ScalarValue, A::Error> {
        Err(fail(self.slot, (self.on_bad)("an array".into())))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<ScalarValue, A::Error> {
        Err(fail(self.slot, (self.on_bad)("an object".into())))
    }
}

struct TensorSeed<'a> {
    name: String,
    slot: Slot<'a>,
}

impl<'de> DeserializeSeed<'de> for TensorSeed<'_> {
    type Value = RawTensor;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawTensor, D::Error> {
        d.deserialize_any(self)
    }
}

impl TensorSeed<'_> {
    fn not_object<E: de::Error>(self, found: &str) -> E {
        fail(
            self.slot,
            SafeTensorsError::NotAnObject {
                tensor: self.name,
                found: found.into(),
            },
        )
    }
}

impl<'de> Visitor<'de> for TensorSeed<'_> {
    type Value = RawTensor;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tensor object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawTensor, A::Error> {
        let (mut dtype, mut shape, mut offsets) = (None, None, None);
        while let Some(k) = map.next_key::<String>()? {
            let field: &'static str = match k.as_str() {
                "dtype" => "dtype",
                "shape" => "shape",
                "data_offsets" => "data_offsets",
                _ => {
                    // Unknown keys are skipped without being built.
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            let dup = match field {
                "dtype" => dtype.is_some(),
                "shape" => shape.is_some(),
                _ => offsets.is_some(),
            };
            if dup {
                return Err(fail(
                    self.slot,
                    SafeTensorsError::BadField {
                        tensor: self.name.clone(),
                        field,
                        expected: "given once",
                        found: "a second value".into(),
                    },
                ));
            }
            match field {
                "dtype" => {
                    let name = self.name.clone();
                    let v = map.next_value_seed(Scalar {
                        slot: self.slot,
                        on_bad: Box::new(move |found| SafeTensorsError::BadField {
                            tensor: name.clone(),
                            field: "dtype",
                            expected: "a string",
                            found,
                        }),
                    })?;
                    match v {
                        ScalarValue::Str(s) => dtype = Some(s),
                        other => {
                            return Err(fail(
                                self.slot,
                                SafeTensorsError::BadField {
                                    tensor: self.name.clone(),
                                    field: "dtype",
                                    expected: "a string",
                                    found: other.describe(),
                                },
                            ))
                        }
                    }
                }
                _ => {
                    let max = if field == "shape" { MAX_RANK } else { 2 };
                    let v = map.next_value_seed(UintList {
                        tensor: &self.name,
                        field,
                        max,
                        slot: self.slot,
                    })?;
                    if field == "shape" {
                        shape = Some(v);
                    } else {
                        if v.len() != 2 {
                            return Err(fail(
                                self.slot,
                                SafeTensorsError::BadField {
                                    tensor: self.name.clone(),
                                    field,
                                    expected: "two offsets [begin, end]",
                                    found: format!("{} values", v.len()),
                                },
                            ));
                        }
                        offsets = Some([v[0], v[1]]);
                    }
                }
            }
        }
        let missing = |field| {
            fail::<A::Error>(
                self.slot,
                SafeTensorsError::MissingField {
                    tensor: self.name.clone(),
                    field,
                },
            )
        };
        let dtype = dtype.ok_or_else(|| missing("dtype"))?;
        let shape = shape.ok_or_else(|| missing("shape"))?;
        let offsets = offsets.ok_or_else(|| missing("data_offsets"))?;
        Ok(RawTensor {
            name: self.name,
            dtype,
            shape,
            offsets,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<RawTensor, A::Error> {
        Err(self.not_object("an array"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<RawTensor, E> {
        Err(self.not_object("a string"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<RawTensor, E> {
        Err(self.not_object("a number"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<RawTensor, E> {
        Err(self.not_object("a number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<RawTensor, E> {
        Err(self.not_object("a number"))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<RawTensor, E> {
        Err(self.not_object("a boolean"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<RawTensor, E> {
        Err(self.not_object("null"))
    }
}

/// An array of at most `max` non-negative integers.
struct UintList<'a> {
    tensor: &'a str,
    field: &'static str,
    max: usize,
    slot: Slot<'a>,
}

impl UintList<'_> {
    fn bad<E: de::Error>(&self, expected: &'static str, found: String) -> E {
        fail(
            self.slot,
            SafeTensorsError::BadField {
                tensor: self.tensor.to_string(),
                field: self.field,
                expected,
                found,
            },
        )
    }
}

impl<'de> DeserializeSeed<'de> for UintList<'_> {
    type Value = Vec<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UintList<'_> {
    type Value = Vec<u64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of non-negative integers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
        let mut out = Vec::new();
        loop {
            let tensor = self.tensor.to_string();
            let field = self.field;
            let el = seq.next_element_seed(Scalar {
                slot: self.slot,
                on_bad: Box::new(move |found| SafeTensorsError::BadField {
                    tensor: tensor.clone(),
                    field,
                    expected: "an array of non-negative integers",
                    found: format!("{found} inside it"),
                }),
            })?;
            match el {
                None => return Ok(out),
                Some(ScalarValue::U64(n)) => {
                    if out.len() == self.max {
                        let what = if self.max == 2 {
                            "two offsets [begin, end]"
                        } else {
                            "at most 64 dimensions"
                        };
                        return Err(self.bad(what, format!("more than {}", self.max)));
                    }
                    out.push(n)
                }
                Some(other) => {
                    let expected = match other {
                        ScalarValue::Neg(_) | ScalarValue::Float(_) => {
                            "non-negative integers (no negatives or fractions)"
                        }
                        _ => "an array of non-negative integers",
                    };
                    return Err(self.bad(expected, other.describe()));
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Vec<u64>, A::Error> {
        Err(self.bad("an array of non-negative integers", "an object".into()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u64>, E> {
        Err(self.bad("an array of non-negative integers", clip(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<u64>, E> {
        Err(self.bad("an array of non-negative integers", v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vec<u64>, E> {
        Err(self.bad("an array of non-negative integers", v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Vec<u64>, E> {
        Err(self.bad("an array of non-negative integers", format!("{v:?}")))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Vec<u64>, E> {
        Err(self.bad("an array of non-negative integers", v.to_string()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Vec<u64>, E> {
        Err(self.bad("an array of non-negative integers", "null".into()))
    }
}

/// Parse header text into raw entries: typed errors where a visitor found the problem, the JSON
/// parser's message where the text itself is malformed.
fn parse_header(text: &str) -> Result<RawHeader> {
    let slot = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = HeaderSeed { slot: &slot }
        .deserialize(&mut de)
        .and_then(|h| de.end().map(|()| h));
    match parsed {
        Ok(h) => Ok(h),
        Err(e) => Err(slot
            .into_inner()
            .unwrap_or_else(|| SafeTensorsError::HeaderJson(e.to_string()))),
    }
}

/// Cross-check raw entries against each other and the data section.
fn validate(raw: Vec<RawTensor>, data_start: u64, data_len: u64) -> Result<Vec<TensorInfo>> {
    let mut out = Vec::with_capacity(raw.len());
    for t in raw {
        let dtype = Dtype::parse(&t.dtype).ok_or_else(|| SafeTensorsError::UnknownDtype {
            tensor: t.name.clone(),
            dtype: t.dtype.clone(),
        })?;
        let overflow = || SafeTensorsError::SizeOverflow {
            tensor: t.name.clone(),
            dtype,
            shape: t.shape.clone(),
        };
        let mut expected = dtype.size() as u64;
        for &d in &t.shape {
            expected = expected.checked_mul(d).ok_or_else(overflow)?;
        }
        let shape = t
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| overflow())?;
        let [begin, end] = t.offsets;
        if begin > end {
            return Err(SafeTensorsError::OffsetsReversed {
                tensor: t.name,
                begin,
                end,
            });
        }
        if end > data_len {
            return Err(SafeTensorsError::OffsetsPastEnd {
                tensor: t.name,
                end,
                data_len,
            });
        }
        if end - begin != expected {
            return Err(SafeTensorsError::SizeMismatch {
                tensor: t.name,
                dtype,
                shape: t.shape,
                expected,
                found: end - begin,
            });
        }
        // data_start + end <= file length, so neither addition overflows.
        out.push(TensorInfo {
            name: t.name,
            dtype,
            shape,
            range: data_start + begin..data_start + end,
        });
    }
    let mut by_offset: Vec<&TensorInfo> = out.iter().collect();
    by_offset.sort_by_key(|t| (t.range.start, t.range.end));
    for w in by_offset.windows(2) {
        if w[1].range.start < w[0].range.end {
            return Err(SafeTensorsError::Overlap {
                tensor: w[1].name.clone(),
                other: w[0].name.clone(),
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

impl SafeTensors {
    /// Open `path` and read and validate its header; the data stays on disk until
    /// [`read`](Self::read).
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        let path = path.as_ref().to_path_buf();
        let io = |source| SafeTensorsError::Io {
            path: path.clone(),
            source,
        };
        let mut file = File::open(&path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        if file_len < 8 {
            return Err(SafeTensorsError::TooShort { len: file_len });
        }
        let mut n = [0u8; 8];
        file.read_exact(&mut n).map_err(io)?;
        let header_len = u64::from_le_bytes(n);
        if header_len > MAX_HEADER_LEN {
            return Err(SafeTensorsError::HeaderTooLarge {
                len: header_len,
                max: MAX_HEADER_LEN,
            });
        }
        if header_len > file_len - 8 {
            return Err(SafeTensorsError::HeaderPastEnd {
                len: header_len,
                file_len,
            });
        }
        // Bounded by both checks above.
        let mut header = Vec::with_capacity(header_len as usize);
        (&mut file)
            .take(header_len)
            .read_to_end(&mut header)
            .map_err(io)?;
        if header.len() as u64 != header_len {
            // The file shrank under us.
            return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        let text = std::str::from_utf8(&header).map_err(|e| SafeTensorsError::HeaderNotUtf8 {
            valid_up_to: e.valid_up_to(),
        })?;
        let RawHeader { tensors, metadata } = parse_header(text)?;
        let data_start = 8 + header_len;
        let tensors = validate(tensors, data_start, file_len - data_start)?;
        let by_name = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(SafeTensors {
            path,
            file: Mutex::new(file),
            file_len,
            header_len,
            tensors,
            by_name,
            metadata,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The JSON header's length in bytes (the data section starts at `8 + header_len`).
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Every tensor, sorted by name.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// `__metadata__` (string to string), empty when absent.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// A tensor's bytes, exactly its declared size (which `open` checked lies inside the file).
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        let t = self
            .get(name)
            .ok_or_else(|| SafeTensorsError::NotFound(name.to_string()))?;
        let io = |source| SafeTensorsError::Io {
            path: self.path.clone(),
            source,
        };
        let len = usize::try_from(t.byte_len()).map_err(|_| {
            io(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                "tensor larger than this host's address space",
            ))
        })?;
        let mut buf = vec![0u8; len];
        let mut f = self.file.lock();
        f.seek(SeekFrom::Start(t.range.start)).map_err(io)?;
        // Fails (rather than returning short data) if the file was truncated since `open`.
        f.read_exact(&mut buf).map_err(io)?;
        Ok(buf)
    }
}

/// The tensor names of a Hugging Face Llama checkpoint with `layers` decoder layers, in the
/// order the model uses them; `lm_head.weight` is left out when the embeddings are tied.
pub fn llama_names(layers: usize, tied: bool) -> Vec<String> {
    let mut v = vec!["model.embed_tokens.weight".to_string()];
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        v.push(format!("{p}.input_layernorm.weight"));
        for m in ["q", "k", "v", "o"] {
            v.push(format!("{p}.self_attn.{m}_proj.weight"));
        }
        v.push(format!("{p}.post_attention_layernorm.weight"));
        for m in ["gate", "up", "down"] {
            v.push(format!("{p}.mlp.{m}_proj.weight"));
        }
    }
    v.push("model.norm.weight".to_string());
    if !tied {
        v.push("lm_head.weight".to_string());
    }
    v
}

/// Every expected tensor of `cfg` with its shape, `[out, in]` for matrices (row-major, as
/// `nn.Linear` stores its weight and as the built-in model lays its own out).
pub fn llama_layout(cfg: &HfConfig) -> Vec<(String, Vec<usize>)> {
    let (h, q, kv, f, v) = (
        cfg.hidden_size,
        cfg.q_dim(),
        cfg.kv_dim(),
        cfg.intermediate_size,
        cfg.vocab_size,
    );
    llama_names(cfg.num_hidden_layers, cfg.tie_word_embeddings)
        .into_iter()
        .map(|name| {
            let shape = match name.rsplit('.').nth(1).unwrap_or("") {
                "embed_tokens" | "lm_head" => vec![v, h],
                "input_layernorm" | "post_attention_layernorm" | "norm" => vec![h],
                "q_proj" => vec![q, h],
                "k_proj" | "v_proj" => vec![kv, h],
                "o_proj" => vec![h, q],
                "gate_proj" | "up_proj" => vec![f, h],
                "down_proj" => vec![h, f],
                other => unreachable!("llama_names produced {other}"),
            };
            (name, shape)
        })
        .collect()
}

/// Check that `st` holds every tensor `cfg` needs, each at its expected shape and at the
/// config's `torch_dtype`; the first mismatch (in model order) is the error. Extra tensors
/// (e.g. old checkpoints' `rotary_emb.inv_freq`) are allowed.
pub fn check_llama(st: &SafeTensors, cfg: &HfConfig) -> Result<()> {
    check_llama_shards(&[st], cfg)
}

/// [`check_llama`] across a sharded checkpoint (`model-0000k-of-0000n.safetensors`): each tensor
/// may live in any shard.
pub fn check_llama_shards(shards: &[&SafeTensors], cfg: &HfConfig) -> Result<()> {
    let want = Dtype::from(cfg.torch_dtype);
    for (name, shape) in llama_layout(cfg) {
        let t = shards
            .iter()
            .find_map(|s| s.get(&name))
            .ok_or_else(|| SafeTensorsError::MissingTensor(name.clone()))?;
        if t.shape != shape {
            return Err(SafeTensorsError::WrongShape {
                tensor: name,
                expected: shape,
                found: t.shape.clone(),
            });
        }
        if t.dtype != want {
            return Err(SafeTensorsError::WrongDtype {
                tensor: name,
                expected: want,
                found: t.dtype,
            });
        }
    }
    Ok(())
}

/// Write a safetensors file: tensors in the order given, contiguous, the header padded with
/// spaces to a multiple of 8 bytes (as the reference writer does, so data is aligned), and
/// `__metadata__` `{"format": "pt"}`. Each tensor's bytes must be exactly its shape times its
/// dtype's size.
pub fn write_safetensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, Dtype, &[usize], &[u8])],
) -> Result<()> {
    let path = path.as_ref();
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut seen = HashSet::new();
    let mut offset = 0u64;
    for &(name, dtype, shape, bytes) in tensors {
        if name == "__metadata__" {
            return Err(SafeTensorsError::ReservedName(name.to_string()));
        }
        if !seen.insert(name) {
            return Err(SafeTensorsError::DuplicateTensor(name.to_string()));
        }
        let shape64: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        let expected = shape64
            .iter()
            .try_fold(dtype.size() as u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| SafeTensorsError::SizeOverflow {
                tensor: name.to_string(),
                dtype,
                shape: shape64.clone(),
            })?;
        if bytes.len() as u64 != expected {
            return Err(SafeTensorsError::SizeMismatch {
                tensor: name.to_string(),
                dtype,
                shape: shape64,
                expected,
                found: bytes.len() as u64,
            });
        }
        let end = offset + expected;
        // A `String` key always serializes.
        let key = serde_json::to_string(name).unwrap_or_default();
        header.push_str(&format!(
            ",{key}:{{\"dtype\":\"{dtype}\",\"shape\":{shape:?},\"data_offsets\":[{offset},{end}]}}"
        ));
        offset = end;
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let io = |source| SafeTensorsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut w = std::io::BufWriter::new(File::create(path).map_err(io)?);
    w.write_all(&(header.len() as u64).to_le_bytes())
        .map_err(io)?;
    w.write_all(header.as_bytes()).map_err(io)?;
    for &(_, _, _, bytes) in tensors {
        w.write_all(bytes).map_err(io)?;
    }
    w.flush().map_err(io)?;
    Ok(())
}
