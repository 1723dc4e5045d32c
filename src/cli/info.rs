//! `gputape info`: what this machine can run, asked before anything else so a script can pick
//! `--on cuda` or fall back to the mock.

use anyhow::Result;

use super::{Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// Print as JSON (schema gputape.info.v1).
    #[arg(long)]
    json: bool,
}

pub fn exec(args: Args, _ctx: &Ctx) -> Result<Exit> {
    info(args.json)?;
    Ok(Exit::Pass)
}

fn info(json: bool) -> Result<()> {
    if json {
        let cuda = match crate::cuda::probe() {
            Ok(devs) => serde_json::json!({
                "available": !devs.is_empty(),
                "devices": devs.iter().map(|d| serde_json::json!({
                    "ordinal": d.ordinal,
                    "name": d.name,
                    "sm_count": d.sm_count,
                    "total_memory": d.total_memory,
                    "free_memory": crate::cuda::device_memory(d.ordinal as usize).ok().map(|m| m.0),
                    "driver_version": d.driver_version,
                })).collect::<Vec<_>>(),
            }),
            Err(e) => serde_json::json!({"available": false, "why": e.to_string()}),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gputape.info.v1",
                "version": env!("CARGO_PKG_VERSION"),
                "backends": {"mock": {"available": true}, "cuda": cuda},
                "shim": super::run::shim_status(),
            }))?
        );
        return Ok(());
    }
    println!("gputape {}", env!("CARGO_PKG_VERSION"));
    println!("backends:");
    println!("  mock   available (CPU, driver-faithful emulation; the default)");
    match crate::cuda::probe() {
        Ok(devs) if devs.is_empty() => println!("  cuda   driver present, but no device visible"),
        Ok(devs) => {
            for d in devs {
                let free = crate::cuda::device_memory(d.ordinal as usize)
                    .map(|(f, _)| format!("{:.1} GiB free of ", f as f64 / (1u64 << 30) as f64))
                    .unwrap_or_default();
                println!(
                    "  cuda   device {}: {} ({} SMs, {free}{:.1} GiB, driver {}.{})",
                    d.ordinal,
                    d.name,
                    d.sm_count,
                    d.total_memory as f64 / (1u64 << 30) as f64,
                    d.driver_version / 1000,
                    (d.driver_version % 1000) / 10
                );
            }
        }
        Err(e) => println!("  cuda   unavailable: {e}"),
    }
    println!("driver shim (gputape run): {}", super::run::shim_status());
    Ok(())
}
