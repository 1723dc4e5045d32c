//! Turns `src/entry_points.txt` (checked in; `scripts/gen-shim-entry-points.sh` makes it) into
//! `$OUT_DIR/entry_points.rs`: the count, the names (as `&str` and as C strings for `dlsym`) and
//! one `trampolines!` line per entry point, which `src/imp/table.rs` expands into the exported
//! forwarders. On x86_64 Linux the shared object is also given the driver's soname,
//! `libcuda.so.1`, so a program that asks the loader for `libcuda.so.1` after the shim was
//! preloaded gets the shim.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let list = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap())
        .join("src")
        .join("entry_points.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(&list).expect("src/entry_points.txt is readable");
    let mut names: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for n in &names {
        assert!(
            n.starts_with("cu") && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "entry_points.txt: {n:?} is not a driver entry point's name"
        );
    }
    // Sorted by bytes, so the shim finds a name by binary search.
    names.sort_unstable();
    names.dedup();

    let mut out = String::new();
    writeln!(out, "/// How many entry points the shim exports.").unwrap();
    writeln!(out, "pub const N: usize = {};", names.len()).unwrap();
    writeln!(out, "/// Their names, sorted by bytes.").unwrap();
    writeln!(out, "pub static NAMES: [&str; N] = [").unwrap();
    for n in &names {
        writeln!(out, "    {n:?},").unwrap();
    }
    writeln!(out, "];").unwrap();
    writeln!(out, "/// The same names as C strings, for `dlsym`.").unwrap();
    writeln!(out, "pub static CNAMES: [&core::ffi::CStr; N] = [").unwrap();
    for n in &names {
        writeln!(out, "    c{n:?},").unwrap();
    }
    writeln!(out, "];").unwrap();
    writeln!(out, "/// The names again, for `entry` at compile time.").unwrap();
    writeln!(out, "const NAME_LIST: [&str; N] = [").unwrap();
    for n in &names {
        writeln!(out, "    {n:?},").unwrap();
    }
    writeln!(out, "];").unwrap();
    writeln!(out, "trampolines! {{").unwrap();
    for (i, n) in names.iter().enumerate() {
        writeln!(out, "    {i} {n},").unwrap();
    }
    writeln!(out, "}}").unwrap();
    let dst = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("entry_points.rs");
    std::fs::write(dst, out).unwrap();

    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if os == "linux" && arch == "x86_64" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    }
}
