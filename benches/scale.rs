//! Gigabyte-scale traces: a mid-run start over many large buffers of bf16-like data (the
//! shape of an engine's weights), then opening, summarising and restoring that trace, and a
//! second and third recording into a shared blob store.
//!
//! ```text
//! cargo bench --bench scale                       # 1 GB on the mock
//! GPUTAPE_SCALE_GB=16 GPUTAPE_SCALE_CUDA=1 cargo bench --bench scale   # on a GPU
//! ```
//!
//! GPUTAPE_SCALE_DIR says where the traces go (default: the temp dir); they are removed after.

use gputape::backend::GpuBackend;
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::Trace;
use std::path::Path;

#[path = "common/mod.rs"]
mod common;
use common::{dir_bytes, peak_over, reset_peak};
use std::time::Instant;

const BUF: usize = 256 << 20;

/// bf16 values shaped like a layer's weights (about N(0, 0.02)): random sign and mantissa,
/// exponents in a narrow band, so they compress as real weights do (a little).
fn bf16_like(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for k in 0..4 {
            let r = (x >> (16 * k)) as u16;
            let exp = 118 + (r >> 13) % 8; // 2^-9 .. 2^-2
            let w = (r & 0x8000) | (exp << 7) | (r & 0x7f);
            v.extend_from_slice(&w.to_le_bytes());
        }
    }
    v.truncate(n);
    v
}

fn gb(b: u64) -> f64 {
    b as f64 / 1e9
}

fn compression_by_kind() {
    println!("compression of one 16 MiB part by kind of data (zstd level 1, one thread)");
    println!("| data | ratio | MB/s | stored |");
    println!("|---|---:|---:|---|");
    let n = 16 << 20;
    let acts: Vec<u8> = bf16_like(7, n / 2)
        .chunks_exact(2)
        .flat_map(|c| {
            let f = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16) * 50.0;
            f.to_le_bytes()
        })
        .collect();
    let mut kv = bf16_like(9, n / 4);
    kv.resize(n, 0);
    let kinds: [(&str, Vec<u8>); 4] = [
        ("bf16 weights", bf16_like(3, n)),
        ("f32 activations", acts),
        ("KV cache, a quarter filled", kv),
        ("zeros", vec![0u8; n]),
    ];
    for (name, data) in kinds {
        let t = Instant::now();
        let z = zstd::bulk::compress(&data, 1).unwrap();
        let s = t.elapsed().as_secs_f64();
        let stored = gputape::recorder::compressed_if_it_pays(&data).is_some();
        println!(
            "| {name} | {:.3} | {:.0} | {} |",
            z.len() as f64 / data.len() as f64,
            data.len() as f64 / s / 1e6,
            if stored { "compressed" } else { "as is" }
        );
    }
    println!();
}

fn run<B: GpuBackend + 'static>(
    inner: B,
    fresh: &dyn Fn() -> Box<dyn GpuBackend>,
    total_gb: usize,
    dir: &Path,
) -> anyhow::Result<()> {
    let nbuf = (total_gb << 30) / BUF;
    let path = dir.join("scale.gtape");
    let store = dir.join("blobs");
    let rec = RecordingBackend::to_file(inner, &path, BackendDesc::new("scale"))?;
    let g: &dyn GpuBackend = &rec;
    let base = bf16_like(1, BUF);
    let mut bufs = Vec::new();
    let mut host = base.clone();
    for i in 0..nbuf {
        let p = g.alloc(BUF)?;
        // Each buffer's parts differ from every other's (or the store would keep one).
        for (k, part) in host.chunks_mut(1 << 20).enumerate() {
            part[..8].copy_from_slice(&((i * 1000 + k) as u64).to_le_bytes());
        }
        g.copy_h2d(&host, p)?;
        bufs.push(p);
    }
    drop(host);
    let small = g.alloc(4096)?;
    g.memset(small, 7, 4096)?;
    let bytes = (nbuf * BUF) as u64;
    println!(
        "{nbuf} buffers of {} MB of bf16-like data ({:.1} GB)",
        BUF >> 20,
        gb(bytes)
    );
    println!("| what | result |");
    println!("|---|---|");

    // 1. A mid-run start: the snapshot. The readback after it hashes every buffer into the
    // trace, so the replay below checks every restored byte, not just what was read back.
    rec.hash_at_syncs(true);
    let rss0 = reset_peak();
    let t = Instant::now();
    rec.start()?;
    let snap = t.elapsed().as_secs_f64();
    let snap_peak = peak_over(rss0);
    let mut back = vec![0u8; 4096];
    g.copy_d2h(small, &mut back)?;
    rec.stop()?;
    rec.hash_at_syncs(false);
    let trace_bytes = std::fs::metadata(&path)?.len();
    println!(
        "| start() snapshot | {snap:.2} s, {:.2} GB/s, +{snap_peak:.2} GB peak RSS |",
        gb(bytes) / snap
    );
    println!(
        "| trace | {:.2} GB ({:.1}% of the data) |",
        gb(trace_bytes),
        100.0 * trace_bytes as f64 / bytes as f64
    );

    // 2. Opening it, and its summary.
    let rss0 = reset_peak();
    let t = Instant::now();
    let tr = Trace::open(&path)?;
    let open_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let summary = gputape::trace::summary(&tr);
    let sum_s = t.elapsed().as_secs_f64();
    println!(
        "| Trace::open | {:.3} s, +{:.3} GB peak RSS |",
        open_s,
        peak_over(rss0)
    );
    println!(
        "| summary | {:.3} s ({} lines) |",
        sum_s,
        summary.lines().count()
    );

    // 3. Restoring it on a fresh backend (the replay is the restore and one 4 KiB readback).
    let rss0 = reset_peak();
    let target = fresh();
    let t = Instant::now();
    let replayer = Replayer::new(&tr);
    let scan = t.elapsed().as_secs_f64();
    println!(
        "| Replayer::new (scans every byte for device addresses) | {scan:.2} s, {:.2} GB/s |",
        gb(bytes) / scan
    );
    let t = Instant::now();
    let r = replayer.run(target.as_ref(), &ReplayOptions::default(), None, |_| {})?;
    let rest = t.elapsed().as_secs_f64();
    println!(
        "| replay: restore, then every buffer read back and its hash checked | {rest:.2} s, {:.2} GB/s, +{:.2} GB peak RSS, {} |",
        gb(bytes) / rest,
        peak_over(rss0),
        if r.divergence.is_none() {
            "matched"
        } else {
            "DIVERGED"
        }
    );
    drop(target);
    drop(tr);

    // 4. The same state into a shared blob store, twice: the second stores only what changed.
    rec.blob_store(&store);
    rec.start()?;
    rec.stop()?;
    let first = std::fs::metadata(dir.join("scale-2.gtape"))?.len();
    let store_bytes = dir_bytes(&store);
    // A step later: two buffers rewritten (the KV cache and activations, say).
    for p in bufs.iter().take(2) {
        g.memset(p.offset(0), 1, 1 << 20)?;
    }
    let t = Instant::now();
    rec.start()?;
    let second_s = t.elapsed().as_secs_f64();
    rec.stop()?;
    let second = std::fs::metadata(dir.join("scale-3.gtape"))?.len();
    println!(
        "| with a blob store, first step | trace {:.1} KB, store {:.2} GB |",
        first as f64 / 1e3,
        gb(store_bytes)
    );
    println!(
        "| next step, same store | trace {:.1} KB, store +{:.1} MB, snapshot {second_s:.2} s |",
        second as f64 / 1e3,
        (dir_bytes(&store) - store_bytes) as f64 / 1e6
    );
    let t2 = Trace::open(&dir.join("scale-3.gtape"))?;
    let target = fresh();
    let replayer = Replayer::new(&t2);
    let t = Instant::now();
    let r = replayer.run(target.as_ref(), &ReplayOptions::default(), None, |_| {})?;
    println!(
        "| replay from the store (restore and one 4 KiB readback) | {:.2} s, {:.2} GB/s, {} |",
        t.elapsed().as_secs_f64(),
        gb(bytes) / t.elapsed().as_secs_f64(),
        if r.divergence.is_none() {
            "matched"
        } else {
            "DIVERGED"
        }
    );
    for p in bufs {
        g.free(p)?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let total_gb: usize = std::env::var("GPUTAPE_SCALE_GB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let dir = std::env::var_os("GPUTAPE_SCALE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("gputape-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    compression_by_kind();
    let cuda = std::env::var_os("GPUTAPE_SCALE_CUDA").is_some();
    let r = if cuda {
        let make = || -> Box<dyn GpuBackend> {
            Box::new(
                gputape::cuda::CudaBackend::new(gputape::cuda::CudaConfig::from_env(0))
                    .expect("a CUDA backend"),
            )
        };
        println!("backend: cuda");
        run(make(), &make, total_gb, &dir)
    } else {
        let make = || -> Box<dyn GpuBackend> {
            Box::new(gputape::mock::MockGpuBackend::new(
                gputape::mock::MockConfig {
                    total_memory: 64 << 30,
                    ..Default::default()
                },
            ))
        };
        println!("backend: mock");
        run(make(), &make, total_gb, &dir)
    };
    let _ = std::fs::remove_dir_all(&dir);
    r
}
