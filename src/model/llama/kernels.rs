//! The bf16 batched step's kernels as data: their CUDA C (kernels/llama/*.cu, one module each,
//! each after kernels/model/prelude.cuh and kernels/llama/common.cuh) and CPU twins that do
//! the same operations in the same order. Every multiply-add is fused on both sides and the
//! exponential is `numerics::gt_exp` (no libm), so a small config's step on the mock gives the
//! bytes CUDA gives.

use super::numerics::{bf16_to_f32, butterfly, f32_to_bf16, fill_value, gt_exp};
use crate::backend::{DevicePtr, GpuBackend, HostBody, HostCtx, HostFault, KernelDesc};
use crate::backend::{ModuleDesc, ParamAccess, ParamInfo};
use std::sync::Arc;

macro_rules! source {
    ($file:literal) => {
        concat!(
            include_str!("../../../kernels/model/prelude.cuh"),
            include_str!("../../../kernels/llama/common.cuh"),
            include_str!(concat!("../../../kernels/llama/", $file, ".cu"))
        )
    };
}

/// The longest sequence `attention_bf16` holds scores for (its shared memory).
pub const MAX_SEQ: usize = 4096;
/// The batch sizes the gemv kernels are built for: a batch runs on the first that holds it.
pub const GEMV_BATCHES: [usize; 3] = [1, 4, 16];

/// The gemv kernel for a batch of `b` (at most 16).
pub fn gemv_kernel(b: usize) -> Option<&'static str> {
    match GEMV_BATCHES.iter().position(|&m| b <= m)? {
        0 => Some("gemv_bf16_b1"),
        1 => Some("gemv_bf16_b4"),
        _ => Some("gemv_bf16_b16"),
    }
}

/// Threads per block of `rmsnorm_bf16` and `attention_bf16`: at batch 1 the device has one
/// block per sequence (norm) or per head (attention), so each block is made as wide as it goes
/// to keep many loads in flight.
pub const WIDE_BLOCK: u32 = 1024;

/// Rows one 256-thread block of the gemv kernels computes (their ROWS: 4 at every width).
pub const GEMV_ROWS: usize = 4;

use ParamAccess::{Read as R, ReadWrite as RW, Value as V, Write as W};

type K = Result<(), HostFault>;

fn layout(params: &[(u32, ParamAccess)]) -> Vec<ParamInfo> {
    ParamInfo::packed(params)
}

fn checked(c: &dyn HostCtx, what: &str, a: usize, b: usize) -> Result<usize, HostFault> {
    a.checked_mul(b)
        .ok_or_else(|| c.bad_args(format!("{what}: {a} x {b} overflows")))
}

fn fill_bf16(c: &mut dyn HostCtx) -> K {
    let (out, n, seed, scale, offset) = (c.ptr(0)?, c.u64(1)?, c.u64(2)?, c.f32(3)?, c.f32(4)?);
    let len = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_mul(2))
        .ok_or_else(|| c.bad_args(format!("{n} elements overflow")))?;
    let dst = c.write_slice(out, len)?;
    for (i, d) in dst.chunks_exact_mut(2).enumerate() {
        d.copy_from_slice(&fill_value(seed, i as u64, scale, offset).to_le_bytes());
    }
    Ok(())
}

fn embed_bf16(c: &mut dyn HostCtx) -> K {
    let (table, inputs, x) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?);
    let (hidden, batch, vocab) = (c.u32(3)? as usize, c.u32(4)? as usize, c.u32(5)?);
    let tokens = c.read_u32(inputs, batch)?;
    let mut out = Vec::new();
    for &tok in &tokens {
        if tok < vocab {
            let row = c.read_u16(
                table.offset(checked(c, "row", tok as usize, hidden * 2)?),
                hidden,
            )?;
            out.extend(row.into_iter().map(bf16_to_f32));
        } else {
            out.extend(std::iter::repeat_n(f32::from_bits(0x7fc0_0000), hidden));
        }
    }
    c.write_f32(x, &out)
}

fn rmsnorm_bf16(c: &mut dyn HostCtx) -> K {
    let (x, w, out) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?);
    let (n, eps, batch) = (c.u32(3)? as usize, c.f32(4)?, c.u32(5)? as usize);
    let nt = block_threads(c, 32)?;
    let ws = c.read_u16(w, n)?;
    let xs = c.read_f32(x, checked(c, "x", n, batch)?)?;
    let mut o = Vec::with_capacity(xs.len());
    for row in xs.chunks_exact(n.max(1)) {
        let mut threads = vec![0.0f32; nt];
        for (j, v) in row.iter().enumerate() {
            threads[j % nt] = v.mul_add(*v, threads[j % nt]);
        }
        let inv = 1.0f32 / (block_sum(&threads) / n as f32 + eps).sqrt();
        o.extend(row.iter().zip(&ws).map(|(v, w)| v * inv * bf16_to_f32(*w)));
    }
    c.write_f32(out, &o)
}

/// A block's threads' sums added as the kernels add them: each warp's 32 in the butterfly,
/// then the warps' in warp order.
fn block_sum(threads: &[f32]) -> f32 {
    let warps: Vec<f32> = threads
        .chunks_exact(32)
        .map(|l| butterfly(l.try_into().expect("32 lanes")))
        .collect();
    warps[1..].iter().fold(warps[0], |s, w| s + w)
}

/// The launch's threads per block, which the kernel's order of additions depends on: a multiple
/// of 32 up to 1024, and at least `least`. (A launch the kernel would return from at once is
/// refused here instead: its outputs would be whatever was there.)
fn block_threads(c: &dyn HostCtx, least: usize) -> Result<usize, HostFault> {
    let [x, y, z] = c.block();
    let nt = x as usize;
    if nt % 32 != 0 || !(least.max(32)..=1024).contains(&nt) || y != 1 || z != 1 {
        return Err(c.bad_args(format!(
            "block [{x}, {y}, {z}]: this kernel runs one dimension of 32 to 1024 threads, a \
             multiple of 32, at least {least}"
        )));
    }
    Ok(nt)
}

/// `gemv_bf16_b*`: thread t of a row's 256 takes columns 8t..8t+8, 8t+2048.., each 8 in
/// order, fused; each warp's 32 sums meet in the butterfly, then the 8 warps' sums are added
/// in warp order. Vectors past `maxb` are not computed, as in CUDA.
fn gemv_bf16(maxb: usize) -> impl Fn(&mut dyn HostCtx) -> K {
    move |c: &mut dyn HostCtx| {
        let (w, x, y) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?);
        let (rows, cols) = (c.u32(3)? as usize, c.u32(4)? as usize);
        let (batch, accumulate) = ((c.u32(5)? as usize).min(maxb), c.u32(6)? != 0);
        if cols % 8 != 0 {
            return Err(c.bad_args(format!("cols = {cols} is not a multiple of 8")));
        }
        let ws = c.read_u16(w, checked(c, "weights", rows, cols)?)?;
        let xs = c.read_f32(x, checked(c, "x", batch, cols)?)?;
        let mut ys = c.read_f32(y, checked(c, "y", batch, rows)?)?;
        for (b, xb) in xs.chunks_exact(cols.max(1)).enumerate().take(batch) {
            for r in 0..rows {
                let row = &ws[r * cols..(r + 1) * cols];
                let mut threads = [0.0f32; 256];
                for (c8, (wc, xc)) in row.chunks_exact(8).zip(xb.chunks_exact(8)).enumerate() {
                    let acc = &mut threads[c8 % 256];
                    for (wv, xv) in wc.iter().zip(xc) {
                        *acc = bf16_to_f32(*wv).mul_add(*xv, *acc);
                    }
                }
                let s = block_sum(&threads);
                let out = &mut ys[b * rows + r];
                *out = if accumulate { *out + s } else { s };
            }
        }
        c.write_f32(y, &ys)
    }
}

/// The per-sequence views of the step's inputs: (positions, block tables).
fn batch_inputs(
    c: &dyn HostCtx,
    inputs: DevicePtr,
    batch: usize,
    max_blocks: usize,
) -> Result<(Vec<u32>, Vec<u32>), HostFault> {
    let all = c.read_u32(
        inputs,
        2 * batch + checked(c, "block tables", batch, max_blocks)?,
    )?;
    Ok((all[batch..2 * batch].to_vec(), all[2 * batch..].to_vec()))
}

/// The cache row of position `t` of a sequence, in u32 arithmetic as the kernels do it.
fn cache_row(table: &[u32], t: usize, bs: usize) -> Option<u32> {
    let blk = *table.get(t / bs.max(1))?;
    Some(
        blk.wrapping_mul(bs as u32)
            .wrapping_add((t % bs.max(1)) as u32),
    )
}

struct Heads {
    nh: usize,
    nkv: usize,
    hd: usize,
    bs: usize,
    max_blocks: usize,
    batch: usize,
}

impl Heads {
    /// Arguments `first`..`first + 6`: heads, KV heads, head size, block size, max blocks,
    /// batch.
    fn read(c: &dyn HostCtx, first: usize) -> Result<Heads, HostFault> {
        let u = |i| c.u32(first + i).map(|v| v as usize);
        let h = Heads {
            nh: u(0)?,
            nkv: u(1)?,
            hd: u(2)?,
            bs: u(3)?,
            max_blocks: u(4)?,
            batch: u(5)?,
        };
        if h.nkv == 0
            || h.nh % h.nkv != 0
            || h.bs == 0
            || !(2..=256).contains(&h.hd)
            || !h.hd.is_power_of_two()
        {
            return Err(c.bad_args(format!(
                "{} query heads over {} KV heads of {}, block size {}",
                h.nh, h.nkv, h.hd, h.bs
            )));
        }
        Ok(h)
    }

    fn kv_dim(&self) -> usize {
        self.nkv * self.hd
    }

    fn qkv_dim(&self) -> usize {
        (self.nh + 2 * self.nkv) * self.hd
    }
}

fn rope_append(c: &mut dyn HostCtx) -> K {
    let (qkv, kp, vp, inputs, rope) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?, c.ptr(3)?, c.ptr(4)?);
    let h = Heads::read(c, 5)?;
    let (half, kv_dim) = (h.hd / 2, h.kv_dim());
    let (pos, tables) = batch_inputs(c, inputs, h.batch, h.max_blocks)?;
    let mut v = c.read_f32(qkv, checked(c, "qkv", h.batch, h.qkv_dim())?)?;
    for b in 0..h.batch {
        let p = pos[b] as usize;
        let table = &tables[b * h.max_blocks..(b + 1) * h.max_blocks];
        let row = cache_row(table, p, h.bs).ok_or_else(|| c.bad_args("position past its table"))?;
        let slot = checked(c, "slot", row as usize, kv_dim)?;
        let angles = c.read_f32(rope.offset(checked(c, "rope", p, half * 8)?), half * 2)?;
        let seq = &mut v[b * h.qkv_dim()..(b + 1) * h.qkv_dim()];
        let mut k_row = vec![0u16; kv_dim];
        let mut v_row = vec![0u16; kv_dim];
        for head in 0..h.nh + 2 * h.nkv {
            let hv = &mut seq[head * h.hd..(head + 1) * h.hd];
            for i in 0..half {
                let (x0, x1) = (hv[i], hv[i + half]);
                if head < h.nh + h.nkv {
                    let (co, s) = (angles[2 * i], angles[2 * i + 1]);
                    let (o0, o1) = (x0 * co - x1 * s, x1 * co + x0 * s);
                    hv[i] = o0;
                    hv[i + half] = o1;
                    if head >= h.nh {
                        let k = &mut k_row[(head - h.nh) * h.hd..];
                        k[i] = f32_to_bf16(o0);
                        k[i + half] = f32_to_bf16(o1);
                    }
                } else {
                    let vv = &mut v_row[(head - h.nh - h.nkv) * h.hd..];
                    vv[i] = f32_to_bf16(x0);
                    vv[i + half] = f32_to_bf16(x1);
                }
            }
        }
        // An odd head size leaves its last element unrotated and uncached, as in CUDA: only
        // the pairs are written.
        for (pool, row_vals) in [(kp, &k_row), (vp, &v_row)] {
            for head in 0..h.nkv {
                for i in (0..half).flat_map(|i| [i, i + half]) {
                    let at = slot + head * h.hd + i;
                    c.write_u16(pool.offset(at * 2), &[row_vals[head * h.hd + i]])?;
                }
            }
        }
    }
    c.write_f32(qkv, &v)
}

fn attention_bf16(c: &mut dyn HostCtx) -> K {
    let (qkv, kp, vp, inputs, out) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?, c.ptr(3)?, c.ptr(4)?);
    let h = Heads::read(c, 5)?;
    let scale = c.f32(11)?;
    let nt = block_threads(c, h.hd)?;
    let kv_dim = h.kv_dim();
    let (pos, tables) = batch_inputs(c, inputs, h.batch, h.max_blocks)?;
    let q = c.read_f32(qkv, checked(c, "qkv", h.batch, h.qkv_dim())?)?;
    let mut o = vec![0.0f32; checked(c, "out", h.batch, h.nh * h.hd)?];
    for b in 0..h.batch {
        let len = (pos[b] as usize + 1).min(MAX_SEQ);
        let table = &tables[b * h.max_blocks..(b + 1) * h.max_blocks];
        let rows: Vec<u32> = (0..len)
            .map(|t| cache_row(table, t, h.bs).ok_or_else(|| c.bad_args("position past its table")))
            .collect::<Result<_, _>>()?;
        for kvh in 0..h.nkv {
            // Grown as rows are read (each read bounds-checked), never sized from arguments.
            let (mut keys, mut vals) = (Vec::new(), Vec::new());
            for &r in &rows {
                let at = (r as usize * kv_dim + kvh * h.hd) * 2;
                keys.push(c.read_u16(kp.offset(at), h.hd)?);
                vals.push(c.read_u16(vp.offset(at), h.hd)?);
            }
            let group = h.nh / h.nkv;
            for head in kvh * group..(kvh + 1) * group {
                let qh = &q[b * h.qkv_dim() + head * h.hd..][..h.hd];
                let sc: Vec<f32> = keys
                    .iter()
                    .map(|k| {
                        let mut lanes = [0.0f32; 32];
                        for (j, (qv, kv)) in qh.iter().zip(k).enumerate() {
                            lanes[j % 32] = qv.mul_add(bf16_to_f32(*kv), lanes[j % 32]);
                        }
                        butterfly(lanes) * scale
                    })
                    .collect();
                let m = sc
                    .iter()
                    .fold(-3.402_823_5e38f32, |m, &s| if s > m { s } else { m });
                let p: Vec<f32> = sc.iter().map(|s| gt_exp(s - m)).collect();
                // G groups of threads, each over its run of positions, then added in order.
                let groups = nt / h.hd;
                let chunk = p.len().div_ceil(groups);
                for d in 0..h.hd {
                    let (mut sum, mut acc) = (0.0f32, 0.0f32);
                    for g in 0..groups {
                        let (mut gs, mut ga) = (0.0f32, 0.0f32);
                        let run = (g * chunk).min(p.len())..((g + 1) * chunk).min(p.len());
                        for (pt, v) in p[run.clone()].iter().zip(&vals[run]) {
                            gs += pt;
                            ga = pt.mul_add(bf16_to_f32(v[d]), ga);
                        }
                        (sum, acc) = if g == 0 {
                            (gs, ga)
                        } else {
                            (sum + gs, acc + ga)
                        };
                    }
                    o[(b * h.nh + head) * h.hd + d] = acc / sum;
                }
            }
        }
    }
    c.write_f32(out, &o)
}

fn silu_mul_bf16(c: &mut dyn HostCtx) -> K {
    let (gu, act) = (c.ptr(0)?, c.ptr(1)?);
    let (ffn, batch, overrun) = (c.u32(2)? as usize, c.u32(3)? as usize, c.u32(4)? as usize);
    let n = checked(c, "act", ffn, batch)?;
    let g = c.read_f32(gu, n * 2)?;
    let mut o = Vec::with_capacity(n);
    for row in g.chunks_exact((2 * ffn).max(1)) {
        let (gate, up) = row.split_at(ffn);
        o.extend(gate.iter().zip(up).map(|(g, u)| g / (1.0 + gt_exp(-g)) * u));
    }
    if overrun > 0 {
        // The planted fault: one write past the end, bounds-checked as a whole.
        c.fill(act, (n + overrun) * 4, 0)?;
    }
    c.write_f32(act, &o)
}

fn argmax_batch(c: &mut dyn HostCtx) -> K {
    let (l, n, batch, out) = (c.ptr(0)?, c.u32(1)? as usize, c.u32(2)? as usize, c.ptr(3)?);
    let ls = c.read_f32(l, checked(c, "logits", n, batch)?)?;
    let best: Vec<u32> = ls
        .chunks_exact(n.max(1))
        .map(|row| {
            let mut best = 0usize;
            for i in 1..row.len() {
                if row[i] > row[best] {
                    best = i;
                }
            }
            best as u32
        })
        .collect();
    c.write_u32(out, &best)
}

fn kernel(name: &str, params: &[(u32, ParamAccess)], body: HostBody) -> KernelDesc {
    KernelDesc::new(name, layout(params), Some(body))
}

/// Each kernel's element types, from its C signature with this model's convention: bf16 is
/// held as `unsigned short` (NVRTC has no bf16 header), which no reader may assume of
/// another's kernels, so the model says it.
fn with_elems(mut m: ModuleDesc) -> ModuleDesc {
    use crate::backend::ElemType;
    let src = m.source.clone().unwrap_or_default();
    for k in &mut m.kernels {
        let Some(ptrs) = crate::trace::signature::pointees(&src, &k.name) else {
            continue;
        };
        k.elems = ptrs
            .into_iter()
            .map(|p| match p?.0.as_str() {
                "unsigned short" => Some(ElemType::Bf16),
                "float" => Some(ElemType::F32),
                _ => None,
            })
            .collect();
    }
    m
}

/// The step's modules: name, CUDA C, and each kernel's layout, element types and twin.
pub fn modules() -> Vec<ModuleDesc> {
    raw_modules().into_iter().map(with_elems).collect()
}

fn raw_modules() -> Vec<ModuleDesc> {
    let heads = [(4, V); 6];
    let gemv = [(8, R), (8, R), (8, RW), (4, V), (4, V), (4, V), (4, V)];
    let mut rope = vec![(8, RW), (8, W), (8, W), (8, R), (8, R)];
    rope.extend(heads);
    let mut attn = vec![(8, R), (8, R), (8, R), (8, R), (8, W)];
    attn.extend(heads);
    attn.push((4, V));
    let one = |module: &str, source: &str, k: KernelDesc| ModuleDesc {
        name: module.to_string(),
        source: Some(source.to_string()),
        kernels: vec![k],
    };
    vec![
        one(
            "llama_fill",
            source!("fill"),
            kernel(
                "fill_bf16",
                &[(8, W), (8, V), (8, V), (4, V), (4, V)],
                Arc::new(fill_bf16),
            ),
        ),
        one(
            "llama_embed",
            source!("embed"),
            kernel(
                "embed_bf16",
                &[(8, R), (8, R), (8, W), (4, V), (4, V), (4, V)],
                Arc::new(embed_bf16),
            ),
        ),
        one(
            "llama_rmsnorm",
            source!("rmsnorm"),
            kernel(
                "rmsnorm_bf16",
                &[(8, R), (8, R), (8, W), (4, V), (4, V), (4, V)],
                Arc::new(rmsnorm_bf16),
            ),
        ),
        ModuleDesc {
            name: "llama_gemv".to_string(),
            source: Some(source!("gemv").to_string()),
            kernels: GEMV_BATCHES
                .iter()
                .map(|&m| {
                    let name = gemv_kernel(m).expect("a listed batch has a kernel");
                    kernel(name, &gemv, Arc::new(gemv_bf16(m)))
                })
                .collect(),
        },
        one(
            "llama_rope_append",
            source!("rope_append"),
            kernel("rope_append", &rope, Arc::new(rope_append)),
        ),
        one(
            "llama_attention",
            source!("attention"),
            kernel("attention_bf16", &attn, Arc::new(attention_bf16)),
        ),
        one(
            "llama_silu_mul",
            source!("silu_mul"),
            kernel(
                "silu_mul_bf16",
                &[(8, R), (8, W), (4, V), (4, V), (4, V)],
                Arc::new(silu_mul_bf16),
            ),
        ),
        one(
            "llama_argmax",
            source!("argmax"),
            kernel(
                "argmax_batch",
                &[(8, R), (4, V), (4, V), (8, W)],
                Arc::new(argmax_batch),
            ),
        ),
    ]
}

/// Load the step's modules on `gpu` (CUDA compiles them, the mock registers their twins),
/// starting a new run of the kernel audit: what a model's load does.
pub fn load(gpu: &dyn GpuBackend) -> anyhow::Result<()> {
    if let Some(r) = gpu.kernel_registry() {
        r.begin_run();
    }
    load_modules(gpu)
}

/// Load the modules alone, the kernel audit's run left as it is (a replay target that gets
/// every model's twins).
pub fn load_modules(gpu: &dyn GpuBackend) -> anyhow::Result<()> {
    for m in modules() {
        gpu.load_module(&m)?;
    }
    Ok(())
}
