//! The examples an engine author copies from build (cargo builds them with the tests) and run
//! on the mock to a clean exit.

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/NAME`, beside this test's own binary.
fn example(name: &str) -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let profile = me.parent().and_then(|d| d.parent()).unwrap();
    profile.join("examples").join(name)
}

#[test]
fn the_examples_run_on_the_mock() {
    for (name, expect) in [
        ("record_your_engine", "recorded"),
        ("flight_recorder", "REPRODUCED"),
        ("snapshot_test", "as a failure reads: [at-most-launches]"),
        ("tp_fault", "the dumps name rank 1 at step 13"),
    ] {
        let p = example(name);
        assert!(p.exists(), "{} is built with the tests", p.display());
        let dir = std::env::temp_dir().join(format!("gputape-ex-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let o = Command::new(&p)
            .env_remove("GPUTAPE_FLIGHT")
            .env("GPUTAPE_RECORD", dir.join("engine.gtape"))
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{name}: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains(expect), "{name}: {out}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn the_engine_tape_example_is_the_whole_command_line() {
    let p = example("engine_tape");
    assert!(p.exists(), "{} is built with the tests", p.display());
    let o = Command::new(&p)
        .args(["replay", "traces/mock_two_streams.gtape"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("replayed"), "{out}");
    let o = Command::new(&p).arg("no-such-verb").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// Run the engine's tool with a replay deadline of 3 s: its exit status and its output.
fn with_deadline(tool: &std::path::Path, args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let o = Command::new(tool)
        .args(args)
        .env("GPUTAPE_REPLAY_DEADLINE_S", "3")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), text)
}

/// `tool minimize DUMP -o SMALL EXTRA...`, its output.
fn minimize_to(
    tool: &std::path::Path,
    dump: &std::path::Path,
    small: &std::path::Path,
    extra: &[&str],
) -> std::process::Output {
    Command::new(tool)
        .arg("minimize")
        .arg(dump)
        .arg("-o")
        .arg(small)
        .args(extra)
        .output()
        .unwrap()
}

fn gtapes(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "gtape"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Run the outside engine (`p`) with `GPUTAPE_FLIGHT=dir` and a fault at step 29 (`graph_at`:
/// its step captured there), see it die with exit 1 as an engine does, and return its dump.
fn engine_dump(
    p: &std::path::Path,
    dir: &std::path::Path,
    fault: &str,
    graph_at: Option<&str>,
) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    let mut args = vec!["run", "--fault", fault, "--fault-step", "29"];
    if let Some(at) = graph_at {
        args.extend(["--graph-at", at]);
    }
    let o = Command::new(p)
        .args(&args)
        .env("GPUTAPE_FLIGHT", dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{args:?}: the engine dies");
    gtapes(dir).pop().expect("a dump")
}

/// The outside engine as its user runs it (`GPUTAPE_FLIGHT` on, a fault at a step nobody
/// chose), and its own tool on the dump: the engine dies with exit 1, the dump replays with
/// the kernel named and exit 0, and `minimize` shrinks it to a handful of calls.
#[test]
fn the_outside_engine_dies_and_its_tool_reproduces_and_minimizes_each_fault() {
    let p = example("outside_engine");
    for (name, fault, graph_at, kernel, code) in [
        (
            "oob",
            "oob",
            None,
            "outside::oe_embed",
            "CUDA_ERROR_ILLEGAL_ADDRESS (700)",
        ),
        (
            "assert",
            "assert",
            None,
            "outside::oe_embed_checked",
            "CUDA_ERROR_ASSERT (710)",
        ),
        // The step captured at step 2 and launched as a graph from then on: the fault is
        // inside a graph captured long before the dump's steps, pinned to its node.
        (
            "graph",
            "oob",
            Some("2"),
            "outside::oe_embed",
            "CUDA_ERROR_ILLEGAL_ADDRESS (700)",
        ),
    ] {
        let dir = std::env::temp_dir().join(format!("gputape-oe-{}-{name}", std::process::id()));
        let dump = engine_dump(&p, &dir, fault, graph_at);
        let o = Command::new(&p).arg("replay").arg(&dump).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{name}: {out}");
        assert!(out.contains("REPRODUCED") && out.contains(kernel), "{out}");
        assert!(
            out.contains(code) && out.contains("flight dump: call #"),
            "{out}"
        );
        let small = dir.join("small.gtape");
        let o = minimize_to(&p, &dump, &small, &[]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{name}: {out}");
        let kept: usize = out
            .split("calls: ")
            .nth(1)
            .and_then(|s| s.split(" -> ").nth(1))
            .and_then(|s| s.split(';').next())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(usize::MAX);
        // A graph keeps its capture (begin, the captured calls, end) and its launch.
        let most = if graph_at.is_some() { 20 } else { 8 };
        assert!(kept <= most, "{name}: {out}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// A hang: the engine's kernel spins on a flag nobody sets and its next wait never returns,
/// whether that wait is the engine's (step 11, checkpoints on the device, which never wait)
/// or the flight recorder's own host checkpoint draining the streams (step 7: the 8th step
/// boundary, with `GPUTAPE_FLIGHT_DEVICE=0`). The recorder's own thread dumps after
/// GPUTAPE_FLIGHT_HANG_S; the tool's replay of the dump hangs again, is killed at its
/// deadline, and reports the hang reproduced (exit 0), naming the call that was blocked.
#[test]
fn a_hung_outside_engine_is_dumped_and_its_hang_replays_as_reproduced() {
    let p = example("outside_engine");
    for (step, blocked, device) in [("11", "copy_d2h_on_stream", "1"), ("7", "checkpoint", "0")] {
        let dir =
            std::env::temp_dir().join(format!("gputape-oe-{}-hang{step}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut engine = Command::new(&p)
            .args(["run", "--fault", "hang", "--fault-step", step])
            .env("GPUTAPE_FLIGHT", &dir)
            .env("GPUTAPE_FLIGHT_HANG_S", "0.5")
            .env("GPUTAPE_FLIGHT_DEVICE", device)
            // The step-7 checkpoint is taken whatever it costs: whether 2% of seven short
            // steps covers it is a matter of this machine's speed.
            .env("GPUTAPE_FLIGHT_BUDGET", "0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        while gtapes(&dir).is_empty() && t0.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let still_running = engine.try_wait().unwrap().is_none();
        let _ = engine.kill();
        let _ = engine.wait();
        assert!(
            still_running,
            "step {step}: the engine hangs; it does not exit"
        );
        let dump = gtapes(&dir).pop().expect("the hang was dumped");
        let (code, out) = with_deadline(&p, &["replay".as_ref(), dump.as_os_str()]);
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("hang REPRODUCED"), "step {step}: {out}");
        assert!(out.contains(blocked), "step {step}: {out}");
        // Killed once stuck where the recording hung, not at the 3 s deadline.
        assert!(
            out.contains("made no progress for") && out.contains("where the recording hung"),
            "step {step}: {out}"
        );
        // The spinning kernel is among the launches not known to have completed.
        let launches = out
            .split("launches not known to have completed")
            .nth(1)
            .unwrap_or_default();
        assert!(launches.contains("outside::oe_spin"), "step {step}: {out}");
        {
            // Shrunk while it still hangs: the spin, the wait, and little else (at step 7 the
            // wait that hung was the recorder's own, after the last call). A candidate
            // counts as hanging when its replay outlives the deadline, so the deadline leaves
            // a loaded machine room to finish the candidates that do not hang.
            let small = dir.join("small.gtape");
            let args = [
                "minimize".as_ref(),
                dump.as_os_str(),
                "--max-attempts".as_ref(),
            ];
            let (code, out) = with_deadline(
                &p,
                &[
                    &args[..],
                    &["60".as_ref(), "-o".as_ref(), small.as_os_str()],
                ]
                .concat(),
            );
            assert_eq!(code, Some(0), "{out}");
            assert!(out.contains("fault kept: a hang"), "{out}");
            assert!(out.contains("oe_spin"), "the spin is kept: {out}");
            let (code, out) = with_deadline(&p, &["replay".as_ref(), small.as_os_str()]);
            assert_eq!(code, Some(0), "{out}");
            assert!(out.contains("hang REPRODUCED"), "{out}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// The same hang with no deadline set, dumped by SIGUSR1 while the engine's copy waits (as an
/// operator signals a stuck server): the dump's reason is "SIGUSR1", not "hang:", but a call in
/// it never returned, so it is a hang's dump, and its replay, blocked again where the recording
/// was, is the hang reproduced (exit 0).
#[test]
fn a_signal_dump_of_a_hung_outside_engine_is_judged_as_a_hang() {
    let p = example("outside_engine");
    let dir = std::env::temp_dir().join(format!("gputape-oe-{}-usr1", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut engine = Command::new(&p)
        .args(["run", "--fault", "hang", "--fault-step", "11"])
        .env("GPUTAPE_FLIGHT", &dir)
        // A signal before the engine waits (a slow start on a loaded machine) dumps too, with
        // nothing in flight: each signal may dump, until one finds the copy waiting.
        .env("GPUTAPE_FLIGHT_MAX_DUMPS", "1000")
        .env_remove("GPUTAPE_FLIGHT_HANG_S")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let waiting = |p: &PathBuf| {
        gputape::trace::Trace::open(p)
            .ok()
            .filter(|t| t.dump.as_ref().is_some_and(|d| !d.in_flight.is_empty()))
            .map(|t| (p.clone(), t))
    };
    let t0 = std::time::Instant::now();
    let (dump, t) = loop {
        if let Some(found) = gtapes(&dir).iter().find_map(waiting) {
            break found;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "no SIGUSR1 dump found the engine waiting"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        // SAFETY: kill(2) on our own child, still running (it hangs).
        unsafe { libc::kill(engine.id() as i32, libc::SIGUSR1) };
    };
    let _ = engine.kill();
    let _ = engine.wait();
    assert_eq!(t.dump.as_ref().unwrap().reason, "SIGUSR1");
    assert!(
        !t.dump.as_ref().unwrap().in_flight.is_empty() && t.is_hang_dump(),
        "the engine's waiting copy is in flight in the dump"
    );
    let (code, out) = with_deadline(&p, &["replay".as_ref(), dump.as_os_str()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("hang REPRODUCED"), "{out}");
    assert!(out.contains("outside::oe_spin"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `gputape dump PID` asks an engine that armed the flight recorder itself (`GPUTAPE_FLIGHT`)
/// for its dump while it hangs: its watcher takes the request and dumps with the reason given,
/// the waiting copy in flight, and the dump replays as the hang.
#[test]
fn gputape_dump_asks_an_engine_s_own_recorder_for_its_dump() {
    let p = example("outside_engine");
    let dir = std::env::temp_dir().join(format!("gputape-oe-{}-asked", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut engine = Command::new(&p)
        .args(["run", "--fault", "hang", "--fault-step", "11"])
        .env("GPUTAPE_FLIGHT", &dir)
        .env_remove("GPUTAPE_FLIGHT_HANG_S")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Asked until a dump finds the engine waiting (a slow start on a loaded machine may be
    // asked before it reaches the hang; a request always dumps).
    let t0 = std::time::Instant::now();
    let (dump, t) = loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let o = Command::new(env!("CARGO_BIN_EXE_gputape"))
            .args([
                "dump",
                &engine.id().to_string(),
                "--reason",
                "no token for 5 s",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}");
        let dump = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
        let t = gputape::trace::Trace::open(&dump).unwrap();
        if t.dump.as_ref().is_some_and(|d| !d.in_flight.is_empty()) {
            break (dump, t);
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "no dump found the engine waiting"
        );
    };
    let _ = engine.kill();
    let _ = engine.wait();
    assert_eq!(t.dump.as_ref().unwrap().reason, "asked: no token for 5 s");
    assert!(t.is_hang_dump(), "the waiting copy is in flight");
    let (code, out) = with_deadline(&p, &["replay".as_ref(), dump.as_os_str()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("hang REPRODUCED"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A NaN nobody chose: at step 29 a request of padding tokens starts with a cleared state and
/// the engine's norm (epsilon 0) divides zero by zero. The engine sees NaN in its readback
/// and dumps. Its tool's `replay` of the dump names the norm as the first writer (not the
/// readback that consumed it), eager and inside a graph captured at step 2; `--json` says
/// the same. gputape without the engine's kernels cannot run them: NOTHING CHECKED, exit 1.
#[test]
fn a_nan_in_the_outside_engine_is_traced_to_the_kernel_that_wrote_it() {
    let p = example("outside_engine");
    let gputape = PathBuf::from(env!("CARGO_BIN_EXE_gputape"));
    for (name, graph_at, node) in [("eager", None, false), ("graph", Some("2"), true)] {
        let dir = std::env::temp_dir().join(format!("gputape-nan-{}-{name}", std::process::id()));
        let dump = engine_dump(&p, &dir, "nan", graph_at);
        let o = Command::new(&p).arg("replay").arg(&dump).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{name}: {out}");
        assert!(
            out.contains("NaN written by call #") && out.contains("outside::oe_norm"),
            "{name}: {out}"
        );
        assert!(out.contains("it produced the value"), "{name}: {out}");
        assert_eq!(out.contains("a node of graph"), node, "{name}: {out}");
        assert!(out.contains("-> NaN REPRODUCED"), "{name}: {out}");
        let o = Command::new(&p)
            .args(["replay", "--check-finite", "--json"])
            .arg(&dump)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["passed"], true, "{v}");
        assert_eq!(v["finite"]["first"]["kernel"], "outside::oe_norm", "{v}");
        assert_eq!(v["finite"]["first"]["param"], 1, "{v}");
        assert_eq!(v["finite"]["first"]["value"], "NaN", "{v}");
        let o = Command::new(&gputape)
            .args(["replay", "--on", "mock", "--check-finite"])
            .arg(&dump)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "{name}: {out}");
        assert!(out.contains("NOTHING CHECKED"), "{name}: {out}");
        // The dump minimizes to the writer and what feeds it; the small trace still
        // reproduces the NaN, written by the same kernel.
        let small = dir.join("small.gtape");
        let o = minimize_to(&p, &dump, &small, &["--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(o.status.code(), Some(0), "{name}: {v}");
        assert_eq!(
            v["kept"]["fault"], "NaN first written by outside::oe_norm",
            "{name}: {v}"
        );
        let kept = v["kept"]["calls"]["after"].as_u64().unwrap();
        assert!(kept <= 20, "{name}: {v}");
        let o = Command::new(&p).arg("replay").arg(&small).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{name}: {out}");
        assert!(out.contains("-> NaN REPRODUCED"), "{name}: {out}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// `inspect` of the NaN dump: the norm's output after its launch, summarised (all NaN), and
/// written as `.npy` (header and data read back here) and `.safetensors` (its header names
/// the buffer with its type and shape).
#[test]
fn inspect_shows_a_buffer_after_any_call_in_files_numpy_reads() {
    let p = example("outside_engine");
    let dir = std::env::temp_dir().join(format!("gputape-inspect-{}", std::process::id()));
    let dump = engine_dump(&p, &dir, "nan", None);
    let o = Command::new(&p)
        .args(["replay", "--check-finite", "--json"])
        .arg(&dump)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let at = v["finite"]["first"]["seq"].as_u64().expect("a writer");
    let npy = dir.join("out.npy");
    let o = Command::new(&p)
        .arg("inspect")
        .arg(&dump)
        .args(["--at", &at.to_string(), "--writes", "--shape", "4,32", "-o"])
        .arg(&npy)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("128 f32 elements") && out.contains("128 NaN"),
        "{out}"
    );
    let bytes = std::fs::read(&npy).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = String::from_utf8_lossy(&bytes[10..10 + hlen]);
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(header.contains("'shape': (4, 32"), "{header}");
    let data = &bytes[10 + hlen..];
    assert_eq!(data.len(), 128 * 4);
    assert!(data
        .chunks_exact(4)
        .all(|c| f32::from_le_bytes(c.try_into().unwrap()).is_nan()));
    // Before the norm ran, its input (the state) was zeros: a finite summary.
    let st = dir.join("state.safetensors");
    let o = Command::new(&p)
        .arg("inspect")
        .arg(&dump)
        .args(["--at", &(at - 1).to_string(), "--buffer", "buf3", "-o"])
        .arg(&st)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("0 NaN, 0 Inf"), "{out}");
    let bytes = std::fs::read(&st).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let h: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    assert_eq!(h["buf3"]["dtype"], "F32", "{h}");
    assert_eq!(h["buf3"]["shape"], serde_json::json!([128]), "{h}");
    std::fs::remove_dir_all(&dir).ok();
}
