//! Installing gputape and learning it: the wheel (`scripts/wheel.py`) installs into a fresh
//! virtual environment and its `gputape` runs a program under the shim built into it; the
//! book's generated reference pages match the code; every environment variable the source
//! reads is in the one table; the book's pages and links resolve.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

#[path = "../crates/gputape-cuda-shim/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The wheel made from this build's binary, installed with pip into a new virtual environment
/// (nothing from the network), runs from that environment's bin/: `info` names the shim built
/// into it, and `run` records a program's calls through that shim with only the real driver's
/// location set, as `cargo install` users and `pip install` users both get it.
#[test]
fn the_wheel_installs_into_a_fresh_environment_and_runs_a_program_from_there() {
    let Some(python) = ["python3", "python"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import sys, venv; assert sys.version_info >= (3, 9)"])
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        eprintln!("SKIPPED: no Python 3.9+ with venv on PATH to install a wheel into");
        return;
    };
    let d = support::scratch("install-wheel");
    let dist = d.join("dist");
    let mut wheel = Command::new(python);
    wheel
        .arg(root().join("scripts/wheel.py"))
        .arg(env!("CARGO_BIN_EXE_gputape"))
        .arg("--out")
        .arg(&dist);
    if Command::new("strip").arg("--version").output().is_ok() {
        wheel.arg("--strip");
    }
    let o = wheel.output().unwrap();
    assert!(o.status.success(), "wheel.py: {}", text(&o.stderr));
    let whl = PathBuf::from(text(&o.stdout).trim());
    let name = whl.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("gputape-") && name.contains("-py3-none-manylinux_2_"),
        "{name}"
    );

    let venv = d.join("venv");
    let o = Command::new(python)
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(o.status.success(), "venv: {}", text(&o.stderr));
    let o = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "install", "-q", "--no-index", "--no-deps"])
        .arg(&whl)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "pip: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let exe = venv.join("bin/gputape");
    assert!(exe.is_file(), "pip put no gputape in {}", venv.display());

    installed_binary_works(&exe, &d);
    let _ = std::fs::remove_dir_all(d);
}

/// `exe`, wherever it was installed, with no gputape environment and an empty cache: `info`
/// names the shim built into it, and `run` records a program's calls through that shim with
/// only the real driver's location set (the tests' fake driver).
fn installed_binary_works(exe: &Path, d: &Path) {
    let cache = d.join("cache");
    let clean = |c: &mut Command| {
        c.env("XDG_CACHE_HOME", &cache)
            .env_remove("GPUTAPE_SHIM_DIR")
            .env_remove("GPUTAPE_SHIM_COUNTS")
            .env_remove("LD_PRELOAD");
    };
    let mut info = Command::new(exe);
    info.arg("info");
    clean(&mut info);
    let o = info.output().unwrap();
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(out.contains("built into this binary"), "{out}");

    let prog = support::records_program(d);
    let counts = d.join("counts.json");
    let mut run = Command::new(exe);
    run.args(["run", "--counts"])
        .arg(&counts)
        .arg("--")
        .arg(&prog)
        .env("GPUTAPE_REAL_LIBCUDA", support::fake_driver());
    clean(&mut run);
    let o = run.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let c: serde_json::Value = serde_json::from_slice(&std::fs::read(&counts).unwrap()).unwrap();
    assert!(c["calls"]["cuInit"].as_u64().unwrap_or(0) >= 1, "{c}");
}

/// `cargo install --path .` (the dev profile, as CI can afford; into the build's own target
/// directory, so nothing is compiled twice) puts a `gputape` in the install root's `bin/`
/// that works from there with no environment: the shim is inside it.
#[test]
fn cargo_install_gives_a_gputape_that_runs_with_no_environment() {
    let d = support::scratch("install-cargo");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let o = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "install",
            "--debug",
            "--offline",
            "--quiet",
            "--no-track",
            "--path",
        ])
        .arg(root())
        .arg("--root")
        .arg(d.join("root"))
        .arg("--target-dir")
        .arg(&target)
        .args(["--bin", "gputape"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cargo install: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let exe = d.join("root/bin/gputape");
    assert!(
        exe.is_file(),
        "cargo install put no gputape in {}",
        d.display()
    );
    installed_binary_works(&exe, &d);
    let _ = std::fs::remove_dir_all(d);
}

/// `docs/book/src/reference/` is what `gputape reference` makes from the code: a flag, a
/// verb or an environment variable added without regenerating it fails here.
#[test]
fn the_book_s_reference_pages_match_the_code() {
    let o = Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(["reference", "--check"])
        .arg(root().join("docs/book/src/reference"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let commands =
        std::fs::read_to_string(root().join("docs/book/src/reference/commands.md")).unwrap();
    // The page is the command line's: each verb `--help` lists has a section.
    for verb in ["replay", "run", "minimize", "analyze", "show", "dump"] {
        assert!(
            commands.contains(&format!("## `gputape {verb}`")),
            "{verb} has no section"
        );
    }
}

/// Every `GPUTAPE_*` name gputape's own source (the binary's and the shim's) reads or prints
/// is a row of `gputape_shimlog::env::VARS`, and every row is read somewhere.
#[test]
fn every_environment_variable_in_the_source_is_in_the_table() {
    let mut seen = std::collections::BTreeSet::new();
    let mut dirs = vec![root().join("src")];
    for c in std::fs::read_dir(root().join("crates")).unwrap() {
        dirs.push(c.unwrap().path().join("src"));
    }
    let mut files = Vec::new();
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("env.rs") {
                files.push(p);
            }
        }
    }
    for f in &files {
        let s = std::fs::read_to_string(f).unwrap();
        let mut rest = s.as_str();
        while let Some(i) = rest.find("GPUTAPE_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // `GPUTAPE_` alone, or a name built at run time (`GPUTAPE_{}`), is no variable.
            if name.len() > "GPUTAPE_".len() && !name.ends_with('_') {
                seen.insert(name.clone());
            }
            rest = &rest[i + name.len().max(1)..];
        }
    }
    let missing: Vec<_> = seen
        .iter()
        .filter(|n| gputape_shimlog::env::find(n).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "read by the source but not in gputape_shimlog::env::VARS: {missing:?}"
    );
    let unread: Vec<_> = gputape_shimlog::env::VARS
        .iter()
        .filter(|v| !seen.contains(v.name))
        .map(|v| v.name)
        .collect();
    assert!(
        unread.is_empty(),
        "in the table but read nowhere: {unread:?}"
    );
}

/// The book's table of contents names pages that exist, and every relative link in a page
/// leads to a file of the repository.
#[test]
fn the_book_s_pages_and_links_resolve() {
    let src = root().join("docs/book/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let mut pages = vec![src.join("SUMMARY.md")];
    for target in links(&summary) {
        let p = src.join(&target);
        assert!(
            p.is_file(),
            "SUMMARY.md lists {target}, which does not exist"
        );
        pages.push(p);
    }
    assert!(
        pages.len() > 5,
        "SUMMARY.md lists {} pages",
        pages.len() - 1
    );
    for page in pages.iter().chain([&root().join("README.md")]) {
        let text = std::fs::read_to_string(page).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let path = target.split('#').next().unwrap();
            let p = page.parent().unwrap().join(path);
            assert!(
                p.exists(),
                "{} links to {target}, which does not exist",
                page.display()
            );
        }
    }
}

/// The trace-format page describes every kind of frame the code writes: a variant added to
/// `Frame` without a line in the page fails here, naming it.
#[test]
fn the_trace_format_page_names_every_frame_kind() {
    let code = std::fs::read_to_string(root().join("src/trace/frame.rs")).unwrap();
    let body = code
        .split("pub enum Frame {")
        .nth(1)
        .and_then(|rest| rest.split("\n}").next())
        .expect("src/trace/frame.rs declares `pub enum Frame`");
    let kinds: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            l.split(|c: char| !c.is_ascii_alphanumeric())
                .next()
                .unwrap()
        })
        .collect();
    assert!(
        kinds.len() > 20,
        "read {} frame kinds: {kinds:?}",
        kinds.len()
    );
    let page = std::fs::read_to_string(root().join("docs/book/src/trace-format.md")).unwrap();
    let missing: Vec<&&str> = kinds
        .iter()
        .filter(|k| !page.contains(&format!("Frame::{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "trace-format.md does not describe {missing:?}"
    );
}

/// The targets of a markdown page's inline links, `[text](target)`, outside code.
fn links(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code spans hold no links.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            if !target.is_empty() {
                out.push(target.split_whitespace().next().unwrap().to_string());
            }
            rest = &after[end..];
        }
    }
    out
}
