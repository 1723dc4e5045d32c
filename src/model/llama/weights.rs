//! The bf16 step's weights: one allocation per tensor, with q/k/v and gate/up fused into one
//! matrix each (their rows stacked), as serving engines hold them, so a layer reads its
//! attention input projections in one launch and its MLP input projections in another.
//!
//! Two sources: generated on the device from a seed (`fill_bf16`: a 16 GB model costs no
//! host memory and no upload), or a Hugging Face safetensors checkpoint in the usual Llama
//! tensor layout, checked against the config before anything is allocated.

use super::{launch_fill, Shape};
use crate::backend::{DevicePtr, GpuBackend, ModelResource, Releases};
use crate::model::safetensors::{check_llama_shards, SafeTensors};
use anyhow::{Context, Result};

/// One decoder layer's tensors.
#[derive(Clone, Copy, Debug)]
pub struct LayerWeights {
    pub attn_norm: DevicePtr,
    /// [q_dim + 2 kv_dim][hidden]: q_proj, k_proj, v_proj rows stacked.
    pub qkv: DevicePtr,
    /// [hidden][q_dim].
    pub o: DevicePtr,
    pub ffn_norm: DevicePtr,
    /// [2 ffn][hidden]: gate_proj rows, then up_proj rows.
    pub gate_up: DevicePtr,
    /// [hidden][ffn].
    pub down: DevicePtr,
}

/// Every weight tensor of the model on one backend.
pub struct LlamaWeights {
    /// [vocab][hidden].
    pub embed: DevicePtr,
    pub layers: Vec<LayerWeights>,
    pub final_norm: DevicePtr,
    /// [vocab][hidden]; `None` when tied to `embed` (Llama 3.2 1B ties them).
    pub lm_head: Option<DevicePtr>,
    /// Every allocation with its size, in allocation order (what `release` frees).
    allocs: Vec<(DevicePtr, usize)>,
}

/// One tensor of the model, named for whichever source provides it.
#[derive(Clone, Copy, Debug)]
enum Tensor {
    Embed,
    AttnNorm(usize),
    Qkv(usize),
    O(usize),
    FfnNorm(usize),
    GateUp(usize),
    Down(usize),
    FinalNorm,
    LmHead,
}

impl Tensor {
    /// (rows, cols); a norm is one row.
    fn shape(self, s: &Shape) -> (usize, usize) {
        match self {
            Tensor::Embed | Tensor::LmHead => (s.vocab, s.hidden),
            Tensor::AttnNorm(_) | Tensor::FfnNorm(_) | Tensor::FinalNorm => (1, s.hidden),
            Tensor::Qkv(_) => (s.qkv_dim(), s.hidden),
            Tensor::O(_) => (s.hidden, s.q_dim()),
            Tensor::GateUp(_) => (2 * s.ffn, s.hidden),
            Tensor::Down(_) => (s.hidden, s.ffn),
        }
    }

    /// The checkpoint tensors whose rows it stacks.
    fn hf_names(self) -> Vec<String> {
        let layer = |i: usize, ms: &[&str]| -> Vec<String> {
            ms.iter()
                .map(|m| format!("model.layers.{i}.{m}.weight"))
                .collect()
        };
        match self {
            Tensor::Embed => vec!["model.embed_tokens.weight".into()],
            Tensor::AttnNorm(i) => layer(i, &["input_layernorm"]),
            Tensor::Qkv(i) => layer(
                i,
                &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
            ),
            Tensor::O(i) => layer(i, &["self_attn.o_proj"]),
            Tensor::FfnNorm(i) => layer(i, &["post_attention_layernorm"]),
            Tensor::GateUp(i) => layer(i, &["mlp.gate_proj", "mlp.up_proj"]),
            Tensor::Down(i) => layer(i, &["mlp.down_proj"]),
            Tensor::FinalNorm => vec!["model.norm.weight".into()],
            Tensor::LmHead => vec!["lm_head.weight".into()],
        }
    }

    /// (scale, offset) of its seeded values: matrices uniform in ±1/sqrt(cols), norms around
    /// 1, the embedding in ±1.
    fn init(self, s: &Shape) -> (f32, f32) {
        match self {
            Tensor::Embed => (1.0, 0.0),
            Tensor::AttnNorm(_) | Tensor::FfnNorm(_) | Tensor::FinalNorm => (0.1, 1.0),
            t => (1.0 / (t.shape(s).1 as f32).sqrt(), 0.0),
        }
    }
}

impl LlamaWeights {
    /// The head the logits come from: `lm_head`, or the embedding when tied.
    pub fn head(&self) -> DevicePtr {
        self.lm_head.unwrap_or(self.embed)
    }

    /// Bytes held on the device.
    pub fn bytes(&self) -> u64 {
        self.allocs.iter().map(|a| a.1 as u64).sum()
    }

    /// Every tensor, in the model's order, each allocated by `make`, which says its size.
    fn build(
        s: &Shape,
        mut make: impl FnMut(Tensor) -> Result<(DevicePtr, usize)>,
    ) -> Result<Self> {
        let mut allocs = Vec::new();
        let mut t = |which: Tensor| -> Result<DevicePtr> {
            let (p, bytes) = make(which)?;
            allocs.push((p, bytes));
            Ok(p)
        };
        let embed = t(Tensor::Embed)?;
        let mut layers = Vec::with_capacity(s.layers);
        for i in 0..s.layers {
            layers.push(LayerWeights {
                attn_norm: t(Tensor::AttnNorm(i))?,
                qkv: t(Tensor::Qkv(i))?,
                o: t(Tensor::O(i))?,
                ffn_norm: t(Tensor::FfnNorm(i))?,
                gate_up: t(Tensor::GateUp(i))?,
                down: t(Tensor::Down(i))?,
            });
        }
        let final_norm = t(Tensor::FinalNorm)?;
        let lm_head = match s.tied {
            true => None,
            false => Some(t(Tensor::LmHead)?),
        };
        Ok(LlamaWeights {
            embed,
            layers,
            final_norm,
            lm_head,
            allocs,
        })
    }

    /// Generated on the device from `seed`, one `fill_bf16` launch per tensor on `stream`.
    pub fn generate(gpu: &dyn GpuBackend, s: &Shape, seed: u64, stream: u64) -> Result<Self> {
        let mut n = 0u64;
        Self::build(s, |t| {
            let (rows, cols) = t.shape(s);
            let (scale, offset) = t.init(s);
            let elems = rows * cols;
            let p = gpu.alloc(elems * 2)?;
            n += 1;
            // Each tensor its own stream of values: a seed a large odd step apart.
            let seed = seed ^ n.wrapping_mul(0xD1B5_4A32_D192_ED03);
            launch_fill(gpu, p, elems, seed, scale, offset, stream)?;
            Ok((p, elems * 2))
        })
    }

    /// From safetensors shards (one file or several) in the Hugging Face Llama layout; every
    /// tensor must be bf16 and shaped as `cfg` says (checked first: a wrong file allocates
    /// nothing). Fused matrices are the checkpoint's rows stacked.
    pub fn from_safetensors(
        gpu: &dyn GpuBackend,
        s: &Shape,
        shards: &[&SafeTensors],
    ) -> Result<Self> {
        anyhow::ensure!(
            s.hf.torch_dtype == crate::model::hf::TorchDtype::BFloat16,
            "the bf16 step loads bfloat16 checkpoints; this config says {}",
            s.hf.torch_dtype.as_str()
        );
        check_llama_shards(shards, &s.hf)?;
        Self::build(s, |t| {
            let mut bytes = Vec::new();
            for name in t.hf_names() {
                let st = shards
                    .iter()
                    .find(|st| st.get(&name).is_some())
                    .ok_or_else(|| anyhow::anyhow!("no shard holds {name}"))?;
                bytes
                    .extend_from_slice(&st.read(&name).with_context(|| format!("reading {name}"))?);
            }
            let p = gpu.alloc(bytes.len())?;
            gpu.copy_h2d(&bytes, p)?;
            Ok((p, bytes.len()))
        })
    }
}

impl ModelResource<dyn GpuBackend> for LlamaWeights {
    fn label(&self) -> &'static str {
        "bf16 weights"
    }

    /// Every allocation, each attempted once even when one fails.
    fn release(&mut self, gpu: &dyn GpuBackend) -> Result<()> {
        let mut releases = Releases::new();
        while let Some((p, bytes)) = self.allocs.pop() {
            releases.attempt(
                self.label(),
                format_args!("allocation {p} ({bytes} bytes)"),
                gpu.free(p),
            );
        }
        self.layers.clear();
        Ok(releases.finish()?)
    }
}

/// Which part of a tensor-parallel model one rank holds: rank `rank` of `size`, joined to
/// the others by `comm` (the caller's communicator, which it destroys).
#[derive(Clone, Copy, Debug)]
pub struct TpPart {
    pub rank: usize,
    pub size: usize,
    pub comm: crate::backend::CommHandle,
}

impl LlamaWeights {
    /// This rank's shard of a model generated whole (`full`, as one GPU would hold it), in
    /// the usual Megatron split: the q/k/v rows of its heads and KV heads and the gate/up
    /// rows of its part of the MLP (row slices), the o and down projections' matching columns
    /// (column slices, pitched copies); embedding, norms and head stay whole on every rank.
    /// The whole tensors it replaces are freed. Generating whole and slicing keeps the seeded
    /// values where one GPU has them, so a tensor-parallel step can be checked against one
    /// GPU's.
    pub(super) fn shard(
        mut self,
        gpu: &dyn GpuBackend,
        full: &Shape,
        part: TpPart,
        stream: u64,
    ) -> Result<Self> {
        let (r, n, h) = (part.rank, part.size, full.hidden);
        let (q, kv, f) = (full.q_dim(), full.kv_dim(), full.ffn);
        let (ql, kvl, fl) = (q / n, kv / n, f / n);
        let mut made = Vec::new();
        let mut old = Vec::new();
        for lw in &mut self.layers {
            let qkv = row_slices(
                gpu,
                lw.qkv,
                h,
                &[(r * ql, ql), (q + r * kvl, kvl), (q + kv + r * kvl, kvl)],
                stream,
            )?;
            let o = column_slice(gpu, lw.o, h, q, r * ql, ql, stream)?;
            let gate_up = row_slices(
                gpu,
                lw.gate_up,
                h,
                &[(r * fl, fl), (f + r * fl, fl)],
                stream,
            )?;
            let down = column_slice(gpu, lw.down, h, f, r * fl, fl, stream)?;
            old.extend([lw.qkv, lw.o, lw.gate_up, lw.down]);
            (lw.qkv, lw.o, lw.gate_up, lw.down) = (qkv.0, o.0, gate_up.0, down.0);
            made.extend([qkv, o, gate_up, down]);
        }
        // The copies read the whole tensors: done before they are freed.
        gpu.synchronize(stream)?;
        for p in &old {
            gpu.free(*p)?;
        }
        self.allocs.retain(|a| !old.contains(&a.0));
        self.allocs.extend(made);
        Ok(self)
    }
}

/// A new tensor of the rows `ranges` (first, count) of a row-major bf16 matrix with `cols`
/// columns, stacked in that order: (pointer, bytes).
pub(super) fn row_slices(
    gpu: &dyn GpuBackend,
    src: DevicePtr,
    cols: usize,
    ranges: &[(usize, usize)],
    stream: u64,
) -> Result<(DevicePtr, usize)> {
    let row = cols * 2;
    let bytes = ranges.iter().map(|r| r.1).sum::<usize>() * row;
    let p = gpu.alloc(bytes)?;
    let mut at = 0;
    for &(first, count) in ranges {
        gpu.copy_d2d_async(src.offset(first * row), p.offset(at), count * row, stream)?;
        at += count * row;
    }
    Ok((p, bytes))
}

/// A new tensor of columns `first..first + count` of a row-major bf16 matrix of `rows` x
/// `cols`: (pointer, bytes).
pub(super) fn column_slice(
    gpu: &dyn GpuBackend,
    src: DevicePtr,
    rows: usize,
    cols: usize,
    first: usize,
    count: usize,
    stream: u64,
) -> Result<(DevicePtr, usize)> {
    let bytes = rows * count * 2;
    let p = gpu.alloc(bytes)?;
    gpu.copy_d2d_2d_async(
        src.offset(first * 2),
        cols * 2,
        p,
        count * 2,
        count * 2,
        rows,
        stream,
    )?;
    Ok((p, bytes))
}
