//! A refused safetensors file in our words. The crate's errors name at most a tensor; these
//! name the tensor, the field and the values. Nothing here decides whether a file is valid: the
//! scan reads the header with the crate's own types, and [`explain`] looks, among its entries,
//! for what the crate's validation met, in the order it meets it.

use super::FormatDtype;
use safetensors::tensor::TensorInfo as CrateInfo;
use safetensors::SafeTensorError;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::error::Category;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use thiserror::Error;

/// What is wrong with a file's contents (or with tensors given to the writer).
#[derive(Debug, Error)]
pub enum FileProblem {
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
    /// `field` is the path inside the tensor's entry (`shape[1]`, `dtype`), empty for the entry.
    #[error("tensor {tensor:?}{}: {detail}", at(field))]
    BadTensor {
        tensor: String,
        field: String,
        detail: String,
    },
    #[error("`__metadata__`{}: {detail}", at(field))]
    BadMetadata { field: String, detail: String },
    #[error("tensor {0:?} appears twice")]
    DuplicateTensor(String),
    #[error("{0:?} is a reserved name, not a tensor")]
    ReservedName(String),
    #[error("tensor {tensor:?}: shape of {rank} dimensions, over the limit of {max}")]
    RankTooHigh {
        tensor: String,
        rank: usize,
        max: usize,
    },
    #[error("tensor {tensor:?}: dtype {dtype} is not loaded here (only byte-sized types are)")]
    UnsupportedDtype { tensor: String, dtype: FormatDtype },
    #[error("tensor {tensor:?}: shape {shape:?} of {dtype} is too many bytes to address")]
    SizeOverflow {
        tensor: String,
        dtype: FormatDtype,
        shape: Vec<usize>,
    },
    #[error("tensor {tensor:?}: shape {shape:?} of {dtype} is not a whole number of bytes")]
    NotWholeBytes {
        tensor: String,
        dtype: FormatDtype,
        shape: Vec<usize>,
    },
    #[error("tensor {tensor:?}: shape {shape:?} of {dtype} is {expected} bytes, its data {found}")]
    SizeMismatch {
        tensor: String,
        dtype: FormatDtype,
        shape: Vec<usize>,
        expected: usize,
        found: usize,
    },
    #[error(
        "tensor {tensor:?}: `data_offsets` end {end} is past the {data_len}-byte data section"
    )]
    PastEnd {
        tensor: String,
        end: usize,
        data_len: u64,
    },
    #[error("tensor {tensor:?}: `data_offsets` [{begin}, {end}] run backwards")]
    OffsetsReversed {
        tensor: String,
        begin: usize,
        end: usize,
    },
    /// Taken in offset order, each tensor must begin where the one before it ends (`after`;
    /// the first at 0): gaps and overlaps are both refused.
    #[error(
        "tensor {tensor:?}: `data_offsets` begin at {begin}, not at {expected} where {} ends \
         (tensors lie end to end)",
        after.as_deref().map_or("the header".to_string(), |a| format!("{a:?}"))
    )]
    NotContiguous {
        tensor: String,
        begin: usize,
        expected: usize,
        after: Option<String>,
    },
    #[error(
        "the tensors end at byte {covered} of the {data_len}-byte data section, which must end \
         where they do"
    )]
    DataLen { covered: usize, data_len: u64 },
    /// A refusal of the crate's that none of the above explains, in its words.
    #[error("{0}")]
    Format(String),
}

/// ` at `field`` for a non-empty path inside an entry, clipped for a hostile one.
fn at(field: &str) -> String {
    if field.is_empty() {
        return String::new();
    }
    let mut end = field.len().min(64);
    while !field.is_char_boundary(end) {
        end -= 1;
    }
    let more = if end < field.len() { "..." } else { "" };
    format!(" at `{}{more}`", &field[..end])
}

/// A header entry read with the crate's own type.
pub(super) type Entry = (String, CrateInfo);

/// Why the crate refused, in our words: found among the entries the way the crate's validation
/// would have met it (in offset order). This decides nothing: it only names what the crate's
/// error leaves out, and falls back to the crate's message.
pub(super) fn explain(
    e: SafeTensorError,
    scanned: Result<Vec<Entry>, FileProblem>,
    data_len: u64,
) -> FileProblem {
    let mut entries = match (&e, scanned) {
        (
            SafeTensorError::InvalidHeaderDeserialization(_),
            Err(p @ (FileProblem::BadTensor { .. } | FileProblem::BadMetadata { .. })),
        ) => return p,
        (SafeTensorError::InvalidHeaderDeserialization(j), _) => {
            return FileProblem::HeaderJson(j.to_string())
        }
        (_, Ok(entries)) => entries,
        (_, Err(_)) => return FileProblem::Format(e.to_string()),
    };
    entries.sort_by_key(|(_, t)| t.data_offsets);
    let found = match e {
        SafeTensorError::InvalidOffset(_) => {
            let (mut expected, mut after) = (0, None);
            entries.into_iter().find_map(|(tensor, t)| {
                let (begin, end) = t.data_offsets;
                let fault = if end < begin {
                    Some(FileProblem::OffsetsReversed {
                        tensor: tensor.clone(),
                        begin,
                        end,
                    })
                } else if begin != expected {
                    Some(FileProblem::NotContiguous {
                        tensor: tensor.clone(),
                        begin,
                        expected,
                        after: after.take(),
                    })
                } else {
                    None
                };
                expected = end;
                after = Some(tensor);
                fault
            })
        }
        SafeTensorError::TensorInvalidInfo
        | SafeTensorError::ValidationOverflow
        | SafeTensorError::MisalignedSlice => entries.into_iter().find_map(|(tensor, t)| {
            let (dtype, shape) = (t.dtype, t.shape);
            let found = t.data_offsets.1.wrapping_sub(t.data_offsets.0);
            match byte_len(dtype, &shape) {
                Err(Size::Overflow) => Some(FileProblem::SizeOverflow {
                    tensor,
                    dtype,
                    shape,
                }),
                Err(Size::NotWhole) => Some(FileProblem::NotWholeBytes {
                    tensor,
                    dtype,
                    shape,
                }),
                Ok(expected) if expected != found => Some(FileProblem::SizeMismatch {
                    tensor,
                    dtype,
                    shape,
                    expected,
                    found,
                }),
                Ok(_) => None,
            }
        }),
        SafeTensorError::MetadataIncompleteBuffer => Some(FileProblem::DataLen {
            covered: entries.last().map_or(0, |(_, t)| t.data_offsets.1),
            data_len,
        }),
        _ => None,
    };
    found.unwrap_or_else(|| FileProblem::Format(e.to_string()))
}

pub(super) enum Size {
    Overflow,
    NotWhole,
}

/// Bytes of `shape` elements of `dtype`, computed as the crate does, but checked throughout.
pub(super) fn byte_len(dtype: FormatDtype, shape: &[usize]) -> Result<usize, Size> {
    let bits = shape
        .iter()
        .try_fold(dtype.bitsize(), |a, &d| a.checked_mul(d))
        .ok_or(Size::Overflow)?;
    if bits % 8 != 0 {
        return Err(Size::NotWhole);
    }
    Ok(bits / 8)
}

/// The header read entry by entry with the crate's own types, so that a refusal can be pinned
/// on an entry and a field (the crate reads the header through a flattened map, whose errors
/// name neither). JSON that is cut short is left to the crate's message.
pub(super) fn scan(text: &str) -> Result<Vec<Entry>, FileProblem> {
    let culprit = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let entries = Entries(&culprit)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    entries.map_err(|e| match culprit.into_inner() {
        Some(p) if e.classify() != Category::Eof => p,
        _ => FileProblem::HeaderJson(e.to_string()),
    })
}

struct Entries<'a>(&'a RefCell<Option<FileProblem>>);

impl<'de> DeserializeSeed<'de> for Entries<'_> {
    type Value = Vec<Entry>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Entry>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Entries<'_> {
    type Value = Vec<Entry>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of tensors")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<Entry>, A::Error> {
        let mut out = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            if name == "__metadata__" {
                map.next_value_seed(Traced::<Option<HashMap<String, String>>>::new(self.0, None))?;
            } else {
                let t = map.next_value_seed(Traced::<CrateInfo>::new(self.0, Some(&name)))?;
                out.push((name, t));
            }
        }
        Ok(out)
    }
}

/// Deserializes a `T`; on failure, leaves in `culprit` which entry (a tensor, or the metadata
/// when `tensor` is `None`) and which field inside it.
struct Traced<'a, T> {
    culprit: &'a RefCell<Option<FileProblem>>,
    tensor: Option<&'a str>,
    _t: PhantomData<T>,
}

impl<'a, T> Traced<'a, T> {
    fn new(culprit: &'a RefCell<Option<FileProblem>>, tensor: Option<&'a str>) -> Self {
        Traced {
            culprit,
            tensor,
            _t: PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Traced<'_, T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        serde_path_to_error::deserialize(d).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { String::new() } else { path };
            let detail = e.inner().to_string();
            *self.culprit.borrow_mut() = Some(match self.tensor {
                Some(t) => FileProblem::BadTensor {
                    tensor: t.to_string(),
                    field,
                    detail,
                },
                None => FileProblem::BadMetadata { field, detail },
            });
            e.into_inner()
        })
    }
}
