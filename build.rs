//! Builds gputape's CUDA driver shim (`crates/gputape-cuda-shim`) with a nested cargo and
//! leaves it in `OUT_DIR` for `src/cli/run.rs` to include: `cargo install` copies binaries
//! only, so a `gputape run` that found its shim only beside the binary or in `target/` could
//! not run from an installed binary. The shim is built in the outer build's profile
//! (stripped: it is loaded into every recorded program), into a target directory of its own,
//! with none of the outer build's flags or wrappers (clippy's, a sanitizer's), which are for
//! the outer build. A shim that will not build leaves an empty file and a warning: `gputape run`
//! then needs `GPUTAPE_SHIM_DIR` or a shim beside the binary, and says so.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    for p in [
        "crates/gputape-cuda-shim/src",
        "crates/gputape-cuda-shim/build.rs",
        "crates/gputape-cuda-shim/Cargo.toml",
        "crates/gputape-shimlog/src",
    ] {
        println!("cargo:rerun-if-changed={p}");
    }
    println!("cargo:rerun-if-env-changed=GPUTAPE_NO_EMBEDDED_SHIM");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dst = out.join("libgputape_cuda_shim.so");
    let linux_x86 = env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64");
    if !linux_x86 || env::var_os("GPUTAPE_NO_EMBEDDED_SHIM").is_some() {
        std::fs::write(&dst, b"").expect("write an empty shim");
        return;
    }
    match build_shim(&out) {
        Ok(built) => {
            std::fs::copy(&built, &dst).expect("copy the shim into OUT_DIR");
        }
        Err(e) => {
            println!("cargo:warning=gputape's driver shim was not built into the binary: {e}");
            std::fs::write(&dst, b"").expect("write an empty shim");
        }
    }
}

/// The nested build; the built library's path.
fn build_shim(out: &std::path::Path) -> Result<PathBuf, String> {
    let release = env::var("PROFILE").as_deref() == Ok("release");
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").ok_or("no CARGO_MANIFEST_DIR")?);
    let target = out.join("shim-target");
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args([
        "build",
        "--lib",
        "-p",
        "gputape-cuda-shim",
        "--manifest-path",
    ])
    .arg(root.join("Cargo.toml"))
    .arg("--target-dir")
    .arg(&target);
    if release {
        cmd.arg("--release");
    }
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CLIPPY_CONF_DIR",
        "CARGO_TARGET_DIR",
    ] {
        cmd.env_remove(var);
    }
    for profile in ["RELEASE", "DEV"] {
        cmd.env(format!("CARGO_PROFILE_{profile}_DEBUG"), "0")
            .env(format!("CARGO_PROFILE_{profile}_STRIP"), "true");
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("the nested cargo build exited with {status}"));
    }
    let built = target
        .join(if release { "release" } else { "debug" })
        .join("libgputape_cuda_shim.so");
    if built.is_file() {
        Ok(built)
    } else {
        Err(format!("{} was not made", built.display()))
    }
}
