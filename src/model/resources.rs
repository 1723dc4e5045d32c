//! The model's device resources, each released explicitly (and idempotently) at teardown.

use super::{f32s, ModelConfig, Rng};
use crate::backend::{DevicePtr, GpuBackend, ModelResource, Releases};
use anyhow::Result;
use std::collections::BTreeMap;

/// Every weight tensor, one allocation each.
pub struct WeightStore {
    tensors: BTreeMap<String, (DevicePtr, usize)>,
}

impl WeightStore {
    pub fn generate(gpu: &dyn GpuBackend, cfg: &ModelConfig) -> Result<WeightStore> {
        let mut rng = Rng::new(cfg.seed);
        let mut ws = WeightStore {
            tensors: BTreeMap::new(),
        };
        let mut put = |name: String, vals: Vec<f32>| -> Result<()> {
            let bytes = f32s(&vals);
            let p = gpu.alloc(bytes.len())?;
            gpu.copy_h2d(&bytes, p)?;
            ws.tensors.insert(name, (p, bytes.len()));
            Ok(())
        };
        let mat = |rng: &mut Rng, rows: usize, cols: usize| -> Vec<f32> {
            let a = 1.0 / (cols as f32).sqrt();
            (0..rows * cols).map(|_| rng.uniform(a)).collect()
        };
        let norm = |rng: &mut Rng, n: usize| -> Vec<f32> {
            (0..n).map(|_| 1.0 + rng.uniform(0.1)).collect()
        };
        let (h, qd, kvd, f) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ffn);
        put(
            "embed".into(),
            (0..cfg.vocab * h).map(|_| rng.uniform(1.0)).collect(),
        )?;
        for l in 0..cfg.layers {
            put(format!("l{l}.attn_norm"), norm(&mut rng, h))?;
            put(format!("l{l}.wq"), mat(&mut rng, qd, h))?;
            put(format!("l{l}.wk"), mat(&mut rng, kvd, h))?;
            put(format!("l{l}.wv"), mat(&mut rng, kvd, h))?;
            put(format!("l{l}.wo"), mat(&mut rng, h, qd))?;
            put(format!("l{l}.ffn_norm"), norm(&mut rng, h))?;
            put(format!("l{l}.w_gate"), mat(&mut rng, f, h))?;
            put(format!("l{l}.w_up"), mat(&mut rng, f, h))?;
            put(format!("l{l}.w_down"), mat(&mut rng, h, f))?;
        }
        put("final_norm".into(), norm(&mut rng, h))?;
        put("lm_head".into(), mat(&mut rng, cfg.vocab, h))?;
        Ok(ws)
    }

    pub fn get(&self, name: &str) -> Result<DevicePtr> {
        self.tensors
            .get(name)
            .map(|t| t.0)
            .ok_or_else(|| anyhow::anyhow!("no weight tensor named {name}"))
    }

    pub fn bytes(&self) -> usize {
        self.tensors.values().map(|t| t.1).sum()
    }
}

impl ModelResource<dyn GpuBackend> for WeightStore {
    fn label(&self) -> &'static str {
        "weights"
    }

    /// Per tensor: each was its own allocation, and no view of one is stored here.
    fn release(&mut self, gpu: &dyn GpuBackend) -> Result<()> {
        let mut releases = Releases::new();
        while let Some((name, (p, _))) = self.tensors.pop_first() {
            releases.attempt(self.label(), format_args!("tensor {name}"), gpu.free(p));
        }
        Ok(releases.finish()?)
    }
}

/// Activations and step inputs. Released by an exhaustive destructure: adding a field without
/// freeing it does not compile.
pub struct BufferArena {
    pub x: DevicePtr,
    pub xn: DevicePtr,
    pub q: DevicePtr,
    pub k: DevicePtr,
    pub v: DevicePtr,
    pub attn: DevicePtr,
    pub tmp: DevicePtr,
    pub gate: DevicePtr,
    pub up: DevicePtr,
    pub act: DevicePtr,
    pub logits: DevicePtr,
    pub inputs: DevicePtr,
    released: bool,
}

impl BufferArena {
    pub fn new(gpu: &dyn GpuBackend, c: &ModelConfig) -> Result<BufferArena> {
        // One line per buffer, so the ledger names each field's line.
        Ok(BufferArena {
            x: gpu.alloc(c.hidden * 4)?,
            xn: gpu.alloc(c.hidden * 4)?,
            q: gpu.alloc(c.q_dim() * 4)?,
            k: gpu.alloc(c.kv_dim() * 4)?,
            v: gpu.alloc(c.kv_dim() * 4)?,
            attn: gpu.alloc(c.q_dim() * 4)?,
            tmp: gpu.alloc(c.hidden * 4)?,
            gate: gpu.alloc(c.ffn * 4)?,
            up: gpu.alloc(c.ffn * 4)?,
            act: gpu.alloc(c.ffn * 4)?,
            logits: gpu.alloc(c.vocab * 4)?,
            inputs: gpu.alloc(c.inputs_len() * 4)?,
            released: false,
        })
    }
}

impl ModelResource<dyn GpuBackend> for BufferArena {
    fn label(&self) -> &'static str {
        "activation arena"
    }

    fn release(&mut self, gpu: &dyn GpuBackend) -> Result<()> {
        // Exhaustive on purpose, no `..`: a new buffer field must be freed here to compile.
        let BufferArena {
            x,
            xn,
            q,
            k,
            v,
            attn,
            tmp,
            gate,
            up,
            act,
            logits,
            inputs,
            released,
        } = self;
        if *released {
            return Ok(());
        }
        let mut releases = Releases::new();
        for (name, p) in [
            ("x", x),
            ("xn", xn),
            ("q", q),
            ("k", k),
            ("v", v),
            ("attn", attn),
            ("tmp", tmp),
            ("gate", gate),
            ("up", up),
            ("act", act),
            ("logits", logits),
            ("inputs", inputs),
        ] {
            releases.attempt(
                "activation arena",
                format_args!("buffer {name}"),
                gpu.free(*p),
            );
        }
        // Each free was attempted once: a second release must not free them again.
        *released = true;
        Ok(releases.finish()?)
    }
}

/// Per-layer K and V pools of fixed-size blocks, with a free list and reference counts.
pub struct PagedKvCache {
    pub k_pools: Vec<DevicePtr>,
    pub v_pools: Vec<DevicePtr>,
    free_blocks: Vec<u32>,
    ref_counts: Vec<u32>,
}

impl PagedKvCache {
    pub fn new(gpu: &dyn GpuBackend, c: &ModelConfig) -> Result<PagedKvCache> {
        let bytes = c.num_blocks * c.block_size * c.kv_dim() * 4;
        let mut k_pools = Vec::new();
        let mut v_pools = Vec::new();
        for _ in 0..c.layers {
            let k = gpu.alloc(bytes)?;
            gpu.memset(k, 0, bytes)?;
            let v = gpu.alloc(bytes)?;
            gpu.memset(v, 0, bytes)?;
            k_pools.push(k);
            v_pools.push(v);
        }
        Ok(PagedKvCache {
            k_pools,
            v_pools,
            // Hand out the highest-numbered blocks first, so block ids differ from positions
            // and a table bug cannot hide behind an identity mapping.
            free_blocks: (0..c.num_blocks as u32).collect(),
            ref_counts: vec![0; c.num_blocks],
        })
    }

    pub fn allocate_block(&mut self) -> Result<u32> {
        let b = self
            .free_blocks
            .pop()
            .ok_or_else(|| anyhow::anyhow!("KV cache is out of blocks"))?;
        self.ref_counts[b as usize] += 1;
        Ok(b)
    }

    pub fn free_block_count(&self) -> usize {
        self.free_blocks.len()
    }
}

impl ModelResource<dyn GpuBackend> for PagedKvCache {
    fn label(&self) -> &'static str {
        "paged KV cache"
    }

    /// Pools are per layer, so freed per layer; the block bookkeeping goes with them so a
    /// released cache cannot hand out a block of freed memory.
    fn release(&mut self, gpu: &dyn GpuBackend) -> Result<()> {
        let mut releases = Releases::new();
        for (kv, pools) in [("K", &mut self.k_pools), ("V", &mut self.v_pools)] {
            for (layer, p) in pools.drain(..).enumerate() {
                releases.attempt(
                    "paged KV cache",
                    format_args!("{kv} pool of layer {layer}"),
                    gpu.free(p),
                );
            }
        }
        self.free_blocks.clear();
        self.ref_counts.clear();
        Ok(releases.finish()?)
    }
}
