//! `gputape run`: unmodified programs (C, compiled at test time) run with gputape's driver shim
//! in front of a fake driver (`crates/gputape-cuda-shim/tests/support/c/`): the table of the
//! calls they made, every process summed, and the command's exit status relayed.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

#[path = "../crates/gputape-cuda-shim/tests/support/mod.rs"]
mod support;

use std::process::{Command, Output};

/// `gputape run ARGS` with the fake driver as the real one.
fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gputape"))
        .arg("run")
        .args(args)
        .env("GPUTAPE_REAL_LIBCUDA", support::fake_driver())
        .env_remove("GPUTAPE_SHIM_DIR")
        .env_remove("GPUTAPE_SHIM_COUNTS")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn counts(p: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn run_counts_the_driver_calls_of_a_program_that_loads_libcuda_by_name() {
    let d = support::scratch("run-dlopen");
    let prog = support::dlopen_program(&d);
    let json = d.join("counts.json");
    let o = run(&[
        "--counts".as_ref(),
        json.as_ref(),
        "--".as_ref(),
        prog.as_ref(),
        "7".as_ref(),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(7), "{out}{err}");
    // Forwarded: the program got the driver's answer.
    assert!(
        out.contains("cuDriverGetVersion -> 0, version 12345"),
        "{out}{err}"
    );
    assert!(
        err.lines().any(|l| l.trim() == "1  cuDriverGetVersion"),
        "{err}"
    );
    assert!(err.contains("exited with status 7"), "{err}");
    assert!(err.contains("no trace was recorded"), "{err}");
    let v = counts(&json);
    assert_eq!(v["schema"], "gputape.shim-counts.v1");
    assert_eq!(v["calls"]["cuDriverGetVersion"], 1);
    assert_eq!(v["calls"].as_object().unwrap().len(), 1);
    assert_eq!(v["processes"].as_array().unwrap().len(), 1);
    assert_eq!(v["exit_status"], 7);
    assert_eq!(v["recorded"], false);
    assert_eq!(v["drivers"][0], support::fake_driver().to_str().unwrap());
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn run_sums_every_process_and_covers_programs_linked_against_libcuda() {
    let d = support::scratch("run-linked");
    let prog = support::dlopen_program(&d);
    let linked = support::linked_program(&d);
    let json = d.join("counts.json");
    // The shell loads the shim too (LD_PRELOAD) but calls nothing: no line of its own.
    let script = format!("{} && {} && exit 3", prog.display(), linked.display());
    let o = run(&[
        "--counts".as_ref(),
        json.as_ref(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        script.as_ref(),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(3), "{out}{err}");
    assert!(
        out.contains("linked: cuInit -> 0, cuDriverGetVersion -> 0, version 12345"),
        "{out}{err}"
    );
    assert!(err.contains("in 2 processes"), "{err}");
    let v = counts(&json);
    assert_eq!(v["calls"]["cuDriverGetVersion"], 2);
    assert_eq!(v["calls"]["cuInit"], 1);
    assert_eq!(v["processes"].as_array().unwrap().len(), 2);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn run_refuses_a_missing_shim_or_command_and_says_it_does_not_record_yet() {
    let o = Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(["run", "--", "true"])
        .env("GPUTAPE_SHIM_DIR", "/nonexistent/gputape-shim")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("holds no libcuda.so.1"),
        "{}",
        text(&o.stderr)
    );
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = run(&["--".as_ref(), "/nonexistent/program".as_ref()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("cannot start"),
        "{}",
        text(&o.stderr)
    );
    let o = run(&["--help".as_ref()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        text(&o.stdout).contains("No trace is recorded"),
        "{}",
        text(&o.stdout)
    );
}
