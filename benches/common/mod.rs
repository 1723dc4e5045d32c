//! What the gigabyte benches (`scale.rs`, `step.rs`) both measure with: medians, the bytes a
//! directory holds, and peak RSS over a stretch of work. Included by path, so it is not a bench
//! of its own.

// Each bench uses what it needs of this.
#![allow(dead_code)]

use std::path::Path;

/// The median of `v` (NaN for none).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Bytes of every file below `d`.
pub fn dir_bytes(d: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            n += if p.is_dir() {
                dir_bytes(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            };
        }
    }
    n
}

fn status_kb(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Reset the peak RSS the kernel keeps (Linux: write 5 to clear_refs), returning RSS now in
/// KB, for `peak_over`.
pub fn reset_peak() -> u64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    status_kb("VmRSS:")
}

/// Peak RSS since `reset_peak` returned `base_kb`, above it, in GB.
pub fn peak_over(base_kb: u64) -> f64 {
    status_kb("VmHWM:").saturating_sub(base_kb) as f64 / 1e6
}
