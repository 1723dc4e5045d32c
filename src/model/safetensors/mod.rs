//! `.safetensors` checkpoints, read and written through the `safetensors` crate (Hugging Face's
//! reference implementation), for files that cannot be trusted.
//!
//! The format: an 8-byte little-endian header length `N`, `N` bytes of UTF-8 JSON
//! `{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//! "__metadata__": {"key": "value", ...}}`, then the data section, which the offsets index
//! (relative to its start).
//!
//! The crate's reader decides what a valid file is: taken in offset order, tensors lie end to end
//! from the start of the data section, with no gap and no overlap, each spanning exactly its
//! shape times its dtype, and the last one ends at the end of the file, as the crate's writer
//! lays them out. A file it refuses is refused here; this module only says why in our words,
//! naming the file, the tensor, the field and the values (the crate's own errors name at most the
//! tensor). A thin layer keeps what the crate lacks:
//! - a tensor named twice is refused (the crate's map keeps the last one silently);
//! - a shape of more than [`MAX_RANK`] dimensions is refused;
//! - only the byte-sized dtypes of [`Dtype`] are accepted (the crate also knows 4- and 6-bit
//!   floats and complex numbers, which nothing here loads);
//! - every `data_offsets` end is checked against the data section before the crate sees the
//!   header: its final length check adds the last end to the header length unchecked, which
//!   overflows (a panic in a debug build) when the ends of a chain of huge tensors reach
//!   `usize::MAX`.
//!
//! Why a file was refused is told by `refusal.rs`. The file is mapped (memmap2);
//! [`SafeTensors::read`] copies one tensor out of the map. Nothing in here panics on any input.
//!
//! Cost: the crate reads the header through a flattened map, which buffers every value as
//! serde's `Content` first. A hostile header at the 100 MB cap (a 49-million-element array in an
//! unknown field) took 1.3 GB and 7 s to open (a debug build, measured); the hand-written
//! reader this replaces streamed it in about the header's size.

mod refusal;

pub use refusal::FileProblem;

use super::hf::{HfConfig, TorchDtype};
use memmap2::Mmap;
use refusal::{byte_len, explain, scan};
use safetensors::tensor::{Metadata, TensorInfo as CrateInfo, TensorView};
use safetensors::SafeTensorError;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Largest header accepted, in bytes (the crate's limit, repeated so that a refusal can say it).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Most dimensions a tensor's shape may have. Real checkpoints use at most 5 or so.
pub const MAX_RANK: usize = 64;

/// The element types loaded here: the byte-sized ones of the format.
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

/// The crate's name for a dtype (`safetensors::Dtype`), which its header and its errors use.
pub type FormatDtype = safetensors::Dtype;

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        self.format().bitsize() / 8
    }

    /// The crate's dtype of the same name.
    pub fn format(self) -> FormatDtype {
        use safetensors::Dtype as F;
        match self {
            Dtype::Bool => F::BOOL,
            Dtype::U8 => F::U8,
            Dtype::I8 => F::I8,
            Dtype::F8E5M2 => F::F8_E5M2,
            Dtype::F8E4M3 => F::F8_E4M3,
            Dtype::I16 => F::I16,
            Dtype::U16 => F::U16,
            Dtype::F16 => F::F16,
            Dtype::BF16 => F::BF16,
            Dtype::I32 => F::I32,
            Dtype::U32 => F::U32,
            Dtype::F32 => F::F32,
            Dtype::F64 => F::F64,
            Dtype::I64 => F::I64,
            Dtype::U64 => F::U64,
        }
    }

    /// Ours for the crate's, or `None` for one not loaded here (sub-byte floats, complex).
    pub fn from_format(d: FormatDtype) -> Option<Dtype> {
        const ALL: [Dtype; 15] = [
            Dtype::Bool,
            Dtype::U8,
            Dtype::I8,
            Dtype::F8E5M2,
            Dtype::F8E4M3,
            Dtype::I16,
            Dtype::U16,
            Dtype::F16,
            Dtype::BF16,
            Dtype::I32,
            Dtype::U32,
            Dtype::F32,
            Dtype::F64,
            Dtype::I64,
            Dtype::U64,
        ];
        ALL.into_iter().find(|t| t.format() == d)
    }
}

impl fmt::Display for Dtype {
    /// The name the format uses (`BF16`, `F8_E4M3`, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.format().fmt(f)
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
    /// A file that breaks the format (reading) or tensors that cannot make one (writing).
    #[error("{}: {problem}", path.display())]
    File { path: PathBuf, problem: FileProblem },
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

impl SafeTensorsError {
    /// What was wrong with the file, for a [`SafeTensorsError::File`].
    pub fn problem(&self) -> Option<&FileProblem> {
        match self {
            SafeTensorsError::File { problem, .. } => Some(problem),
            _ => None,
        }
    }
}

type Result<T, E = SafeTensorsError> = std::result::Result<T, E>;

/// One tensor as the (validated) header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Where its bytes lie, as absolute offsets in the file (header included). Checked to lie
    /// inside the file.
    pub range: Range<u64>,
}

impl TensorInfo {
    pub fn byte_len(&self) -> u64 {
        self.range.end - self.range.start
    }
}

/// An open safetensors file: the validated header in memory, the file mapped.
pub struct SafeTensors {
    path: PathBuf,
    file: File,
    map: Mmap,
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
            .field("file_len", &self.file_len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl SafeTensors {
    /// Open `path`, map it and check its header; the data is read by [`read`](Self::read).
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        let path = path.as_ref().to_path_buf();
        let io = |source| SafeTensorsError::Io {
            path: path.clone(),
            source,
        };
        let refuse = |problem| SafeTensorsError::File {
            path: path.clone(),
            problem,
        };
        let file = File::open(&path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < 8 {
            return Err(refuse(FileProblem::TooShort { len }));
        }
        // SAFETY: the map is read-only and private to this value. Another process changing
        // the file while it is mapped is what no mapping can rule out (memmap2's caveat):
        // `read` checks the file's length first, so a file cut since `open` is an error rather
        // than a fault on the pages past its new end.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let Header {
            header_len,
            tensors,
            metadata,
        } = parse(&map).map_err(refuse)?;
        let by_name = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(SafeTensors {
            path,
            file,
            map,
            header_len,
            tensors,
            by_name,
            metadata,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length when it was opened.
    pub fn file_len(&self) -> u64 {
        self.map.len() as u64
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
    /// Fails, rather than returning short data or faulting, if the file was cut since `open`.
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        let t = self
            .get(name)
            .ok_or_else(|| SafeTensorsError::NotFound(name.to_string()))?;
        let io = |source| SafeTensorsError::Io {
            path: self.path.clone(),
            source,
        };
        let now = self.file.metadata().map_err(io)?.len();
        if now < t.range.end {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the file is now {now} bytes, cut since it was opened"),
            )));
        }
        // `open` checked the range against the map; `get` keeps a wrong one from panicking.
        let bytes = usize::try_from(t.range.start)
            .ok()
            .zip(usize::try_from(t.range.end).ok())
            .and_then(|(a, b)| self.map.get(a..b))
            .ok_or_else(|| io(std::io::ErrorKind::UnexpectedEof.into()))?;
        Ok(bytes.to_vec())
    }
}

/// A header the crate and this module's caps accepted.
struct Header {
    header_len: u64,
    tensors: Vec<TensorInfo>,
    metadata: BTreeMap<String, String>,
}

/// Check a whole file (`buf`, at least 8 bytes): the crate decides, the caps follow.
fn parse(buf: &[u8]) -> Result<Header, FileProblem> {
    let file_len = buf.len() as u64;
    let mut n = [0u8; 8];
    n.copy_from_slice(buf.get(..8).unwrap_or(&[0; 8]));
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_LEN {
        return Err(FileProblem::HeaderTooLarge {
            len: n,
            max: MAX_HEADER_LEN,
        });
    }
    if n > file_len.saturating_sub(8) {
        return Err(FileProblem::HeaderPastEnd { len: n, file_len });
    }
    // Both bounded by the file's length, which the map proves fits in a usize.
    let data_start = 8 + n as usize;
    let text =
        std::str::from_utf8(&buf[8..data_start]).map_err(|e| FileProblem::HeaderNotUtf8 {
            valid_up_to: e.valid_up_to(),
        })?;
    let data_len = file_len - data_start as u64;
    let scanned = scan(text);
    if let Ok(entries) = &scanned {
        // Caps checked before the crate: a name given twice (which its map would keep once),
        // and an end past the data section (see the module docs: its unchecked addition).
        let mut seen = HashSet::new();
        for (name, t) in entries {
            if !seen.insert(name) {
                return Err(FileProblem::DuplicateTensor(name.clone()));
            }
            if t.data_offsets.1 as u64 > data_len {
                return Err(FileProblem::PastEnd {
                    tensor: name.clone(),
                    end: t.data_offsets.1,
                    data_len,
                });
            }
        }
    }
    let meta = match safetensors::SafeTensors::read_metadata(buf) {
        Ok((_, meta)) => meta,
        Err(e) => return Err(explain(e, scanned, data_len)),
    };
    // The crate accepted what the scan, reading the same types, refused: not expected, but
    // refused all the same.
    scanned?;
    let tensors = infos(&meta, data_start as u64)?;
    let metadata = meta.metadata().clone().unwrap_or_default();
    Ok(Header {
        header_len: n,
        tensors,
        metadata: metadata.into_iter().collect(),
    })
}

/// The crate's accepted tensors as ours, sorted by name, through the rank and dtype caps.
fn infos(meta: &Metadata, data_start: u64) -> Result<Vec<TensorInfo>, FileProblem> {
    let mut all: Vec<(String, &CrateInfo)> = meta.tensors().into_iter().collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all.into_iter()
        .map(|(name, t)| {
            if t.shape.len() > MAX_RANK {
                return Err(FileProblem::RankTooHigh {
                    tensor: name,
                    rank: t.shape.len(),
                    max: MAX_RANK,
                });
            }
            let Some(dtype) = Dtype::from_format(t.dtype) else {
                return Err(FileProblem::UnsupportedDtype {
                    tensor: name,
                    dtype: t.dtype,
                });
            };
            let (begin, end) = t.data_offsets;
            Ok(TensorInfo {
                name,
                dtype,
                shape: t.shape.clone(),
                // The crate checked that the last end is the data section's.
                range: data_start + begin as u64..data_start + end as u64,
            })
        })
        .collect()
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

/// Write a safetensors file through the crate (`serialize_to_file`: a temporary file beside
/// `path`, renamed over it): tensors end to end in the crate's order (by dtype alignment, then
/// name), the header padded with spaces to a multiple of 8 bytes so that data is aligned, and
/// `__metadata__` `{"format": "pt"}`. Each tensor's bytes must be exactly its shape times its
/// dtype's size; names must be distinct (the crate would write a name twice) and not
/// `__metadata__`.
pub fn write_safetensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, Dtype, &[usize], &[u8])],
) -> Result<()> {
    let path = path.as_ref();
    let refuse = |problem| SafeTensorsError::File {
        path: path.to_path_buf(),
        problem,
    };
    let mut seen = HashSet::new();
    let mut views = Vec::with_capacity(tensors.len());
    for &(name, dtype, shape, bytes) in tensors {
        if name == "__metadata__" {
            return Err(refuse(FileProblem::ReservedName(name.to_string())));
        }
        if !seen.insert(name) {
            return Err(refuse(FileProblem::DuplicateTensor(name.to_string())));
        }
        let (tensor, dtype, shape) = (name.to_string(), dtype.format(), shape.to_vec());
        // Checked here: the crate's `TensorView::new` multiplies unchecked.
        let expected = match byte_len(dtype, &shape) {
            Ok(n) => n,
            Err(_) => {
                return Err(refuse(FileProblem::SizeOverflow {
                    tensor,
                    dtype,
                    shape,
                }))
            }
        };
        if bytes.len() != expected {
            return Err(refuse(FileProblem::SizeMismatch {
                tensor,
                dtype,
                shape,
                expected,
                found: bytes.len(),
            }));
        }
        let view = TensorView::new(dtype, shape, bytes)
            .map_err(|e| refuse(FileProblem::Format(e.to_string())))?;
        views.push((name, view));
    }
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(meta), path).map_err(|e| match e {
        SafeTensorError::IoError(source) => SafeTensorsError::Io {
            path: path.to_path_buf(),
            source,
        },
        e => refuse(FileProblem::Format(e.to_string())),
    })
}
