//! The decode step's kernels: their CUDA C (kernels/model/*.cu, one module each) and their
//! CPU twins for the mock, registered with the same parameter layouts. The twins do the same
//! arithmetic in the same order as the CUDA code, which is compiled without FMA contraction,
//! so the two agree bit for bit except where the device's `expf`/`sinf`/`cosf`/`powf` differ
//! from the host's by an ulp.

use crate::backend::{GpuBackend, HostBody, HostCtx, HostFault, KernelDesc, ModuleDesc};
use crate::backend::{ParamAccess, ParamInfo};
use std::sync::Arc;

/// Every module's source starts with kernels/model/prelude.cuh (the grid-dependency wait that
/// makes a kernel safe to launch with programmatic dependent launch), so that the source a
/// trace embeds compiles on its own.
macro_rules! module {
    ($name:literal) => {
        (
            $name,
            concat!(
                include_str!("../../kernels/model/prelude.cuh"),
                include_str!(concat!("../../kernels/model/", $name, ".cu"))
            ),
        )
    };
}

/// (module = kernel name, CUDA source).
pub const SOURCES: [(&str, &str); 9] = [
    module!("embedding"),
    module!("rmsnorm"),
    module!("gemv"),
    module!("rope"),
    module!("kv_append"),
    module!("paged_attention"),
    module!("silu_mul"),
    module!("add"),
    module!("argmax"),
];

use ParamAccess::{Read as R, ReadWrite as RW, Value as V, Write as W};

/// Parameter layouts, as nvcc lays them out for the signatures in kernels/model.
pub fn layout(name: &str) -> Vec<ParamInfo> {
    let p = |v: &[(u32, ParamAccess)]| ParamInfo::packed(v);
    match name {
        "embedding" => p(&[(8, R), (8, R), (8, W), (4, V)]),
        "rmsnorm" => p(&[(8, R), (8, R), (8, W), (4, V), (4, V)]),
        "gemv" => p(&[(8, R), (8, R), (8, W), (4, V), (4, V)]),
        "rope" => p(&[(8, RW), (8, RW), (8, R), (4, V), (4, V), (4, V), (4, V)]),
        "kv_append" => p(&[(8, R), (8, R), (8, W), (8, W), (8, R), (4, V), (4, V)]),
        "paged_attention" => p(&[
            (8, R),
            (8, R),
            (8, R),
            (8, R),
            (8, W),
            (4, V),
            (4, V),
            (4, V),
            (4, V),
            (4, V),
        ]),
        "silu_mul" => p(&[(8, R), (8, R), (8, W), (4, V), (4, V)]),
        "add" => p(&[(8, RW), (8, R), (4, V)]),
        "argmax" => p(&[(8, R), (4, V), (8, W)]),
        other => panic!("no layout for kernel {other}"),
    }
}

type K = Result<(), HostFault>;
/// A CPU twin.
type Twin = fn(&mut dyn HostCtx) -> K;

fn embedding(c: &mut dyn HostCtx) -> K {
    let (table, inputs, out, hidden) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?, c.u32(3)? as usize);
    let tok = c.read_u32(inputs, 1)?[0] as usize;
    let row = c.read_f32(table.offset(tok * hidden * 4), hidden)?;
    c.write_f32(out, &row)
}

fn rmsnorm(c: &mut dyn HostCtx) -> K {
    let (x, w, out, n, eps) = (
        c.ptr(0)?,
        c.ptr(1)?,
        c.ptr(2)?,
        c.u32(3)? as usize,
        c.f32(4)?,
    );
    let xs = c.read_f32(x, n)?;
    let ws = c.read_f32(w, n)?;
    let ss = warp_dot(&xs, &xs);
    let inv = 1.0f32 / (ss / n as f32 + eps).sqrt();
    let o: Vec<f32> = xs.iter().zip(&ws).map(|(x, w)| x * inv * w).collect();
    c.write_f32(out, &o)
}

fn gemv(c: &mut dyn HostCtx) -> K {
    let (w, x, y) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?);
    let (rows, cols) = (c.u32(3)? as usize, c.u32(4)? as usize);
    let ws = c.read_f32(w, rows * cols)?;
    let xs = c.read_f32(x, cols)?;
    // No columns: every row's sum is of nothing, as the CUDA kernel's is.
    let out: Vec<f32> = match cols {
        0 => vec![0.0; rows],
        _ => ws
            .chunks_exact(cols)
            .map(|row| warp_dot(row, &xs))
            .collect(),
    };
    c.write_f32(y, &out)
}

/// A row times a vector the way `gemv.cu`'s warp computes it: lane `l` of 32 sums columns
/// l, l+32, ... in order, then the lanes' sums are added in the warp's butterfly (each lane
/// adds its partner's sum at xor 16, 8, 4, 2, 1; lane 0's result is kept).
fn warp_dot(row: &[f32], x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 32];
    for (c, (a, b)) in row.iter().zip(x).enumerate() {
        lanes[c % 32] += a * b;
    }
    for off in [16, 8, 4, 2, 1] {
        let before = lanes;
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = before[i] + before[i ^ off];
        }
    }
    lanes[0]
}

fn rope(c: &mut dyn HostCtx) -> K {
    let (q, k, inputs) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?);
    let (nh, nkv, hd, theta) = (
        c.u32(3)? as usize,
        c.u32(4)? as usize,
        c.u32(5)? as usize,
        c.f32(6)?,
    );
    let pos = c.read_u32(inputs, 2)?[1] as f32;
    let half = hd / 2;
    for (base, heads) in [(q, nh), (k, nkv)] {
        let mut v = c.read_f32(base, heads * hd)?;
        for h in 0..heads {
            for i in 0..half {
                let inv_freq = 1.0f32 / theta.powf((2 * i) as f32 / hd as f32);
                let a = pos * inv_freq;
                let (s, co) = (a.sin(), a.cos());
                let (x0, x1) = (v[h * hd + 2 * i], v[h * hd + 2 * i + 1]);
                v[h * hd + 2 * i] = x0 * co - x1 * s;
                v[h * hd + 2 * i + 1] = x0 * s + x1 * co;
            }
        }
        c.write_f32(base, &v)?;
    }
    Ok(())
}

/// The step's position and the block-table entries that cover it.
fn block_table(
    c: &dyn HostCtx,
    inputs: crate::backend::DevicePtr,
    bs: usize,
) -> Result<(usize, Vec<u32>), HostFault> {
    if bs == 0 {
        return Err(c.bad_args("block size 0"));
    }
    let pos = c.read_u32(inputs, 2)?[1] as usize;
    let blocks = c.read_u32(inputs, 2 + pos / bs + 1)?;
    Ok((pos, blocks[2..].to_vec()))
}

/// The float index of position `t`'s row in a paged KV pool, or `None` if it overflows.
fn kv_row(table: &[u32], t: usize, bs: usize, kv_dim: usize) -> Option<usize> {
    (*table.get(t / bs)? as usize)
        .checked_mul(bs)?
        .checked_add(t % bs)?
        .checked_mul(kv_dim)
}

fn kv_append(c: &mut dyn HostCtx) -> K {
    let (k, v, kp, vp, inputs) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?, c.ptr(3)?, c.ptr(4)?);
    let (kv_dim, bs) = (c.u32(5)? as usize, c.u32(6)? as usize);
    let (pos, table) = block_table(c, inputs, bs)?;
    let slot = kv_row(&table, pos, bs, kv_dim)
        .and_then(|r| r.checked_mul(4))
        .ok_or_else(|| c.bad_args("KV slot offset overflows"))?;
    let kk = c.read_f32(k, kv_dim)?;
    let vv = c.read_f32(v, kv_dim)?;
    c.write_f32(kp.offset(slot), &kk)?;
    c.write_f32(vp.offset(slot), &vv)
}

// Indexing by position mirrors the CUDA loop it must match operation for operation.
#[allow(clippy::needless_range_loop)]
fn paged_attention(c: &mut dyn HostCtx) -> K {
    let (q, kp, vp, inputs, out) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?, c.ptr(3)?, c.ptr(4)?);
    let (nh, nkv, hd, bs, scale) = (
        c.u32(5)? as usize,
        c.u32(6)? as usize,
        c.u32(7)? as usize,
        c.u32(8)? as usize,
        c.f32(9)?,
    );
    if nkv == 0 || nh % nkv != 0 {
        return Err(c.bad_args(format!("{nh} query heads over {nkv} KV heads")));
    }
    let (pos, table) = block_table(c, inputs, bs)?;
    let len = pos + 1;
    let kv_dim = nkv * hd;
    let qs = c.read_f32(q, nh * hd)?;
    // Grown as rows are read (each read is bounds-checked), never sized from the arguments.
    let mut keys = Vec::new();
    let mut vals = Vec::new();
    for t in 0..len {
        let off = kv_row(&table, t, bs, kv_dim)
            .and_then(|r| r.checked_mul(4))
            .ok_or_else(|| c.bad_args("KV row offset overflows"))?;
        keys.push(c.read_f32(kp.offset(off), kv_dim)?);
        vals.push(c.read_f32(vp.offset(off), kv_dim)?);
    }
    let mut o = vec![0.0f32; nh * hd];
    for h in 0..nh {
        let kvh = h / (nh / nkv);
        let qh = &qs[h * hd..(h + 1) * hd];
        let score = |t: usize| {
            let kh = &keys[t][kvh * hd..(kvh + 1) * hd];
            let mut s = 0.0f32;
            for j in 0..hd {
                s += qh[j] * kh[j];
            }
            s
        };
        let mut m = -3.402_823_5e38f32;
        for t in 0..len {
            let s = score(t) * scale;
            m = if s > m { s } else { m };
        }
        for d in 0..hd {
            let (mut sum, mut acc) = (0.0f32, 0.0f32);
            for t in 0..len {
                let p = (score(t) * scale - m).exp();
                sum += p;
                acc += p * vals[t][kvh * hd + d];
            }
            o[h * hd + d] = acc / sum;
        }
    }
    c.write_f32(out, &o)
}

fn silu_mul(c: &mut dyn HostCtx) -> K {
    let (g, u, out) = (c.ptr(0)?, c.ptr(1)?, c.ptr(2)?);
    let (n, overrun) = (c.u32(3)? as usize, c.u32(4)? as usize);
    let gs = c.read_f32(g, n)?;
    let us = c.read_f32(u, n)?;
    let o: Vec<f32> = gs
        .iter()
        .zip(&us)
        .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
        .collect();
    if overrun > 0 {
        // The planted fault: the same write past the end as the CUDA kernel, as one access
        // (the bounds check fires on it; nothing is allocated for it).
        c.fill(out, (n + overrun) * 4, 0)?;
    }
    c.write_f32(out, &o)
}

fn add(c: &mut dyn HostCtx) -> K {
    let (x, y, n) = (c.ptr(0)?, c.ptr(1)?, c.u32(2)? as usize);
    let mut xs = c.read_f32(x, n)?;
    let ys = c.read_f32(y, n)?;
    for (a, b) in xs.iter_mut().zip(&ys) {
        *a += b;
    }
    c.write_f32(x, &xs)
}

fn argmax(c: &mut dyn HostCtx) -> K {
    let (l, n, out) = (c.ptr(0)?, c.u32(1)? as usize, c.ptr(2)?);
    let ls = c.read_f32(l, n)?;
    let mut best = 0usize;
    for i in 1..n {
        if ls[i] > ls[best] {
            best = i;
        }
    }
    c.write_u32(out, &[best as u32])
}

/// A model's run begins before its first module load: the kernel audit then lists this
/// model's modules and lookups only, not an earlier model's on the same backend.
fn begin_run(gpu: &dyn GpuBackend) {
    if let Some(r) = gpu.kernel_registry() {
        r.begin_run();
    }
}

/// The decode step's modules as data: one per kernel, each with its CUDA C, its layout and its
/// CPU twin.
pub fn modules() -> Vec<ModuleDesc> {
    let twins: [(&str, Twin); 9] = [
        ("embedding", embedding),
        ("rmsnorm", rmsnorm),
        ("gemv", gemv),
        ("rope", rope),
        ("kv_append", kv_append),
        ("paged_attention", paged_attention),
        ("silu_mul", silu_mul),
        ("add", add),
        ("argmax", argmax),
    ];
    twins
        .into_iter()
        .map(|(name, f)| {
            let body: HostBody = Arc::new(f);
            ModuleDesc {
                name: name.to_string(),
                source: SOURCES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, s)| s.to_string()),
                kernels: vec![KernelDesc::new(name, layout(name), Some(body))],
            }
        })
        .collect()
}

/// Load every model kernel on `gpu` (CUDA compiles them, the mock registers their twins),
/// starting a new run of the kernel audit.
pub fn load(gpu: &dyn GpuBackend) -> anyhow::Result<()> {
    begin_run(gpu);
    for m in modules() {
        gpu.load_module(&m)?;
    }
    Ok(())
}
