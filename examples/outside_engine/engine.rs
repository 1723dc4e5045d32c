//! An engine written the way a user outside gputape writes one: its own CUDA C kernels with CPU
//! bodies described as a `ModuleDesc`, two streams joined by events, its steps marked with
//! `step_boundary`, and optionally its step captured into a CUDA graph (with the step hook
//! inside the captured function) and launched as one. It knows nothing of gputape's own
//! conventions; the tests in tests/outside_engine.rs and the H200 script run it.
//!
//! A step: token ids are copied in; `oe_embed` gathers each token's row of a table on stream
//! 0; stream 1 waits for it and mixes the rows into a running state (`oe_mix`); stream 0 waits
//! for that and normalises the state (`oe_norm`); the host reads the result back.

#![allow(dead_code)]

use gputape::backend::{
    DevicePtr, GpuBackend, GraphHandle, HostBody, KernelArg, KernelDesc, KernelHandle, ModuleDesc,
    ParamAccess::{Read, ReadWrite, Value, Write},
    ParamInfo,
};
use std::sync::Arc;

/// How the kernels get `assert` without the C library's headers, which NVRTC lacks: the
/// driver's `__assertfail` as NVRTC declares it, or declared here where it does not.
pub const ASSERT_PRELUDES: [&str; 2] = [
    "#define assert(e) ((e) ? (void)0 : __assertfail(#e, __FILE__, __LINE__, __func__, sizeof(char)))\n",
    "extern \"C\" __host__ __device__ void __assertfail(const char*, const char*, unsigned int, const char*, decltype(sizeof(0)));\n\
     #define assert(e) ((e) ? (void)0 : __assertfail(#e, __FILE__, __LINE__, __func__, sizeof(char)))\n",
];

/// The engine's kernels. `oe_embed` reads the table row its id names without a check (a bad
/// id reads out of range); `oe_embed_checked` asserts the id first, as a careful engine does.
pub const KERNELS: &str = r#"
extern "C" __global__ void oe_embed(const float* table, const int* ids, float* out, int rows, int dim) {
    int t = blockIdx.x, j = threadIdx.x;
    int id = ids[t];
    out[t * dim + j] = table[(long long)id * dim + j];
}
extern "C" __global__ void oe_embed_checked(const float* table, const int* ids, float* out, int rows, int dim) {
    int t = blockIdx.x, j = threadIdx.x;
    int id = ids[t];
    assert(id >= 0 && id < rows);
    out[t * dim + j] = table[(long long)id * dim + j];
}
extern "C" __global__ void oe_spin(const int* flag) {
    while (*(volatile const int*)flag == 0) { }
}
extern "C" __global__ void oe_mix(float* state, const float* rows, float keep, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) state[i] = state[i] * keep + rows[i];
}
extern "C" __global__ void oe_norm(const float* state, float* out, int n, float eps) {
    if (threadIdx.x != 0) return;
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += state[i] * state[i];
    float inv = 1.0f / sqrtf(s / n + eps);
    for (int i = 0; i < n; i++) out[i] = state[i] * inv;
}
"#;

/// The module as data, with the first assert prelude.
pub fn module() -> ModuleDesc {
    module_with(0)
}

/// The module as data, with assert prelude `variant`: CUDA compiles the source; the mock runs
/// the bodies, which compute what the kernels compute.
pub fn module_with(variant: usize) -> ModuleDesc {
    let embed = |checked: bool| -> HostBody {
        Arc::new(move |ctx| {
            let (table, ids, out) = (ctx.ptr(0)?, ctx.ptr(1)?, ctx.ptr(2)?);
            let (rows, dim) = (ctx.i32(3)?, ctx.i32(4)? as usize);
            let tokens = ctx.grid()[0] as usize;
            let ids: Vec<i32> = ctx
                .read_u32(ids, tokens)?
                .into_iter()
                .map(|v| v as i32)
                .collect();
            for (t, id) in ids.into_iter().enumerate() {
                if checked {
                    ctx.device_assert(id >= 0 && id < rows, "id >= 0 && id < rows")?;
                }
                let at = (id as i64 as u64).wrapping_mul(dim as u64 * 4) as usize;
                let row = ctx.read_f32(table.offset(at), dim)?;
                ctx.write_f32(out.offset(t * dim * 4), &row)?;
            }
            Ok(())
        })
    };
    let mix: HostBody = Arc::new(|ctx| {
        let (state, rows) = (ctx.ptr(0)?, ctx.ptr(1)?);
        let (keep, n) = (ctx.f32(2)?, ctx.i32(3)? as usize);
        let r = ctx.read_f32(rows, n)?;
        let mut s = ctx.read_f32(state, n)?;
        for (s, r) in s.iter_mut().zip(r) {
            *s = *s * keep + r;
        }
        ctx.write_f32(state, &s)
    });
    let norm: HostBody = Arc::new(|ctx| {
        let (state, out) = (ctx.ptr(0)?, ctx.ptr(1)?);
        let (n, eps) = (ctx.i32(2)? as usize, ctx.f32(3)?);
        let s = ctx.read_f32(state, n)?;
        let mut acc = 0.0f32;
        for v in &s {
            acc += v * v;
        }
        let inv = 1.0f32 / (acc / n as f32 + eps).sqrt();
        let o: Vec<f32> = s.iter().map(|v| v * inv).collect();
        ctx.write_f32(out, &o)
    });
    // The flag is never set: the kernel spins forever, and so does whoever waits for it.
    let spin: HostBody = Arc::new(|ctx| {
        let flag = ctx.ptr(0)?;
        if ctx.read_u32(flag, 1)?[0] == 0 {
            return Err(ctx.waits_forever("oe_spin waits for a flag nobody sets"));
        }
        Ok(())
    });
    let embed_layout =
        || ParamInfo::packed(&[(8, Read), (8, Read), (8, Write), (4, Value), (4, Value)]);
    ModuleDesc {
        name: "outside".into(),
        source: Some(format!(
            "{}{KERNELS}",
            ASSERT_PRELUDES[variant % ASSERT_PRELUDES.len()]
        )),
        kernels: vec![
            KernelDesc::new("oe_embed", embed_layout(), Some(embed(false))),
            KernelDesc::new("oe_embed_checked", embed_layout(), Some(embed(true))),
            KernelDesc::new(
                "oe_mix",
                ParamInfo::packed(&[(8, ReadWrite), (8, Read), (4, Value), (4, Value)]),
                Some(mix),
            ),
            KernelDesc::new("oe_spin", ParamInfo::packed(&[(8, Read)]), Some(spin)),
            KernelDesc::new(
                "oe_norm",
                ParamInfo::packed(&[(8, Read), (8, Write), (4, Value), (4, Value)]),
                Some(norm),
            ),
        ],
    }
}

/// What the engine runs and what goes wrong in it.
#[derive(Clone, Debug)]
pub struct Config {
    pub rows: u32,
    pub dim: u32,
    pub tokens: u32,
    /// Check ids with a device-side assert (`oe_embed_checked`).
    pub checked: bool,
    /// Capture the step into a graph at this step and launch it as one from then on; the
    /// step hook (`step_boundary`) runs inside the captured function.
    pub graph_at: Option<u64>,
    /// At this step, one token id is this (out of range when past `rows`).
    pub bad_id: Option<(u64, i32)>,
    /// At this step the engine launches `oe_spin` on a flag it forgot to set: a hang.
    pub hang_at: Option<u64>,
    /// Which `ASSERT_PRELUDES` entry the source uses (the one this NVRTC compiles).
    pub prelude: usize,
    /// The norm's epsilon. At 0 a state of zeros normalises to 0/0: NaN.
    pub eps: f32,
    /// At this step a new request starts: the engine clears its state and the batch is all
    /// padding (id 0, whose table row is zeros), so the state stays zero.
    pub pad_at: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rows: 64,
            dim: 32,
            tokens: 4,
            checked: false,
            graph_at: None,
            bad_id: None,
            hang_at: None,
            prelude: 0,
            eps: 1e-6,
            pad_at: None,
        }
    }
}

struct Kernels {
    embed: KernelHandle,
    mix: KernelHandle,
    norm: KernelHandle,
    spin: KernelHandle,
}

/// The engine: its buffers, streams, events and (once captured) its graph.
pub struct Engine<'g> {
    gpu: &'g dyn GpuBackend,
    pub cfg: Config,
    k: Kernels,
    s0: u64,
    s1: u64,
    ev_embed: u64,
    ev_mix: u64,
    table: DevicePtr,
    ids: DevicePtr,
    rows_out: DevicePtr,
    state: DevicePtr,
    out: DevicePtr,
    flag: DevicePtr,
    /// A few constants the forward uploads each step (into a graph, when it is captured).
    consts: DevicePtr,
    graph: Option<GraphHandle>,
    /// How long the last step took to hand its work to the backend (up to its readback): a
    /// benchmark tells host time from device time with it.
    pub last_issue: std::time::Duration,
}

impl<'g> Engine<'g> {
    /// Load the module, make the streams, events and buffers, and fill the table.
    pub fn new(gpu: &'g dyn GpuBackend, cfg: Config) -> anyhow::Result<Self> {
        gpu.load_module(&module_with(cfg.prelude))?;
        let embed = if cfg.checked {
            "oe_embed_checked"
        } else {
            "oe_embed"
        };
        let k = Kernels {
            embed: gpu.kernel("outside", embed)?,
            mix: gpu.kernel("outside", "oe_mix")?,
            norm: gpu.kernel("outside", "oe_norm")?,
            spin: gpu.kernel("outside", "oe_spin")?,
        };
        let (s0, s1) = (gpu.create_stream()?, gpu.create_stream()?);
        let (ev_embed, ev_mix) = (gpu.create_event()?, gpu.create_event()?);
        let (rows, dim, tokens) = (cfg.rows as usize, cfg.dim as usize, cfg.tokens as usize);
        let table = gpu.alloc(rows * dim * 4)?;
        let ids = gpu.alloc(tokens * 4)?;
        let rows_out = gpu.alloc(tokens * dim * 4)?;
        let state = gpu.alloc(tokens * dim * 4)?;
        let out = gpu.alloc(tokens * dim * 4)?;
        let flag = gpu.alloc(4)?;
        gpu.memset(flag, 0, 4)?;
        // Larger than what is uploaded into it, so its contents are never the upload's bytes.
        let consts = gpu.alloc(64)?;
        // Row 0 is the padding token's: zeros.
        let vals: Vec<u8> = (0..rows * dim)
            .map(|i| match i < dim {
                true => 0.0f32,
                false => ((i * 37) % 101) as f32 / 101.0 - 0.5,
            })
            .flat_map(|v| v.to_le_bytes())
            .collect();
        gpu.copy_h2d(&vals, table)?;
        gpu.memset(state, 0, tokens * dim * 4)?;
        Ok(Engine {
            gpu,
            cfg,
            k,
            s0,
            s1,
            ev_embed,
            ev_mix,
            table,
            ids,
            rows_out,
            state,
            out,
            flag,
            consts,
            graph: None,
            last_issue: std::time::Duration::ZERO,
        })
    }

    /// The step's device work on the two streams (what a graph captures).
    fn forward(&self) -> anyhow::Result<()> {
        use KernelArg::{Buffer as B, Bytes};
        let g = self.gpu;
        let (dim, tokens) = (self.cfg.dim, self.cfg.tokens);
        let n = (dim * tokens) as i32;
        let (rows_b, dim_b) = (
            (self.cfg.rows as i32).to_le_bytes(),
            (dim as i32).to_le_bytes(),
        );
        let (keep_b, n_b, eps_b) = (
            0.5f32.to_le_bytes(),
            n.to_le_bytes(),
            self.cfg.eps.to_le_bytes(),
        );
        // Host bytes uploaded by the forward: captured into the graph with it.
        let consts: Vec<u8> = [0.5f32, 1.0, 2.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        g.copy_h2d_async(&consts, self.consts, self.s0)?;
        g.launch_typed(
            self.k.embed,
            [tokens, 1, 1],
            [dim, 1, 1],
            0,
            self.s0,
            &[
                B(self.table),
                B(self.ids),
                B(self.rows_out),
                Bytes(&rows_b),
                Bytes(&dim_b),
            ],
        )?;
        g.record_event(self.ev_embed, self.s0)?;
        g.stream_wait_event(self.s1, self.ev_embed)?;
        g.launch_typed(
            self.k.mix,
            [(n as u32).div_ceil(128), 1, 1],
            [128, 1, 1],
            0,
            self.s1,
            &[B(self.state), B(self.rows_out), Bytes(&keep_b), Bytes(&n_b)],
        )?;
        g.record_event(self.ev_mix, self.s1)?;
        g.stream_wait_event(self.s0, self.ev_mix)?;
        g.launch_typed(
            self.k.norm,
            [1, 1, 1],
            [32, 1, 1],
            0,
            self.s0,
            &[B(self.state), B(self.out), Bytes(&n_b), Bytes(&eps_b)],
        )
    }

    /// Step `n`: ids in, the forward (eager, captured, or the graph launched), the result out.
    pub fn step(&mut self, n: u64) -> anyhow::Result<Vec<f32>> {
        let t0 = std::time::Instant::now();
        let g = self.gpu;
        let pad = self.cfg.pad_at == Some(n);
        let ids: Vec<u8> = (0..self.cfg.tokens)
            .map(|t| match self.cfg.bad_id {
                _ if pad => 0,
                Some((at, id)) if at == n && t == 1 => id,
                _ => ((n as u32 * 7 + t * 13) % self.cfg.rows) as i32,
            })
            .flat_map(|id| id.to_le_bytes())
            .collect();
        g.copy_h2d(&ids, self.ids)?;
        if pad {
            let zeros = vec![0u8; (self.cfg.tokens * self.cfg.dim * 4) as usize];
            g.copy_h2d(&zeros, self.state)?;
        }
        if self.cfg.hang_at == Some(n) {
            g.launch_typed(
                self.k.spin,
                [1, 1, 1],
                [1, 1, 1],
                0,
                self.s0,
                &[KernelArg::Buffer(self.flag)],
            )?;
        }
        match (self.graph, self.cfg.graph_at) {
            (Some(graph), _) => {
                g.step_boundary(n);
                g.launch_graph(graph, self.s0)?;
            }
            (None, Some(at)) if at == n => {
                g.begin_capture(self.s0)?;
                // The engine's per-step hook runs inside its captured function.
                g.step_boundary(n);
                let fwd = self.forward();
                if let Err(e) = fwd {
                    g.abort_capture_if_active(self.s0);
                    return Err(e);
                }
                let graph = g.end_capture(self.s0)?;
                self.graph = Some(graph);
                g.launch_graph(graph, self.s0)?;
            }
            _ => {
                g.step_boundary(n);
                self.forward()?;
            }
        }
        let mut bytes = vec![0u8; (self.cfg.tokens * self.cfg.dim * 4) as usize];
        self.last_issue = t0.elapsed();
        g.copy_d2h_on_stream(self.out, &mut bytes, self.s0)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }

    /// Run steps `0..steps`; the first error ends the run and is returned with its step.
    pub fn run(&mut self, steps: u64) -> Result<Vec<f32>, (u64, anyhow::Error)> {
        let mut last = Vec::new();
        for n in 0..steps {
            last = self.step(n).map_err(|e| (n, e))?;
        }
        Ok(last)
    }
}
