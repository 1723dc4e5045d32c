//! Your engine's own `gputape`: the whole command line, with your kernels loaded into every
//! backend it opens.
//!
//! Plain `gputape` knows only its own kernels, so on the mock it skips an engine's kernels as
//! opaque (their launches do nothing, and readbacks that depend on them go unchecked). Built
//! with the engine's modules, the same verbs run them: their CPU bodies on the mock, their CUDA
//! C on a GPU.
//!
//! ```text
//! cargo run --example engine_tape -- replay mine.gtape
//! cargo run --example engine_tape -- trim mine.gtape --range 40.. -o step.gtape
//! ```
//!
//! In an engine this is `src/bin/myengine-tape.rs`, with `module()` the engine's own.

use gputape::backend::{HostBody, KernelDesc, ModuleDesc, ParamAccess, ParamInfo};
use std::sync::Arc;

/// The CUDA C of the engine's module: what CUDA compiles, and what a trace embeds.
const SOURCE: &str = r#"
extern "C" __global__ void scale(float* x, unsigned n, float a) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"#;

/// Module `myengine`: one kernel, `scale(x, n, a)` (x *= a), with its parameters (which
/// pointer is read and written) and a CPU body doing the CUDA code's arithmetic.
pub fn module() -> ModuleDesc {
    let scale: HostBody = Arc::new(|ctx| {
        let x = ctx.ptr(0)?;
        let n = ctx.u32(1)? as usize;
        let a = ctx.f32(2)?;
        let xs: Vec<f32> = ctx.read_f32(x, n)?.into_iter().map(|v| v * a).collect();
        ctx.write_f32(x, &xs)
    });
    let params = ParamInfo::packed(&[
        (8, ParamAccess::ReadWrite),
        (4, ParamAccess::Value),
        (4, ParamAccess::Value),
    ]);
    ModuleDesc {
        name: "myengine".into(),
        source: Some(SOURCE.to_string()),
        kernels: vec![KernelDesc::new("scale", params, Some(scale))],
    }
}

fn main() -> std::process::ExitCode {
    gputape::cli::main_with(&[module()])
}
