//! Small call patterns over `&dyn GpuBackend`, shared by tests, benchmarks and the CLI, each
//! exercising one shape of engine behaviour.

use crate::backend::{
    GpuBackend, HostBody as KernelBody, KernelArg, KernelDesc, ModuleDesc, ParamAccess, ParamInfo,
};
use anyhow::Result;
use std::sync::Arc;

/// The CUDA C of the workloads' kernels (and the GPU suite's), loaded as module `blas`.
pub const TEST_KERNELS: &str = include_str!("../kernels/test_kernels.cu");

/// Their parameter layouts, as nvcc lays out the signatures in kernels/test_kernels.cu, with
/// what each parameter is.
fn blas_layout(name: &str) -> Vec<ParamInfo> {
    use ParamAccess::*;
    match name {
        "saxpy" | "saxpy_pdl" => {
            ParamInfo::packed(&[(8, Read), (8, ReadWrite), (4, Value), (4, Value)])
        }
        "noop_pdl" => Vec::new(),
        "fill" => ParamInfo::packed(&[(8, Write), (4, Value), (4, Value)]),
        "gather" => ParamInfo::packed(&[(8, Read), (8, Write), (4, Value)]),
        // The tensor map is a 128-byte value (64-byte aligned: first, so at offset 0).
        "tma_copy" => ParamInfo::packed(&[
            (128, Value),
            (8, Write),
            (4, Value),
            (4, Value),
            (4, Value),
            (4, Value),
        ]),
        other => unreachable!("no layout for blas::{other}"),
    }
}

/// Module `blas` as data: `TEST_KERNELS` and the kernels these workloads launch, each with its
/// layout and CPU twin: `saxpy(x, y, n, a)` (y += a*x), `fill(dst, n, v)`, `gather`,
/// `tma_copy`, and the PDL variants `bench-launch` uses (`saxpy_pdl`, `noop_pdl`).
pub fn blas_module() -> ModuleDesc {
    let saxpy: KernelBody = Arc::new(|ctx| {
        let (x, y) = (ctx.ptr(0)?, ctx.ptr(1)?);
        let n = ctx.u32(2)? as usize;
        let a = ctx.f32(3)?;
        let xs = ctx.read_f32(x, n)?;
        let mut ys = ctx.read_f32(y, n)?;
        for (y, x) in ys.iter_mut().zip(xs) {
            *y += a * x;
        }
        ctx.write_f32(y, &ys)
    });
    let saxpy_k = KernelDesc::new("saxpy", blas_layout("saxpy"), Some(saxpy.clone()));
    let saxpy_pdl_k = KernelDesc::new("saxpy_pdl", blas_layout("saxpy_pdl"), Some(saxpy));
    let noop: KernelBody = Arc::new(|_| Ok(()));
    let noop_pdl_k = KernelDesc::new("noop_pdl", blas_layout("noop_pdl"), Some(noop));
    let fill: KernelBody = Arc::new(|ctx| {
        let d = ctx.ptr(0)?;
        let n = ctx.u32(1)? as usize;
        let v = ctx.f32(2)?;
        ctx.fill_f32(d, n, v)
    });
    let fill_k = KernelDesc::new("fill", blas_layout("fill"), Some(fill));
    // The twin reads the matrix through the map's address and strides, as TMA does.
    let tma_copy: KernelBody = Arc::new(|ctx| {
        let (src, d) = ctx.tensor_map(0)?;
        let out = ctx.ptr(1)?;
        let (rows, cols) = (ctx.u32(2)? as usize, ctx.u32(3)? as usize);
        if d.rank() != 2 || d.dtype != crate::backend::TensorMapDtype::F32 {
            return Err(ctx.bad_args("tma_copy takes a 2-D f32 tensor map"));
        }
        // The map's extent bounds the copy (the mock checked it lies in its buffer when it was
        // encoded); a launch asking for more is refused, never sized by its own arguments.
        if rows as u64 > d.dims[1] || cols as u64 > d.dims[0] {
            return Err(ctx.bad_args(format!(
                "{rows} x {cols} is more than the map's {} x {}",
                d.dims[1], d.dims[0]
            )));
        }
        for r in 0..rows {
            let row = ctx.read_f32(src.offset(d.offset_of(&[0, r as u64]) as usize), cols)?;
            let at = (r as u64).saturating_mul(cols as u64 * 4);
            ctx.write_f32(out.offset(at as usize), &row)?;
        }
        Ok(())
    });
    let tma_copy_k = KernelDesc::new("tma_copy", blas_layout("tma_copy"), Some(tma_copy));
    let gather: KernelBody = Arc::new(|ctx| {
        let (table, out) = (ctx.ptr(0)?, ctx.ptr(1)?);
        let n = ctx.u32(2)? as usize;
        let ptrs: Vec<u64> = ctx
            .read(table, n * 8)?
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect();
        let mut vals = Vec::with_capacity(n);
        for p in ptrs {
            vals.push(ctx.read_f32(crate::backend::DevicePtr(p), 1)?[0]);
        }
        ctx.write_f32(out, &vals)
    });
    let gather_k = KernelDesc::new("gather", blas_layout("gather"), Some(gather));
    ModuleDesc {
        name: "blas".into(),
        // The CUDA C the twins stand for: CUDA compiles it, and a trace recorded on the mock
        // embeds it, so it replays on a GPU.
        source: Some(TEST_KERNELS.to_string()),
        kernels: vec![
            saxpy_k,
            saxpy_pdl_k,
            noop_pdl_k,
            fill_k,
            gather_k,
            tma_copy_k,
        ],
    }
}

/// Load module `blas` on `gpu`.
pub fn load_kernels(gpu: &dyn GpuBackend) -> Result<()> {
    gpu.load_module(&blas_module())
}

/// A workload: runs on any backend, returns the bytes it read back.
pub type Workload = fn(&dyn GpuBackend) -> Result<Vec<u8>>;

/// The built-in workloads, by name.
pub const ALL: [(&str, Workload); 5] = [
    ("single_stream", single_stream),
    ("two_streams", two_streams),
    ("capture_region", capture_region),
    ("pointer_table", pointer_table),
    ("tma", tma),
];

/// A Hopper TMA kernel: a 48 x 64 f32 matrix copied tile by tile (16 x 32 boxes) through a
/// tensor map the backend encoded. The map holds the source's device address, so a replay
/// must encode it again for wherever the source lives then.
pub fn tma(g: &dyn GpuBackend) -> Result<Vec<u8>> {
    use crate::backend::{TensorMapDesc, TensorMapDtype};
    let (rows, cols, box_rows, box_cols) = (48u32, 64u32, 16u32, 32u32);
    let bytes = (rows * cols * 4) as usize;
    let src = g.alloc(bytes)?;
    let out = g.alloc(bytes)?;
    let data: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5 - 7.0).collect();
    g.copy_h2d(&f32_bytes(&data), src)?;
    g.memset(out, 0, bytes)?;
    let desc = TensorMapDesc::tiled_2d(
        TensorMapDtype::F32,
        rows.into(),
        cols.into(),
        box_rows,
        box_cols,
    );
    let map = g.encode_tensor_map(src, &desc)?;
    let k = g.op_cache().kernel(g, "blas", "tma_copy")?;
    let s = g.default_stream();
    g.launch_typed(
        k,
        [cols / box_cols, rows / box_rows, 1],
        [128, 1, 1],
        0,
        s,
        &[
            KernelArg::Bytes(&map),
            KernelArg::Buffer(out),
            KernelArg::Bytes(&rows.to_le_bytes()),
            KernelArg::Bytes(&cols.to_le_bytes()),
            KernelArg::Bytes(&box_rows.to_le_bytes()),
            KernelArg::Bytes(&box_cols.to_le_bytes()),
        ],
    )?;
    g.synchronize(s)?;
    let mut back = vec![0u8; bytes];
    g.copy_d2h(out, &mut back)?;
    g.free(src)?;
    g.free(out)?;
    Ok(back)
}

pub use crate::backend::f32_bytes;

pub fn saxpy(
    g: &dyn GpuBackend,
    x: crate::backend::DevicePtr,
    y: crate::backend::DevicePtr,
    n: u32,
    a: f32,
    stream: u64,
) -> Result<()> {
    let k = g.op_cache().kernel(g, "blas", "saxpy")?;
    g.launch_typed(
        k,
        [n.div_ceil(256), 1, 1],
        [256, 1, 1],
        0,
        stream,
        &[
            KernelArg::Buffer(x),
            KernelArg::Buffer(y),
            KernelArg::Bytes(&n.to_le_bytes()),
            KernelArg::Bytes(&a.to_le_bytes()),
        ],
    )
}

/// One stream: upload, two kernels, read back, free.
pub fn single_stream(g: &dyn GpuBackend) -> Result<Vec<u8>> {
    let n = 64u32;
    let s = g.default_stream();
    let x = g.alloc(n as usize * 4)?;
    let y = g.alloc(n as usize * 4)?;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    g.copy_h2d(&f32_bytes(&xs), x)?;
    g.memset_async(y, 0, n as usize * 4, s)?;
    saxpy(g, x, y, n, 2.0, s)?;
    // The raw-params path: the recorder must decode these with the kernel's layout.
    let k = g.op_cache().kernel(g, "blas", "saxpy")?;
    let (mut px, mut py, mut pn, mut pa) = (x.0, y.0, n, 0.5f32);
    let mut params = [
        (&mut px as *mut u64).cast(),
        (&mut py as *mut u64).cast(),
        (&mut pn as *mut u32).cast(),
        (&mut pa as *mut f32).cast(),
    ];
    g.launch(k, [1, 1, 1], [64, 1, 1], 0, s, &mut params)?;
    let mut out = vec![0u8; n as usize * 4];
    g.copy_d2h_on_stream(y, &mut out, s)?;
    g.free(x)?;
    g.free(y)?;
    Ok(out)
}

/// Two streams joined by an event, with a pinned async readback.
pub fn two_streams(g: &dyn GpuBackend) -> Result<Vec<u8>> {
    let n = 32u32;
    let bytes = n as usize * 4;
    let producer = g.create_stream()?;
    let consumer = g.create_stream()?;
    let ready = g.create_event()?;
    let a = g.alloc(bytes)?;
    let b = g.alloc(bytes)?;
    let host = g.alloc_host_pinned(bytes)?;
    g.copy_h2d_async(&f32_bytes(&vec![1.5; n as usize]), a, producer)?;
    g.record_event(ready, producer)?;
    g.stream_wait_event(consumer, ready)?;
    g.memset_async(b, 0, bytes, consumer)?;
    saxpy(g, a, b, n, 4.0, consumer)?;
    // SAFETY: `host` is a live pinned region of `bytes` bytes from alloc_host_pinned.
    let out = unsafe { std::slice::from_raw_parts_mut(host, bytes) };
    g.copy_d2h_async(b, out, consumer)?;
    g.synchronize(consumer)?;
    let result = out.to_vec();
    g.free_host_pinned(host, bytes)?;
    g.destroy_event(ready)?;
    g.free(a)?;
    g.free(b)?;
    Ok(result)
}

/// The `two_streams` bug an engine ships: the consumer stream never waits for the producer,
/// so whether it reads the producer's output depends on timing. The producer's stream does
/// more work first (a larger saxpy), as a real producer would; the mock runs it in order and
/// hides the race, `replay --chaos` shows it.
pub fn missing_event(g: &dyn GpuBackend) -> Result<Vec<u8>> {
    let (n, big) = (32u32, 1u32 << 22);
    let bytes = n as usize * 4;
    let producer = g.create_stream()?;
    let consumer = g.create_stream()?;
    let a = g.alloc(bytes)?;
    let b = g.alloc(bytes)?;
    let (wx, wy) = (g.alloc(big as usize * 4)?, g.alloc(big as usize * 4)?);
    g.memset(a, 0, bytes)?;
    g.memset(wx, 0, big as usize * 4)?;
    g.memset(wy, 0, big as usize * 4)?;
    let ones = f32_bytes(&vec![1.0; n as usize]);
    let x = g.alloc(bytes)?;
    g.copy_h2d(&ones, x)?;
    saxpy(g, wx, wy, big, 1.0, producer)?;
    saxpy(g, x, a, n, 3.0, producer)?;
    // Missing: record an event on `producer` and wait for it on `consumer`.
    g.memset_async(b, 0, bytes, consumer)?;
    saxpy(g, a, b, n, 2.0, consumer)?;
    let mut out = vec![0u8; bytes];
    g.copy_d2h_on_stream(b, &mut out, consumer)?;
    g.synchronize(producer)?;
    for p in [a, b, wx, wy, x] {
        g.free(p)?;
    }
    Ok(out)
}

/// A captured region replayed twice as a graph.
pub fn capture_region(g: &dyn GpuBackend) -> Result<Vec<u8>> {
    let n = 16u32;
    let bytes = n as usize * 4;
    let s = g.create_stream()?;
    let x = g.alloc(bytes)?;
    let y = g.alloc(bytes)?;
    g.copy_h2d(&f32_bytes(&vec![1.0; n as usize]), x)?;
    g.memset(y, 0, bytes)?;
    g.begin_capture(s)?;
    saxpy(g, x, y, n, 1.0, s)?;
    saxpy(g, x, y, n, 1.0, s)?;
    let graph = g.end_capture(s)?;
    g.launch_graph(graph, s)?;
    g.launch_graph(graph, s)?;
    g.synchronize(s)?;
    let mut out = vec![0u8; bytes];
    g.copy_d2h(y, &mut out)?;
    g.destroy_graph(graph)?;
    g.free(x)?;
    g.free(y)?;
    Ok(out)
}

/// Floats past its 64-float output that `graph_fault`'s planted `fill` writes.
pub const GRAPH_FAULT_OVERRUN: u32 = 16;

/// A step run as a CUDA graph, as engines run decode steps, with a fault planted in one node:
/// the second of three kernels writes `GRAPH_FAULT_OVERRUN` floats past its output.
pub fn graph_fault(g: &dyn GpuBackend) -> Result<Vec<u8>> {
    graph_fault_with(g, GRAPH_FAULT_OVERRUN)
}

/// `graph_fault` with the overrun given: a large one (268435456 floats, say) runs into
/// unmapped memory on a GPU and raises an illegal address inside the graph launch; the error
/// is reported by the sync after it.
pub fn graph_fault_with(g: &dyn GpuBackend, overrun: u32) -> Result<Vec<u8>> {
    let n = 64u32;
    let bytes = n as usize * 4;
    let s = g.create_stream()?;
    let x = g.alloc(bytes)?;
    let y = g.alloc(bytes)?;
    let out = g.alloc(bytes)?;
    g.copy_h2d(&f32_bytes(&vec![1.0; n as usize]), x)?;
    g.memset(y, 0, bytes)?;
    let fill = g.op_cache().kernel(g, "blas", "fill")?;
    g.begin_capture(s)?;
    saxpy(g, x, y, n, 2.0, s)?;
    let planted = n.saturating_add(overrun);
    g.launch_typed(
        fill,
        [planted.div_ceil(256), 1, 1],
        [256, 1, 1],
        0,
        s,
        &[
            KernelArg::Buffer(out),
            KernelArg::Bytes(&planted.to_le_bytes()),
            KernelArg::Bytes(&3.0f32.to_le_bytes()),
        ],
    )?;
    saxpy(g, y, out, n, 1.0, s)?;
    let graph = g.end_capture(s)?;
    g.launch_graph(graph, s)?;
    g.synchronize(s)?;
    let mut res = vec![0u8; bytes];
    g.copy_d2h(out, &mut res)?;
    g.destroy_graph(graph)?;
    for b in [x, y, out] {
        g.free(b)?;
    }
    Ok(res)
}

/// A device buffer that holds device addresses: a table of pointers to four buffers, read
/// through by a kernel. The replay must put the four buffers back where they were.
pub fn pointer_table(g: &dyn GpuBackend) -> Result<Vec<u8>> {
    let s = g.default_stream();
    let mut bufs = Vec::new();
    for i in 0..4 {
        let b = g.alloc(64)?;
        g.copy_h2d(&f32_bytes(&[10.0 + i as f32; 16]), b)?;
        bufs.push(b);
    }
    let table = g.alloc(4 * 8)?;
    let addrs: Vec<u8> = bufs.iter().flat_map(|b| b.0.to_le_bytes()).collect();
    g.copy_h2d(&addrs, table)?;
    let out = g.alloc(16)?;
    let k = g.op_cache().kernel(g, "blas", "gather")?;
    g.launch_typed(
        k,
        [1, 1, 1],
        [32, 1, 1],
        0,
        s,
        &[
            KernelArg::Buffer(table),
            KernelArg::Buffer(out),
            KernelArg::Bytes(&4u32.to_le_bytes()),
        ],
    )?;
    let mut res = vec![0u8; 16];
    g.copy_d2h_on_stream(out, &mut res, s)?;
    for b in bufs.into_iter().chain([table, out]) {
        g.free(b)?;
    }
    Ok(res)
}
