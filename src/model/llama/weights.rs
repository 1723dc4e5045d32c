//! The bf16 step's weights: one allocation per tensor, with q/k/v and gate/up fused into one
//! matrix each (their rows stacked), as serving engines hold them, so a layer reads its
//! attention input projections in one launch and its MLP input projections in another.
//!
//! Two sources: generated on the device from a seed (`fill_bf16`: a 16 GB model costs no
//! host memory and no upload), or a Hugging Face safetensors checkpoint in the usual Llama
//! tensor layout, checked against the config before anything is allocated.

use super::{launch_fill, Shape};
use crate::backend::{DevicePtr, GpuBackend, ModelResource};
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

/// (element count, scale, offset) of a seeded tensor: matrices uniform in ±1/sqrt(cols), norms
/// around 1, the embedding in ±1.
fn init(rows: usize, cols: usize) -> (usize, f32, f32) {
    (rows * cols, 1.0 / (cols as f32).sqrt(), 0.0)
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

    /// Generated on the device from `seed`, one `fill_bf16` launch per tensor on `stream`.
    pub fn generate(gpu: &dyn GpuBackend, s: &Shape, seed: u64, stream: u64) -> Result<Self> {
        let mut n = 0u64;
        let mut allocs = Vec::new();
        let mut tensor = |(elems, scale, offset): (usize, f32, f32)| -> Result<DevicePtr> {
            let p = gpu.alloc(elems * 2)?;
            n += 1;
            // Each tensor its own stream of values: a seed a large odd step apart.
            launch_fill(
                gpu,
                p,
                elems,
                seed ^ n.wrapping_mul(0xD1B5_4A32_D192_ED03),
                scale,
                offset,
                stream,
            )?;
            allocs.push((p, elems * 2));
            Ok(p)
        };
        let norm = (s.hidden, 0.1, 1.0);
        let embed = tensor((s.vocab * s.hidden, 1.0, 0.0))?;
        let mut layers = Vec::with_capacity(s.layers);
        for _ in 0..s.layers {
            layers.push(LayerWeights {
                attn_norm: tensor(norm)?,
                qkv: tensor(init(s.qkv_dim(), s.hidden))?,
                o: tensor(init(s.hidden, s.q_dim()))?,
                ffn_norm: tensor(norm)?,
                gate_up: tensor(init(2 * s.ffn, s.hidden))?,
                down: tensor(init(s.hidden, s.ffn))?,
            });
        }
        let final_norm = tensor(norm)?;
        let lm_head = match s.tied {
            true => None,
            false => Some(tensor(init(s.vocab, s.hidden))?),
        };
        Ok(LlamaWeights {
            embed,
            layers,
            final_norm,
            lm_head,
            allocs,
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
        let read = |name: &str| -> Result<Vec<u8>> {
            let st = shards
                .iter()
                .find(|st| st.get(name).is_some())
                .ok_or_else(|| anyhow::anyhow!("no shard holds {name}"))?;
            Ok(st.read(name)?)
        };
        let mut allocs = Vec::new();
        let mut upload = |names: &[String]| -> Result<DevicePtr> {
            let mut bytes = Vec::new();
            for n in names {
                bytes.extend_from_slice(&read(n).with_context(|| format!("reading {n}"))?);
            }
            let p = gpu.alloc(bytes.len())?;
            gpu.copy_h2d(&bytes, p)?;
            allocs.push((p, bytes.len()));
            Ok(p)
        };
        let one = |n: &str| vec![n.to_string()];
        let embed = upload(&one("model.embed_tokens.weight"))?;
        let mut layers = Vec::with_capacity(s.layers);
        for i in 0..s.layers {
            let p = |m: &str| format!("model.layers.{i}.{m}.weight");
            layers.push(LayerWeights {
                attn_norm: upload(&[p("input_layernorm")])?,
                qkv: upload(&[
                    p("self_attn.q_proj"),
                    p("self_attn.k_proj"),
                    p("self_attn.v_proj"),
                ])?,
                o: upload(&[p("self_attn.o_proj")])?,
                ffn_norm: upload(&[p("post_attention_layernorm")])?,
                gate_up: upload(&[p("mlp.gate_proj"), p("mlp.up_proj")])?,
                down: upload(&[p("mlp.down_proj")])?,
            });
        }
        let final_norm = upload(&one("model.norm.weight"))?;
        let lm_head = match s.tied {
            true => None,
            false => Some(upload(&one("lm_head.weight"))?),
        };
        Ok(LlamaWeights {
            embed,
            layers,
            final_norm,
            lm_head,
            allocs,
        })
    }
}

impl ModelResource<dyn GpuBackend> for LlamaWeights {
    fn label(&self) -> &'static str {
        "bf16 weights"
    }

    fn release(&mut self, gpu: &dyn GpuBackend) -> Result<()> {
        while let Some((p, _)) = self.allocs.pop() {
            gpu.free(p)?;
        }
        self.layers.clear();
        Ok(())
    }
}
