//! Traces of PyTorch programs recorded on the H200 by `gputape run` (`traces/python/`: an
//! embedding's device-side assert eager and inside a `torch.cuda.CUDAGraph`, a Triton kernel
//! reading out of bounds, an eager step with `.item()`; scripts/gpu-lines.sh and
//! gpu-capture.sh made them, `trim --drop-images` left NVIDIA's kernels out). What `show`,
//! `analyze` and `report` say of them, the program's lines included, is snapshotted; CI cannot
//! run their kernels, so nothing here replays them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir("traces/python")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gtape"))
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 4, "{paths:?}");
    paths
}

fn gputape(args: &[&std::ffi::OsStr]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn name(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

/// `show`, every call with its line (and `--stacks` of the calls around the fault), and
/// `analyze`, for each fixture. The provenance line (when, pid, host) is left out.
#[test]
fn show_and_analyze_of_python_traces_name_the_programs_lines() {
    for p in fixtures() {
        let shown: String = gputape(&["show".as_ref(), "--stacks".as_ref(), p.as_ref()])
            .lines()
            .filter(|l| !l.starts_with("recorded at"))
            .map(|l| format!("{}\n", l.trim_end()))
            .collect();
        assert!(!shown.contains("<driver call>"), "{}: {shown}", name(&p));
        insta::assert_snapshot!(format!("show_{}", name(&p)), shown);
        let analyzed = gputape(&["analyze".as_ref(), p.as_ref()]);
        insta::assert_snapshot!(format!("analyze_{}", name(&p)), analyzed);
    }
}

/// The HTML report of each fixture: its fault's window names the launches (a graph launch by
/// its nodes) with their lines, and a program that frees nothing has no leak rows.
#[test]
fn reports_of_python_traces_name_lines_and_no_false_leaks() {
    for p in fixtures() {
        let page = gputape(&["report".as_ref(), "-o".as_ref(), "-".as_ref(), p.as_ref()]);
        let n = name(&p);
        assert!(!page.contains(">leak<"), "{n}: a leak row");
        match n.as_str() {
            "h200_py_eager_assert" => assert!(
                page.contains("indexSelectSmallIndex")
                    && page.contains("gpu-lines.py:18:12 in embed"),
                "{n}"
            ),
            "h200_py_graph_assert" => assert!(
                page.contains("with node(s)") && page.contains("gpu-lines.py:18:12 in embed"),
                "{n}: the graph launch's nodes with their capture line"
            ),
            "h200_py_triton_oob" => assert!(page.contains("gather_scaled"), "{n}"),
            "h200_py_capture_item" => assert!(
                page.contains("gpu-capture.py:30:17 in step") && page.contains("held until exit"),
                "{n}"
            ),
            other => panic!("no check for {other}"),
        }
    }
}

/// The Perfetto export of each fixture: every host call's slice names its line (a timeline is
/// where a slow call is found, and its line is what the user changes).
#[test]
fn perfetto_exports_of_python_traces_carry_each_call_s_line() {
    for p in fixtures() {
        let json = gputape(&[
            "export".as_ref(),
            "--perfetto".as_ref(),
            "-".as_ref(),
            p.as_ref(),
        ]);
        let v: serde_json::Value = serde_json::from_str(&json).expect("trace-event JSON");
        let events = v["traceEvents"]
            .as_array()
            .or(v.as_array())
            .expect("events");
        let calls: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["args"]["seq"].is_u64() && e["args"]["site"].is_string())
            .collect();
        assert!(!calls.is_empty(), "{}: no call slices", name(&p));
        for e in &calls {
            let site = e["args"]["site"].as_str().unwrap();
            assert!(
                site.contains(".py:") || site == "<no Python frame>",
                "{}: a slice without a line: {e}",
                name(&p)
            );
        }
    }
}

/// Every kernel of the fixtures gets the element type a person reads from its name
/// (`tests/fixtures/kernel_types.txt`), or none where the name gives none, and `show` says
/// which and how.
#[test]
fn the_fixtures_kernels_get_their_element_types_from_their_names() {
    use gputape::trace::kernel_types::from_name;
    let table = std::fs::read_to_string("tests/fixtures/kernel_types.txt").unwrap();
    let expected: Vec<(&str, &str)> = table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_once(' ').unwrap())
        .collect();
    let mut used = std::collections::HashSet::new();
    for p in fixtures() {
        let t = gputape::trace::Trace::open(&p).unwrap();
        let shown = gputape(&["show".as_ref(), p.as_ref()]);
        for (id, k) in &t.kernels {
            let (pattern, want) = expected
                .iter()
                .find(|(pat, _)| k.name.contains(pat))
                .unwrap_or_else(|| panic!("{}: {} is not in the table", name(&p), k.name));
            used.insert(*pattern);
            let got = from_name(&k.name).map(|t| t.ty.name()).unwrap_or("none");
            assert_eq!(got, *want, "{}: {}", name(&p), k.name);
            let line = format!("  {id} elements: {want} (from ");
            assert_eq!(
                shown.contains(&line),
                *want != "none",
                "{}: {line} in {shown}",
                name(&p)
            );
        }
    }
    let unused: Vec<_> = expected.iter().filter(|(p, _)| !used.contains(p)).collect();
    assert!(unused.is_empty(), "rows no kernel matched: {unused:?}");
}

/// `--dtype` takes a kernel rule as well as a buffer's type; a rule that does not parse is a
/// usage error that says what is wrong.
#[test]
fn dtype_rules_are_parsed_and_refused_with_reasons() {
    let p = PathBuf::from("traces/python/h200_py_triton_oob.gtape");
    let run = |dtype: &str| {
        Command::new(env!("CARGO_BIN_EXE_gputape"))
            .args(["replay", "--on", "mock", "--check-finite", "--dtype", dtype])
            .arg(&p)
            .output()
            .unwrap()
    };
    for (bad, why) in [
        ("gather_scaled:x=f32", "not N or N.M"),
        ("gather_scaled=f33", "unknown type"),
        ("buf1=i64", "not an element type a buffer is read as"),
    ] {
        let o = run(bad);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains(why), "{bad}: {err}");
    }
    let o = run("gather_scaled:0=f32");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(2), "a rule is accepted: {err}");
}
