//! The command line as scripts see it: every verb's exit status, and what a fault replay says.
//!
//! 0 = matched / reproduced / no differences, 1 = divergence / not reproduced / differences /
//! an `analyze --fail-on` finding, 2 = usage, 3 = damaged or unreadable trace, 4 = the asked
//! backend is not available here.

use gputape::trace::{ErrorRec, Trace, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gputape(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not signalled")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch directory for this test, emptied first.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(t: &Trace, p: &Path) -> String {
    std::fs::write(p, t.to_bytes().unwrap()).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn an_async_fault_recorded_at_a_later_copy_replays_reproduced_and_pinned() {
    let o = gputape(&["replay", "traces/mock_tiny_async_illegal_step4.gtape"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}{}", stderr(&o));
    assert!(out.contains("fault at call #72 copy_d2h"), "{out}");
    assert!(out.contains("at call #30 -> REPRODUCED"), "{out}");
    assert!(
        out.contains("raised by call #30 silu_mul::silu_mul"),
        "{out}"
    );
    assert!(
        out.contains("1073741824 bytes past the end of buf30 (512 bytes, allocated at src/model/resources.rs:"),
        "{out}"
    );
    // The same verdict as JSON, which scripts read.
    let o = gputape(&[
        "replay",
        "traces/mock_tiny_async_illegal_step4.gtape",
        "--json",
    ]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "gputape.replay.v2");
    assert_eq!(v["passed"], true);
    let f = &v["faults"][0];
    assert_eq!(f["seq"], 72);
    assert_eq!(f["observed_at"], 30);
    assert_eq!(f["raised_by"]["kernel"], "silu_mul::silu_mul");
    assert_eq!(f["raised_by"]["past_end"], 1073741824u64);
}

#[test]
fn a_fault_inside_a_graph_is_pinned_to_its_node_eager_or_as_graph() {
    for extra in [&[][..], &["--as-graph"][..]] {
        let mut args = vec!["replay", "traces/mock_graph_fault.gtape"];
        args.extend_from_slice(extra);
        let o = gputape(&args);
        let out = stdout(&o);
        assert_eq!(code(&o), 0, "{args:?}: {out}{}", stderr(&o));
        assert!(out.contains("REPRODUCED"), "{out}");
        assert!(
            out.contains("raised by call #12 blas::fill") && out.contains("a node of graph0"),
            "{out}"
        );
        assert!(out.contains("64 bytes past the end of buf2"), "{out}");
    }
}

#[test]
fn replay_exits_1_on_a_divergence_and_on_a_fault_not_reproduced() {
    let d = scratch("replay1");
    let base = Trace::open(Path::new("traces/mock_tiny_step5.gtape")).unwrap();
    // The recorded token readback changed: the replay's bytes differ from it.
    let mut diverged = base.clone();
    let last = diverged
        .calls
        .iter_mut()
        .rev()
        .find(|c| matches!(c.ret, Some(Ok(Value::Bytes(_)))))
        .expect("the step reads its token back");
    let Some(Ok(Value::Bytes(blob))) = &last.ret else {
        unreachable!()
    };
    let mut bytes = diverged
        .blobs
        .get(blob)
        .unwrap()
        .expect("recorded")
        .to_vec();
    bytes[0] ^= 1;
    let id = gputape::trace::BlobId::of(&bytes);
    diverged.blobs.insert(id, bytes);
    last.ret = Some(Ok(Value::Bytes(id)));
    let o = gputape(&["replay", &write(&diverged, &d.join("div.gtape"))]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("FIRST DIVERGENCE"));
    // A recorded illegal address the replay never meets.
    let mut phantom = base.clone();
    phantom.calls.last_mut().unwrap().ret = Some(Err(ErrorRec {
        code: Some(700),
        message: "illegal address".into(),
    }));
    let o = gputape(&["replay", &write(&phantom, &d.join("phantom.gtape"))]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("not reproduced"), "{}", stdout(&o));
    let o = gputape(&["replay", "traces/mock_tiny_step5.gtape"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

#[test]
fn usage_errors_exit_2_damaged_traces_3_and_a_missing_backend_4() {
    let d = scratch("codes");
    for args in [
        &["replay", "--bogus"][..],
        &["replay", "traces/mock_tiny_step5.gtape", "--range", "9..3"],
        &["frobnicate"],
        &["export", "traces/mock_two_streams.gtape"],
    ] {
        assert_eq!(code(&gputape(args)), 2, "{args:?}");
    }
    std::fs::write(d.join("three.gtape"), b"GPU").unwrap();
    let mut bad = std::fs::read("traces/mock_tiny_step5.gtape").unwrap();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x55;
    std::fs::write(d.join("bad.gtape"), &bad).unwrap();
    for p in ["three.gtape", "bad.gtape", "missing.gtape"] {
        let p = d.join(p).to_string_lossy().into_owned();
        for verb in ["replay", "show", "analyze"] {
            let o = gputape(&[verb, &p]);
            assert_eq!(code(&o), 3, "{verb} {p}: {}", stderr(&o));
            assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
        }
    }
    if !gputape::cuda::driver_present() {
        let o = gputape(&["replay", "traces/mock_two_streams.gtape", "--on", "cuda"]);
        assert_eq!(code(&o), 4, "{}", stderr(&o));
        assert_eq!(code(&gputape(&["bench-launch"])), 4);
    }
}

#[test]
fn diff_analyze_and_the_other_verbs_exit_as_documented() {
    let d = scratch("verbs");
    let two = "traces/mock_two_streams.gtape";
    assert_eq!(code(&gputape(&["diff", two, two])), 0);
    assert_eq!(
        code(&gputape(&["diff", two, "traces/mock_capture_region.gtape"])),
        1
    );
    // A trace cut inside a call differs from the whole one.
    let bytes = std::fs::read(two).unwrap();
    std::fs::write(d.join("cut.gtape"), &bytes[..bytes.len() - 30]).unwrap();
    let cut = d.join("cut.gtape").to_string_lossy().into_owned();
    let o = gputape(&["diff", two, &cut]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    // The graph-fault step leaks its buffers (the step failed before freeing them).
    let gf = "traces/mock_graph_fault.gtape";
    assert_eq!(code(&gputape(&["analyze", gf, "--fail-on", "leak"])), 1);
    assert_eq!(code(&gputape(&["analyze", gf, "--fail-on", "race"])), 0);
    assert_eq!(code(&gputape(&["analyze", two])), 0);
    // The default stream s0 does none of this trace's work: a capture of it is judged for the
    // whole process, in every mode; a stream the trace never names is a usage error.
    let o = gputape(&["analyze", two, "--capture", "--stream", "s0", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let modes = v["report"]["idle_capture"]["modes"].as_array().unwrap();
    let breakers = |mode: &str| -> Vec<String> {
        let m = modes.iter().find(|m| m["mode"] == mode).unwrap();
        m["breakers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["call"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(breakers("global").contains(&"alloc".to_string()), "{v}");
    assert!(
        breakers("thread-local").contains(&"alloc".to_string()),
        "{v}"
    );
    assert!(breakers("relaxed").is_empty(), "{v}");
    let o = gputape(&["analyze", two, "--capture", "--stream", "s0"]);
    assert!(
        stdout(&o).contains("the trace does no work on s0"),
        "{}",
        stdout(&o)
    );
    let o = gputape(&["analyze", two, "--stream", "s9"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("names no stream s9"), "{}", stderr(&o));
    assert_eq!(code(&gputape(&["show", two])), 0);
    assert_eq!(code(&gputape(&["info"])), 0);
    assert_eq!(
        code(&gputape(&["capture-table", "--on", "mock", "--strict"])),
        0
    );
    let p = d.join("p.json").to_string_lossy().into_owned();
    assert_eq!(code(&gputape(&["export", two, "--perfetto", &p])), 0);
    let o = gputape(&["demo", "--config", "tiny", "--steps", "2"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn minimize_and_trim_write_traces_that_replay() {
    let d = scratch("shrink");
    let small = d.join("small.gtape").to_string_lossy().into_owned();
    let o = gputape(&[
        "minimize",
        "traces/mock_tiny_async_illegal_step4.gtape",
        "-o",
        &small,
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let t = Trace::open(Path::new(&small)).unwrap();
    assert!(t.calls.len() <= 5, "{}", stdout(&o));
    let o = gputape(&["replay", &small]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert!(stdout(&o).contains("REPRODUCED"));
    // Nothing to keep in a trace without a fault.
    let o = gputape(&["minimize", "traces/mock_tiny_step5.gtape", "-o", &small]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("records no fault"), "{}", stderr(&o));
    let cut = d.join("cut.gtape").to_string_lossy().into_owned();
    let o = gputape(&[
        "trim",
        "traces/mock_tiny_step5.gtape",
        "--range",
        "30..",
        "-o",
        &cut,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = gputape(&["replay", &cut]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert!(stdout(&o).contains("1 of 1 match"), "{}", stdout(&o));
    // Nothing is left under a temporary name.
    let left: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Every verb that reports speaks JSON on request, with a schema name scripts can check.
#[test]
fn every_reporting_verb_has_versioned_json() {
    let t = "traces/mock_two_streams.gtape";
    for (args, schema) in [
        (vec!["replay", t, "--json"], "gputape.replay.v2"),
        (
            vec!["replay", t, "--json", "--as-graph"],
            "gputape.replay.v2",
        ),
        (vec!["analyze", t, "--json"], "gputape.analyze.v1"),
        (vec!["show", t, "--json"], "gputape.show.v1"),
        (vec!["diff", t, t, "--json"], "gputape.diff.v2"),
        (
            vec!["replay", t, "--check-finite", "--json"],
            "gputape.replay.v2",
        ),
        (
            vec!["replay", t, "--against", "mock", "--json"],
            "gputape.replay.v2",
        ),
        (
            vec!["inspect", t, "--at", "12", "--writes", "--json"],
            "gputape.inspect.v1",
        ),
        (vec!["info", "--json"], "gputape.info.v1"),
        (vec!["capture-table", "--json"], "gputape.capture-table.v1"),
    ] {
        let o = gputape(&args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        let v: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON: {e}"));
        assert_eq!(v["schema"], schema, "{args:?}");
    }
    // A replay's document has the same keys eager and as graphs.
    let keys = |extra: &[&str]| {
        let mut args = vec!["replay", t, "--json"];
        args.extend_from_slice(extra);
        let v: serde_json::Value = serde_json::from_slice(&gputape(&args).stdout).unwrap();
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        (k, v)
    };
    let (eager, ev) = keys(&[]);
    let (graph, gv) = keys(&["--as-graph"]);
    assert_eq!(eager, graph);
    assert_eq!(
        (ev["mode"].as_str(), gv["mode"].as_str()),
        (Some("eager"), Some("graph"))
    );
    assert!(
        ev["graph"].is_null() && gv["graph"]["graphs"].as_u64() > Some(0),
        "{gv}"
    );
    assert_eq!(ev["d2h_checked"], gv["d2h_checked"]);
    // Plain names, not Rust enum shapes.
    let o = gputape(&["analyze", t, "--json"]);
    let text = stdout(&o);
    assert!(!text.contains("\"Id\""), "{text}");
}

/// The verbs that write files report what they wrote as JSON too, with the same schema
/// naming; an output sent to stdout beside `--json` is a usage error.
#[test]
fn the_writing_verbs_speak_json_too() {
    let d = scratch("json");
    let at = |name: &str| d.join(name).to_string_lossy().into_owned();
    let (rec, step, small, cut, page, p, g) = (
        at("rec.gtape"),
        at("step.gtape"),
        at("small.gtape"),
        at("cut.gtape"),
        at("page.html"),
        at("p.json"),
        at("g.dot"),
    );
    type Check = fn(&serde_json::Value) -> bool;
    let cases: [(Vec<&str>, &str, Check); 6] = [
        (
            vec!["record", "--workload", "two-streams", "-o", &rec],
            "gputape.record.v1",
            |v| v["calls"].as_u64() > Some(0) && v["what"] == "workload two-streams",
        ),
        (
            vec!["record", "--config", "tiny", "--step", "3", "-o", &step],
            "gputape.record.v1",
            |v| {
                v["steps"][0]["step"] == 3 && v["steps"][0]["tokens"].as_array().unwrap().len() == 1
            },
        ),
        (
            vec![
                "minimize",
                "traces/mock_tiny_async_illegal_step4.gtape",
                "-o",
                &small,
            ],
            "gputape.minimize.v1",
            |v| {
                v["reproduced"] == true
                    && v["kept"]["signature"]["code"] == 700
                    && v["kept"]["calls"]["after"].as_u64() < v["kept"]["calls"]["before"].as_u64()
            },
        ),
        (
            vec![
                "trim",
                "traces/mock_tiny_step5.gtape",
                "--range",
                "30..",
                "-o",
                &cut,
            ],
            "gputape.trim.v1",
            |v| v["from"] == 30 && v["kept"] == 44 && v["initial_buffers"].as_u64() > Some(0),
        ),
        (
            vec![
                "export",
                "traces/mock_two_streams.gtape",
                "--perfetto",
                &p,
                "--dot",
                &g,
            ],
            "gputape.export.v1",
            |v| v["perfetto"]["items"].as_u64() > Some(0) && v["dot"]["items"].as_u64() > Some(0),
        ),
        (
            vec!["report", "traces/mock_graph_fault.gtape", "-o", &page],
            "gputape.report.v1",
            |v| v["faults"] == 1 && v["lifetimes"].as_u64() > Some(0),
        ),
    ];
    for (mut args, schema, check) in cases {
        args.push("--json");
        let o = gputape(&args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", stdout(&o)));
        assert_eq!(v["schema"], schema, "{args:?}");
        assert!(check(&v), "{args:?}: {v:#}");
        // Every file it names was written, at the size it says where it says one.
        for key in ["output", "kept"] {
            let path = match key {
                "kept" => &v["kept"]["output"],
                _ => &v[key],
            };
            if let Some(path) = path.as_str() {
                assert!(Path::new(path).exists(), "{args:?}: {path}");
            }
        }
    }
    let size = |p: &str| std::fs::metadata(p).unwrap().len();
    let v: serde_json::Value = serde_json::from_slice(
        &gputape(&[
            "export",
            "traces/mock_two_streams.gtape",
            "--dot",
            &g,
            "--json",
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(v["dot"]["bytes"].as_u64(), Some(size(&g)));
    assert!(v["perfetto"].is_null());
    for args in [
        &[
            "export",
            "traces/mock_two_streams.gtape",
            "--perfetto",
            "-",
            "--json",
        ][..],
        &[
            "report",
            "traces/mock_two_streams.gtape",
            "-o",
            "-",
            "--json",
        ],
    ] {
        let o = gputape(args);
        assert_eq!(code(&o), 2, "{args:?}");
        assert!(
            stderr(&o).contains("both write to stdout"),
            "{}",
            stderr(&o)
        );
    }
}

/// `record` drives the model and records it; what it calls for itself is not the model's, and
/// `analyze` of its trace names only the model's calls (a red-zone scan at the CLI's own
/// line was listed as a capture breaker).
#[test]
fn analyze_of_a_recorded_trace_names_no_call_of_the_recorder_s_own() {
    let d = scratch("own");
    let out = d.join("s.gtape").to_string_lossy().into_owned();
    let o = gputape(&["record", "--config", "tiny", "--step", "3", "-o", &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = gputape(&["analyze", &out, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &v["report"];
    let named: Vec<(&str, &str)> = r["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .chain(r["graph_plan"]["breakers"].as_array().unwrap())
        .map(|x| (x["call"].as_str().unwrap(), x["site"].as_str().unwrap()))
        .collect();
    assert!(!named.is_empty());
    for (call, site) in &named {
        assert_ne!(*call, "scan_redzones", "{site}");
        assert!(!site.starts_with("src/cli/"), "{call} at {site}");
    }
    let text = stdout(&gputape(&["analyze", &out]));
    assert!(!text.contains("src/cli/"), "{text}");
}

/// Output into a pipe closed early ends quietly, not with a panic.
#[test]
fn a_closed_pipe_ends_output_quietly() {
    use std::io::Read;
    // Far more output than a pipe buffers, so the writer does meet the closed pipe.
    let d = scratch("pipe");
    let step = Trace::open(Path::new("traces/mock_tiny_step5.gtape")).unwrap();
    let mut big = step.clone();
    big.calls.clear();
    for i in 0..50u64 {
        for c in &step.calls {
            let mut c = c.clone();
            c.seq += i * step.calls.len() as u64;
            big.calls.push(c);
        }
    }
    let path = write(&big, &d.join("big.gtape"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(["show", &path])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(o.status.code(), Some(101), "{err}");
}

/// `report` writes one self-contained page for every fixture: every section, inline SVG, no
/// scripts and nothing fetched from anywhere.
#[test]
fn report_pages_are_self_contained_and_complete() {
    let d = scratch("report");
    let mut fixtures: Vec<_> = std::fs::read_dir("traces")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gtape"))
        .collect();
    fixtures.sort();
    for f in fixtures {
        let out = d.join("r.html");
        let o = gputape(&["report", f.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert_eq!(code(&o), 0, "{}: {}", f.display(), stderr(&o));
        let page = std::fs::read_to_string(&out).unwrap();
        for id in ["faults", "timeline", "capture", "races", "leaks", "graph"] {
            assert!(
                page.contains(&format!("id=\"{id}\"")),
                "{}: no {id}",
                f.display()
            );
        }
        assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
        assert!(page.matches("<svg").count() == 2, "{}", f.display());
        assert_eq!(
            page.matches("<table").count(),
            page.matches("</table>").count()
        );
        for banned in ["<script", "<link", " src=", "@import", "url("] {
            assert!(!page.contains(banned), "{}: {banned}", f.display());
        }
        // The only URL is the SVG namespace, which is a name, not a fetch.
        let urls = page.matches("http").count();
        assert_eq!(
            urls,
            page.matches("http://www.w3.org/2000/svg").count(),
            "{}",
            f.display()
        );
        // Faults are on the page for the fixtures that record one.
        if f.to_string_lossy().contains("fault") || f.to_string_lossy().contains("illegal") {
            assert!(page.contains("may have been raised by"), "{}", f.display());
        }
    }
}

/// `record` refuses what it cannot do before it starts, leaves no file when it fails, and
/// replaces an existing trace only with a complete one.
#[test]
fn record_exits_as_documented_and_never_leaves_half_a_trace() {
    let d = scratch("record");
    let out = d.join("t.gtape");
    let p = out.to_str().unwrap();
    std::fs::write(&out, b"an older trace").unwrap();
    let o = gputape(&["record", "--config", "tiny", "--step", "500", "-o", p]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), b"an older trace");
    let o = gputape(&["record", "-o", p]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("say what to record"), "{}", stderr(&o));
    let o = gputape(&["record", "--config", "tiny", "--step", "2", "-o", p]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(Trace::open(&out).is_ok());
    assert!(!gputape::trace::partial_path(&out).exists());
}

/// `show` says when and by what command a trace was recorded, and prints scalars as the types
/// the kernels' code declares.
#[test]
fn show_prints_provenance_and_typed_scalars() {
    let d = scratch("show");
    let out = d.join("t.gtape");
    let p = out.to_str().unwrap();
    let o = gputape(&["record", "--config", "tiny", "--step", "2", "-o", p]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = gputape(&["show", p, "--kernel", "rmsnorm"]);
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.starts_with("recorded at "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(&format!(
            " UTC by `{} record --config tiny --step 2 -o {p}` (pid ",
            env!("CARGO_BIN_EXE_gputape")
        )),
        "{line}"
    );
    // rmsnorm(x, w, out, unsigned n, float eps): n in decimal, eps as a float.
    let launch = text
        .lines()
        .find(|l| l.contains("rmsnorm::rmsnorm<<<"))
        .unwrap();
    assert!(launch.contains(", 64, 1e-5f)"), "{launch}");
    let v: serde_json::Value =
        serde_json::from_slice(&gputape(&["show", p, "--json", "--calls", "0..1"]).stdout).unwrap();
    let argv = v["header"]["command_line"].as_array().unwrap();
    assert_eq!(argv[1], "record");
    assert!(v["header"]["recorded_at_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
    // --steps picks the calls of the steps the engine marked, and refuses steps not there.
    let o = gputape(&["record", "--config", "tiny", "--steps", "2..5", "-o", p]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let shown = stdout(&gputape(&["show", p, "--steps", "3..4"]));
    let marks: Vec<&str> = shown.lines().filter(|l| l.contains("---- step")).collect();
    assert_eq!(marks.len(), 1, "{shown}");
    assert!(marks[0].contains("---- step 3 ----"), "{shown}");
    let o = gputape(&["show", p, "--steps", "9..10"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("holds steps 2..=4"), "{}", stderr(&o));
    // A format-2 trace has none, and says so.
    let old = stdout(&gputape(&[
        "show",
        "traces/mock_tiny_step5.gtape",
        "--summary",
    ]));
    assert!(
        old.contains(
            "recorded at: not stored (recorded in trace format 2, before it had provenance)"
        ),
        "{old}"
    );
}

/// `replay --perfetto` adds device tracks, one per stream, timed by the replay.
#[test]
fn replay_perfetto_has_device_tracks_beside_host_calls() {
    let d = scratch("replay-perfetto");
    let out = d.join("p.json");
    let o = gputape(&[
        "replay",
        "traces/mock_two_streams.gtape",
        "--perfetto",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let device: Vec<_> = ev.iter().filter(|e| e["cat"] == "device").collect();
    assert!(
        device.iter().any(|e| e["name"] == "blas::saxpy"),
        "{device:?}"
    );
    let names: Vec<&str> = ev
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["pid"] == 2)
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["s1: device work", "s2: device work"]);
    // Host calls stay on their own tracks, in the recording's process.
    assert!(ev.iter().any(|e| e["cat"] == "call" && e["pid"] == 1));
    // A graph replay does not time calls one by one: refused, not silently ignored.
    let o = gputape(&[
        "replay",
        "traces/mock_two_streams.gtape",
        "--as-graph",
        "--perfetto",
        "p.json",
    ]);
    assert_eq!(code(&o), 2);
    // Standard output carries the report: the Perfetto file needs a name.
    let o = gputape(&["replay", "traces/mock_two_streams.gtape", "--perfetto", "-"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("needs a file"), "{}", stderr(&o));
}

/// `--blobs DIR`: two recordings share their weights through the store, each trace replays,
/// a store moved away is exit 3 with a message saying what to pass, and `--blobs` finds it.
#[test]
fn a_shared_blob_store_from_the_command_line() {
    let d = std::env::temp_dir().join(format!("gputape-cli-blobs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let p = |n: &str| d.join(n).to_string_lossy().into_owned();
    let alone = gputape(&["record", "--step", "5", "-o", &p("alone.gtape")]);
    assert_eq!(code(&alone), 0, "{}", stderr(&alone));
    for (step, name) in [("5", "a.gtape"), ("6", "b.gtape")] {
        let o = gputape(&[
            "record",
            "--step",
            step,
            "--blobs",
            &p("store"),
            "-o",
            &p(name),
        ]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    let size = |n: &str| std::fs::metadata(d.join(n)).unwrap().len();
    assert!(
        size("b.gtape") * 20 < size("alone.gtape"),
        "{} vs {}",
        size("b.gtape"),
        size("alone.gtape")
    );
    let shown = gputape(&["show", &p("b.gtape"), "--summary"]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    for name in ["a.gtape", "b.gtape"] {
        let o = gputape(&["replay", &p(name)]);
        assert_eq!(code(&o), 0, "{name}: {}", stderr(&o));
    }
    std::fs::rename(d.join("store"), d.join("moved")).unwrap();
    let lost = gputape(&["replay", &p("b.gtape")]);
    assert_eq!(code(&lost), 3, "{}", stderr(&lost));
    assert!(stderr(&lost).contains("--blobs"), "{}", stderr(&lost));
    let found = gputape(&["replay", &p("b.gtape"), "--blobs", &p("moved")]);
    assert_eq!(code(&found), 0, "{}", stderr(&found));
    let _ = std::fs::remove_dir_all(&d);
}

/// `record --hf`: the bf16 batched step from a config preset or a config.json file, recorded
/// and replayed from the command line; a config that is neither is named in the error.
#[test]
fn record_hf_records_the_batched_bf16_step_and_it_replays() {
    let d = scratch("record-hf");
    let out = d.join("hf.gtape");
    let o = gputape(&[
        "record",
        "--hf",
        "tiny",
        "--batch",
        "3",
        "--steps",
        "2..4",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("step 3 produced tokens ["),
        "{}",
        stdout(&o)
    );
    let o = gputape(&["replay", out.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("2 of 2 match the recording"),
        "{}",
        stdout(&o)
    );

    // The same shape from a config.json on disk.
    let cfg = d.join("config.json");
    std::fs::write(
        &cfg,
        gputape::model::hf::HfConfig::preset_text("tiny").unwrap(),
    )
    .unwrap();
    let out2 = d.join("file.gtape");
    let o = gputape(&[
        "record",
        "--hf",
        cfg.to_str().unwrap(),
        "--steps",
        "0..1",
        "-o",
        out2.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));

    let o = gputape(&[
        "record",
        "--hf",
        "no-such-model",
        "--steps",
        "0..1",
        "-o",
        out2.to_str().unwrap(),
    ]);
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("neither a preset (tiny, default, llama-3.2-1b, llama-3-8b)"),
        "{}",
        stderr(&o)
    );
}

/// `--mock-memory` sizes the mock's device memory for every verb that runs it: too little
/// and the replay is refused at the allocation that does not fit, named; enough and it runs.
#[test]
fn mock_memory_sizes_the_mock_for_every_verb() {
    let o = gputape(&[
        "--mock-memory",
        "4096",
        "replay",
        "traces/mock_tiny_step5.gtape",
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("out of memory"), "{}", stderr(&o));
    assert!(stderr(&o).contains("of 4096 in use"), "{}", stderr(&o));
    let o = gputape(&[
        "replay",
        "traces/mock_tiny_step5.gtape",
        "--mock-memory",
        "68719476736",
    ]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

/// The rank-set verbs on the fixture dumps of `traces/ranks/` (examples/tp_fault.rs on mock
/// ranks: rank 1 left out its all-reduce of step 13): `ranks` names the step and replays the
/// hang (exit 1: the ranks parted); `trim --checkpoint` begins a dump at its later
/// checkpoint without a backend, and refuses one it does not hold; `export` lays the two on
/// one time line and refuses a DOT of two.
#[test]
fn rank_set_verbs_on_the_fixture_dumps() {
    let (r0, r1) = (
        "traces/ranks/mock_tp_fault_rank0.gtape",
        "traces/ranks/mock_tp_fault_rank1.gtape",
    );
    let o = gputape(&["ranks", r0, r1, "--replay"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}{}", stderr(&o));
    assert!(
        out.contains(
            "step 13: the ranks made different numbers of collectives (rank 0: 1, rank 1: 0)"
        ),
        "{out}"
    );
    assert!(out.contains("-> REPRODUCED"), "{out}");
    let dir = scratch("rank-verbs");
    let cut = dir.join("cut.gtape");
    let o = gputape(&["trim", r0, "--checkpoint", "0", "-o", cut.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("starting from the state at #36"),
        "{}",
        stdout(&o)
    );
    let t = Trace::open(&cut).unwrap();
    assert_eq!(t.calls.first().map(|c| c.seq), Some(36));
    assert!(t.restarts.is_empty());
    let o = gputape(&["trim", r0, "--checkpoint", "3", "-o", cut.to_str().unwrap()]);
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("there is no checkpoint 3"),
        "{}",
        stderr(&o)
    );
    let json = dir.join("two.json");
    let o = gputape(&["export", r0, r1, "--perfetto", json.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let pids: std::collections::BTreeSet<u64> = j["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert_eq!(pids.into_iter().collect::<Vec<_>>(), [1, 2]);
    let o = gputape(&["export", r0, r1, "--dot", "-"]);
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("give one trace"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).ok();
}

/// `ranks --json`: the findings as data (the rank set's fixture dumps, where rank 1 left out
/// its all-reduce of step 13), and the exit status of the text form.
#[test]
fn ranks_prints_its_findings_as_json() {
    let (r0, r1) = (
        "traces/ranks/mock_tp_fault_rank0.gtape",
        "traces/ranks/mock_tp_fault_rank1.gtape",
    );
    let o = gputape(&["ranks", "--json", r0, r1]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "gputape.ranks.v1");
    assert_eq!(v["parted"], true);
    let first = &v["findings"][0];
    assert_eq!(first["kind"], "step_differs", "{v:#}");
    assert_eq!(first["step"], 13, "{v:#}");
    assert!(v["replays"].is_null());
}

/// `gputape dump PID` of a process that keeps no flight recorder, and of one that is gone:
/// usage errors (exit 2) that say why, and no request file left anywhere.
#[test]
fn dump_refuses_a_process_without_a_flight_recorder() {
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .env_remove("GPUTAPE_FLIGHT")
        .env_remove("GPUTAPE_SHIM_FLIGHT_DIR")
        .spawn()
        .unwrap();
    let o = gputape(&["dump", &sleeper.id().to_string()]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("keeps no flight recorder"),
        "{}",
        stderr(&o)
    );
    let o = gputape(&["dump", "4000000000"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot read the environment of process"),
        "{}",
        stderr(&o)
    );
}

/// `replay --sanitize` where compute-sanitizer is not to be found: exit 4 and what to set.
#[test]
fn sanitize_without_compute_sanitizer_says_so() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args([
            "replay",
            "traces/mock_tiny_fault_step4.gtape",
            "--on",
            "cuda",
            "--sanitize",
            "memcheck",
        ])
        .env("COMPUTE_SANITIZER", "/nonexistent/compute-sanitizer")
        .output()
        .unwrap();
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("compute-sanitizer") && stderr(&o).contains("COMPUTE_SANITIZER"),
        "{}",
        stderr(&o)
    );
}

/// `minimize --sanitize` keeps a compute-sanitizer finding, which only a CUDA replay has.
#[test]
fn minimize_sanitize_wants_a_cuda_replay() {
    let out = std::env::temp_dir().join(format!("gputape-minsan-{}.gtape", std::process::id()));
    let out = out.to_string_lossy().into_owned();
    let o = gputape(&[
        "minimize",
        "traces/mock_tiny_fault_step4.gtape",
        "-o",
        &out,
        "--on",
        "mock",
        "--sanitize",
        "memcheck",
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("add --on cuda"), "{}", stderr(&o));
    assert!(!std::path::Path::new(&out).exists());
}

/// `replay --debug` runs this same replay, in one process, under cuda-gdb: in batch mode when
/// stdin is no terminal (a script or a log), stopping where the fault stops it. A stand-in
/// debugger here records what it was asked to run.
#[test]
fn replay_debug_runs_the_replay_in_one_process_under_cuda_gdb() {
    let d = scratch("debug");
    let gdb = d.join("cuda-gdb");
    let seen = d.join("seen");
    std::fs::write(
        &gdb,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\necho \"under=$GPUTAPE_UNDER_DEBUGGER\" >> {}\n",
            seen.display(),
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&gdb, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let trace = "traces/python/h200_py_triton_oob.gtape";
    let launch = Trace::open(Path::new(trace))
        .unwrap()
        .calls
        .iter()
        .find(|c| c.call.launch().is_some())
        .map(|c| c.seq)
        .unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(["replay", "--on", "cuda", "--debug", "--break-at"])
        .arg(launch.to_string())
        .arg(trace)
        .env("CUDA_GDB", &gdb)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let args: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let at = |s: &str| args.iter().position(|a| a == s);
    assert!(at("-batch").is_some(), "no terminal: batch mode: {args:?}");
    // Stopped by the replay before the launch, then on into that kernel.
    let (run, cont) = (at("run").unwrap(), at("continue").unwrap());
    assert!(at("set cuda break_on_launch application").is_some_and(|b| run < b && b < cont));
    let inner = &args[at("--args").unwrap() + 1..];
    assert!(inner[0].ends_with("gputape"), "{inner:?}");
    assert!(inner.contains(&"--no-isolate".to_string()), "{inner:?}");
    assert!(inner.contains(&launch.to_string()), "{inner:?}");
    assert_eq!(args.last().map(String::as_str), Some("under=1"));

    // A --break-at that names no launch, and no debugger at all.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args([
            "replay",
            "--on",
            "cuda",
            "--debug",
            "--break-at",
            "0",
            trace,
        ])
        .env("CUDA_GDB", &gdb)
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("not a launch"), "{}", stderr(&o));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(["replay", "--on", "cuda", "--debug", trace])
        .env("CUDA_GDB", d.join("none"))
        .output()
        .unwrap();
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("CUDA_GDB"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(d);
}

/// `report --bug` on a machine without a GPU writes what needs none (the README with where
/// the trace was recorded, the report page, each step's log) and exits 4: its verdict needs
/// a CUDA replay.
#[test]
fn report_bug_writes_what_it_can_without_a_gpu_and_exits_4() {
    if gputape::cuda::driver_present() {
        eprintln!(
            "SKIPPED: this machine has a CUDA driver (scripts/gpu-bugreport.sh runs --bug there)"
        );
        return;
    }
    let d = scratch("bug");
    let dir = d.join("report");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(["report", "--bug"])
        .arg(&dir)
        .arg("traces/python/h200_py_triton_oob.gtape")
        .env("COMPUTE_SANITIZER", d.join("none"))
        .output()
        .unwrap();
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for want in [
        "Not minimized",
        "compute-sanitizer was not found",
        "`python3 scripts/gpu-triton-oob.py`",
        "no standalone program",
    ] {
        assert!(readme.contains(want), "{want:?} not in:\n{readme}");
    }
    assert!(dir.join("report.html").is_file());
    assert!(dir.join("minimize.log").is_file());
    let _ = std::fs::remove_dir_all(d);
}

/// `--against --loop N` repeats the lockstep until a round differs (a race that loses rarely),
/// and says how many rounds ran.
#[test]
fn against_with_loop_runs_rounds_until_one_differs() {
    let o = gputape(&[
        "replay",
        "traces/mock_tiny_step5.gtape",
        "--against",
        "mock",
        "--loop",
        "3",
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("lockstep round 3 of 3: no round differed"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).contains("-> no difference"), "{}", stdout(&o));
}
