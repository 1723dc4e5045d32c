//! Host cost of a launch: a bare driver launch (`driver::launch_kernel`) against the same kernel
//! through `CudaBackend::launch` and `launch_typed`. Lives here because the bare launch is a
//! driver call.

use super::driver;
use super::CudaBackend;
use crate::backend::{DevicePtr, GpuBackend, KernelArg};
use anyhow::Result;
use cudarc::driver::sys;
use std::time::Instant;

/// Median host nanoseconds per launch of each variant.
#[derive(Clone, Debug)]
pub struct LaunchBench {
    pub bare_ns: f64,
    pub backend_ns: f64,
    pub typed_ns: f64,
    pub rounds: usize,
    pub per_round: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// Launch `saxpy(x, y, n, a)` (from module `blas`, which must be loaded) in interleaved rounds.
pub fn launch_overhead(gpu: &CudaBackend, rounds: usize, per_round: usize) -> Result<LaunchBench> {
    let k = gpu.kernel("blas", "saxpy")?;
    let s = gpu.default_stream();
    let n = 256u32;
    let x = gpu.alloc(n as usize * 4)?;
    let y = gpu.alloc(n as usize * 4)?;
    let (mut px, mut py, mut pn, mut pa) = (x.0, y.0, n, 1.0f32);
    let mut params = [
        (&mut px as *mut u64).cast::<std::ffi::c_void>(),
        (&mut py as *mut u64).cast(),
        (&mut pn as *mut u32).cast(),
        (&mut pa as *mut f32).cast(),
    ];
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let t = Instant::now();
        for _ in 0..per_round {
            f()?;
        }
        let ns = t.elapsed().as_nanos() as f64 / per_round as f64;
        gpu.synchronize(s)?;
        Ok(ns)
    };
    let (mut bare, mut backend, mut typed) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        bare.push(time(&mut || {
            // SAFETY: `k` is a CUfunction of the loaded `blas` module with this 4-parameter
            // signature; `params` points at live locals of the right sizes; `s` is a stream of
            // this backend's context, which is current; `x` and `y` are its `n`-float buffers.
            let r = unsafe {
                driver::launch_kernel(
                    k.0 as sys::CUfunction,
                    [1, 1, 1],
                    [256, 1, 1],
                    0,
                    s as sys::CUstream,
                    &mut params,
                )
            };
            Ok(r?)
        })?);
        backend.push(time(&mut || {
            gpu.launch(k, [1, 1, 1], [256, 1, 1], 0, s, &mut params)
        })?);
        typed.push(time(&mut || {
            gpu.launch_typed(
                k,
                [1, 1, 1],
                [256, 1, 1],
                0,
                s,
                &[
                    KernelArg::Buffer(DevicePtr(px)),
                    KernelArg::Buffer(DevicePtr(py)),
                    KernelArg::Bytes(&n.to_le_bytes()),
                    KernelArg::Bytes(&1.0f32.to_le_bytes()),
                ],
            )
        })?);
    }
    gpu.free(x)?;
    gpu.free(y)?;
    Ok(LaunchBench {
        bare_ns: median(bare),
        backend_ns: median(backend),
        typed_ns: median(typed),
        rounds,
        per_round,
    })
}

/// Host nanoseconds per `launch_typed` of `blas::<kernel>` (saxpy's signature) on `a` and on
/// `b`, medians of interleaved rounds. With a recorder (recording, around its own
/// `CudaBackend`) as `b`, the recorder's overhead on the real driver rather than on the mock;
/// with a backend that launches with programmatic dependent launch, that launch's host cost. No
/// FFI here; it sits beside `launch_overhead` so the tables come from one run.
pub fn launch_pair(
    a: &dyn GpuBackend,
    b: &dyn GpuBackend,
    kernel: &str,
    rounds: usize,
    per_round: usize,
) -> Result<(f64, f64)> {
    struct Saxpy {
        k: crate::backend::KernelHandle,
        s: u64,
        x: DevicePtr,
        y: DevicePtr,
    }
    let n = 256u32;
    let setup = |g: &dyn GpuBackend| -> Result<Saxpy> {
        Ok(Saxpy {
            k: g.kernel("blas", kernel)?,
            s: g.default_stream(),
            x: g.alloc(n as usize * 4)?,
            y: g.alloc(n as usize * 4)?,
        })
    };
    let time = |g: &dyn GpuBackend, l: &Saxpy| -> Result<f64> {
        let t = Instant::now();
        for _ in 0..per_round {
            g.launch_typed(
                l.k,
                [1, 1, 1],
                [256, 1, 1],
                0,
                l.s,
                &[
                    KernelArg::Buffer(l.x),
                    KernelArg::Buffer(l.y),
                    KernelArg::Bytes(&n.to_le_bytes()),
                    KernelArg::Bytes(&1.0f32.to_le_bytes()),
                ],
            )?;
        }
        let ns = t.elapsed().as_nanos() as f64 / per_round as f64;
        g.synchronize(l.s)?;
        Ok(ns)
    };
    let (p, r) = (setup(a)?, setup(b)?);
    let (mut pv, mut rv) = (vec![], vec![]);
    for _ in 0..rounds {
        pv.push(time(a, &p)?);
        rv.push(time(b, &r)?);
    }
    for (g, l) in [(a, p), (b, r)] {
        g.free(l.x)?;
        g.free(l.y)?;
    }
    Ok((median(pv), median(rv)))
}

/// Microseconds per node of a CUDA graph that is one chain of `nodes` launches of an empty
/// kernel (`blas::noop_pdl`), launched and synchronised, median of `rounds`: the floor under
/// any graph replay's per-node cost on this machine. On a backend with `pdl` on, the chain's
/// edges are programmatic. No FFI here: capture goes through the trait.
pub fn graph_chain_us_per_node(gpu: &dyn GpuBackend, nodes: usize, rounds: usize) -> Result<f64> {
    let k = gpu.kernel("blas", "noop_pdl")?;
    let s = gpu.create_stream()?;
    gpu.begin_capture(s)?;
    for _ in 0..nodes {
        if let Err(e) = gpu.launch_typed(k, [1, 1, 1], [32, 1, 1], 0, s, &[]) {
            gpu.abort_capture_if_active(s);
            return Err(e);
        }
    }
    let g = gpu.end_capture(s)?;
    let mut v = Vec::with_capacity(rounds);
    gpu.launch_graph(g, s)?; // the first launch uploads the graph
    gpu.synchronize(s)?;
    for _ in 0..rounds {
        let t = Instant::now();
        gpu.launch_graph(g, s)?;
        gpu.synchronize(s)?;
        v.push(t.elapsed().as_secs_f64() * 1e6 / nodes as f64);
    }
    gpu.destroy_graph(g)?;
    Ok(median(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain graph goes through the trait, so the mock's emulated capture runs it: every
    /// node is captured and the graph launches and is destroyed.
    #[test]
    fn the_chain_graph_captures_and_launches_on_the_mock() {
        let m = crate::mock::MockGpuBackend::default();
        crate::workloads::load_kernels(&m).expect("load module blas");
        let us = graph_chain_us_per_node(&m, 37, 3).unwrap();
        assert!(us.is_finite() && us > 0.0, "{us}");
        // A kernel the mock does not know fails the capture cleanly.
        let k = graph_chain_us_per_node(&crate::mock::MockGpuBackend::default(), 3, 1);
        assert!(k.is_err());
    }
}
