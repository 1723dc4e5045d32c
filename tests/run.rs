//! `gputape run`: unmodified programs (C, compiled at test time) run with gputape's driver shim
//! in front of a fake driver (`crates/gputape-cuda-shim/tests/support/c/`): the table of the
//! calls they made, every process summed, and the command's exit status relayed; with `-o`,
//! their calls recorded into a trace that `show`, `analyze` and `replay` read.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

#[path = "../crates/gputape-cuda-shim/tests/support/mod.rs"]
mod support;

use std::process::{Command, Output};

/// `gputape run ARGS` with the fake driver as the real one.
fn run(args: &[&std::ffi::OsStr]) -> Output {
    run_with(args, &[])
}

/// `run`, with `envs` set for gputape and the command.
fn run_with(args: &[&std::ffi::OsStr], envs: &[(&str, &str)]) -> Output {
    run_command(args, envs).output().unwrap()
}

/// `gputape run ARGS` with the fake driver as the real one and `envs` set, not started.
fn run_command(args: &[&std::ffi::OsStr], envs: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gputape"));
    c.arg("run")
        .args(args)
        .env("GPUTAPE_REAL_LIBCUDA", support::fake_driver())
        .envs(envs.iter().copied())
        .env_remove("GPUTAPE_SHIM_DIR")
        .env_remove("GPUTAPE_SHIM_COUNTS")
        .env_remove("GPUTAPE_SHIM_FLIGHT_AT_EXIT")
        .env_remove("LD_PRELOAD");
    c
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
    assert!(err.contains("No trace was recorded"), "{err}");
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
fn run_refuses_a_missing_shim_or_command_and_its_help_says_what_it_records() {
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
        text(&o.stdout).contains("With -o, the calls are also recorded into a trace"),
        "{}",
        text(&o.stdout)
    );
}

/// `gputape VERB ARGS` (no shim involved).
/// `shown` with the parts of native sites that depend on where the test ran and which compiler
/// built the program (the scratch directory, offsets) written as `<dir>` and `+0x…`, and the
/// trace's format and frame count (this build's, not the program's) masked.
fn native_sites(shown: &str, dir: &std::path::Path) -> String {
    let shown = shown.replace(&dir.display().to_string(), "<dir>");
    let shown = gputape::testing::mask_format(&shown);
    let shown = match shown.find(" stream(s) used, ") {
        Some(at) => {
            let (head, tail) = shown.split_at(at + " stream(s) used, ".len());
            let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
            format!("{head}_{}", &tail[digits..])
        }
        None => shown,
    };
    let mut out = String::with_capacity(shown.len());
    let mut rest = shown.as_str();
    while let Some(at) = rest.find("+0x") {
        out.push_str(&rest[..at + 3]);
        rest = rest[at + 3..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        out.push('…');
    }
    out.push_str(rest);
    out
}

fn gputape(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(args)
        .output()
        .unwrap()
}

/// `prog` recorded with `run -o` into `trace` (which must exit 0): its stdout and stderr.
fn record_ok(prog: &std::path::Path, trace: &std::path::Path) -> (String, String) {
    let o = run(&["-o".as_ref(), trace.as_ref(), "--".as_ref(), prog.as_ref()]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    (out, err)
}

/// `show --json` of `trace`.
fn show_json(trace: &std::path::Path) -> serde_json::Value {
    let o = gputape(&["show".as_ref(), "--json".as_ref(), trace.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The `show --json` calls of `trace`, each as `show` writes it.
fn call_texts(trace: &std::path::Path) -> Vec<String> {
    show_json(trace)["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call"].as_str().unwrap().to_string())
        .collect()
}

/// `calls`, each without its result, begin with `want`'s texts, in order.
fn assert_calls_begin(calls: &[String], want: &[&str]) {
    let heads: Vec<&str> = calls
        .iter()
        .map(|c| c.split(" -> ").next().unwrap_or_default())
        .collect();
    assert!(heads.len() >= want.len(), "{heads:?}");
    for (c, w) in heads.iter().zip(want) {
        assert!(c.starts_with(w), "{c} is not {w}: {heads:?}");
    }
}

/// `trace` replays on the mock with no divergence and `matched` ("2 of 2") read backs matching.
fn replays_on_mock_matching(trace: &std::path::Path, matched: &str) {
    let out = replay_on_mock_ok(trace);
    assert!(
        out.contains(&format!("{matched} match")) && out.contains("no divergence"),
        "{out}"
    );
}

/// `stream_values.c`'s and `stream_batch.c`'s calls, the same whether their values were
/// written and waited for one by one or in batches: uploads each followed by an event record,
/// a wait for the first write's event, the copy it held back, the wait no write met.
fn assert_value_ops(trace: &std::path::Path) {
    let calls: Vec<String> = call_texts(trace)
        .into_iter()
        .filter(|c| !c.starts_with("alloc") && !c.starts_with("create_stream"))
        .collect();
    let want = [
        "copy_h2d_async(buf0+0, 4 bytes #",
        "record_event(ev0, s1)",
        "copy_h2d_async(buf0+8, 8 bytes #",
        "record_event(ev1, s1)",
        "stream_wait_event(s2, ev0)",
        "copy_d2d_async(buf0+0",
        "cuStreamWaitValue32 (for a value no recorded stream write set)",
    ];
    assert_calls_begin(&calls, &want);
}

/// `export --program` of `trace` into `dir` (which must succeed): the program's source and
/// what `gputape` said.
fn export_program(trace: &std::path::Path, dir: &std::path::Path) -> (String, String) {
    let o = gputape(&[
        "export".as_ref(),
        "--program".as_ref(),
        dir.as_ref(),
        trace.as_ref(),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{} {err}", trace.display());
    (std::fs::read_to_string(dir.join("repro.c")).unwrap(), err)
}

/// `replay --on mock` of `trace` (which must exit 0): what it printed.
fn replay_on_mock_ok(trace: &std::path::Path) -> String {
    let o = gputape(&[
        "replay".as_ref(),
        "--on".as_ref(),
        "mock".as_ref(),
        trace.as_ref(),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    out
}

#[test]
fn run_o_records_a_program_s_driver_calls_into_a_trace_every_verb_reads() {
    let d = support::scratch("run-record");
    let prog = support::records_program(&d);
    let trace = d.join("records.gtape");
    let json = d.join("counts.json");
    let o = run(&[
        "-o".as_ref(),
        trace.as_ref(),
        "--counts".as_ref(),
        json.as_ref(),
        "--".as_ref(),
        prog.as_ref(),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    // The program ran as it would without the recorder.
    assert!(out.contains("out[5] = 15, errors 0"), "{out}{err}");
    assert!(
        err.contains(
            "15 driver calls -> 13 trace calls (1 launches of 1 kernels from 1 module images)"
        ),
        "{err}"
    );
    assert!(
        err.contains("kept by name only (a replay skips them): cuMemcpyAtoH_v2 x1, cuMemsetD32 x1"),
        "{err}"
    );
    // The table says how the recording took each entry point.
    let how = |name: &str| {
        err.lines()
            .find(|l| l.trim_end().ends_with(&format!(" {name}")))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
    };
    assert_eq!(
        how("cuLaunchKernel").as_deref(),
        Some("yes cuLaunchKernel"),
        "{err}"
    );
    assert_eq!(
        how("cuMemcpyAtoH_v2").as_deref(),
        Some("by name cuMemcpyAtoH_v2"),
        "{err}"
    );
    assert_eq!(how("cuInit").as_deref(), Some("no cuInit"), "{err}");
    let v = counts(&json);
    assert_eq!(v["recorded"], true);
    assert!(v["entry_points_recorded"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n == "cuStreamSynchronize"));
    assert_eq!(v["entry_points_by_name"][0], "cuMemcpyAtoH_v2");
    assert_eq!(v["traces"][0], trace.to_str().unwrap());

    // The trace reads like any other: the calls in order, the kernel by its symbol and layout,
    // the module by its image, the launch's pointer as a buffer. Provenance lines (time, pid,
    // path) are left out of the snapshot.
    let o = gputape(&["show".as_ref(), trace.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let shown: String = text(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with("recorded at"))
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    insta::assert_snapshot!("run_o_records_show", native_sites(&shown, &d));

    // On the mock the compiled kernel has no body: skipped, and the read back that depends on
    // it unchecked, which the replay says rather than passing; the opaque calls are named.
    let o = gputape(&[
        "replay".as_ref(),
        "--on".as_ref(),
        "mock".as_ref(),
        trace.as_ref(),
    ]);
    let rout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{rout}{}", text(&o.stderr));
    assert!(
        rout.contains("1 kernel(s) this backend cannot run were skipped: ptx-"),
        "{rout}"
    );
    assert!(
        rout.contains("not replayed (what they did is missing here): cuMemcpyAtoH_v2 x1 (first #9), cuMemsetD32 x1 (first #6)"),
        "{rout}"
    );
    assert!(rout.contains("NOTHING CHECKED"), "{rout}");
    let o = gputape(&["analyze".as_ref(), trace.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("no leaks or use-after-free found"));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn run_o_without_any_driver_call_says_no_trace_was_written() {
    let d = support::scratch("run-record-none");
    let trace = d.join("none.gtape");
    let o = run(&[
        "-o".as_ref(),
        trace.as_ref(),
        "--".as_ref(),
        "true".as_ref(),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no process of the command recorded a driver call"),
        "{err}"
    );
    assert!(!trace.exists());
    let _ = std::fs::remove_dir_all(d);
}

/// `gputape run --flight DIR -- PROGRAM ARGS...` with the ring at `ring_mb` and `envs` set.
fn flight(
    d: &std::path::Path,
    prog: &std::path::Path,
    args: &[&str],
    ring_mb: u32,
    envs: &[(&str, &str)],
) -> Output {
    let dir = d.join("flight");
    let mut argv: Vec<&std::ffi::OsStr> = vec!["--flight".as_ref(), dir.as_ref(), "--".as_ref()];
    argv.push(prog.as_ref());
    argv.extend(args.iter().map(std::ffi::OsStr::new));
    let ring = ring_mb.to_string();
    let mut all = vec![("GPUTAPE_FLIGHT_RING_MB", ring.as_str())];
    all.extend_from_slice(envs);
    run_with(&argv, &all)
}

/// The one trace a flight run left in `d/flight`.
fn flight_dump(d: &std::path::Path) -> std::path::PathBuf {
    let found: Vec<_> = std::fs::read_dir(d.join("flight"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].extension().unwrap(), "gtape", "{found:?}");
    found[0].clone()
}

#[test]
fn run_flight_writes_nothing_until_a_fault_then_a_dump_that_names_it() {
    let d = support::scratch("run-flight");
    let prog = support::faults_program(&d);

    // No fault: the program runs as without gputape, and nothing is written.
    let o = flight(&d, &prog, &["200", "1000"], 256, &[]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        out.contains("faults: 200 steps, out[3] = 202"),
        "{out}{err}"
    );
    assert!(
        err.contains("no process of the command reported a driver fault"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(d.join("flight")).unwrap().count(), 0);

    // A fault at step 40: the program's own exit status, and a dump of everything, since the
    // ring never filled: the setup, 40 good steps and the faulting one.
    let o = flight(&d, &prog, &["100", "40"], 256, &[]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains("faults: step 40 failed with 700"),
        "{out}{err}"
    );
    assert!(
        err.contains("CUDA_ERROR_ILLEGAL_ADDRESS (700) returned by cuStreamSynchronize"),
        "{err}"
    );
    let trace = flight_dump(&d);
    let v = show_json(&trace);
    let reason = v["dump"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("CUDA_ERROR_ILLEGAL_ADDRESS (700)"),
        "{reason}"
    );
    assert!(!reason.contains("dropped"), "{reason}");
    // 5 setup calls (two allocations, the weights, the kernel's lookup, a stream; the module
    // load is a frame of its own), then 4 per step: 41 steps.
    assert_eq!(
        v["calls_in_trace"].as_u64(),
        Some(5 + 4 * 41),
        "{}",
        v["dump"]
    );
    std::fs::remove_file(&trace).unwrap();

    // A ring of 1 MiB and a fault at step 20000 (about 4 MB of work records before it): the
    // dump keeps the setup and the last steps, says what it dropped, and stays near the
    // ring's size.
    let o = flight(&d, &prog, &["30000", "20000"], 1, &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let trace = flight_dump(&d);
    let size = std::fs::metadata(&trace).unwrap().len();
    assert!(size < 3 << 20, "{size} bytes");
    let o = gputape(&["show".as_ref(), "--json".as_ref(), trace.as_ref()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let reason = v["dump"]["reason"].as_str().unwrap();
    assert!(reason.contains("had dropped the"), "{reason}");
    assert!(reason.contains("start without their contents"), "{reason}");
    let calls = v["calls_in_trace"].as_u64().unwrap();
    assert!((1000..4 * 20001).contains(&calls), "{calls} calls");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn run_o_records_a_captured_graph_and_its_launches() {
    let d = support::scratch("run-graphs");
    let prog = support::graphs_program(&d);
    let trace = d.join("graphs.gtape");
    let o = run(&[
        "-o".as_ref(),
        trace.as_ref(),
        "--".as_ref(),
        prog.as_ref(),
        "3".as_ref(),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    // The graph ran its two captured launches at each of its launches: (2 + 1) * 2 * 3.
    assert!(out.contains("graphs: 3 steps, out[1] = 18"), "{out}{err}");
    assert!(!err.contains("kept by name only"), "{err}");
    let o = gputape(&["show".as_ref(), trace.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let shown: String = text(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with("recorded at"))
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    insta::assert_snapshot!("run_o_graphs_show", native_sites(&shown, &d));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_flight_dump_keeps_a_graph_captured_long_before_its_window() {
    let d = support::scratch("run-flight-graphs");
    let prog = support::graphs_program(&d);
    // The graph is captured at the start; 20000 steps later (about 3 MB of work records
    // through a 1 MiB ring) an eager launch faults.
    let o = flight(&d, &prog, &["30000", "20000"], 1, &[]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains("graphs: step 20000 failed with 700"),
        "{out}{err}"
    );
    let trace = flight_dump(&d);
    let o = gputape(&["show".as_ref(), "--json".as_ref(), trace.as_ref()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["dump"]["reason"]
            .as_str()
            .unwrap()
            .contains("had dropped the"),
        "{}",
        v["dump"]
    );
    let kinds: Vec<&str> = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    // The capture and what it captured, kept whole though far older than the window.
    let begin = kinds
        .iter()
        .position(|k| *k == "begin_capture")
        .expect("begin_capture kept");
    // The allocation made mid-capture goes before it: a replay's capture could not make it.
    assert_eq!(
        kinds[begin - 1..begin + 4],
        ["alloc", "begin_capture", "launch", "launch", "end_capture"],
        "{kinds:?}"
    );
    // Every graph launch in the window names that graph: none is opaque.
    let graphs = kinds.iter().filter(|k| **k == "launch_graph").count();
    assert!(graphs > 100, "{graphs} graph launches");
    assert!(!kinds.contains(&"opaque"), "{kinds:?}");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_flight_recording_dumps_a_sync_that_does_not_return_as_a_hang() {
    let d = support::scratch("run-flight-hang");
    let prog = support::faults_program(&d);
    // Step 30's kernel spins; the fake driver's sync gives up after 4 s (a real one would
    // not), long after the 0.5 s deadline.
    let o = flight(
        &d,
        &prog,
        &["100", "30", "hang"],
        256,
        &[("GPUTAPE_FLIGHT_HANG_S", "0.5")],
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("hang: cuStreamSynchronize has not returned after"),
        "{err}"
    );
    let trace = flight_dump(&d);
    let o = gputape(&["show".as_ref(), "--json".as_ref(), trace.as_ref()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let in_flight = v["dump"]["in_flight"].as_array().unwrap();
    assert_eq!(in_flight.len(), 1, "{}", v["dump"]);
    // The blocked sync is the last call, without a result; the spinning launch before it.
    let calls = v["calls"].as_array().unwrap();
    let last = calls.last().unwrap();
    assert_eq!(in_flight[0]["seq"], last["seq"], "{last}");
    assert_eq!(last["kind"], "synchronize", "{last}");
    assert!(last["ok"].is_null(), "{last}");
    let launch = &calls[calls.len() - 3];
    assert_eq!(launch["kind"], "launch", "{launch}");
    assert!(
        launch["call"].as_str().unwrap().contains("0xffffffff"),
        "{launch}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// Two processes of one `gputape run --flight` (as one per GPU would be): the second faults at
/// step 20 and dumps; the first, stuck in a sync since step 5 (a peer waiting for it), dumps
/// within a fraction of a second on the other's word, no hang deadline set: its waiting sync is
/// in its dump as not returned, and its reason names the process that dumped first.
#[test]
fn a_faulting_process_makes_the_runs_other_processes_dump() {
    let d = support::scratch("run-flight-peers");
    let prog = support::faults_program(&d);
    let p = prog.display();
    let script = format!("{p} 100 5 hang & sleep 0.5; {p} 100 20; wait");
    let dir = d.join("flight");
    let o = run(&[
        "--flight".as_ref(),
        dir.as_ref(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        script.as_ref(),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    let mut found: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    found.sort();
    // Two traces, and the run's announcements removed with their directory.
    assert_eq!(found.len(), 2, "{found:?}\n{out}{err}");
    let dumps: Vec<serde_json::Value> = found
        .iter()
        .map(|t| {
            assert_eq!(t.extension().unwrap(), "gtape", "{found:?}");
            let o = gputape(&["show".as_ref(), "--json".as_ref(), t.as_ref()]);
            serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["dump"].clone()
        })
        .collect();
    let reason = |v: &serde_json::Value| v["reason"].as_str().unwrap().to_string();
    let (peer, own): (Vec<_>, Vec<_>) = dumps
        .iter()
        .partition(|v| reason(v).starts_with("peer: process "));
    assert_eq!((peer.len(), own.len()), (1, 1), "{dumps:?}");
    assert!(
        reason(own[0]).contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{dumps:?}"
    );
    assert!(reason(peer[0]).contains("of this run dumped"), "{dumps:?}");
    let waiting = peer[0]["in_flight"].as_array().unwrap();
    assert_eq!(waiting.len(), 1, "the peer's blocked sync: {dumps:?}");
    // Side by side: `ranks` says where each process was, the waiting one in its sync behind
    // the spinning launch.
    let mut args: Vec<&std::ffi::OsStr> = vec!["ranks".as_ref(), "--json".as_ref()];
    args.extend(found.iter().map(|p| p.as_os_str()));
    let o = gputape(&args);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let at = v["dumps"].as_array().unwrap();
    assert_eq!(at.len(), 2, "{v:#}");
    let blocked: Vec<&serde_json::Value> = at
        .iter()
        .filter(|d| !d["blocked_in"].as_array().unwrap().is_empty())
        .collect();
    assert_eq!(blocked.len(), 1, "{v:#}");
    assert!(
        blocked[0]["blocked_in"][0]
            .as_str()
            .unwrap()
            .contains("synchronize"),
        "{v:#}"
    );
    assert_eq!(blocked[0]["hang"], true, "{v:#}");
    assert!(
        !blocked[0]["launches_not_known_complete"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the spinning launch: {v:#}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// With GPUTAPE_SHIM_SELFTIME=1 each recording process says at exit how long its threads spent
/// in the recorder's own code, over how many records.
#[test]
fn a_recording_says_its_own_time_when_asked() {
    let d = support::scratch("run-selftime");
    let prog = support::faults_program(&d);
    let o = flight(
        &d,
        &prog,
        &["50", "1000"],
        256,
        &[("GPUTAPE_SHIM_SELFTIME", "1")],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("recorder self time"))
        .unwrap_or_else(|| panic!("{err}"));
    // 50 steps of 4 recorded calls, and the set-up's.
    let n: u64 = line
        .split(" in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(n >= 200, "{line}");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_program_can_pause_the_recording_of_its_work_and_keep_its_state() {
    let d = support::scratch("run-pause");
    let prog = support::faults_program(&d);
    let trace = d.join("paused.gtape");
    let o = run_with(
        &[
            "-o".as_ref(),
            trace.as_ref(),
            "--".as_ref(),
            prog.as_ref(),
            "100".as_ref(),
            "1000".as_ref(),
        ],
        &[("FAULTS_PAUSE", "10:90")],
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    // Steps 10 to 89 ran (the output is the last step's) and were not recorded: 5 setup calls
    // and 4 per recorded step, 20 of them.
    assert!(out.contains("faults: 100 steps, out[3] = 102"), "{out}");
    let o = gputape(&["show".as_ref(), "--json".as_ref(), trace.as_ref()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["calls_in_trace"].as_u64(), Some(5 + 4 * 20), "{err}");
    let _ = std::fs::remove_dir_all(d);
}

/// `gputape run ARGS` started with the fake driver as the real one, in a process group of
/// its own (so the test can kill the run and its command together), stderr piped.
fn spawn_run(args: &[&std::ffi::OsStr], envs: &[(&str, &str)]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    run_command(args, envs)
        .process_group(0)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (up to 20 s) for a file with extension `ext` in `dir`.
fn wait_for(dir: &std::path::Path, ext: &str) -> Option<std::path::PathBuf> {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(20) {
        let found = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == ext));
        if found.is_some() {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

/// A program hung in a sync is dumped by its hang deadline; then the run and the program are
/// killed with SIGKILL, as a scheduler would, before `gputape run` converts anything. What is
/// left is the raw dump, and every verb opens it as it is: `show` names the hang and the sync
/// in flight, `replay` and `minimize` read it (neither says it is damaged). `gputape run`
/// said the dump's path on its own stderr as it was written.
#[test]
fn a_hung_program_s_raw_dump_opens_after_the_run_is_killed() {
    let d = support::scratch("run-flight-killed");
    let prog = support::faults_program(&d);
    let dir = d.join("flight");
    let run = spawn_run(
        &[
            "--flight".as_ref(),
            dir.as_os_str(),
            "--".as_ref(),
            prog.as_os_str(),
            "100".as_ref(),
            "30".as_ref(),
            "hang".as_ref(),
        ],
        &[("GPUTAPE_FLIGHT_HANG_S", "0.5")],
    );
    let mut run = run;
    // gputape run's stderr, line by line, as it comes.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = run.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let dump = wait_for(&dir, "gtshm").expect("the hang was dumped");
    // Until gputape run has said where the dump is (its watcher looks every 0.1 s), then the
    // whole group is killed.
    let said = format!("flight dump written: {}", dump.display());
    let mut err = String::new();
    while !err.contains(&said) {
        match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(line) => err.push_str(&(line + "\n")),
            Err(_) => break,
        }
    }
    // SAFETY: kill(2) on the process group the run was started in.
    unsafe { libc::kill(-(run.id() as i32), libc::SIGKILL) };
    let _ = run.wait();
    let _ = reader.join();
    assert!(err.contains(&said), "{err}");
    let o = gputape(&["show".as_ref(), "--json".as_ref(), dump.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["dump"]["reason"].as_str().unwrap().starts_with("hang:"),
        "{}",
        v["dump"]
    );
    assert_eq!(v["dump"]["in_flight"].as_array().unwrap().len(), 1);
    for verb in [&["replay"][..], &["minimize", "-o"][..]] {
        let mut args: Vec<&std::ffi::OsStr> = verb.iter().map(|s| s.as_ref()).collect();
        let out = d.join("min.gtape");
        if verb.len() > 1 {
            args.push(out.as_ref());
        }
        args.push(dump.as_ref());
        let o = gputape(&args);
        let err = text(&o.stderr);
        assert_ne!(o.status.code(), Some(3), "{verb:?}: {err}");
        assert!(o.status.code().is_some(), "{verb:?}: {:?}", o.status);
        assert!(!err.contains("cannot read"), "{verb:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(d);
}

/// `gputape dump PID` asks a program blocked in a sync (its kernel spins; no hang deadline
/// set) for its dump: written at once, with the reason given and the sync in flight, so it is
/// a hang's dump (`replay` judges it as one). SIGTERM to `gputape run` then reaches the
/// program; the run converts the dump and exits with the program's status.
#[test]
fn a_requested_dump_names_the_waiting_sync_and_sigterm_reaches_the_program() {
    let d = support::scratch("run-flight-asked");
    let prog = support::faults_program(&d);
    let dir = d.join("flight");
    let run = spawn_run(
        &[
            "--flight".as_ref(),
            dir.as_os_str(),
            "--".as_ref(),
            prog.as_os_str(),
            "100".as_ref(),
            "5".as_ref(),
            "hang".as_ref(),
        ],
        &[],
    );
    // The program: the run's child, once it has started recording.
    let t0 = std::time::Instant::now();
    let pid = loop {
        let kids =
            std::fs::read_to_string(format!("/proc/{}/task/{}/children", run.id(), run.id()))
                .unwrap_or_default();
        if let Some(p) = kids.split_whitespace().next() {
            break p.to_string();
        }
        assert!(t0.elapsed().as_secs() < 20, "the program did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Step 5's kernel spins; the sync after it waits (the fake driver gives up after 4 s).
    // (1.5 s: reached within milliseconds on an idle machine, with room for a loaded one, and
    // well before the fake sync gives up at 4 s; the request is served within 0.2 s.)
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let o = gputape(&[
        "dump".as_ref(),
        pid.as_ref(),
        "--reason".as_ref(),
        "the step is late".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let dump = std::path::PathBuf::from(text(&o.stdout).trim());
    let o = gputape(&["show".as_ref(), "--json".as_ref(), dump.as_ref()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let reason = v["dump"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("asked: the step is late"), "{reason}");
    let calls = v["calls"].as_array().unwrap();
    let last = calls.last().unwrap();
    assert_eq!(last["kind"], "synchronize", "{last}");
    assert!(last["ok"].is_null(), "the sync had not returned: {last}");
    // Its kernels run only on a GPU: with no driver here, `replay` says so (exit 4); on the
    // mock, asked for, the spinning kernel has no body and the replay says the hang cannot
    // show there.
    let o = gputape(&["replay".as_ref(), dump.as_ref()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("launches kernels only a GPU runs"), "{err}");
    let o = gputape(&[
        "replay".as_ref(),
        "--on".as_ref(),
        "mock".as_ref(),
        dump.as_ref(),
    ]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("so the hang cannot show: replay it --on cuda"),
        "{out}"
    );
    // SIGTERM to gputape run, not to the program: forwarded; the program's status relayed.
    // SAFETY: kill(2) on the run's own pid.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let o = run.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(dir.join(format!("{pid}.gtape")).exists(), "{err}");
    let _ = std::fs::remove_dir_all(d);
}

/// A program asks for its own flight dump through the shim's `gputape_flight_dump` (what
/// Python reaches through ctypes): written with its reason though nothing faulted, the program
/// runs on, and the run converts the dump.
#[test]
fn a_program_asks_for_its_own_dump() {
    let d = support::scratch("run-flight-self");
    let prog = support::faults_program(&d);
    let o = flight(&d, &prog, &["20", "1000"], 256, &[("FAULTS_ASK", "7")]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("asked for a dump at step 7: 0"), "{out}{err}");
    let trace = flight_dump(&d);
    let o = gputape(&["show".as_ref(), "--json".as_ref(), trace.as_ref()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let reason = v["dump"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("asked: the program saw something wrong"),
        "{reason}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// The binary alone, as `cargo install` leaves it (nothing beside it, no `target/` above it, no
/// variable naming the shim): `gputape run` writes the shim built into it to the user's cache
/// directory and runs the program under it; a second run reuses it.
#[test]
fn an_installed_binary_runs_programs_with_the_shim_built_into_it() {
    let d = support::scratch("run-installed");
    let prog = support::records_program(&d);
    let bin = d.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("gputape");
    std::fs::copy(env!("CARGO_BIN_EXE_gputape"), &exe).unwrap();
    let cache = d.join("cache");
    let counts_file = d.join("counts.json");
    for _ in 0..2 {
        let o = Command::new(&exe)
            .args(["run", "--counts"])
            .arg(&counts_file)
            .arg("--")
            .arg(&prog)
            .env("GPUTAPE_REAL_LIBCUDA", support::fake_driver())
            .env("XDG_CACHE_HOME", &cache)
            .env_remove("GPUTAPE_SHIM_DIR")
            .env_remove("GPUTAPE_SHIM_COUNTS")
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}");
        let c = counts(&counts_file);
        assert!(c["calls"]["cuInit"].as_u64().unwrap_or(0) >= 1, "{c}");
    }
    let shims: Vec<_> = std::fs::read_dir(cache.join("gputape"))
        .unwrap()
        .map(|e| e.unwrap().path().join("libcuda.so.1"))
        .collect();
    assert_eq!(shims.len(), 1, "one shim, reused: {shims:?}");
    assert!(shims[0].is_file());
    let _ = std::fs::remove_dir_all(d);
}

/// `tests/fixtures/python/NAME`: the Python programs these tests run.
fn python_fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/python")
        .join(name)
}

/// The Python interpreters of each minor version gputape reads frames of (3.11-3.13) found on
/// PATH (pyenv's shims included), one per version.
fn pythons() -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    let mut candidates: Vec<String> = ["python3", "python3.11", "python3.12", "python3.13"]
        .map(String::from)
        .to_vec();
    // pyenv's versions, whichever is global (its shims run only that one).
    let root = std::env::var("PYENV_ROOT")
        .ok()
        .or_else(|| std::env::var("HOME").ok().map(|h| format!("{h}/.pyenv")));
    if let Some(Ok(dir)) = root.map(|r| std::fs::read_dir(format!("{r}/versions"))) {
        let mut vs: Vec<_> = dir
            .flatten()
            .map(|e| e.path().join("bin/python3"))
            .collect();
        vs.sort();
        candidates.extend(vs.iter().map(|p| p.display().to_string()));
    }
    for exe in &candidates {
        let Ok(o) = Command::new(exe)
            .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
            .output()
        else {
            continue;
        };
        let v = text(&o.stdout).trim().to_string();
        if o.status.success()
            && ["3.11", "3.12", "3.13"].contains(&v.as_str())
            && !found.iter().any(|(_, have)| *have == v)
        {
            found.push((exe.clone(), v));
        }
    }
    found
}

/// Every call a Python program makes through the driver carries the line the program noted
/// with `traceback` just before it: from a plain function, a generator, a coroutine before and
/// after an await, a second thread, a lambda, a method's multi-line call, the module, and a
/// kernel captured into a graph (its capture line), on each CPython minor version found.
#[test]
fn each_call_of_a_python_program_carries_the_line_it_was_made_from() {
    let pythons = pythons();
    assert!(!pythons.is_empty(), "no python3 of 3.11-3.13 on PATH");
    let script = python_fixture("lines.py");
    for (exe, version) in &pythons {
        let d = support::scratch(&format!("lines-{version}"));
        let trace = d.join("lines.gtape");
        let want = d.join("expected.json");
        let o = run(&[
            "-o".as_ref(),
            trace.as_ref(),
            "--".as_ref(),
            exe.as_ref(),
            script.as_ref(),
            want.as_ref(),
        ]);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{version}: {out}{err}");
        assert!(!err.contains("carry no Python lines"), "{version}: {err}");
        let expected: Vec<(String, u64, String)> =
            serde_json::from_slice(&std::fs::read(&want).unwrap()).unwrap();
        let o = gputape(&["show".as_ref(), "--json".as_ref(), trace.as_ref()]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let sites: Vec<String> = v["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["site"].as_str().unwrap().to_string())
            .collect();
        // Each noted line made one driver call; those the trace keeps as calls (a module
        // load or a kernel lookup is no call of its own) appear in order, and no call has
        // any other site.
        let as_site = |(file, line, function): &(String, u64, String)| {
            (format!("{file}:{line}:"), format!(" in {function}"))
        };
        // The module load is no call of its own.
        let mut next = 0;
        for s in &sites {
            let at = expected[next..]
                .iter()
                .position(|e| {
                    let (head, tail) = as_site(e);
                    s.starts_with(&head) && s.ends_with(&tail)
                })
                .unwrap_or_else(|| {
                    panic!("{version}: call at {s} is none of {expected:?} from {next}")
                });
            next += at + 1;
        }
        assert_eq!(sites.len(), expected.len() - 1, "{version}: {sites:?}");
        for (what, function) in [
            ("the generator", "generator"),
            ("the coroutine", "coroutine"),
            ("the lambda", "<lambda>"),
            ("the method", "Model.forward"),
            ("the capture", "capture"),
            ("the module", "<module>"),
        ] {
            assert!(
                sites
                    .iter()
                    .any(|s| s.ends_with(&format!(" in {function}"))),
                "{version}: no call from {what}: {sites:?}"
            );
        }
        let _ = std::fs::remove_dir_all(d);
    }
    eprintln!(
        "checked on Python {:?}",
        pythons.iter().map(|p| &p.1).collect::<Vec<_>>()
    );
}

/// A flight dump keeps the stacks its calls were made from (named once, long before the
/// window): the dump's calls carry their lines too.
#[test]
fn a_python_program_s_flight_dump_carries_its_lines() {
    let (exe, version) = pythons()
        .into_iter()
        .next()
        .expect("a python3 of 3.11-3.13");
    let d = support::scratch("lines-flight");
    let script = python_fixture("lines.py");
    let expected = d.join("expected.json");
    let o = flight(
        &d,
        std::path::Path::new(&exe),
        &[script.to_str().unwrap(), expected.to_str().unwrap()],
        64,
        &[("LINES_DUMP", "1")],
    );
    assert_eq!(o.status.code(), Some(0), "{version}: {}", text(&o.stderr));
    let dump = flight_dump(&d);
    let o = gputape(&["show".as_ref(), dump.as_ref()]);
    let shown = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    for want in [
        "lines.py:29:30 in plain",
        "lines.py:79:30 in capture",
        "lines.py:86:26 in <module>",
    ] {
        assert!(shown.contains(want), "{version}: no {want} in\n{shown}");
    }
    assert!(!shown.contains("<driver call>"), "{shown}");
    assert!(shown.contains("(image: blob"), "{shown}");
    // Cut to share (the whole dump, its module images left out): the lines stay.
    let cut = d.join("cut.gtape");
    let o = gputape(&[
        "trim".as_ref(),
        dump.as_ref(),
        "--range".as_ref(),
        "0..".as_ref(),
        "--drop-images".as_ref(),
        "-o".as_ref(),
        cut.as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = gputape(&["show".as_ref(), cut.as_ref()]);
    let cut_shown = text(&o.stdout);
    assert!(
        cut_shown.contains("lines.py:79:30 in capture"),
        "{cut_shown}"
    );
    assert!(!cut_shown.contains("(image: blob"), "{cut_shown}");
    assert!(
        cut_shown.contains("::scale"),
        "the kernel keeps its name: {cut_shown}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// An eager program's step (its work on the legacy stream, as PyTorch's is) gets capture
/// verdicts as `torch.cuda.graph` would capture it, judged on the step it repeats, not on the
/// weight upload before: the step's host sync is named first, with its line.
#[test]
fn analyze_capture_of_an_eager_python_program_names_its_host_sync_line_first() {
    let (exe, version) = pythons()
        .into_iter()
        .next()
        .expect("a python3 of 3.11-3.13");
    let d = support::scratch("eager-capture");
    let trace = d.join("eager.gtape");
    let script = python_fixture("eager_step.py");
    let o = run(&[
        "-o".as_ref(),
        trace.as_ref(),
        "--".as_ref(),
        exe.as_ref(),
        script.as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{version}: {}", text(&o.stderr));
    let line = std::fs::read_to_string(&script)
        .unwrap()
        .lines()
        .position(|l| l.contains("# the step's host sync"))
        .unwrap()
        + 1;
    let o = gputape(&["analyze".as_ref(), "--capture".as_ref(), trace.as_ref()]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(out.contains("an eager program"), "{out}");
    // Four steps; the first also looked its kernel up, so three are alike.
    assert!(out.contains("seen 3 times between host syncs"), "{out}");
    let first = out
        .lines()
        .find(|l| l.contains("first to break it"))
        .unwrap_or_else(|| panic!("no breaker named:\n{out}"));
    assert!(
        first.contains("copy_d2h")
            && first.contains(&format!("eager_step.py:{line}:"))
            && first.contains(" in step"),
        "{first}"
    );
    // The launches of the step are captured: nothing else of the step breaks it.
    assert!(!out.contains("launch at"), "{out}");
    let _ = std::fs::remove_dir_all(d);
}

/// A module variable (a `__constant__` table filled as `cudaMemcpyToSymbol` fills it) is a
/// buffer of its own in the trace: the copy into it and the read back are ordinary calls on
/// it, and a replay finds the variable where its backend loaded the module (the mock, which
/// loads no images, a stand-in), instead of refusing an address no allocation holds.
#[test]
fn a_module_variable_is_recorded_as_a_buffer_and_replayed() {
    let d = support::scratch("run-globals");
    let prog = support::globals_program(&d);
    let trace = d.join("globals.gtape");
    let o = run(&["-o".as_ref(), trace.as_ref(), "--".as_ref(), prog.as_ref()]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        out.contains("table 64 bytes, back[3] = 9, errors 0"),
        "{out}"
    );
    assert!(
        !err.contains("cuModuleGetGlobal_v2 x"),
        "kept by name: {err}"
    );
    let o = gputape(&["show".as_ref(), trace.as_ref()]);
    let shown = text(&o.stdout);
    assert!(shown.contains("global buf1 = ptx-"), "{shown}");
    assert!(shown.contains("::table (64 bytes,"), "{shown}");
    assert!(shown.contains("copy_h2d(buf1+0, 64 bytes"), "{shown}");
    let o = gputape(&[
        "replay".as_ref(),
        "--on".as_ref(),
        "mock".as_ref(),
        trace.as_ref(),
    ]);
    let rout = text(&o.stdout);
    assert!(
        !rout.contains("cannot be remapped"),
        "{rout}{}",
        text(&o.stderr)
    );
    assert!(
        rout.contains("1 of 1 match the recording"),
        "{rout}{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(d);
}

/// A kernel launched cooperatively (`cuLaunchCooperativeKernel`, and `cuLaunchKernelEx` with
/// the cooperative attribute) is recorded as a launch of a kernel marked cooperative, not kept
/// by name; the mark survives into the standalone program, which launches it cooperatively
/// again, and that program's own recording marks it too.
#[test]
fn a_cooperative_launch_is_recorded_and_exported_as_one() {
    let d = support::scratch("run-cooperative");
    let prog = support::cooperative_program(&d);
    let trace = d.join("coop.gtape");
    let o = run(&["-o".as_ref(), trace.as_ref(), "--".as_ref(), prog.as_ref()]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("back[3] = 54, errors 0"), "{out}");
    assert!(
        !err.contains("cuLaunchCooperativeKernel x"),
        "kept by name: {err}"
    );
    assert!(!err.contains("cuLaunchKernelEx x"), "kept by name: {err}");
    let shown = |t: &std::path::Path| text(&gputape(&["show".as_ref(), t.as_ref()]).stdout);
    let s = shown(&trace);
    let kernel_line = s
        .lines()
        .find(|l| l.starts_with("kernel k0 ="))
        .unwrap_or("");
    assert!(
        kernel_line.ends_with(" cooperative") || kernel_line.contains(" cooperative "),
        "{s}"
    );
    let launches = s.lines().filter(|l| l.contains("<<<")).count();
    assert_eq!(launches, 2, "{s}");
    let dir = d.join("repro");
    let (source, _) = export_program(&trace, &dir);
    assert_eq!(
        source.matches("cuLaunchCooperativeKernel(fn[0]").count(),
        2,
        "{source}"
    );
    let bin = support::link_program(&dir, "repro", &source);
    let again = d.join("repro.gtape");
    let o = run(&[
        "-o".as_ref(),
        again.as_ref(),
        "--".as_ref(),
        bin.as_ref(),
        dir.join("data").as_ref(),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    let s = shown(&again);
    assert!(
        s.lines()
            .any(|l| l.starts_with("kernel k0 =") && l.contains(" cooperative")),
        "{s}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// A capture during which its thread allocates as PyTorch's allocator does (switching itself
/// to relaxed capture mode around the allocation, `cuThreadExchangeStreamCaptureMode`): the
/// allocation goes before the capture in the trace (a replay captures in its own mode), the
/// summary says it was made in relaxed mode, and the captured launch stays inside the capture.
#[test]
fn an_allocation_made_in_relaxed_mode_while_capturing_is_said_and_placed_before_the_capture() {
    let d = support::scratch("run-capture-mode");
    let prog = support::capture_mode_program(&d);
    let trace = d.join("cm.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("back[3] = 12, switched back from mode 2, errors 0"),
        "{out}"
    );
    assert!(
        err.contains("1 allocation made while a capture was open moved before it (1 by a thread in relaxed capture mode"),
        "{err}"
    );
    assert!(
        !err.contains("cuThreadExchangeStreamCaptureMode x"),
        "kept by name: {err}"
    );
    let kinds: Vec<String> = show_json(&trace)["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap().to_string())
        .filter(|k| {
            matches!(
                k.as_str(),
                "alloc" | "begin_capture" | "launch" | "end_capture"
            )
        })
        .collect();
    assert_eq!(
        kinds,
        ["alloc", "alloc", "begin_capture", "launch", "end_capture"],
        "{kinds:?}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// Managed memory the host fills and reads with plain stores and loads (no copy moves those
/// bytes): the trace holds the host's writes as copies before the work that follows them, and
/// what the device changed as read backs after `cudaDeviceSynchronize`, and after a sync of the
/// legacy stream (or a blocking read of it) when all the work went there, the tool's own
/// (named so, left out of the analyses); the mock replays it and compares the read back no
/// kernel feeds (the memset's), which matches.
#[test]
fn managed_memory_the_host_writes_and_reads_is_recorded_and_compared() {
    let d = support::scratch("run-managed");
    let prog = support::managed_program(&d);
    let trace = d.join("mg.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("step 1: x[3] = 3, x[9] = 0.7471, errors 0"),
        "{out}"
    );
    assert!(
        out.contains("step 2: x[3] = 200, x[4] = 8, errors 0"),
        "{out}"
    );
    assert!(
        out.contains("step 3: back[4] = 16, x[4] = 2000, errors 0"),
        "{out}"
    );
    assert!(
        err.contains("managed memory: 3 host writes, 4 device results read"),
        "{err}"
    );
    let v = show_json(&trace);
    let calls: Vec<(String, bool)> = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let tools = c["site"]
                .as_str()
                .unwrap_or_default()
                .starts_with("<gputape>");
            (c["kind"].as_str().unwrap().to_string(), tools)
        })
        .filter(|(k, _)| k != "kernel")
        .collect();
    let of = |k: &str, tools: bool| (k.to_string(), tools);
    assert_eq!(
        calls,
        [
            of("alloc_managed", false),
            of("copy_h2d", false),
            of("memset_async", false),
            of("synchronize", false),
            of("copy_d2h", true),
            of("copy_h2d", false),
            of("launch", false),
            of("synchronize", false),
            of("copy_d2h", true),
            of("launch", false),
            of("copy_d2h", false),
            of("copy_d2h", true),
            of("copy_h2d", false),
            of("launch", false),
            of("synchronize", false),
            of("copy_d2h", true),
        ]
    );
    replays_on_mock_matching(&trace, "1 of 1");
    let _ = std::fs::remove_dir_all(d);
}

/// A graph built node by node (a memset node, a kernel node after it, a copy node after that
/// and one to host memory last, as `cudaGraphAdd*Node` make them), instantiated once and
/// launched twice with its copy's source changed between: the trace holds the graph as a
/// capture of its four nodes in the order added, on a stream of its own (the host copy's
/// destination a pinned region of its own), where the program instantiated it, and both
/// launches as launches of it; the mock replays it, every read back it can check (the memset's
/// and the copy's: it cannot run the fake PTX kernel) matching, the second copy's the changed
/// source.
#[test]
fn a_graph_built_node_by_node_is_recorded_as_a_capture_of_its_nodes_and_replays() {
    let d = support::scratch("run-graph-nodes");
    let prog = support::graph_nodes_program(&d);
    let trace = d.join("gn.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("launch 1: w[3] = 0.7471, y[3] = 3, x[3] = 6, seen[3] = 3, errors 0"),
        "{out}"
    );
    assert!(
        out.contains("launch 2: w[3] = 0.7471, y[3] = 103, x[3] = 12, seen[3] = 103, errors 0"),
        "{out}"
    );
    assert!(err.contains("1 graph built node by node"), "{err}");
    assert!(!err.contains("not understood"), "{err}");
    let v = show_json(&trace);
    let kinds: Vec<(String, String)> = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["stream"].to_string(),
            )
        })
        .filter(|(k, _)| !matches!(k.as_str(), "alloc" | "kernel" | "copy_h2d" | "copy_d2h"))
        .collect();
    let graph_stream = kinds
        .iter()
        .find(|(k, _)| k == "begin_capture")
        .map(|(_, s)| s.clone())
        .unwrap_or_default();
    assert!(!graph_stream.contains("legacy"), "{kinds:?}");
    let on = |k: &str| (k.to_string(), graph_stream.clone());
    assert_eq!(
        kinds[..6],
        [
            on("begin_capture"),
            on("memset_async"),
            on("launch"),
            on("copy_d2d_async"),
            on("copy_d2h_async"),
            on("end_capture")
        ],
        "{kinds:?}"
    );
    let graph_launches = kinds.iter().filter(|(k, _)| k == "launch_graph").count();
    assert_eq!(graph_launches, 2, "{kinds:?}");
    replays_on_mock_matching(&trace, "4 of 4");
    let _ = std::fs::remove_dir_all(d);
}

/// The flight recorder keeps a graph's nodes for good, as it keeps a capture: with a 1 MiB ring
/// that 30,000 later uploads wrap, the dump at exit still holds the graph built node by node,
/// as a capture of its four nodes.
#[test]
fn a_flight_dump_keeps_a_graph_built_node_by_node() {
    let d = support::scratch("run-graph-nodes-flight");
    let prog = support::graph_nodes_program(&d);
    let dir = d.join("flight");
    let o = run_command(
        &[
            "--flight".as_ref(),
            dir.as_ref(),
            "--".as_ref(),
            prog.as_ref(),
            "30000".as_ref(),
        ],
        &[("GPUTAPE_FLIGHT_RING_MB", "1")],
    )
    // `run_command` clears it from the environment the tests run in; set here.
    .env("GPUTAPE_SHIM_FLIGHT_AT_EXIT", "1")
    .output()
    .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    let dump = flight_dump(&d);
    let kinds: Vec<String> = show_json(&dump)["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap().to_string())
        .collect();
    let uploads = kinds.iter().filter(|k| *k == "copy_h2d").count();
    assert!(
        uploads < 30000,
        "the ring did not wrap: {uploads} uploads kept"
    );
    let begin = kinds
        .iter()
        .position(|k| k == "begin_capture")
        .unwrap_or_else(|| panic!("no graph in the dump: {:?}", &kinds[..kinds.len().min(40)]));
    assert_eq!(
        kinds[begin..begin + 6],
        [
            "begin_capture",
            "memset_async",
            "launch",
            "copy_d2d_async",
            "copy_d2h_async",
            "end_capture"
        ],
        "{:?}",
        &kinds[..kinds.len().min(40)]
    );
    let _ = std::fs::remove_dir_all(d);
}

/// A program built for per-thread default streams (`nvcc --default-stream per-thread`: every
/// stream-taking call its `_ptsz`/`_ptds` form): each thread's stream 0 is a stream of its own
/// in the trace, two threads two streams, and neither is the legacy stream, which the main
/// thread's one explicit use (`CU_STREAM_LEGACY`) keeps. The mock replays it, every read back
/// it can check (those no kernel feeds) matching. (Its context made as the runtime makes one,
/// the trace also names the device, as the driver does.)
#[test]
fn each_thread_s_per_thread_default_stream_is_a_stream_of_its_own() {
    let d = support::scratch("run-per-thread");
    let prog = support::per_thread_program(&d);
    let trace = d.join("pt.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(out.contains("thread 0: back[3] = 6, errors 0"), "{out}");
    assert!(out.contains("thread 1: back[3] = 39, errors 0"), "{out}");
    assert!(
        err.contains("per-thread default streams of 2 threads"),
        "{err}"
    );
    // The device its context was made on, as the driver named it.
    let shown = text(&gputape(&["show".as_ref(), trace.as_ref()]).stdout);
    assert!(shown.contains("recorded on cuda Fake GPU 9000,"), "{shown}");
    let v = show_json(&trace);
    let calls = v["calls"].as_array().unwrap();
    // Each work call's stream, with the thread that made it.
    let on = |kind: &str| -> Vec<(u64, String)> {
        calls
            .iter()
            .filter(|c| c["kind"] == kind)
            .map(|c| (c["thread"].as_u64().unwrap(), c["stream"].to_string()))
            .collect()
    };
    let launches = on("launch");
    assert_eq!(launches.len(), 2, "{launches:?}");
    assert_ne!(launches[0].0, launches[1].0, "{launches:?}");
    assert_ne!(
        launches[0].1, launches[1].1,
        "two threads, two streams: {launches:?}"
    );
    for (thread, stream) in &launches {
        assert!(!stream.contains("legacy"), "{launches:?}");
        let synced = on("synchronize");
        assert!(
            synced.contains(&(*thread, stream.clone())),
            "thread {thread} syncs its own stream {stream}: {synced:?}"
        );
    }
    let synced = on("synchronize");
    assert!(
        synced.iter().any(|(_, s)| s.contains("legacy")),
        "CU_STREAM_LEGACY stays the legacy stream: {synced:?}"
    );
    let out = replay_on_mock_ok(&trace);
    // The reads before each thread's kernel; the mock cannot run the fake PTX kernel.
    assert!(
        out.contains("2 of 2 match") && out.contains("no divergence"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// Copies of every shape a CUDA C++ program makes: 2D copies between pitched and packed memory
/// (with a sub-rectangle read back asynchronously into a unified address), a 3D box there and
/// back, the generic `cuMemcpy` both ways and a peer copy are recorded as the plain copies they
/// amount to (a pitched device side row by row, a packed one whole with the host's rows packed),
/// none kept by name only; the replay on the mock, which runs copies itself, reads back every
/// byte the program read.
#[test]
fn copies_of_every_shape_are_recorded_and_replayed_byte_for_byte() {
    let d = support::scratch("run-copies");
    let prog = support::copies_program(&d);
    let trace = d.join("copies.gtape");
    let o = run(&["-o".as_ref(), trace.as_ref(), "--".as_ref(), prog.as_ref()]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("copies: errors 0"), "{out}");
    assert!(
        out.contains("(same: 1)"),
        "the 3D copy came back changed: {out}"
    );
    // What the program must have read back, computed here: the shim forwarded every copy
    // as the program made it.
    let sum = |b: &[u8]| {
        b.iter()
            .fold(0u32, |s, &x| s.wrapping_mul(31).wrapping_add(x as u32))
    };
    let host = |y: usize, x: usize| (y * 24 + x + 1) as u8;
    let round: Vec<u8> = (0..8)
        .flat_map(|y| (0..40).map(move |x| if x < 24 { host(y, x) } else { 0 }))
        .collect();
    let sub: Vec<u8> = (0..3)
        .flat_map(|r| (0..8).map(move |c| host(2 + r, 4 + c)))
        .collect();
    let lin: Vec<u8> = (0..64).map(|i| 255 - i as u8).collect();
    for want in [
        format!("2D round trip {}", sum(&round)),
        format!("2D sub-rectangle {}", sum(&sub)),
        format!("generic and peer {}", sum(&lin)),
    ] {
        assert!(out.contains(&want), "{want} not in {out}");
    }
    assert!(!err.contains("kept by name only"), "{err}");
    let o = gputape(&["show".as_ref(), trace.as_ref()]);
    let shown = text(&o.stdout);
    // The pitched upload: a copy per row, each 24 bytes, 32 bytes apart on the device.
    assert!(shown.contains("copy_h2d(buf0+0, 24 bytes"), "{shown}");
    assert!(shown.contains("copy_h2d(buf0+224, 24 bytes"), "{shown}");
    // The packed read back: one copy of all eight rows.
    assert!(shown.contains("copy_d2h(buf1+0, 192 bytes)"), "{shown}");
    // The sub-rectangle (x 4, y 2) read back a row at a time, asynchronously.
    assert!(shown.contains("copy_d2h_async(buf0+68, 8 bytes"), "{shown}");
    // The 3D box: three rows of 12 bytes in each of two slices of 64 bytes.
    assert!(shown.contains("copy_h2d(buf2+80, 12 bytes"), "{shown}");
    assert!(!shown.contains("not understood"), "{shown}");
    let o = gputape(&[
        "replay".as_ref(),
        "--on".as_ref(),
        "mock".as_ref(),
        trace.as_ref(),
    ]);
    let rout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{rout}{}", text(&o.stderr));
    // Every read back compared (the async rows' bytes together, at their sync), none apart.
    let (matched, of) = rout
        .split_once(" match the recording")
        .and_then(|(head, _)| {
            let mut w = head.rsplit(' ');
            let of = w.next()?.parse::<u32>().ok()?;
            w.next();
            Some((w.next()?.parse::<u32>().ok()?, of))
        })
        .unwrap_or_else(|| panic!("no read back count: {rout}"));
    assert!(matched == of && of >= 9, "{rout}");
    let _ = std::fs::remove_dir_all(d);
}

/// `export --program`: a recorded fault becomes a C program that needs only the driver. Built
/// here against the fake driver (through the shim, so its own calls are recorded too), it makes
/// the trace's calls in order with their recorded arguments, reproduces the fault (the sync
/// that reported the bad launch reports it again) and says so; its own recording has the
/// original's calls. A trace with a call kept by name only is refused, naming the call.
#[test]
fn a_recorded_fault_exported_as_a_program_reproduces_without_gputape() {
    let d = support::scratch("run-program");
    let prog = support::faults_program(&d);
    let trace = d.join("faults.gtape");
    let o = run(&[
        "-o".as_ref(),
        trace.as_ref(),
        "--".as_ref(),
        prog.as_ref(),
        "4".as_ref(),
        "2".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let dir = d.join("repro");
    let (source, err) = export_program(&trace, &dir);
    assert!(err.contains("repro.c"), "{err}");
    assert!(source.contains("cuLaunchKernel(fn[0]"), "{source}");
    let bin = support::link_program(&dir, "repro", &source);
    let again = d.join("repro.gtape");
    let o = run(&[
        "-o".as_ref(),
        again.as_ref(),
        "--".as_ref(),
        bin.as_ref(),
        dir.join("data").as_ref(),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        out.contains("the recorded fault (status 700 at call #") && out.contains("REPRODUCED"),
        "{out}"
    );
    // The repro's own calls, recorded: the original's launches, copies and syncs, in order,
    // then its final wait for the device.
    let calls = |t: &std::path::Path| -> Vec<String> {
        let o = gputape(&["show".as_ref(), t.as_ref()]);
        text(&o.stdout)
            .lines()
            .filter(|l| l.starts_with('#'))
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(2)
                    .map(|w| w.split('(').next().unwrap().to_string())
            })
            .filter(|k| !k.starts_with("cuCtxSetCurrent"))
            .collect()
    };
    let mut want = calls(&trace);
    want.push("synchronize".into());
    assert_eq!(calls(&again), want);

    // A call kept by name only: refused, and the call named.
    let records = support::records_program(&d);
    let t2 = d.join("records.gtape");
    let o = run(&["-o".as_ref(), t2.as_ref(), "--".as_ref(), records.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = gputape(&[
        "export".as_ref(),
        "--program".as_ref(),
        d.join("refused").as_ref(),
        t2.as_ref(),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("call #6") && err.contains("kept cuMemsetD32 by name only"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// The standalone program of each committed fault fixture recorded on a GPU (`export
/// --program`), built against the tests' fake driver through the shim, makes the trace's calls
/// in order: each returns what the recording saw, up to the recorded fault (which the fake
/// driver, running no kernel, does not raise: the program says so there), and the program's own
/// recording launches the fixture's kernels in the fixture's order.
#[test]
fn each_committed_fault_fixture_s_program_builds_and_makes_its_calls_in_order() {
    let kernels = |t: &std::path::Path| -> Vec<String> {
        let v = show_json(t);
        v["calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["kind"] == "launch" || c["kind"] == "launch_typed")
            .map(|c| {
                let k = c["kernel"].as_str().unwrap_or_default();
                k.rsplit("::").next().unwrap_or(k).to_string()
            })
            .collect()
    };
    for name in [
        "h200_graph_fault",
        "h200_tiny_async_illegal_step4",
        "h200_tiny_fault_step4",
        "h200_tiny_illegal_step4",
        "h200_tiny_redzone_step4",
    ] {
        let d = support::scratch(&format!("run-export-{name}"));
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("traces")
            .join(format!("{name}.gtape"));
        let dir = d.join("repro");
        let (source, _) = export_program(&fixture, &dir);
        let bin = support::link_program(&dir, "repro", &source);
        let again = d.join("again.gtape");
        let o = run_with(
            &[
                "-o".as_ref(),
                again.as_ref(),
                "--".as_ref(),
                bin.as_ref(),
                dir.join("data").as_ref(),
            ],
            &[("FAKE_CUDA_LAUNCHES_RUN", "1")],
        );
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        // Where the program says its calls stopped being as recorded: nowhere, or at the
        // recorded fault.
        let fault = out
            .split("the recorded fault (status ")
            .nth(1)
            .and_then(|r| r.split("at call #").nth(1))
            .and_then(|r| r.split(')').next())
            .map(str::to_string);
        match o.status.code() {
            Some(0) => assert!(out.contains("every call as recorded"), "{name}: {out}{err}"),
            Some(1) => {
                let fault = fault.unwrap_or_else(|| panic!("{name}: no fault named: {out}"));
                assert!(
                    out.contains(&format!("first call not as recorded: #{fault}\n")),
                    "{name}: a call before the fault was not as recorded: {out}"
                );
            }
            other => panic!("{name}: exit {other:?}: {out}{err}"),
        }
        let (want, got) = (kernels(&fixture), kernels(&again));
        assert!(!got.is_empty(), "{name}: no launch made");
        assert_eq!(got[..], want[..got.len()], "{name}");
        if o.status.code() == Some(0) {
            assert_eq!(got.len(), want.len(), "{name}");
        }
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Values written on a stream (`cuStreamWriteValue32`/`64`) are the stream-ordered uploads of
/// their bytes they amount to, each followed by an event recorded on its stream; a wait for a
/// value (`cuStreamWaitValue32`) that a recorded write meets is a wait for that write's event on
/// another stream, and nothing on the writer's own (stream order holds it); a wait for a value
/// no recorded write set stays kept by name. The mock replays it, both read backs matching.
#[test]
fn values_written_on_a_stream_are_recorded_as_uploads_and_waits_for_them_as_event_waits() {
    let d = support::scratch("run-stream-values");
    let prog = support::stream_values_program(&d);
    let trace = d.join("sv.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains(
            "stream_values: cafe 1122334455667788, copied cafe 1122334455667788, errors 0"
        ),
        "{out}"
    );
    assert!(
        err.contains(
            "not understood, kept by name only (a replay skips them): cuStreamWaitValue32 (for a value no recorded stream write set) x1;"
        ),
        "{err}"
    );
    assert!(
        err.contains("2 stream waits for a value a recorded stream write set"),
        "{err}"
    );
    assert_value_ops(&trace);
    replays_on_mock_matching(&trace, "2 of 2");
    let _ = std::fs::remove_dir_all(d);
}

/// A node destroyed before its graph is instantiated is not in the graph the trace makes of
/// it; an executable's child-graph node given another graph runs that graph's nodes from its
/// next launch (a graph of its own, made there); the mock's replay checks every buffer.
#[test]
fn a_destroyed_node_and_a_child_graph_given_to_an_executable_replay_as_they_ran() {
    let d = support::scratch("run-node-changes");
    let prog = support::node_changes_program(&d);
    let trace = d.join("nc.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("node_changes: x 01010101, y 00000000, z 05050505 then 07070707, errors 0"),
        "{out}"
    );
    assert!(!err.contains("not understood"), "{err}");
    assert!(
        err.contains("1 executable graph change after instantiation"),
        "{err}"
    );
    replays_on_mock_matching(&trace, "4 of 4");
    let _ = std::fs::remove_dir_all(d);
}

/// A graph built node by node with event nodes: its wait node becomes a wait for the event
/// before each launch of the graph, its record node a record of the event after it, so the
/// streams it joins keep their order in a replay; the mock's replay checks both buffers.
#[test]
fn a_graph_s_event_nodes_become_waits_before_its_launches_and_records_after() {
    let d = support::scratch("run-event-nodes");
    let prog = support::event_nodes_program(&d);
    let trace = d.join("en.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("event_nodes: x[5] = 5, x[12] = 0.7471, y[12] = 0.7471, errors 0"),
        "{out}"
    );
    assert!(!err.contains("not understood"), "{err}");
    assert!(err.contains("2 event nodes of those graphs"), "{err}");
    let calls: Vec<String> = call_texts(&trace)
        .into_iter()
        .skip_while(|c| !c.starts_with("copy_h2d_async"))
        .collect();
    let want = [
        "copy_h2d_async(buf0+0, 64 bytes #",
        "record_event(ev0, s1)",
        "stream_wait_event(s2, ev0)",
        "launch_graph(graph0, s2)",
        "record_event(ev1, s2)",
        "stream_wait_event(s1, ev1)",
        "copy_d2d_async(buf0+0",
    ];
    assert_calls_begin(&calls, &want);
    replays_on_mock_matching(&trace, "2 of 2");
    let _ = std::fs::remove_dir_all(d);
}

/// A batch of stream memory operations (`cuStreamBatchMemOp`) is the values written and
/// waited for that it holds, in its order, each recorded as its own call would be (a barrier
/// orders memory only: nothing); the mock's replay checks both buffers.
#[test]
fn a_batch_of_stream_memory_operations_is_recorded_as_its_writes_and_waits() {
    let d = support::scratch("run-stream-batch");
    let prog = support::stream_batch_program(&d);
    let trace = d.join("sb.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("stream_batch: cafe 1122334455667788, copied cafe 1122334455667788, errors 0"),
        "{out}"
    );
    assert!(
        err.contains("cuStreamWaitValue32 (for a value no recorded stream write set) x1"),
        "{err}"
    );
    assert!(
        err.contains("1 stream wait for a value a recorded stream write set"),
        "{err}"
    );
    assert_value_ops(&trace);
    replays_on_mock_matching(&trace, "2 of 2");
    let _ = std::fs::remove_dir_all(d);
}

/// Host functions queued on a stream (`cuLaunchHostFunc`, `cuStreamAddCallback`) are recorded
/// in their place on it, named by the program's function (a `static` one exports no symbol:
/// found in the file's own symbol table, with its file and offset), a captured one inside its
/// capture; the mock's replay
/// keeps their place, says it did not run them, and still checks the copy they followed (the
/// captured copy to the host writes a pinned region of the trace's own, as a replay's capture
/// needs); an exported program leaves them out.
#[test]
fn host_functions_are_recorded_in_their_stream_s_order_and_named_by_the_replay() {
    let d = support::scratch("run-host-func");
    let prog = support::host_func_program(&d);
    let trace = d.join("hf.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("host_func: seen 5e5e5e5e, callbacks 1, errors 0"),
        "{out}"
    );
    assert!(!err.contains("cuLaunchHostFunc x"), "kept by name: {err}");
    assert!(
        !err.contains("cuStreamAddCallback x"),
        "kept by name: {err}"
    );
    let calls: Vec<String> = show_json(&trace)["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call"].as_str().unwrap().to_string())
        .collect();
    let at = |p: &str| {
        calls
            .iter()
            .position(|c| c.starts_with(p))
            .unwrap_or_else(|| panic!("no {p}: {calls:?}"))
    };
    let funcs: Vec<&String> = calls
        .iter()
        .filter(|c| c.starts_with("host_func("))
        .collect();
    assert_eq!(funcs.len(), 3, "{calls:?}");
    assert!(
        funcs[0].starts_with("host_func(s1, take (host_func+0x"),
        "{funcs:?}"
    );
    assert!(
        funcs[1].starts_with("host_func(s1, count (host_func+0x"),
        "{funcs:?}"
    );
    assert_eq!(funcs[0], funcs[2], "one function, two names: {funcs:?}");
    // In the stream's order: after the copy the first one waited for, before the sync; the
    // captured one between its capture's ends.
    assert!(at("copy_d2h_async") < at("host_func("), "{calls:?}");
    assert!(at("host_func(") < at("synchronize(s1)"), "{calls:?}");
    let last = calls
        .iter()
        .rposition(|c| c.starts_with("host_func("))
        .unwrap();
    assert!(
        at("begin_capture") < last && last < at("end_capture"),
        "{calls:?}"
    );
    let captured_copy = &calls[at("begin_capture") + 1];
    assert!(
        captured_copy.starts_with("copy_d2h_async") && !captured_copy.contains("pageable"),
        "{captured_copy}"
    );
    let out = replay_on_mock_ok(&trace);
    assert!(out.contains("1 of 1 match"), "{out}");
    assert!(
        out.contains("host functions the program queued, not run")
            && out.contains(" on s1 x2 (first #")
            && out.contains(" on s1 x1 (first #"),
        "{out}"
    );
    let (source, _) = export_program(&trace, &d.join("repro"));
    assert!(!source.contains("HostFunc"), "{source}");
    let _ = std::fs::remove_dir_all(d);
}

/// A launch with more than 48 KiB of dynamic shared memory, exported as a program: the
/// program raises the function's limit before it (as the recorded program did, by a call a
/// recording may keep by name only), and built against the fake driver it makes every call as
/// recorded.
#[test]
fn an_exported_launch_with_large_shared_memory_raises_its_function_s_limit() {
    let d = support::scratch("run-big-shared");
    let prog = support::big_shared_program(&d);
    let trace = d.join("bs.gtape");
    let (out, _) = record_ok(&prog, &trace);
    assert!(out.contains("back[3] = 15, errors 0"), "{out}");
    let dir = d.join("repro");
    let (source, _) = export_program(&trace, &dir);
    let raise = source
        .find("cuFuncSetAttribute(fn[0], 8 /* MAX_DYNAMIC_SHARED_SIZE_BYTES */, 98304);")
        .unwrap_or_else(|| panic!("no limit raised: {source}"));
    let launch = source.find("cuLaunchKernel(fn[0]").unwrap();
    assert!(raise < launch, "{source}");
    let bin = support::link_program(&dir, "repro", &source);
    let o = run(&["--".as_ref(), bin.as_ref(), dir.join("data").as_ref()]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(out.contains("every call as recorded"), "{out}");
    let _ = std::fs::remove_dir_all(d);
}

/// A kernel Triton compiled (a cubin whose name says no type) is typed from Triton's cache:
/// the cubin the program loaded is found there byte for byte beside its TTIR, whose signature
/// types each float pointer; a cached cubin of the same name but other bytes (another compile)
/// is not taken for it.
#[test]
fn a_triton_kernel_is_typed_from_triton_s_cache() {
    let d = support::scratch("run-triton");
    let src = r#"
#include <stdio.h>
#include <stddef.h>
typedef unsigned long long CUdeviceptr;
int cuInit(unsigned flags);
int cuMemAlloc_v2(CUdeviceptr *p, size_t n);
int cuModuleLoadData(void **module, const void *image);
int cuModuleGetFunction(void **f, void *module, const char *name);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
int cuStreamSynchronize(void *stream);
/* The smallest ELF64 header the shim sizes: no sections, 64 bytes. */
static unsigned char cubin[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
int main(int argc, char **argv) {
    CUdeviceptr x;
    void *m, *f;
    int n = 16, bad = 0;
    float k = 2.0f;
    cubin[0x3A] = 0x40;
    cubin[8] = argc > 1; /* another compile: other bytes */
    bad |= cuInit(0);
    bad |= cuMemAlloc_v2(&x, 64);
    bad |= cuModuleLoadData(&m, cubin);
    bad |= cuModuleGetFunction(&f, m, "scale");
    void *params[] = {&x, &n, &k};
    bad |= cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, params, NULL);
    bad |= cuStreamSynchronize(NULL);
    printf("triton: errors %d\n", bad);
    return bad;
}
"#;
    let prog = support::link_program(&d, "triton", src);
    let cache = d.join("triton-cache");
    let mut cubin = vec![0u8; 64];
    cubin[..7].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1]);
    cubin[0x3A] = 0x40;
    let ours = cache.join("HASHA");
    let other = cache.join("HASHB");
    std::fs::create_dir_all(&ours).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let mut changed = cubin.clone();
    changed[8] = 1;
    std::fs::write(other.join("scale.cubin"), &changed).unwrap();
    std::fs::write(
        other.join("scale.ttir"),
        "tt.func public @scale(%arg0: !tt.ptr<bf16>, %arg1: i32, %arg2: f32) {",
    )
    .unwrap();
    std::fs::write(ours.join("scale.cubin"), &cubin).unwrap();
    std::fs::write(
        ours.join("scale.ttir"),
        "module {\n  tt.func public @scale(%arg0: !tt.ptr<f32> {tt.divisibility = 16 : i32} \
         loc(\"k.py\":3:0), %arg1: i32 loc(\"k.py\":3:0), %arg2: f32 loc(\"k.py\":3:0)) \
         attributes {noinline = false} {",
    )
    .unwrap();
    let trace = d.join("triton.gtape");
    let cache_s = cache.to_str().unwrap();
    let o = run_with(
        &["-o".as_ref(), trace.as_ref(), "--".as_ref(), prog.as_ref()],
        &[("TRITON_CACHE_DIR", cache_s)],
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        err.contains("1 Triton kernels typed from Triton's cache"),
        "{err}"
    );
    let shown = text(&gputape(&["show".as_ref(), trace.as_ref()]).stdout);
    assert!(
        shown.contains("elements: param 0 f32 (from its Triton signature)"),
        "{shown}"
    );
    // Another compile's bytes: the cache's cubin of that name is not this one.
    let trace2 = d.join("other.gtape");
    let o = run_with(
        &[
            "-o".as_ref(),
            trace2.as_ref(),
            "--".as_ref(),
            prog.as_ref(),
            "x".as_ref(),
        ],
        &[("TRITON_CACHE_DIR", cache_s)],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let shown = text(&gputape(&["show".as_ref(), trace2.as_ref()]).stdout);
    assert!(
        shown.contains("elements: param 0 bf16"),
        "the other compile's types: {shown}"
    );
    // torch.compile's kernels: Inductor points Triton at a cache of its own from inside the
    // program, which the converter finds by Inductor's rule (`triton/<device>` under it).
    let inductor = d.join("inductor");
    let dev0 = inductor.join("triton/0/HASHA");
    std::fs::create_dir_all(&dev0).unwrap();
    for f in ["scale.cubin", "scale.ttir"] {
        std::fs::copy(ours.join(f), dev0.join(f)).unwrap();
    }
    let trace3 = d.join("inductor.gtape");
    let o = run_with(
        &["-o".as_ref(), trace3.as_ref(), "--".as_ref(), prog.as_ref()],
        &[("TORCHINDUCTOR_CACHE_DIR", inductor.to_str().unwrap())],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("1 Triton kernels typed from Triton's cache"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// A program without Python: each call's site is the native frame it was made from, module +
/// offset (and the exported symbol around it), the innermost outside the libraries a program
/// calls the driver through; where that frame lies is what the program itself says.
#[test]
fn a_c_program_s_calls_carry_the_module_and_offset_they_were_made_from() {
    let d = support::scratch("run-sites");
    let prog = support::sites_program(&d);
    let trace = d.join("sites.gtape");
    let o = run(&["-o".as_ref(), trace.as_ref(), "--".as_ref(), prog.as_ref()]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    let hex = |key: &str| {
        let at = out.find(key).unwrap_or_else(|| panic!("{key} in {out}")) + key.len();
        let word = out[at..].split([',', ' ', '\n']).next().unwrap();
        u64::from_str_radix(word.trim_start_matches("0x"), 16).unwrap()
    };
    let (launch_here, main) = (hex("launch_here at "), hex("main at "));
    let o = gputape(&["show".as_ref(), "--json".as_ref(), trace.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let shown = text(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(&shown).expect("show --json");
    let calls = v["calls"].as_array().expect("calls");
    // The program's own frame, as module+offset of its own file, and the offset lies in the
    // function that made the call (the symbol's start is the program's own offset for it).
    let sites = prog.display().to_string();
    let offset_in = |site: &str, symbol: &str| -> (u64, u64) {
        let rest = site
            .strip_prefix(&format!("{sites}+0x"))
            .unwrap_or_else(|| panic!("{site} is not of {sites}"));
        let (off, func) = rest.split_once(" in ").expect("a symbol");
        let sym_off = func
            .strip_prefix(&format!("{symbol}+0x"))
            .unwrap_or_else(|| panic!("{func} is not in {symbol}"));
        (
            u64::from_str_radix(off, 16).unwrap(),
            u64::from_str_radix(sym_off, 16).unwrap(),
        )
    };
    let alloc = calls
        .iter()
        .find(|c| c["kind"] == "alloc")
        .unwrap_or_else(|| panic!("no alloc in {shown}"));
    let alloc_site = alloc["site"].as_str().unwrap();
    let (off, into) = offset_in(alloc_site, "main");
    assert_eq!(off - into, main, "{alloc_site}");
    let launches: Vec<_> = calls.iter().filter(|c| c["kind"] == "launch").collect();
    assert_eq!(launches.len(), 2, "{shown}");
    let own = launches[0]["site"].as_str().unwrap();
    let (off, into) = offset_in(own, "launch_here");
    assert_eq!(off - into, launch_here, "{own}");
    // Made inside the library: named by main's frame, the library's frame kept below it.
    let (lib_site, lib_frames) = (
        launches[1]["site"].as_str().unwrap(),
        launches[1]["stack"]["frames"].as_array().unwrap(),
    );
    let (off, into) = offset_in(lib_site, "main");
    assert_eq!(off - into, main, "{lib_site}");
    assert_eq!(lib_frames.len(), 2, "{lib_frames:?}");
    assert!(
        lib_frames[0]["file"]
            .as_str()
            .unwrap()
            .contains("libcublas_sites.so+0x"),
        "{lib_frames:?}"
    );
    assert!(
        lib_frames[0]["function"]
            .as_str()
            .unwrap()
            .starts_with("sites_lib_launch+0x"),
        "{lib_frames:?}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// Graphs changed after they were made, as engines that build their own do: new parameters
/// for an executable's nodes reach only it, new parameters for a graph's nodes only later
/// instantiations, a node turned off stops running, `cuGraphExecUpdate` gives an executable a
/// clone's nodes, and a child graph runs its nodes in its parent. Recorded, each launch runs in
/// the trace the work it ran (a trace graph of the executable's nodes as they then were, made
/// where it next ran, the one it replaced destroyed), and the mock replays it with every read
/// back it can check matching (the memsets'; it cannot run the fake PTX kernel).
#[test]
fn graphs_changed_after_instantiation_replay_the_work_each_launch_ran() {
    let d = support::scratch("run-graph-update");
    let prog = support::graph_update_program(&d);
    let trace = d.join("gu.gtape");
    let (out, err) = record_ok(&prog, &trace);
    for line in [
        "eA: w[3] = 0x1010101, x[3] = 6, y[3] = 3, z[3] = 0, host node runs 1, errors 0",
        "eA changed: w[3] = 0x2020202, x[3] = 6, y[3] = 9, z[3] = 0, host node runs 2, errors 0",
        "eA again: w[3] = 0x2020202, x[3] = 6, y[3] = 27, z[3] = 0, host node runs 3, errors 0",
        "eB: w[3] = 0x3030303, x[3] = 30, y[3] = 27, z[3] = 0, host node runs 4, errors 0",
        "eB without its memset: w[3] = 0, x[3] = 150, y[3] = 27, z[3] = 0, host node runs 5, errors 0",
        "eA updated: w[3] = 0x3030303, x[3] = 750, y[3] = 27, z[3] = 0, host node runs 6, errors 0",
        "eD: w[3] = 0x3030303, x[3] = 3750, y[3] = 27, z[3] = 0x4040404, host node runs 7, errors 0",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    assert!(!err.contains("not understood"), "{err}");
    assert!(
        err.contains("3 executable graph changes after instantiation"),
        "{err}"
    );
    let calls = show_json(&trace)["calls"].as_array().unwrap().clone();
    let kinds: Vec<&str> = calls.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    let n = |k: &str| kinds.iter().filter(|&&x| x == k).count();
    // A, eA changed, A changed (eB), eB without its memset, C (eA updated), D.
    assert_eq!(n("begin_capture"), 6, "{kinds:?}");
    assert_eq!(n("launch_graph"), 7, "{kinds:?}");
    assert_eq!(n("destroy_graph"), 6, "{kinds:?}");
    assert_eq!(
        n("host_func"),
        6,
        "every graph but eB's without its memset has the host node"
    );
    // The memsets each graph runs, in the order the graphs were made.
    let memsets: Vec<String> = calls
        .iter()
        .filter(|c| c["kind"] == "memset_async")
        .map(|c| {
            c["call"]
                .as_str()
                .unwrap()
                .split(", ")
                .nth(1)
                .unwrap()
                .to_string()
        })
        .collect();
    let want = ["0x01", "0x02", "0x03", "0x03", "0x04", "0x03"];
    assert_eq!(memsets, want, "{calls:?}");
    replays_on_mock_matching(&trace, "15 of 15");
    let _ = std::fs::remove_dir_all(d);
}

/// Copies in batches (`cuMemcpyBatchAsync_v2`, CUDA 13) and a copy with attributes are
/// recorded as the generic copies they are, each direction from its pointers (two uploads, a
/// read back and a device copy, a read back), and the mock replays them with both read backs
/// matching.
#[test]
fn batched_copies_are_recorded_as_their_copies_and_replay() {
    let d = support::scratch("run-batch-copies");
    let prog = support::batch_copies_program(&d);
    let trace = d.join("bc.gtape");
    let (out, err) = record_ok(&prog, &trace);
    let want = out.lines().next().unwrap_or_default();
    let sums: Vec<&str> = want.split(['(', ')', ' ', ',']).collect();
    assert!(out.contains("errors 0"), "{out}");
    assert_eq!(sums[1], sums[4], "x read back as uploaded: {out}");
    // "w SUM (want SUM)": the rows the 3D batch packed read back as the host packed them.
    let w: Vec<&str> = want
        .split_once(", w ")
        .map(|(_, rest)| {
            rest.split([' ', '(', ')'])
                .filter(|t| !t.is_empty())
                .collect()
        })
        .unwrap_or_default();
    assert!(w.len() > 2 && w[0] == w[2], "w read back packed: {out}");
    assert!(!err.contains("not understood"), "{err}");
    let kinds: Vec<String> = show_json(&trace)["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap().to_string())
        .filter(|k| k.starts_with("copy"))
        .collect();
    assert_eq!(
        kinds,
        [
            "copy_h2d_async",
            "copy_h2d_async",
            "copy_d2h_async",
            "copy_d2d_async",
            "copy_d2h_async",
            "copy_h2d_async",
            "copy_d2h_async"
        ],
        "{kinds:?}"
    );
    // The 3D batch's upload is the rows packed together (32 bytes, not the source's pitch).
    let calls = call_texts(&trace);
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("copy_h2d_async(buf3+0, 32 bytes")),
        "{calls:?}"
    );
    // The read backs of the stream hold their bytes, taken at its sync, which the replay
    // compares there (one check at the sync).
    let o = gputape(&["show".as_ref(), trace.as_ref()]);
    let shown = text(&o.stdout);
    assert_eq!(shown.matches("at sync]").count(), 3, "{shown}");
    replays_on_mock_matching(&trace, "1 of 1");
    let _ = std::fs::remove_dir_all(d);
}

/// Pinned host memory the device reads and writes where it lies (zero-copy: allocated mapped,
/// or registered and its device address asked) is a buffer of the trace's own, followed as
/// managed memory: the launches on it name that buffer (a replay would otherwise refuse an
/// address no allocation holds), what the host wrote is copied in before the work, what the
/// device left is read back after each sync, and the mock replays it with every read back it
/// can check matching (the memsets'; it cannot run the fake PTX kernel).
#[test]
fn pinned_memory_the_device_maps_is_a_buffer_followed_as_managed_memory() {
    let d = support::scratch("run-mapped");
    let prog = support::mapped_program(&d);
    let trace = d.join("mapped.gtape");
    let (out, err) = record_ok(&prog, &trace);
    for line in [
        "step 1: x[3] = 3, x[13] = 0.7471, y[3] = 13, y[13] = 0.7471, errors 0",
        "step 2: x[3] = 6, y[3] = 39, errors 0",
        "step 3: x[3] = 200, y[3] = 600, errors 0",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    assert!(
        err.contains("2 pinned host regions the device maps"),
        "{err}"
    );
    assert!(!err.contains("not understood"), "{err}");
    let calls = show_json(&trace)["calls"].as_array().unwrap().clone();
    let kinds: Vec<&str> = calls.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|&&k| k == "alloc_managed").count(), 2);
    assert_eq!(kinds.iter().filter(|&&k| k == "free").count(), 2);
    let launches: Vec<&str> = calls
        .iter()
        .filter(|c| c["kind"] == "launch")
        .map(|c| c["call"].as_str().unwrap())
        .collect();
    assert_eq!(launches.len(), 4);
    assert!(launches.iter().all(|l| l.contains("(buf")), "{launches:?}");
    replays_on_mock_matching(&trace, "2 of 2");
    let _ = std::fs::remove_dir_all(d);
}

/// `cuLaunchKernelEx`'s attributes beyond the cluster shape and the cooperative flag: an event
/// the launch records (here its completion event, which another stream waits for) is an event
/// record on the launch's stream just after it, so the wait keeps its order in a replay; the
/// rest (a priority, programmatic stream serialization) change scheduling, not results, and
/// the summary names them.
#[test]
fn launch_attributes_keep_their_events_and_are_named() {
    let d = support::scratch("run-launch-attrs");
    let prog = support::launch_attrs_program(&d);
    let trace = d.join("attrs.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(out.contains("attributes: back[3] = 18, errors 0"), "{out}");
    assert!(
        err.contains(
            "launch attributes a replay does not apply (they change how launches overlap or are scheduled, not what they compute): priority x1, programmatic stream serialization x1"
        ),
        "{err}"
    );
    assert!(
        err.contains("1 event recorded by launch attributes"),
        "{err}"
    );
    let calls = show_json(&trace)["calls"].as_array().unwrap().clone();
    let kinds: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap(),
                c["stream"].as_str().unwrap_or(""),
            )
        })
        .filter(|(k, _)| matches!(*k, "launch" | "record_event" | "stream_wait_event"))
        .collect();
    assert_eq!(
        kinds,
        [
            ("launch", "s1"),
            ("record_event", "s1"),
            ("stream_wait_event", "s2"),
            ("launch", "s2")
        ],
        "{calls:?}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// A captured graph's nodes are known by the node each captured call became (the stream's
/// capture dependencies just after it), so new parameters for them are followed as for a graph
/// built node by node: the executable's own (`cuGraphExecKernelNodeSetParams` on a node
/// `cuGraphGetNodes` listed) from its next launch, the graph's (`cuGraphKernelNodeSetParams`)
/// only once the executable is updated to it. Each launch in the trace runs the factors that
/// launch ran: (2, 3), (2, 5), (2, 5), (7, 3).
#[test]
fn new_parameters_for_a_captured_graph_s_nodes_are_followed() {
    let d = support::scratch("run-capture-update");
    let prog = support::capture_update_program(&d);
    let trace = d.join("cu.gtape");
    let (out, err) = record_ok(&prog, &trace);
    for line in [
        "step 1: x[3] = 18, errors 0",
        "step 2: x[3] = 180, errors 0",
        "step 3: x[3] = 1800, errors 0",
        "step 4: x[3] = 37800, errors 0",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    assert!(!err.contains("not understood"), "{err}");
    assert!(
        err.contains("2 executable graph changes after instantiation"),
        "{err}"
    );
    let calls = show_json(&trace)["calls"].as_array().unwrap().clone();
    // The factor of each launch inside a capture, by the graph it is in, and the graph each
    // launch of e ran.
    let mut graphs: Vec<Vec<String>> = Vec::new();
    let mut launched: Vec<String> = Vec::new();
    for c in &calls {
        let text = c["call"].as_str().unwrap();
        match c["kind"].as_str().unwrap() {
            "begin_capture" => graphs.push(Vec::new()),
            "launch" => {
                let k = text.rsplit(", ").next().unwrap_or_default();
                graphs
                    .last_mut()
                    .unwrap()
                    .push(k.trim_end_matches(')').to_string());
            }
            "launch_graph" => launched.push(text.to_string()),
            _ => {}
        }
    }
    let f = |a: &str, b: &str| vec![a.to_string(), b.to_string()];
    assert_eq!(
        graphs,
        [
            f("0x40000000", "0x40400000"),
            f("0x40000000", "0x40a00000"),
            f("0x40e00000", "0x40400000")
        ],
        "{calls:?}"
    );
    assert_eq!(launched.len(), 4);
    assert!(
        launched[0].starts_with("launch_graph(graph0,"),
        "{launched:?}"
    );
    assert!(
        launched[1].starts_with("launch_graph(graph1,"),
        "{launched:?}"
    );
    assert!(
        launched[2].starts_with("launch_graph(graph1,"),
        "{launched:?}"
    );
    assert!(
        launched[3].starts_with("launch_graph(graph2,"),
        "{launched:?}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// Another process's allocation opened through an IPC handle (`cuIpcOpenMemHandle`) is a buffer
/// of the trace's own, its extent asked of the driver and its bytes as they were when opened
/// copied in, so work on it replays instead of being refused for an address no allocation
/// holds; the export is counted, the close frees the buffer. The mock replays it, both halves of
/// the read back matching (the bytes copied in, and the memset's).
#[test]
fn memory_opened_through_an_ipc_handle_is_a_buffer_holding_its_bytes_when_opened() {
    let d = support::scratch("run-ipc");
    let prog = support::ipc_program(&d);
    let trace = d.join("ipc.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("ipc: back[3] = 4, back[40] = 238, errors 0"),
        "{out}"
    );
    assert!(!err.contains("not understood"), "{err}");
    assert!(
        err.contains("1 allocation shared with other processes (IPC)"),
        "{err}"
    );
    assert!(
        err.contains("1 allocation of other processes opened (IPC"),
        "{err}"
    );
    let calls: Vec<String> = show_json(&trace)["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call"].as_str().unwrap().to_string())
        .collect();
    let want = [
        "alloc(64)",
        "copy_h2d(buf0+0, 64 bytes #",
        "alloc(64)",
        "copy_h2d(buf1+0, 64 bytes #",
        "memset(buf1+32, 0xee, 32)",
        "copy_d2h(buf1+0, 64 bytes)",
        "free(buf1+0)",
    ];
    assert_eq!(calls.len(), want.len(), "{calls:?}");
    for (c, w) in calls.iter().zip(want) {
        assert!(c.starts_with(w), "{c} is not {w}: {calls:?}");
    }
    replays_on_mock_matching(&trace, "1 of 1");
    let _ = std::fs::remove_dir_all(d);
}

/// The two traces `run -o DIR/STEM.gtape` wrote for a parent and the child it forked: the
/// parent's (the one that filled the shared memory) first, the child's (the one that wrote over
/// it with a memset) second.
fn parent_and_child(d: &std::path::Path, stem: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut traces: Vec<std::path::PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(stem) && name.ends_with(".gtape")
        })
        .collect();
    traces.sort();
    assert_eq!(traces.len(), 2, "{traces:?}");
    if call_texts(&traces[0])
        .iter()
        .any(|c| c.starts_with("memset"))
    {
        (traces[1].clone(), traces[0].clone())
    } else {
        (traces[0].clone(), traces[1].clone())
    }
}

/// `show` of `trace`'s text.
fn shown(trace: &std::path::Path) -> String {
    let o = gputape(&["show".as_ref(), trace.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    text(&o.stdout)
}

/// The parent's trace alone replays on the mock with a read back that differs (the child's
/// writes are not in it); with the child's, through `ranks --replay`, every read back matches.
/// The ranks replay's stdout.
fn diverges_alone_matches_together(parent: &std::path::Path, child: &std::path::Path) -> String {
    let o = gputape(&[
        "replay".as_ref(),
        "--on".as_ref(),
        "mock".as_ref(),
        parent.as_ref(),
    ]);
    let alone = text(&o.stdout);
    assert_ne!(o.status.code(), Some(0), "{alone}{}", text(&o.stderr));
    let o = gputape(&[
        "ranks".as_ref(),
        "--replay".as_ref(),
        parent.as_ref(),
        child.as_ref(),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    out
}

#[test]
fn processes_that_shared_physical_memory_through_a_file_descriptor_replay_together() {
    let d = support::scratch("run-vmm-fork");
    let prog = support::vmm_fork_program(&d);
    let trace = d.join("vmm.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("vmm child: before[40] = 41, after[40] = 238, errors 0"),
        "{out}"
    );
    assert!(
        out.contains("vmm parent: back[3] = 4, back[40] = 238, child exit 0, errors 0"),
        "{out}"
    );
    assert!(
        err.contains("1 physical allocation shared with other processes"),
        "{err}"
    );
    assert!(
        err.contains("1 physical allocation of other processes imported"),
        "{err}"
    );
    assert!(!err.contains("cannot pair"), "{err}");
    assert!(err.contains("gputape ranks --replay"), "{err}");
    // The list of exported descriptors went with the run's logs.
    assert!(
        !std::fs::read_dir(&d).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("shared-fds")),
        "the descriptor list was left behind"
    );
    let (parent, child) = parent_and_child(&d, "vmm.");
    let p_shown = shown(&parent);
    assert!(
        p_shown.contains("shared buf0: handed to other processes before #"),
        "{p_shown}"
    );
    assert!(
        p_shown.contains("(shareable handle: a file descriptor process "),
        "{p_shown}"
    );
    let c_shown = shown(&child);
    for want in [
        "shared buf0: another process's, opened here (shareable handle: a file descriptor",
        "; what it held then uploaded by #1",
    ] {
        assert!(c_shown.contains(want), "{want}: {c_shown}");
    }
    // The child's buffer is made where its mapping became readable, with the parent's bytes.
    assert_calls_begin(
        &call_texts(&child),
        &[
            "alloc(4096)",
            "copy_h2d(buf0+0, 4096 bytes",
            "copy_d2h(buf0+0, 64 bytes)",
            "memset(buf0+32, 0xee, 32)",
        ],
    );
    let out = diverges_alone_matches_together(&parent, &child);
    assert!(
        out.contains("buf0 (#0) is rank 0's buf0, opened from its shareable handle"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn processes_that_shared_memory_and_an_event_through_ipc_handles_replay_together() {
    let d = support::scratch("run-ipc-fork");
    let prog = support::ipc_fork_program(&d);
    let trace = d.join("ipc.gtape");
    let (out, err) = record_ok(&prog, &trace);
    assert!(
        out.contains("ipc child: before[40] = 41, after[40] = 238, errors 0"),
        "{out}"
    );
    assert!(
        out.contains("ipc parent: back[3] = 4, back[40] = 238, child exit 0, errors 0"),
        "{out}"
    );
    assert!(err.contains("gputape ranks --replay"), "{err}");
    let (parent, child) = parent_and_child(&d, "ipc.");
    // Each trace names what it shared: the parent's buffer and event handed over, the child's
    // opened (the buffer with the upload of its bytes when opened).
    let (p_shown, c_shown) = (shown(&parent), shown(&child));
    for want in [
        "shared buf0: handed to other processes before #",
        "shared ev0: handed",
    ] {
        assert!(p_shown.contains(want), "{want}: {p_shown}");
    }
    for want in [
        "shared buf0: another process's, opened here (IPC handle",
        "; what it held then uploaded by #1",
        "shared ev0: another process's, opened here",
    ] {
        assert!(c_shown.contains(want), "{want}: {c_shown}");
    }
    let child_calls = call_texts(&child);
    assert!(
        child_calls[0].starts_with("alloc(64)") && child_calls[1].starts_with("copy_h2d(buf0+0"),
        "{child_calls:?}"
    );
    // Alone, the parent's replay has no child: its read back of what the child wrote differs.
    // Together, the child's buffer is the parent's: both read backs match the recording.
    let out = diverges_alone_matches_together(&parent, &child);
    assert!(
        out.contains(
            "2 buffer(s) and event(s) opened through IPC or shareable handles by processes that shared"
        ),
        "{out}"
    );
    assert!(
        out.contains("buf0 (#0) is rank 0's buf0, opened from its IPC handle"),
        "{out}"
    );
    assert!(
        out.contains("#1, the upload of what buf0 held when opened"),
        "{out}"
    );
    // The child's event is the parent's: what the child recorded, the parent waited for.
    assert!(
        out.contains("ev0 (#2) is rank 0's ev0, opened from its IPC handle"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(d);
}
