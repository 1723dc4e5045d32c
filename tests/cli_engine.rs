//! An engine's own command line (`gputape::cli::main_with`): a trace that launches a kernel of
//! the engine's module replays and trims with that kernel run (its CPU body, on the mock),
//! where plain `gputape` can only skip it as opaque.

use gputape::backend::{GpuBackend, KernelArg};
use gputape::cli::{run_with, Exit};
use gputape::mock::MockGpuBackend;
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::trace::Trace;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The example's engine module (its `main` is the binary, unused here).
#[allow(dead_code)]
#[path = "../examples/engine_tape.rs"]
mod engine_tape;

const N: u32 = 256;

/// A scratch directory for this test, emptied first.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-engine-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Record, on the mock, an engine step that fills `x` with 0, 1, 2, ..., scales it by 3 with
/// `myengine::scale`, reads it back, scales it by 0.5 and reads it back again. Returns the
/// seq of the second launch (where a trim starts).
fn record(path: &Path) -> u64 {
    let rec = RecordingBackend::to_file(MockGpuBackend::default(), path, BackendDesc::new("mock"))
        .unwrap();
    rec.start().unwrap();
    let g: &dyn GpuBackend = &rec;
    g.load_module(&engine_tape::module()).unwrap();
    let scale = g.kernel("myengine", "scale").unwrap();
    let x = g.alloc(N as usize * 4).unwrap();
    let init: Vec<u8> = (0..N).flat_map(|i| (i as f32).to_le_bytes()).collect();
    g.copy_h2d(&init, x).unwrap();
    let s = g.default_stream();
    let launch = |a: f32| {
        g.launch_typed(
            scale,
            [N.div_ceil(128), 1, 1],
            [128, 1, 1],
            0,
            s,
            &[
                KernelArg::Buffer(x),
                KernelArg::Bytes(&N.to_le_bytes()),
                KernelArg::Bytes(&a.to_le_bytes()),
            ],
        )
        .unwrap();
        let mut out = vec![0u8; N as usize * 4];
        g.copy_d2h_on_stream(x, &mut out, s).unwrap();
        out
    };
    let once = launch(3.0);
    assert_eq!(f32::from_le_bytes(once[8..12].try_into().unwrap()), 6.0);
    launch(0.5);
    g.free(x).unwrap();
    rec.stop().unwrap();
    let t = Trace::open(path).unwrap();
    let launches: Vec<u64> = t
        .calls
        .iter()
        .filter(|c| c.call.launch().is_some())
        .map(|c| c.seq)
        .collect();
    assert_eq!(launches.len(), 2, "{}", gputape::trace::render(&t));
    launches[1]
}

fn args(a: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    std::iter::once(OsString::from("myengine-tape"))
        .chain(a.iter().map(|s| s.as_ref().to_os_string()))
        .collect()
}

/// `replay` through `run_with`, its report read from the file a child replay would write.
fn replay(
    trace: &Path,
    report: &Path,
    modules: &[gputape::backend::ModuleDesc],
) -> (Exit, serde_json::Value) {
    let code = run_with(
        args(&[
            &"replay",
            &"--on",
            &"mock",
            &"--child-report",
            &report,
            &trace,
        ]),
        modules,
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    (code, v)
}

#[test]
fn main_with_replays_an_engines_kernels_where_plain_gputape_skips_them() {
    let dir = scratch("replay");
    let trace = dir.join("engine.gtape");
    record(&trace);

    // With the engine's module: the kernel runs, and both readbacks are checked and match.
    let (code, v) = replay(&trace, &dir.join("with.json"), &[engine_tape::module()]);
    let text = v["text"].as_str().unwrap();
    assert_eq!(code, Exit::Pass, "{text}");
    let r = &v["report"];
    assert_eq!(r["opaque_kernels"], serde_json::json!([]), "{text}");
    assert_eq!(r["d2h_checked"], 2, "{text}");
    assert_eq!(r["d2h_matched"], 2, "{text}");
    assert!(!text.contains("skipped"), "{text}");

    // Without it: the kernel is opaque, skipped, and the readbacks that depend on it unchecked;
    // a replay that checked nothing does not pass.
    let (code, v) = replay(&trace, &dir.join("without.json"), &[]);
    let text = v["text"].as_str().unwrap();
    assert_eq!(code, Exit::Findings, "{text}");
    assert!(text.contains("NOTHING CHECKED"), "{text}");
    assert_eq!(
        v["report"]["opaque_kernels"],
        serde_json::json!(["myengine::scale"]),
        "{text}"
    );
    assert_eq!(v["report"]["d2h_checked"], 0, "{text}");

    // The plain binary, on the mock, says so on its report.
    let plain = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
            .arg("replay")
            .args(extra)
            .arg(&trace)
            .output()
            .unwrap()
    };
    let o = plain(&["--on", "mock"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("1 kernel(s) this backend cannot run were skipped: myengine::scale"),
        "{out}"
    );
    // Not asked for a backend, where no driver is: the trace needs a GPU (exit 4), said
    // before anything runs.
    if !gputape::cuda::driver_present() {
        let o = plain(&[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{err}");
        assert!(
            err.contains("launches kernels only a GPU runs (myengine::scale"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn main_with_trims_through_an_engines_kernels() {
    let dir = scratch("trim");
    let trace = dir.join("engine.gtape");
    let second = record(&trace);
    let range = format!("{second}..");

    // The state at the second launch is computed by running the first: x = 3 * (0, 1, 2, ...).
    let out = dir.join("cut.gtape");
    let code = run_with(
        args(&[&"trim", &trace, &"--range", &range, &"-o", &out]),
        &[engine_tape::module()],
    );
    assert_eq!(code, Exit::Pass);
    let cut = Trace::open(&out).unwrap();
    let want: Vec<u8> = (0..N)
        .flat_map(|i| (3.0 * i as f32).to_le_bytes())
        .collect();
    assert!(
        cut.initial
            .iter()
            .any(|b| cut.blob(b.data) == Some(want.as_slice())),
        "the cut starts from the scaled buffer"
    );
    // And the cut replays, its kernel run and its readback matched.
    let (code, v) = replay(&out, &dir.join("cut.json"), &[engine_tape::module()]);
    assert_eq!(code, Exit::Pass, "{}", v["text"]);
    assert_eq!(v["report"]["d2h_matched"], 1, "{}", v["text"]);

    // Plain gputape cannot compute that state on the mock: the kernel has no body there.
    let plain = dir.join("plain.gtape");
    let code = run_with(
        args(&[&"trim", &trace, &"--range", &range, &"-o", &plain]),
        &[],
    );
    assert_ne!(code, Exit::Pass);
    assert!(!plain.exists());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn run_with_answers_usage_errors_and_help_as_the_binary_does() {
    assert_eq!(run_with(args(&[&"no-such-verb"]), &[]), Exit::Usage);
    assert_eq!(run_with(args(&[&"--version"]), &[]), Exit::Pass);
    assert_eq!(
        run_with(args(&[&"show", &"/nonexistent/x.gtape"]), &[]),
        Exit::Damaged
    );
}
