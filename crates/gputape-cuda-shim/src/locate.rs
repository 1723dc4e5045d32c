//! Where the real CUDA driver is looked for: by the shim when it first forwards a call, and by
//! `gputape run` (which includes this file with `#[path]`, so the two search alike) before it
//! starts a program, to set `GPUTAPE_REAL_LIBCUDA` for it. Std only: it builds in both crates.
//!
//! The order: `GPUTAPE_REAL_LIBCUDA` when set (the caller's business: it is the only place then
//! looked at); else `libcuda.so.1` in each `LD_LIBRARY_PATH` directory, where the loader would
//! have found it first; then the usual install locations; then the `ldconfig -p` cache. A
//! caller skips the shim itself (`same_file`) and anything it cannot open.

use std::path::{Path, PathBuf};

/// The real driver, when the user (or `gputape run`) names it.
pub const ENV_REAL: &str = "GPUTAPE_REAL_LIBCUDA";

/// Where drivers are installed, tried after `LD_LIBRARY_PATH`.
pub const USUAL: [&str; 4] = [
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/local/cuda/compat/libcuda.so.1",
    "/usr/lib/wsl/lib/libcuda.so.1",
];

/// Every existing `libcuda.so.1` in search order (see the module docs), without duplicates;
/// `ldconfig -p` is run only if the earlier places are used up.
pub fn candidates() -> impl Iterator<Item = PathBuf> {
    let ld_path: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|d| !d.as_os_str().is_empty())
                .map(|d| d.join("libcuda.so.1"))
                .collect()
        })
        .unwrap_or_default();
    let mut seen: Vec<PathBuf> = Vec::new();
    ld_path
        .into_iter()
        .chain(USUAL.iter().map(PathBuf::from))
        .chain(std::iter::once_with(ldconfig_cache).flatten())
        .filter(move |p| {
            if !p.is_file() || seen.contains(p) {
                return false;
            }
            seen.push(p.clone());
            true
        })
}

/// The x86-64 `libcuda.so.1` entries of the loader's cache, as `ldconfig -p` lists them.
pub fn ldconfig_cache() -> Vec<PathBuf> {
    for exe in ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"] {
        let out = std::process::Command::new(exe)
            .arg("-p")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output();
        // (No `if let` chain: this file is built in edition 2021 too.)
        match out {
            Ok(out) if out.status.success() => {
                return parse_ldconfig(&String::from_utf8_lossy(&out.stdout));
            }
            _ => {}
        }
    }
    Vec::new()
}

/// `ldconfig -p`'s lines `\tlibcuda.so.1 (libc6,x86-64) => /path/libcuda.so.1`, as paths.
pub fn parse_ldconfig(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let (lhs, path) = l.split_once(" => ")?;
            let mut words = lhs.split_whitespace();
            (words.next()? == "libcuda.so.1" && lhs.contains("x86-64"))
                .then(|| PathBuf::from(path.trim()))
        })
        .collect()
}

/// Whether two paths name one file (device and inode, links followed): how the shim knows a
/// candidate is itself, under whatever name it was loaded.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}
