//! Model shapes the way users have them: a Hugging Face `config.json`.
//!
//! A Llama checkpoint on the Hub describes its shape in `config.json`; reading that file (rather
//! than asking users to retype sizes into a [`ModelConfig`]) is what lets the same step be run at
//! a real model's scale. The reader is deliberately narrow: it takes the Llama fields the decode
//! step depends on, fills in the defaults `transformers`' `LlamaConfig` uses, ignores every other
//! key (`architectures`, `bos_token_id`, `rope_scaling`, ...), and rejects anything it would
//! otherwise have to guess about. Every error is an [`HfError`] naming the field and the value.
//!
//! Sizes are bounded (see [`LIMITS`]) so that every product the model or [`HfConfig::weight_bytes`]
//! forms from them fits in a `u64` (and a 64-bit `usize`) with room to spare: a hostile or
//! mistyped config fails here, not as an overflow or an absurd allocation later.

use super::ModelConfig;
use serde_json::{Map, Value};
use thiserror::Error;

/// Why a `config.json` (or a request to map one onto a [`ModelConfig`]) was refused.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum HfError {
    #[error("config.json is not valid JSON: {0}")]
    BadJson(String),
    #[error("config.json must be a JSON object, found {0}")]
    NotAnObject(&'static str),
    #[error("config.json has no `{0}`")]
    MissingField(&'static str),
    #[error("`{field}` must be {expected}, found {value}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
        value: String,
    },
    #[error("`{0}` must be non-zero")]
    Zero(&'static str),
    #[error("`{field}` = {value} is larger than this reader allows ({max})")]
    TooLarge {
        field: &'static str,
        value: u64,
        max: u64,
    },
    #[error("`{field}` = {value} must be a finite number in {range}")]
    OutOfRange {
        field: &'static str,
        value: f64,
        range: &'static str,
    },
    #[error(
        "`num_attention_heads` = {heads} is not divisible by `num_key_value_heads` = {kv_heads}"
    )]
    HeadsNotDivisible { heads: u64, kv_heads: u64 },
    #[error(
        "`hidden_size` = {hidden} is not `num_attention_heads` = {heads} times a whole head \
         size (give `head_dim` explicitly if the model's heads do not tile the hidden size)"
    )]
    HiddenNotDivisible { hidden: u64, heads: u64 },
    #[error("`model_type` = {0:?} is not supported (only \"llama\" is)")]
    UnknownModelType(String),
    #[error("`torch_dtype` = {0:?} is not supported (expected \"bfloat16\", \"float16\" or \"float32\")")]
    UnknownDtype(String),
    #[error("max_seq = {max_seq} is longer than `max_position_embeddings` = {max_positions}")]
    SeqTooLong {
        max_seq: usize,
        max_positions: usize,
    },
}

/// Upper bounds on each size (inclusive). Generous for today's models (Llama 3 405B has hidden
/// 16384, intermediate 53248, 126 layers, 128 heads; the largest vocabularies are ~256k), small
/// enough that `layers * 4 * hidden * heads * head_dim * 4 bytes` stays below 2^62.
pub const LIMITS: Limits = Limits {
    hidden_size: 1 << 18,
    intermediate_size: 1 << 20,
    num_hidden_layers: 1 << 10,
    num_attention_heads: 1 << 10,
    head_dim: 1 << 12,
    vocab_size: 1 << 22,
    max_position_embeddings: 1 << 24,
};

/// See [`LIMITS`].
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub num_hidden_layers: u64,
    pub num_attention_heads: u64,
    pub head_dim: u64,
    pub vocab_size: u64,
    pub max_position_embeddings: u64,
}

/// The weights' element type, from `torch_dtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TorchDtype {
    BFloat16,
    Float16,
    Float32,
}

impl TorchDtype {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "bfloat16" => Some(Self::BFloat16),
            "float16" => Some(Self::Float16),
            "float32" => Some(Self::Float32),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::BFloat16 => "bfloat16",
            Self::Float16 => "float16",
            Self::Float32 => "float32",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::BFloat16 | Self::Float16 => 2,
            Self::Float32 => 4,
        }
    }
}

/// The Llama fields of a Hugging Face `config.json`, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct HfConfig {
    /// The preset's name, or `"custom"` for a parsed file. Static so it can become
    /// [`ModelConfig::name`].
    pub name: &'static str,
    pub model_type: String,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// `num_attention_heads` when absent (plain multi-head attention).
    pub num_key_value_heads: usize,
    /// `hidden_size / num_attention_heads` when absent.
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f64,
    /// 10000 when absent.
    pub rope_theta: f64,
    pub max_position_embeddings: usize,
    pub torch_dtype: TorchDtype,
    /// false when absent; when true there is no `lm_head.weight`, the embedding is reused.
    pub tie_word_embeddings: bool,
}

/// Embedded `config.json` text for each preset: the same path as a user's file, so the presets
/// exercise the parser and a preset is exactly what a user could write down.
const PRESETS: &[(&str, &str)] = &[
    // ModelConfig::tiny(). float32 because the built-in model's weights are f32.
    (
        "tiny",
        r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 16,
  "vocab_size": 128,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "max_position_embeddings": 64,
  "torch_dtype": "float32",
  "tie_word_embeddings": false
}"#,
    ),
    // ModelConfig::default_config().
    (
        "default",
        r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 256,
  "intermediate_size": 688,
  "num_hidden_layers": 4,
  "num_attention_heads": 8,
  "num_key_value_heads": 2,
  "head_dim": 32,
  "vocab_size": 512,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "max_position_embeddings": 256,
  "torch_dtype": "float32",
  "tie_word_embeddings": false
}"#,
    ),
    // meta-llama/Llama-3.2-1B (its `rope_scaling` block is omitted: the reader ignores it).
    (
        "llama-3.2-1b",
        r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "num_hidden_layers": 16,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "head_dim": 64,
  "vocab_size": 128256,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "max_position_embeddings": 131072,
  "torch_dtype": "bfloat16",
  "tie_word_embeddings": true
}"#,
    ),
    // meta-llama/Meta-Llama-3-8B.
    (
        "llama-3-8b",
        r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "num_hidden_layers": 32,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "vocab_size": 128256,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "max_position_embeddings": 8192,
  "torch_dtype": "bfloat16",
  "tie_word_embeddings": false
}"#,
    ),
];

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Short rendering of a value for an error message (a hostile file may hold a huge string).
fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 64 {
        s
    } else {
        let mut end = 61;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn get(&self, field: &'static str) -> Option<&Value> {
        // An explicit `null` means "not given", as transformers treats it.
        self.0.get(field).filter(|v| !v.is_null())
    }

    fn size_opt(&self, field: &'static str, max: u64) -> Result<Option<usize>, HfError> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        let n = v.as_u64().ok_or_else(|| HfError::WrongType {
            field,
            expected: "a non-negative integer",
            value: show(v),
        })?;
        if n == 0 {
            return Err(HfError::Zero(field));
        }
        if n > max {
            return Err(HfError::TooLarge {
                field,
                value: n,
                max,
            });
        }
        // max <= 2^24, so this fits any usize of 32 bits or more.
        usize::try_from(n).map(Some).map_err(|_| HfError::TooLarge {
            field,
            value: n,
            max,
        })
    }

    fn size(&self, field: &'static str, max: u64) -> Result<usize, HfError> {
        self.size_opt(field, max)?
            .ok_or(HfError::MissingField(field))
    }

    fn float_opt(&self, field: &'static str) -> Result<Option<f64>, HfError> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        v.as_f64().map(Some).ok_or_else(|| HfError::WrongType {
            field,
            expected: "a number",
            value: show(v),
        })
    }

    fn string_opt(&self, field: &'static str) -> Result<Option<&str>, HfError> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        v.as_str().map(Some).ok_or_else(|| HfError::WrongType {
            field,
            expected: "a string",
            value: show(v),
        })
    }

    fn bool_opt(&self, field: &'static str) -> Result<Option<bool>, HfError> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        v.as_bool().map(Some).ok_or_else(|| HfError::WrongType {
            field,
            expected: "a boolean",
            value: show(v),
        })
    }
}

impl HfConfig {
    /// Parse and validate `config.json` text. The result is named `"custom"`.
    pub fn parse(text: &str) -> Result<HfConfig, HfError> {
        let v: Value = serde_json::from_str(text).map_err(|e| HfError::BadJson(e.to_string()))?;
        let Value::Object(map) = &v else {
            return Err(HfError::NotAnObject(kind(&v)));
        };
        let f = Fields(map);

        // model_type first: a non-Llama config may legitimately lack Llama fields, and "this is a
        // mistral config" is the more useful error.
        let model_type = f
            .string_opt("model_type")?
            .ok_or(HfError::MissingField("model_type"))?;
        if model_type != "llama" {
            return Err(HfError::UnknownModelType(model_type.to_string()));
        }

        let hidden_size = f.size("hidden_size", LIMITS.hidden_size)?;
        let intermediate_size = f.size("intermediate_size", LIMITS.intermediate_size)?;
        let num_hidden_layers = f.size("num_hidden_layers", LIMITS.num_hidden_layers)?;
        let num_attention_heads = f.size("num_attention_heads", LIMITS.num_attention_heads)?;
        let num_key_value_heads = f
            .size_opt("num_key_value_heads", LIMITS.num_attention_heads)?
            .unwrap_or(num_attention_heads);
        if num_attention_heads % num_key_value_heads != 0 {
            return Err(HfError::HeadsNotDivisible {
                heads: num_attention_heads as u64,
                kv_heads: num_key_value_heads as u64,
            });
        }
        let head_dim = match f.size_opt("head_dim", LIMITS.head_dim)? {
            Some(d) => d,
            None => {
                if hidden_size % num_attention_heads != 0 {
                    return Err(HfError::HiddenNotDivisible {
                        hidden: hidden_size as u64,
                        heads: num_attention_heads as u64,
                    });
                }
                let d = hidden_size / num_attention_heads;
                if d as u64 > LIMITS.head_dim {
                    return Err(HfError::TooLarge {
                        field: "head_dim",
                        value: d as u64,
                        max: LIMITS.head_dim,
                    });
                }
                d
            }
        };
        let vocab_size = f.size("vocab_size", LIMITS.vocab_size)?;
        let max_position_embeddings =
            f.size("max_position_embeddings", LIMITS.max_position_embeddings)?;

        let rms_norm_eps = f
            .float_opt("rms_norm_eps")?
            .ok_or(HfError::MissingField("rms_norm_eps"))?;
        // Must survive the step's f32 and keep the norm a norm.
        if !(rms_norm_eps.is_finite() && rms_norm_eps > 0.0 && rms_norm_eps < 1.0)
            || (rms_norm_eps as f32) == 0.0
        {
            return Err(HfError::OutOfRange {
                field: "rms_norm_eps",
                value: rms_norm_eps,
                range: "(0, 1)",
            });
        }
        let rope_theta = f.float_opt("rope_theta")?.unwrap_or(10000.0);
        if !(rope_theta.is_finite() && rope_theta > 1.0 && rope_theta <= 1e12) {
            return Err(HfError::OutOfRange {
                field: "rope_theta",
                value: rope_theta,
                range: "(1, 1e12]",
            });
        }

        // Newer transformers write `dtype` where older ones wrote `torch_dtype`; take either.
        let dtype_field = if f.get("torch_dtype").is_some() {
            "torch_dtype"
        } else {
            "dtype"
        };
        let dtype_str = f
            .string_opt(dtype_field)?
            .ok_or(HfError::MissingField("torch_dtype"))?;
        let torch_dtype = TorchDtype::parse(dtype_str)
            .ok_or_else(|| HfError::UnknownDtype(dtype_str.to_string()))?;
        let tie_word_embeddings = f.bool_opt("tie_word_embeddings")?.unwrap_or(false);

        Ok(HfConfig {
            name: "custom",
            model_type: model_type.to_string(),
            hidden_size,
            intermediate_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            vocab_size,
            rms_norm_eps,
            rope_theta,
            max_position_embeddings,
            torch_dtype,
            tie_word_embeddings,
        })
    }

    /// The preset names, in a stable order.
    pub fn preset_names() -> impl Iterator<Item = &'static str> {
        PRESETS.iter().map(|(n, _)| *n)
    }

    /// The embedded `config.json` text of a preset.
    pub fn preset_text(name: &str) -> Option<&'static str> {
        PRESETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    /// `tiny`, `default`, `llama-3.2-1b` or `llama-3-8b`.
    pub fn preset(name: &str) -> Option<HfConfig> {
        let &(n, text) = PRESETS.iter().find(|(n, _)| *n == name)?;
        // The presets are tested to parse; a failure here is a bug in this file.
        let mut c = HfConfig::parse(text).expect("embedded preset config.json parses");
        c.name = n;
        Some(c)
    }

    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// Parameters per decoder layer: two norms, q/k/v/o, gate/up/down.
    pub fn layer_params(&self) -> u64 {
        let (h, q, kv, f) = (
            self.hidden_size as u64,
            self.q_dim() as u64,
            self.kv_dim() as u64,
            self.intermediate_size as u64,
        );
        2 * h + 2 * h * q + 2 * h * kv + 3 * h * f
    }

    /// Every parameter: embeddings, layers, the final norm, and `lm_head` unless tied (a tied
    /// checkpoint stores the embedding once and reuses it).
    pub fn params(&self) -> u64 {
        let embed = self.vocab_size as u64 * self.hidden_size as u64;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        embed + self.num_hidden_layers as u64 * self.layer_params() + self.hidden_size as u64 + head
    }

    /// Total parameter bytes at `torch_dtype`: what a checkpoint holds and what loading it
    /// costs in device memory. `u64` so that it is exact on any host; [`LIMITS`] keep it far
    /// below overflow.
    pub fn weight_bytes(&self) -> u64 {
        self.params() * self.torch_dtype.size() as u64
    }

    /// Map onto the built-in model's [`ModelConfig`]: shapes, `rope_theta` and `eps` (as f32,
    /// the step's precision). The KV pool gets two sequences' worth of blocks
    /// (`2 * ceil(max_seq / block_size)`), which is what the built-in configs carry, so `tiny`
    /// and `default` map back to exactly `ModelConfig::tiny()` / `default_config()`. The seed is
    /// the default config's: the built-in model still generates its weights.
    ///
    /// Not carried: `torch_dtype` and `tie_word_embeddings` (the built-in model is f32 with its
    /// own `lm_head`). No kernel limits are checked here; the step checks its own.
    pub fn to_model_config(
        &self,
        max_seq: usize,
        block_size: usize,
    ) -> Result<ModelConfig, HfError> {
        if max_seq == 0 {
            return Err(HfError::Zero("max_seq"));
        }
        if block_size == 0 {
            return Err(HfError::Zero("block_size"));
        }
        if max_seq > self.max_position_embeddings {
            return Err(HfError::SeqTooLong {
                max_seq,
                max_positions: self.max_position_embeddings,
            });
        }
        // max_seq <= max_position_embeddings <= 2^24, so this cannot overflow.
        let num_blocks = 2 * max_seq.div_ceil(block_size);
        Ok(ModelConfig {
            name: self.name,
            vocab: self.vocab_size,
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            ffn: self.intermediate_size,
            block_size,
            num_blocks,
            max_seq,
            rope_theta: self.rope_theta as f32,
            eps: self.rms_norm_eps as f32,
            seed: ModelConfig::default_config().seed,
        })
    }
}
