//! `gputape bench-launch`: what a launch costs on the host through the CUDA backend, through
//! a recording recorder and with programmatic dependent launch, measured on the machine at
//! hand so the published numbers can be checked (and re-measured) on any GPU.

use anyhow::Result;

use super::{Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// Rounds; each variant's median over rounds is reported.
    #[arg(long, default_value_t = 31)]
    rounds: usize,
    /// Launches per round.
    #[arg(long, default_value_t = 2000)]
    per_round: usize,
}

pub fn exec(a: Args, _ctx: &Ctx) -> Result<Exit> {
    bench_launch(a.rounds, a.per_round)?;
    Ok(Exit::Pass)
}

/// `bench-launch` measures the CUDA backend itself, so it builds one directly.
fn cuda_blas() -> Result<crate::cuda::CudaBackend> {
    let g = crate::cuda::CudaBackend::new(crate::cuda::CudaConfig::from_env(0))?;
    crate::workloads::load_kernels(&g)?;
    Ok(g)
}

fn bench_launch(rounds: usize, per_round: usize) -> Result<()> {
    let g = cuda_blas()?;
    let b = crate::cuda::bench::launch_overhead(&g, rounds, per_round)?;
    println!(
        "launch host cost, saxpy (4 args), median of {} rounds x {} launches",
        b.rounds, b.per_round
    );
    println!("| variant | ns/launch | over bare |");
    println!("|---|---:|---:|");
    println!(
        "| bare cuLaunchKernel (cudarc sys) | {:.0} | - |",
        b.bare_ns
    );
    println!(
        "| CudaBackend::launch | {:.0} | {:+.0} |",
        b.backend_ns,
        b.backend_ns - b.bare_ns
    );
    println!(
        "| CudaBackend::launch_typed | {:.0} | {:+.0} |",
        b.typed_ns,
        b.typed_ns - b.bare_ns
    );

    // The same launch through a recorder that is recording (into a file in the temp dir).
    let path = std::env::temp_dir().join(format!("gputape-bench-{}.gtape", std::process::id()));
    let desc = crate::recorder::BackendDesc::new("cuda");
    let rec = crate::recorder::RecordingBackend::to_file(cuda_blas()?, &path, desc)?;
    rec.start()?;
    let (plain, recorded) = crate::cuda::bench::launch_pair(&g, &rec, "saxpy", rounds, per_round)?;
    let stats = rec.stop()?;
    std::fs::remove_file(&path).ok();
    println!();
    println!(
        "recorder overhead on the driver, saxpy launch_typed (4 args), median of {rounds} rounds x {per_round}"
    );
    println!("| variant | ns/launch | over plain |");
    println!("|---|---:|---:|");
    println!("| CudaBackend::launch_typed | {plain:.0} | - |");
    println!(
        "| RecordingBackend<CudaBackend>, recording | {recorded:.0} | {:+.0} |",
        recorded - plain
    );
    println!("({} calls, {} bytes recorded)", stats.calls, stats.bytes);

    // A kernel written for programmatic dependent launch, launched the ordinary way and with
    // it (cuLaunchKernelEx): what PDL costs or saves on the host.
    let backend = |pdl: bool| -> Result<crate::cuda::CudaBackend> {
        let mut cfg = crate::cuda::CudaConfig::from_env(0);
        cfg.pdl = pdl;
        let g = crate::cuda::CudaBackend::new(cfg)?;
        crate::workloads::load_kernels(&g)?;
        Ok(g)
    };
    let (plain_g, pdl_g) = (backend(false)?, backend(true)?);
    let (ordinary, programmatic) =
        crate::cuda::bench::launch_pair(&plain_g, &pdl_g, "saxpy_pdl", rounds, per_round)?;
    println!();
    println!(
        "programmatic dependent launch, saxpy_pdl launch_typed (4 args), median of {rounds} rounds x {per_round}"
    );
    println!("| variant | ns/launch | over ordinary |");
    println!("|---|---:|---:|");
    println!("| ordinary (cuLaunchKernel) | {ordinary:.0} | - |");
    println!(
        "| PDL (cuLaunchKernelEx, programmatic serialization) | {programmatic:.0} | {:+.0} |",
        programmatic - ordinary
    );

    // The floor under graph replay: a chain of empty kernels as one graph, per node.
    println!();
    println!(
        "graph of a chain of empty kernels (noop_pdl), us per node, median of {rounds} launches"
    );
    println!("| nodes | ordinary edges | programmatic edges (PDL) |");
    println!("|---:|---:|---:|");
    for nodes in [37, 1000] {
        let a = crate::cuda::bench::graph_chain_us_per_node(&plain_g, nodes, rounds)?;
        let b = crate::cuda::bench::graph_chain_us_per_node(&pdl_g, nodes, rounds)?;
        println!("| {nodes} | {a:.2} | {b:.2} |");
    }
    Ok(())
}
