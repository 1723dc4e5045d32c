//! Host cost of a launch: a bare driver launch through cudarc's `sys` against the same kernel
//! through `CudaBackend::launch` and `launch_typed`. Lives here because the bare launch is a
//! driver call.

use super::error::check;
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
            // this backend's context, which is current.
            let r = unsafe {
                sys::cuLaunchKernel(
                    k.0 as sys::CUfunction,
                    1,
                    1,
                    1,
                    256,
                    1,
                    1,
                    0,
                    s as sys::CUstream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            Ok(check("cuLaunchKernel", r)?)
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
