//! A real decode step to record: a small Llama-style decoder written against `&dyn GpuBackend`,
//! shaped like a production engine (weights, an activation arena, a paged KV cache, the
//! backend's op cache, a pinned staging buffer and a copy stream for step inputs).
//!
//! Weights are f32, generated from a seed (no downloads). The step ends with a synchronous
//! device-to-host copy of the sampled token, the call that keeps a step out of one CUDA graph.

pub mod hf;
pub mod kernels;
pub mod llama;
mod resources;
pub mod safetensors;

pub use resources::{BufferArena, PagedKvCache, WeightStore};

use crate::backend::{DevicePtr, GpuBackend, KernelArg, ModelResource, Releases};
use anyhow::{Context, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub name: &'static str,
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV blocks in each layer's pool.
    pub num_blocks: usize,
    /// Longest sequence a step may reach.
    pub max_seq: usize,
    pub rope_theta: f32,
    pub eps: f32,
    pub seed: u64,
}

impl ModelConfig {
    /// Runs in milliseconds per step.
    pub fn default_config() -> Self {
        ModelConfig {
            name: "default",
            vocab: 512,
            hidden: 256,
            layers: 4,
            heads: 8,
            kv_heads: 2,
            head_dim: 32,
            ffn: 688,
            block_size: 16,
            num_blocks: 32,
            max_seq: 256,
            rope_theta: 10000.0,
            eps: 1e-5,
            seed: 0x6770_7574_6170_6521,
        }
    }

    /// Small enough that a recorded step (weights included) stays well under 5 MB.
    pub fn tiny() -> Self {
        ModelConfig {
            name: "tiny",
            vocab: 128,
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            ffn: 128,
            block_size: 8,
            num_blocks: 16,
            max_seq: 64,
            ..Self::default_config()
        }
    }

    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::default_config()),
            "tiny" => Some(Self::tiny()),
            _ => None,
        }
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Length of the step-input block: token, position, then the block table.
    pub fn inputs_len(&self) -> usize {
        2 + self.max_seq.div_ceil(self.block_size)
    }
}

/// The planted fault: at `step`, `silu_mul` writes `overrun` floats past its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultPlan {
    pub step: usize,
    pub overrun: u32,
}

/// A loaded model on one backend.
pub struct Model {
    pub cfg: ModelConfig,
    pub weights: WeightStore,
    pub arena: BufferArena,
    pub kv: PagedKvCache,
    staging: *mut u8,
    staging_len: usize,
    copy_stream: u64,
    compute_stream: u64,
    inputs_ready: u64,
    /// This sequence's KV blocks, in order.
    seq_blocks: Vec<u32>,
    pub fault: Option<FaultPlan>,
    pub step_index: usize,
    torn_down: bool,
}

// SAFETY: `staging` is pinned host memory owned by this model and only touched through `&mut
// self` (or `&self` reads during `step`, which takes `&mut self`).
unsafe impl Send for Model {}

use crate::backend::f32_bytes as f32s;

/// A splitmix64 stream: deterministic, seedable, no dependency.
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-a, a).
    pub fn uniform(&mut self, a: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        (u * 2.0 - 1.0) * a
    }
}

impl Model {
    /// Allocate and upload everything a step needs.
    pub fn load(gpu: &dyn GpuBackend, cfg: ModelConfig) -> Result<Model> {
        let weights = WeightStore::generate(gpu, &cfg).context("loading weights")?;
        let arena = BufferArena::new(gpu, &cfg).context("allocating the activation arena")?;
        let kv = PagedKvCache::new(gpu, &cfg).context("allocating the KV cache")?;
        let staging_len = cfg.inputs_len() * 4;
        let staging = gpu.alloc_host_pinned(staging_len)?;
        let copy_stream = gpu.create_stream()?;
        let inputs_ready = gpu.create_event()?;
        Ok(Model {
            compute_stream: gpu.default_stream(),
            cfg,
            weights,
            arena,
            kv,
            staging,
            staging_len,
            copy_stream,
            inputs_ready,
            seq_blocks: Vec::new(),
            fault: None,
            step_index: 0,
            torn_down: false,
        })
    }

    #[track_caller]
    fn launch(
        &self,
        gpu: &dyn GpuBackend,
        name: &'static str,
        threads: usize,
        block: u32,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        let k = gpu.op_cache().kernel(gpu, name, name)?;
        let grid = (threads as u32).div_ceil(block).max(1);
        gpu.launch_typed(k, [grid, 1, 1], [block, 1, 1], 0, self.compute_stream, args)
            .with_context(|| format!("kernel {name} at step {}", self.step_index))
    }

    /// One decode step: feed `token` at `pos`, return the greedy next token. Long on purpose:
    /// the step's launches, copies and syncs in the order an engine issues them, which is the
    /// order its recording (and every snapshot of it) shows.
    pub fn step(&mut self, gpu: &dyn GpuBackend, token: u32, pos: usize) -> Result<u32> {
        gpu.step_boundary(pos as u64);
        let c = &self.cfg;
        anyhow::ensure!(
            pos < c.max_seq,
            "position {pos} is past max_seq {}",
            c.max_seq
        );
        anyhow::ensure!(
            (token as usize) < c.vocab,
            "token {token} is outside the vocabulary"
        );
        // What the kernels' shared-memory staging and one-warp attention hold.
        anyhow::ensure!(
            c.head_dim <= 32 && c.max_seq <= 1024 && c.hidden <= 1024 && c.vocab <= 4096,
            "config {} is beyond the kernels' limits (head_dim <= 32, max_seq <= 1024, \
             hidden <= 1024, vocab <= 4096)",
            c.name
        );
        if pos / c.block_size >= self.seq_blocks.len() {
            let b = self.kv.allocate_block()?;
            self.seq_blocks.push(b);
        }
        // Step inputs go up through pinned staging on the copy stream; the compute stream waits
        // for them on the device, never on the host.
        let mut inputs = vec![0u32; c.inputs_len()];
        inputs[0] = token;
        inputs[1] = pos as u32;
        inputs[2..2 + self.seq_blocks.len()].copy_from_slice(&self.seq_blocks);
        // SAFETY: `staging` is `staging_len` bytes of pinned memory owned by this model and
        // nothing else holds a view of it.
        let host = unsafe { std::slice::from_raw_parts_mut(self.staging, self.staging_len) };
        for (dst, v) in host.chunks_exact_mut(4).zip(&inputs) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        gpu.copy_h2d_async(host, self.arena.inputs, self.copy_stream)?;
        gpu.record_event(self.inputs_ready, self.copy_stream)?;
        gpu.stream_wait_event(self.compute_stream, self.inputs_ready)?;

        let a = &self.arena;
        let w = &self.weights;
        let u = |v: usize| (v as u32).to_le_bytes();
        let (hidden, qd, kvd, ffn) = (c.hidden, c.q_dim(), c.kv_dim(), c.ffn);
        let b = KernelArg::Buffer;
        self.launch(
            gpu,
            "embedding",
            hidden,
            128,
            &[
                b(w.get("embed")?),
                b(a.inputs),
                b(a.x),
                KernelArg::Bytes(&u(hidden)),
            ],
        )?;
        let eps = c.eps.to_le_bytes();
        let scale = (1.0 / (c.head_dim as f32).sqrt()).to_le_bytes();
        let theta = c.rope_theta.to_le_bytes();
        let overrun = match self.fault {
            Some(f) if f.step == self.step_index => f.overrun,
            _ => 0,
        };
        for l in 0..c.layers {
            let lw = |n: &str| w.get(&format!("l{l}.{n}"));
            self.rmsnorm(gpu, lw("attn_norm")?, &eps)?;
            for (name, out, rows) in [("wq", a.q, qd), ("wk", a.k, kvd), ("wv", a.v, kvd)] {
                self.gemv(gpu, lw(name)?, a.xn, out, rows, hidden)?;
            }
            self.launch(
                gpu,
                "rope",
                (c.heads + c.kv_heads) * c.head_dim / 2,
                64,
                &[
                    b(a.q),
                    b(a.k),
                    b(a.inputs),
                    KernelArg::Bytes(&u(c.heads)),
                    KernelArg::Bytes(&u(c.kv_heads)),
                    KernelArg::Bytes(&u(c.head_dim)),
                    KernelArg::Bytes(&theta),
                ],
            )?;
            self.launch(
                gpu,
                "kv_append",
                kvd,
                128,
                &[
                    b(a.k),
                    b(a.v),
                    b(self.kv.k_pools[l]),
                    b(self.kv.v_pools[l]),
                    b(a.inputs),
                    KernelArg::Bytes(&u(kvd)),
                    KernelArg::Bytes(&u(c.block_size)),
                ],
            )?;
            let k = gpu
                .op_cache()
                .kernel(gpu, "paged_attention", "paged_attention")?;
            gpu.launch_typed(
                k,
                [c.heads as u32, 1, 1],
                [32, 1, 1],
                0,
                self.compute_stream,
                &[
                    b(a.q),
                    b(self.kv.k_pools[l]),
                    b(self.kv.v_pools[l]),
                    b(a.inputs),
                    b(a.attn),
                    KernelArg::Bytes(&u(c.heads)),
                    KernelArg::Bytes(&u(c.kv_heads)),
                    KernelArg::Bytes(&u(c.head_dim)),
                    KernelArg::Bytes(&u(c.block_size)),
                    KernelArg::Bytes(&scale),
                ],
            )
            .with_context(|| format!("kernel paged_attention at step {}", self.step_index))?;
            self.gemv(gpu, lw("wo")?, a.attn, a.tmp, hidden, qd)?;
            self.residual_add(gpu)?;
            self.rmsnorm(gpu, lw("ffn_norm")?, &eps)?;
            self.gemv(gpu, lw("w_gate")?, a.xn, a.gate, ffn, hidden)?;
            self.gemv(gpu, lw("w_up")?, a.xn, a.up, ffn, hidden)?;
            self.launch(
                gpu,
                "silu_mul",
                ffn + overrun as usize,
                128,
                &[
                    b(a.gate),
                    b(a.up),
                    b(a.act),
                    KernelArg::Bytes(&u(ffn)),
                    KernelArg::Bytes(&overrun.to_le_bytes()),
                ],
            )?;
            self.gemv(gpu, lw("w_down")?, a.act, a.tmp, hidden, ffn)?;
            self.residual_add(gpu)?;
        }
        self.rmsnorm(gpu, w.get("final_norm")?, &eps)?;
        self.gemv(gpu, w.get("lm_head")?, a.xn, a.logits, c.vocab, hidden)?;
        let token_out = gpu.op_cache().scratch(gpu, "argmax.token", 4)?;
        self.launch(
            gpu,
            "argmax",
            1,
            128,
            &[b(a.logits), KernelArg::Bytes(&u(c.vocab)), b(token_out)],
        )?;
        // The sampled token comes back synchronously: the copy that breaks graph capture.
        let mut out = [0u8; 4];
        gpu.copy_d2h(token_out, &mut out)?;
        self.step_index += 1;
        Ok(u32::from_le_bytes(out))
    }

    /// RMSNorm of the residual stream (`x`) with weight `w`, into `xn`.
    #[track_caller]
    fn rmsnorm(&self, gpu: &dyn GpuBackend, w: DevicePtr, eps: &[u8; 4]) -> Result<()> {
        let a = &self.arena;
        let n = (self.cfg.hidden as u32).to_le_bytes();
        let b = KernelArg::Buffer;
        self.launch(
            gpu,
            "rmsnorm",
            1,
            128,
            &[
                b(a.x),
                b(w),
                b(a.xn),
                KernelArg::Bytes(&n),
                KernelArg::Bytes(eps),
            ],
        )
    }

    /// The residual connection: `x += tmp`.
    #[track_caller]
    fn residual_add(&self, gpu: &dyn GpuBackend) -> Result<()> {
        let a = &self.arena;
        let n = (self.cfg.hidden as u32).to_le_bytes();
        self.launch(
            gpu,
            "add",
            self.cfg.hidden,
            128,
            &[
                KernelArg::Buffer(a.x),
                KernelArg::Buffer(a.tmp),
                KernelArg::Bytes(&n),
            ],
        )
    }

    #[track_caller]
    fn gemv(
        &self,
        gpu: &dyn GpuBackend,
        w: DevicePtr,
        x: DevicePtr,
        y: DevicePtr,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        let u = |v: usize| (v as u32).to_le_bytes();
        self.launch(
            gpu,
            "gemv",
            rows * 32,
            128,
            &[
                KernelArg::Buffer(w),
                KernelArg::Buffer(x),
                KernelArg::Buffer(y),
                KernelArg::Bytes(&u(rows)),
                KernelArg::Bytes(&u(cols)),
            ],
        )
    }

    /// The current logits (after a step), for comparing backends.
    pub fn logits(&self, gpu: &dyn GpuBackend) -> Result<Vec<f32>> {
        let mut b = vec![0u8; self.cfg.vocab * 4];
        gpu.copy_d2h(self.arena.logits, &mut b)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
            .collect())
    }

    /// Release everything, in the order a real engine would; idempotent. A release that fails
    /// does not stop the rest: every one is attempted once, and the error (a `TeardownError`)
    /// names each that failed. A second call releases nothing again, so nothing is freed twice.
    pub fn teardown(&mut self, gpu: &(dyn GpuBackend + 'static)) -> Result<()> {
        if self.torn_down {
            return Ok(());
        }
        let mut releases = Releases::new();
        releases.resource(self.arena.label(), self.arena.release(gpu));
        releases.resource(self.kv.label(), self.kv.release(gpu));
        releases.resource(self.weights.label(), self.weights.release(gpu));
        releases.resource("op-cache", gpu.op_cache().release_scratch(gpu));
        releases.attempt(
            "model",
            "pinned staging",
            gpu.free_host_pinned(self.staging, self.staging_len),
        );
        releases.attempt(
            "model",
            "event inputs_ready",
            gpu.destroy_event(self.inputs_ready),
        );
        self.seq_blocks.clear();
        self.torn_down = true;
        Ok(releases.finish()?)
    }
}

/// Tokens fed before generation starts.
pub const PROMPT: [u32; 4] = [1, 17, 42, 7];

/// Run `steps` decode steps from `PROMPT` (fed one token per step) and return the tokens the
/// model produced after the prompt, with each step's wall time.
pub fn generate(
    gpu: &dyn GpuBackend,
    model: &mut Model,
    steps: usize,
    mut on_step: impl FnMut(usize, u32, std::time::Duration),
) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    let mut token = PROMPT[0];
    for pos in 0..steps {
        let t = std::time::Instant::now();
        let next = model.step(gpu, token, pos)?;
        on_step(pos, next, t.elapsed());
        token = if pos + 1 < PROMPT.len() {
            PROMPT[pos + 1]
        } else {
            out.push(next);
            next
        };
    }
    Ok(out)
}
