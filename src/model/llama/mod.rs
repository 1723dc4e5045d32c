//! A Llama decode step at real scale: bf16 weights (generated on the device from a seed, or
//! loaded from a safetensors checkpoint), a batch of sequences of different lengths over a
//! paged bf16 KV cache with grouped-query attention, and a shape read from a Hugging Face
//! `config.json` (the presets include Llama-3.2-1B and Llama-3-8B). It is written against
//! `&dyn GpuBackend` like the small f32 model beside it, and its kernels keep CPU twins, so a
//! small config runs the same code in CI on the mock and gives CUDA's bytes.
//!
//! A step is what a serving engine's decode step is: the batch's inputs go up through pinned
//! staging on a copy stream, about 9 launches per layer run on the compute stream (q/k/v and
//! gate/up fused; the residual adds fused into the o and down projections), and the sampled
//! tokens come back with one blocking copy. Not modelled: `rope_scaling` (Llama 3's long-context
//! frequency scaling is ignored), sampling other than greedy, and prefill (each sequence's
//! earlier context is KV filled from the seed at load).

pub mod kernels;
pub mod numerics;
mod weights;

pub use weights::{LayerWeights, LlamaWeights, TpPart};

use super::hf::HfConfig;
use crate::backend::{DevicePtr, GpuBackend, KernelArg, ModelResource, Releases};
use anyhow::{Context, Result};

/// The sizes a step is built from, taken from an [`HfConfig`].
#[derive(Clone, Debug)]
pub struct Shape {
    pub hf: HfConfig,
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub tied: bool,
}

impl Shape {
    pub fn new(hf: &HfConfig) -> Shape {
        Shape {
            hf: hf.clone(),
            vocab: hf.vocab_size,
            hidden: hf.hidden_size,
            layers: hf.num_hidden_layers,
            heads: hf.num_attention_heads,
            kv_heads: hf.num_key_value_heads,
            head_dim: hf.head_dim,
            ffn: hf.intermediate_size,
            tied: hf.tie_word_embeddings,
        }
    }

    /// One rank's share of a model split over `n` ranks: its query heads, KV heads and MLP
    /// width; hidden size and vocabulary stay whole.
    pub fn part(&self, n: usize) -> Shape {
        Shape {
            heads: self.heads / n,
            kv_heads: self.kv_heads / n,
            ffn: self.ffn / n,
            ..self.clone()
        }
    }

    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    pub fn qkv_dim(&self) -> usize {
        self.q_dim() + 2 * self.kv_dim()
    }

    /// Weight bytes one step reads: every layer's matrices and norms, the final norm, the head
    /// (the embedding when tied) and the batch's embedding rows.
    pub fn weight_bytes_per_step(&self, batch: usize) -> u64 {
        let (h, f) = (self.hidden as u64, self.ffn as u64);
        let layer = h * (self.qkv_dim() as u64 + self.q_dim() as u64 + 3 * f) + 2 * h;
        2 * (self.layers as u64 * layer + h + self.vocab as u64 * h + batch as u64 * h)
    }
}

/// How a step is run: the batch, the longest sequence, the KV cache's block size, and each
/// sequence's context length before the first step.
#[derive(Clone, Debug)]
pub struct LlamaOptions {
    /// Sequences per step, 1 to 16.
    pub batch: usize,
    /// The longest a sequence may grow (at most [`kernels::MAX_SEQ`]).
    pub max_seq: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Tokens each sequence already holds (its KV filled from the seed); `batch` entries.
    pub context: Vec<usize>,
    pub seed: u64,
}

impl LlamaOptions {
    /// `batch` sequences of different lengths: the first holds `first` tokens, each next one
    /// 37 more, wrapped to stay under half of `max_seq`.
    pub fn staggered(batch: usize, max_seq: usize, first: usize) -> LlamaOptions {
        let half = (max_seq / 2).max(1);
        LlamaOptions {
            batch,
            max_seq,
            block_size: 16,
            context: (0..batch).map(|b| (first + 37 * b) % half).collect(),
            seed: 0x6c6c_616d_615f_6266,
        }
    }
}

/// Activations and step inputs; one allocation each.
struct Arena {
    x: DevicePtr,
    xn: DevicePtr,
    qkv: DevicePtr,
    attn: DevicePtr,
    gu: DevicePtr,
    act: DevicePtr,
    logits: DevicePtr,
    tokens: DevicePtr,
    inputs: DevicePtr,
    /// [max_seq][head_dim / 2] (cos, sin) pairs.
    rope: DevicePtr,
}

impl Arena {
    fn ptrs(&self) -> [(&'static str, DevicePtr); 10] {
        let Arena {
            x,
            xn,
            qkv,
            attn,
            gu,
            act,
            logits,
            tokens,
            inputs,
            rope,
        } = self;
        [
            ("x", *x),
            ("xn", *xn),
            ("qkv", *qkv),
            ("attn", *attn),
            ("gu", *gu),
            ("act", *act),
            ("logits", *logits),
            ("tokens", *tokens),
            ("inputs", *inputs),
            ("rope", *rope),
        ]
    }
}

/// Launch `fill_bf16` over `elems` bf16 values at `p`.
pub(crate) fn launch_fill(
    gpu: &dyn GpuBackend,
    p: DevicePtr,
    elems: usize,
    seed: u64,
    scale: f32,
    offset: f32,
    stream: u64,
) -> Result<()> {
    let k = gpu.op_cache().kernel(gpu, "llama_fill", "fill_bf16")?;
    let blocks = elems.div_ceil(256).clamp(1, 8192) as u32;
    gpu.launch_typed(
        k,
        [blocks, 1, 1],
        [256, 1, 1],
        0,
        stream,
        &[
            KernelArg::Buffer(p),
            KernelArg::Bytes(&(elems as u64).to_le_bytes()),
            KernelArg::Bytes(&seed.to_le_bytes()),
            KernelArg::Bytes(&scale.to_le_bytes()),
            KernelArg::Bytes(&offset.to_le_bytes()),
        ],
    )
}

/// A loaded bf16 model on one backend, with its batch's state.
pub struct Llama {
    pub shape: Shape,
    pub opts: LlamaOptions,
    pub weights: LlamaWeights,
    arena: Arena,
    k_pools: Vec<DevicePtr>,
    v_pools: Vec<DevicePtr>,
    pool_bytes: usize,
    /// Blocks not yet given to a sequence (highest first, so ids differ from positions).
    free_blocks: Vec<u32>,
    /// Each sequence's blocks, in order.
    tables: Vec<Vec<u32>>,
    /// Each sequence's length (the position its next token goes to).
    lens: Vec<usize>,
    staging: *mut u8,
    staging_len: usize,
    copy_stream: u64,
    compute_stream: u64,
    inputs_ready: u64,
    /// The planted fault: at this step, `silu_mul_bf16` writes this many floats past `act`.
    pub fault: Option<(usize, u32)>,
    /// Tensor parallel: this rank's part, and the buffer its projections' partial sums meet
    /// the other ranks' in.
    tp: Option<(TpPart, DevicePtr)>,
    pub step_index: usize,
    released: bool,
}

// SAFETY: `staging` is pinned host memory owned by this model and only touched through
// `&mut self`.
unsafe impl Send for Llama {}

impl Llama {
    fn check(s: &Shape, o: &LlamaOptions) -> Result<()> {
        let name = s.hf.name;
        anyhow::ensure!(
            (1..=16).contains(&o.batch),
            "batch {} is outside 1..=16 (the gemv kernels' widths)",
            o.batch
        );
        anyhow::ensure!(
            o.context.len() == o.batch,
            "{} context lengths for a batch of {}",
            o.context.len(),
            o.batch
        );
        for (what, v) in [
            ("hidden_size", s.hidden),
            ("q_dim", s.q_dim()),
            ("intermediate_size", s.ffn),
        ] {
            anyhow::ensure!(
                v % 8 == 0,
                "{name}: {what} = {v} is not a multiple of 8 (16-byte weight loads)"
            );
        }
        anyhow::ensure!(
            s.head_dim.is_power_of_two() && (2..=256).contains(&s.head_dim),
            "{name}: head_dim {} is not a power of two from 2 to 256 (the attention kernel's \
             thread groups)",
            s.head_dim
        );
        anyhow::ensure!(
            o.max_seq <= kernels::MAX_SEQ && o.max_seq <= s.hf.max_position_embeddings,
            "max_seq {} is past {} (the attention kernel's) or the config's max_position_embeddings {}",
            o.max_seq,
            kernels::MAX_SEQ,
            s.hf.max_position_embeddings
        );
        anyhow::ensure!(o.block_size > 0, "block_size 0");
        if let Some(c) = o.context.iter().find(|&&c| c >= o.max_seq) {
            anyhow::bail!(
                "a context of {c} tokens leaves no room under max_seq {}",
                o.max_seq
            );
        }
        Ok(())
    }

    /// The rotary table: for each position and pair i, cos and sin of pos / theta^(2i/d),
    /// computed in f64 and rounded once.
    fn rope_table(s: &Shape, max_seq: usize) -> Vec<u8> {
        let half = s.head_dim / 2;
        let mut out = Vec::with_capacity(max_seq * half * 8);
        for pos in 0..max_seq {
            for i in 0..half {
                let inv = s.hf.rope_theta.powf(-((2 * i) as f64) / s.head_dim as f64);
                let a = pos as f64 * inv;
                out.extend_from_slice(&(a.cos() as f32).to_le_bytes());
                out.extend_from_slice(&(a.sin() as f32).to_le_bytes());
            }
        }
        out
    }

    /// Load with weights generated on the device from `opts.seed`.
    pub fn load(gpu: &dyn GpuBackend, hf: &HfConfig, opts: LlamaOptions) -> Result<Llama> {
        let shape = Shape::new(hf);
        Self::check(&shape, &opts)?;
        kernels::load(gpu)?;
        let weights = LlamaWeights::generate(gpu, &shape, opts.seed, gpu.default_stream())
            .context("generating the bf16 weights")?;
        Self::with_weights(gpu, shape, opts, weights, None)
    }

    /// Load rank `part.rank` of the model split over `part.size` ranks (tensor parallel, one
    /// GPU each): the weights generated whole from `opts.seed` and sliced
    /// (`LlamaWeights::shard`), the KV cache's context likewise (each rank its KV heads), and
    /// an all-reduce on `part.comm` after the attention and MLP output projections. Every rank
    /// then holds the whole residual stream and samples the same tokens, which one GPU's
    /// `load` samples too, its logits equal to rounding (the partial sums add in another
    /// order).
    pub fn load_tp(
        gpu: &dyn GpuBackend,
        hf: &HfConfig,
        opts: LlamaOptions,
        part: TpPart,
    ) -> Result<Llama> {
        let full = Shape::new(hf);
        let n = part.size;
        anyhow::ensure!(
            n >= 1 && part.rank < n,
            "rank {} of a group of {n}",
            part.rank
        );
        for (what, v) in [
            ("num_attention_heads", full.heads),
            ("num_key_value_heads", full.kv_heads),
            ("intermediate_size", full.ffn),
        ] {
            anyhow::ensure!(
                v % n == 0,
                "{}: {what} = {v} does not split over {n} ranks",
                full.hf.name
            );
        }
        let shape = full.part(n);
        Self::check(&full, &opts)?;
        Self::check(&shape, &opts)?;
        kernels::load(gpu)?;
        let stream = gpu.default_stream();
        let weights = LlamaWeights::generate(gpu, &full, opts.seed, stream)
            .context("generating the bf16 weights")?
            .shard(gpu, &full, part, stream)
            .with_context(|| format!("slicing rank {}'s part of the weights", part.rank))?;
        Self::with_weights(gpu, shape, opts, weights, Some((&full, part)))
    }

    /// Load with the weights of a safetensors checkpoint (one file or its shards).
    pub fn load_safetensors(
        gpu: &dyn GpuBackend,
        hf: &HfConfig,
        opts: LlamaOptions,
        shards: &[&crate::model::safetensors::SafeTensors],
    ) -> Result<Llama> {
        let shape = Shape::new(hf);
        Self::check(&shape, &opts)?;
        kernels::load(gpu)?;
        let weights = LlamaWeights::from_safetensors(gpu, &shape, shards)
            .context("loading the safetensors checkpoint")?;
        Self::with_weights(gpu, shape, opts, weights, None)
    }

    /// `tp`: the whole model's shape and this rank's part, for a tensor-parallel rank.
    fn with_weights(
        gpu: &dyn GpuBackend,
        shape: Shape,
        opts: LlamaOptions,
        weights: LlamaWeights,
        tp: Option<(&Shape, TpPart)>,
    ) -> Result<Llama> {
        let s = &shape;
        let b = opts.batch;
        let max_blocks = opts.max_seq.div_ceil(opts.block_size);
        let num_blocks = b * max_blocks;
        let inputs_len = (2 + max_blocks) * b * 4;
        let rope = Self::rope_table(s, opts.max_seq);
        // One line per buffer, so the ledger names each.
        let arena = Arena {
            x: gpu.alloc(b * s.hidden * 4)?,
            xn: gpu.alloc(b * s.hidden * 4)?,
            qkv: gpu.alloc(b * s.qkv_dim() * 4)?,
            attn: gpu.alloc(b * s.q_dim() * 4)?,
            gu: gpu.alloc(b * 2 * s.ffn * 4)?,
            act: gpu.alloc(b * s.ffn * 4)?,
            logits: gpu.alloc(b * s.vocab * 4)?,
            tokens: gpu.alloc(b * 4)?,
            inputs: gpu.alloc(inputs_len)?,
            rope: gpu.alloc(rope.len())?,
        };
        gpu.copy_h2d(&rope, arena.rope)?;
        let pool_bytes = num_blocks * opts.block_size * s.kv_dim() * 2;
        let (mut k_pools, mut v_pools) = (Vec::new(), Vec::new());
        let stream = gpu.default_stream();
        let slots = num_blocks * opts.block_size;
        for l in 0..s.layers {
            for (pools, which) in [(&mut k_pools, 0u64), (&mut v_pools, 1)] {
                // The sequences' earlier context, as prefill would have left it.
                let seed = opts.seed ^ 0x4b56 ^ ((2 * l as u64 + which) << 32);
                let p = match tp {
                    None => {
                        let p = gpu.alloc(pool_bytes)?;
                        launch_fill(gpu, p, pool_bytes / 2, seed, 1.0, 0.0, stream)?;
                        p
                    }
                    Some((full, part)) => {
                        // The whole cache as one GPU holds it, and this rank's KV heads of it.
                        let whole = slots * full.kv_dim() * 2;
                        let w = gpu.alloc(whole)?;
                        launch_fill(gpu, w, whole / 2, seed, 1.0, 0.0, stream)?;
                        let first = part.rank * s.kv_dim();
                        let (p, _) = weights::column_slice(
                            gpu,
                            w,
                            slots,
                            full.kv_dim(),
                            first,
                            s.kv_dim(),
                            stream,
                        )?;
                        gpu.synchronize(stream)?;
                        gpu.free(w)?;
                        p
                    }
                };
                pools.push(p);
            }
        }
        let tp = match tp {
            Some((_, part)) => Some((part, gpu.alloc(b * s.hidden * 4)?)),
            None => None,
        };
        let staging = gpu.alloc_host_pinned(inputs_len)?;
        let copy_stream = gpu.create_stream()?;
        let inputs_ready = gpu.create_event()?;
        gpu.synchronize(stream)?;
        let mut m = Llama {
            lens: opts.context.clone(),
            tables: vec![Vec::new(); b],
            free_blocks: (0..num_blocks as u32).collect(),
            shape,
            opts,
            weights,
            arena,
            k_pools,
            v_pools,
            pool_bytes,
            staging,
            staging_len: inputs_len,
            copy_stream,
            compute_stream: stream,
            inputs_ready,
            fault: None,
            tp,
            step_index: 0,
            released: false,
        };
        // Blocks for the context each sequence already holds.
        for seq in 0..b {
            m.ensure_blocks(seq, m.lens[seq])?;
        }
        Ok(m)
    }

    /// Give sequence `seq` blocks up to and including position `pos`.
    fn ensure_blocks(&mut self, seq: usize, pos: usize) -> Result<()> {
        while self.tables[seq].len() * self.opts.block_size <= pos {
            let blk = self
                .free_blocks
                .pop()
                .ok_or_else(|| anyhow::anyhow!("the KV cache is out of blocks"))?;
            self.tables[seq].push(blk);
        }
        Ok(())
    }

    /// Device bytes: weights, KV cache, activations.
    pub fn device_bytes(&self) -> u64 {
        self.weights.bytes() + 2 * self.shape.layers as u64 * self.pool_bytes as u64
    }

    /// Each sequence's length (where its next token goes).
    pub fn lens(&self) -> &[usize] {
        &self.lens
    }

    /// Sequence `seq`'s KV blocks, in position order.
    pub fn block_table(&self, seq: usize) -> &[u32] {
        &self.tables[seq]
    }

    /// Layer `l`'s K and V pools: [block][slot][kv_head][head_dim] bf16.
    pub fn kv_pools(&self, l: usize) -> (DevicePtr, DevicePtr) {
        (self.k_pools[l], self.v_pools[l])
    }

    #[track_caller]
    fn launch(
        &self,
        gpu: &dyn GpuBackend,
        module: &'static str,
        kernel: &'static str,
        grid: [u32; 3],
        block: u32,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        let k = gpu.op_cache().kernel(gpu, module, kernel)?;
        gpu.launch_typed(k, grid, [block, 1, 1], 0, self.compute_stream, args)
            .with_context(|| format!("kernel {kernel} at step {}", self.step_index))
    }

    /// `y = W x` (or `y += W x`) for a rows x cols weight matrix, over the batch.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    fn gemv(
        &self,
        gpu: &dyn GpuBackend,
        w: DevicePtr,
        x: DevicePtr,
        y: DevicePtr,
        rows: usize,
        cols: usize,
        accumulate: bool,
    ) -> Result<()> {
        let b = self.opts.batch;
        let name = kernels::gemv_kernel(b).context("batch past the gemv kernels")?;
        let blocks = rows.div_ceil(kernels::GEMV_ROWS) as u32;
        let u = |v: usize| (v as u32).to_le_bytes();
        self.launch(
            gpu,
            "llama_gemv",
            name,
            [blocks, 1, 1],
            256,
            &[
                KernelArg::Buffer(w),
                KernelArg::Buffer(x),
                KernelArg::Buffer(y),
                KernelArg::Bytes(&u(rows)),
                KernelArg::Bytes(&u(cols)),
                KernelArg::Bytes(&u(b)),
                KernelArg::Bytes(&u(accumulate as usize)),
            ],
        )
    }

    /// `x += W input` for an output projection (`W`: hidden x `cols`). Tensor parallel, each
    /// rank's `W` holds its columns, so its product is a partial sum: rank 0 adds its partial
    /// to the residual, the others start from zero, and an all-reduce on the compute stream
    /// sums the ranks' results into every rank's `x`.
    #[track_caller]
    fn project_residual(
        &self,
        gpu: &dyn GpuBackend,
        w: DevicePtr,
        input: DevicePtr,
        cols: usize,
    ) -> Result<()> {
        let (x, hidden) = (self.arena.x, self.shape.hidden);
        let Some((part, partial)) = self.tp else {
            return self.gemv(gpu, w, input, x, hidden, cols, true);
        };
        let (stream, count) = (self.compute_stream, self.opts.batch * hidden);
        if part.rank == 0 {
            gpu.copy_d2d_async(x, partial, count * 4, stream)?;
        } else {
            gpu.memset_async(partial, 0, count * 4, stream)?;
        }
        self.gemv(gpu, w, input, partial, hidden, cols, true)?;
        gpu.collective(
            part.comm,
            crate::backend::Collective::AllReduce(crate::backend::ReduceOp::Sum),
            partial,
            x,
            count as u64,
            crate::backend::CollDtype::F32,
            stream,
        )
        .with_context(|| {
            format!(
                "the all-reduce of rank {} at step {}",
                part.rank, self.step_index
            )
        })
    }

    #[track_caller]
    fn rmsnorm(&self, gpu: &dyn GpuBackend, w: DevicePtr) -> Result<()> {
        let a = &self.arena;
        let u = |v: usize| (v as u32).to_le_bytes();
        self.launch(
            gpu,
            "llama_rmsnorm",
            "rmsnorm_bf16",
            [self.opts.batch as u32, 1, 1],
            kernels::WIDE_BLOCK,
            &[
                KernelArg::Buffer(a.x),
                KernelArg::Buffer(w),
                KernelArg::Buffer(a.xn),
                KernelArg::Bytes(&u(self.shape.hidden)),
                KernelArg::Bytes(&(self.shape.hf.rms_norm_eps as f32).to_le_bytes()),
                KernelArg::Bytes(&u(self.opts.batch)),
            ],
        )
    }

    /// One decode step for the whole batch: `tokens[b]` goes to sequence b at its current
    /// length; returns each sequence's greedy next token. Long on purpose: the layer loop's
    /// launches in the order an engine issues them, which is the order its recording shows.
    pub fn step(&mut self, gpu: &dyn GpuBackend, tokens: &[u32]) -> Result<Vec<u32>> {
        let (vocab, b) = (self.shape.vocab, self.opts.batch);
        anyhow::ensure!(
            tokens.len() == b,
            "{} tokens for a batch of {b}",
            tokens.len()
        );
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= vocab) {
            anyhow::bail!("token {t} is outside the vocabulary of {vocab}");
        }
        gpu.step_boundary(self.step_index as u64);
        let max_blocks = self.opts.max_seq.div_ceil(self.opts.block_size);
        for seq in 0..b {
            let pos = self.lens[seq];
            anyhow::ensure!(
                pos < self.opts.max_seq,
                "sequence {seq} is at max_seq {}",
                self.opts.max_seq
            );
            self.ensure_blocks(seq, pos)?;
        }
        let s = &self.shape;
        let mut inputs = vec![0u32; (2 + max_blocks) * b];
        inputs[..b].copy_from_slice(tokens);
        for seq in 0..b {
            inputs[b + seq] = self.lens[seq] as u32;
            let t = &self.tables[seq];
            inputs[2 * b + seq * max_blocks..][..t.len()].copy_from_slice(t);
        }
        // SAFETY: `staging` is `staging_len` bytes of pinned memory owned by this model; the
        // previous step's copy finished before its blocking readback returned.
        let host = unsafe { std::slice::from_raw_parts_mut(self.staging, self.staging_len) };
        for (dst, v) in host.chunks_exact_mut(4).zip(&inputs) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        let a = &self.arena;
        gpu.copy_h2d_async(host, a.inputs, self.copy_stream)?;
        gpu.record_event(self.inputs_ready, self.copy_stream)?;
        gpu.stream_wait_event(self.compute_stream, self.inputs_ready)?;

        let u = |v: usize| (v as u32).to_le_bytes();
        let buf = KernelArg::Buffer;
        let cols = |n: usize| (n as u32).div_ceil(256);
        self.launch(
            gpu,
            "llama_embed",
            "embed_bf16",
            [cols(b * s.hidden), 1, 1],
            256,
            &[
                buf(self.weights.embed),
                buf(a.inputs),
                buf(a.x),
                KernelArg::Bytes(&u(s.hidden)),
                KernelArg::Bytes(&u(b)),
                KernelArg::Bytes(&u(s.vocab)),
            ],
        )?;
        let heads = [
            s.heads,
            s.kv_heads,
            s.head_dim,
            self.opts.block_size,
            max_blocks,
            b,
        ]
        .map(u);
        let scale = (1.0 / (s.head_dim as f32).sqrt()).to_le_bytes();
        let overrun = match self.fault {
            Some((at, n)) if at == self.step_index => n,
            _ => 0,
        };
        for (l, lw) in self.weights.layers.iter().enumerate() {
            let (kp, vp) = (self.k_pools[l], self.v_pools[l]);
            self.rmsnorm(gpu, lw.attn_norm)?;
            self.gemv(gpu, lw.qkv, a.xn, a.qkv, s.qkv_dim(), s.hidden, false)?;
            let mut args = vec![buf(a.qkv), buf(kp), buf(vp), buf(a.inputs), buf(a.rope)];
            args.extend(heads.iter().map(|h| KernelArg::Bytes(h)));
            self.launch(
                gpu,
                "llama_rope_append",
                "rope_append",
                [cols(b * (s.heads + 2 * s.kv_heads) * s.head_dim / 2), 1, 1],
                256,
                &args,
            )?;
            let mut args = vec![buf(a.qkv), buf(kp), buf(vp), buf(a.inputs), buf(a.attn)];
            args.extend(heads.iter().map(|h| KernelArg::Bytes(h)));
            args.push(KernelArg::Bytes(&scale));
            self.launch(
                gpu,
                "llama_attention",
                "attention_bf16",
                [s.heads as u32, b as u32, 1],
                kernels::WIDE_BLOCK,
                &args,
            )?;
            self.project_residual(gpu, lw.o, a.attn, s.q_dim())?;
            self.rmsnorm(gpu, lw.ffn_norm)?;
            self.gemv(gpu, lw.gate_up, a.xn, a.gu, 2 * s.ffn, s.hidden, false)?;
            self.launch(
                gpu,
                "llama_silu_mul",
                "silu_mul_bf16",
                [cols(b * s.ffn + overrun as usize), 1, 1],
                256,
                &[
                    buf(a.gu),
                    buf(a.act),
                    KernelArg::Bytes(&u(s.ffn)),
                    KernelArg::Bytes(&u(b)),
                    KernelArg::Bytes(&overrun.to_le_bytes()),
                ],
            )?;
            self.project_residual(gpu, lw.down, a.act, s.ffn)?;
        }
        self.rmsnorm(gpu, self.weights.final_norm)?;
        self.gemv(
            gpu,
            self.weights.head(),
            a.xn,
            a.logits,
            s.vocab,
            s.hidden,
            false,
        )?;
        self.launch(
            gpu,
            "llama_argmax",
            "argmax_batch",
            [b as u32, 1, 1],
            256,
            &[
                buf(a.logits),
                KernelArg::Bytes(&u(s.vocab)),
                KernelArg::Bytes(&u(b)),
                buf(a.tokens),
            ],
        )?;
        // The sampled tokens come back synchronously: the copy that ends the step.
        let mut out = vec![0u8; b * 4];
        gpu.copy_d2h(a.tokens, &mut out)?;
        for l in &mut self.lens {
            *l += 1;
        }
        self.step_index += 1;
        Ok(out
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4")))
            .collect())
    }

    /// The last step's logits, [batch][vocab].
    pub fn logits(&self, gpu: &dyn GpuBackend) -> Result<Vec<f32>> {
        let mut bytes = vec![0u8; self.opts.batch * self.shape.vocab * 4];
        gpu.copy_d2h(self.arena.logits, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
            .collect())
    }

    /// Release everything (idempotent). A release that fails does not stop the rest: every
    /// one is attempted once, and the error (a `TeardownError`) names each that failed.
    pub fn release(&mut self, gpu: &(dyn GpuBackend + 'static)) -> Result<()> {
        if self.released {
            return Ok(());
        }
        let mut releases = Releases::new();
        for (name, p) in self.arena.ptrs() {
            releases.attempt("llama arena", format_args!("buffer {name}"), gpu.free(p));
        }
        if let Some((_, partial)) = self.tp {
            releases.attempt("llama", "tensor-parallel partial sums", gpu.free(partial));
        }
        for (kv, pools) in [("K", &mut self.k_pools), ("V", &mut self.v_pools)] {
            for (layer, p) in pools.drain(..).enumerate() {
                releases.attempt(
                    "llama KV cache",
                    format_args!("{kv} pool of layer {layer}"),
                    gpu.free(p),
                );
            }
        }
        releases.resource(self.weights.label(), self.weights.release(gpu));
        releases.attempt(
            "llama",
            "pinned staging",
            gpu.free_host_pinned(self.staging, self.staging_len),
        );
        releases.attempt(
            "llama",
            "event inputs_ready",
            gpu.destroy_event(self.inputs_ready),
        );
        // Each release was attempted once: a second call must not free anything again.
        self.released = true;
        Ok(releases.finish()?)
    }
}
