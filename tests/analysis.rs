//! Offline analysis: reports for the fixture traces, planted problems found at the right site,
//! a clean trace clean, and the offline capture verdicts equal to the mock's real capture.

use gputape::analysis::{self, CaptureQuery, Sections};
use gputape::backend::probe::{all_probes, run_pattern, run_probe};
use gputape::backend::{CaptureMode, GpuBackend, StreamKind};
use gputape::mock::{MockConfig, MockGpuBackend};
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::testing::mask_lines;
use gputape::trace::{Call, StreamId, StreamRef, Trace, VecSink};
use gputape::workloads::{self, f32_bytes};
use std::path::{Path, PathBuf};

const ALL: Sections = Sections {
    capture: true,
    races: true,
    leaks: true,
};

fn mock_with(mode: CaptureMode, kind: StreamKind) -> MockGpuBackend {
    let m = MockGpuBackend::new(MockConfig {
        capture_mode: mode,
        stream_kind: kind,
        ..Default::default()
    });
    workloads::load_kernels(&m).expect("load module blas");
    m
}

/// Record `f` on a mock (from before its first call) and load the trace.
fn record(f: impl FnOnce(&dyn GpuBackend)) -> Trace {
    record_on(mock_with(CaptureMode::Global, StreamKind::Blocking), f)
}

fn record_on(m: MockGpuBackend, f: impl FnOnce(&dyn GpuBackend)) -> Trace {
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let r = RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap();
    r.start().unwrap();
    f(&r);
    r.stop().unwrap();
    let bytes = buf.lock().clone();
    Trace::from_bytes(Path::new("mem"), &bytes).unwrap()
}

fn line_of(t: &Trace, seq: u64) -> String {
    t.site(t.calls[seq as usize].site)
}

#[test]
fn reports_for_the_fixture_traces() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir("traces")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gtape"))
        .collect();
    paths.sort();
    for p in paths {
        let t = Trace::open(&p).unwrap();
        let r = analysis::analyze(&t, CaptureQuery::default(), ALL);
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        insta::assert_snapshot!(format!("analyze_{name}"), mask_lines(&r.render()));
    }
}

/// A rank set's fixture dumps (`traces/ranks/`: examples/tp_fault.rs on mock ranks, rank 1
/// leaving out its all-reduce of step 13, rank 0 dumped at the hang deadline, rank 1 at its
/// peer's word), matched as `gputape ranks` matches them.
#[test]
fn the_rank_set_fixture_is_matched() {
    let traces: Vec<Trace> = ["rank0", "rank1"]
        .iter()
        .map(|r| Trace::open(Path::new(&format!("traces/ranks/mock_tp_fault_{r}.gtape"))).unwrap())
        .collect();
    let found = analysis::ranks::match_ranks(&traces);
    insta::assert_snapshot!(
        "ranks_mock_tp_fault",
        mask_lines(&analysis::ranks::render_findings(&found))
    );
}

#[test]
fn the_decode_step_s_token_copy_is_named_as_a_capture_breaker() {
    for p in [
        "traces/h200_tiny_step5.gtape",
        "traces/mock_tiny_step5.gtape",
    ] {
        let t = Trace::open(Path::new(p)).unwrap();
        let v = analysis::capture_verdicts(&t, CaptureQuery::default());
        let copy = v
            .iter()
            .find(|v| v.call == "copy_d2h")
            .expect("the token readback");
        assert_eq!(
            (copy.category, copy.rule),
            ("fails", "sync-copy-vs-blocking")
        );
        assert!(copy.site.starts_with("src/model/mod.rs:"), "{}", copy.site);
        // Every launch of the step itself is captured.
        assert!(v
            .iter()
            .filter(|v| v.call == "launch_typed")
            .all(|v| v.category == "captured"));
    }
}

#[test]
fn an_unjoined_fork_is_found_at_the_forked_work() {
    let t = record(|g| {
        let a = g.create_stream().unwrap();
        let b = g.create_stream().unwrap();
        let e = g.create_event().unwrap();
        let buf = g.alloc(64).unwrap();
        g.memset_async(buf, 0, 64, a).unwrap();
        g.record_event(e, a).unwrap();
        g.stream_wait_event(b, e).unwrap(); // fork
        g.memset_async(buf, 1, 64, b).unwrap(); // never joined back
        g.memset_async(buf, 2, 64, a).unwrap();
        g.synchronize(b).unwrap();
        g.free(buf).unwrap();
    });
    let q = CaptureQuery {
        range: (5, 8), // the region a capture of `a` would cover
        stream: Some(StreamRef::Id(StreamId(1))),
        ..Default::default()
    };
    let v = analysis::capture_verdicts(&t, q);
    let unjoined = v.iter().find(|v| v.rule == "end-unjoined").expect("found");
    assert_eq!(unjoined.seq, 7);
    assert_eq!(unjoined.site, line_of(&t, 7));
    // Joined, it is clean.
    let t = record(|g| {
        let a = g.create_stream().unwrap();
        let b = g.create_stream().unwrap();
        let (e, j) = (g.create_event().unwrap(), g.create_event().unwrap());
        let buf = g.alloc(64).unwrap();
        g.memset_async(buf, 0, 64, a).unwrap();
        g.record_event(e, a).unwrap();
        g.stream_wait_event(b, e).unwrap();
        g.memset_async(buf, 1, 64, b).unwrap();
        g.record_event(j, b).unwrap();
        g.stream_wait_event(a, j).unwrap();
        g.synchronize(a).unwrap();
        g.free(buf).unwrap();
    });
    let q = CaptureQuery {
        range: (5, 11),
        stream: Some(StreamRef::Id(StreamId(1))),
        ..Default::default()
    };
    let v = analysis::capture_verdicts(&t, q);
    assert!(v.iter().all(|v| v.category == "captured"), "{v:#?}");
}

#[test]
fn planted_problems_are_found_with_their_sites() {
    let t = record(|g| {
        let s = g.create_stream().unwrap();
        let p = g.create_stream().unwrap();
        let x = g.alloc(256).unwrap();
        let y = g.alloc(256).unwrap();
        g.copy_h2d(&f32_bytes(&[1.0; 64]), x).unwrap();
        g.memset(y, 0, 256).unwrap();
        workloads::saxpy(g, x, y, 64, 1.0, s).unwrap(); // #6.. (op_cache, kernel, launch)
        let scratch = g.alloc(256).unwrap(); // alloc inside the step
        g.memset_async(scratch, 0, 256, p).unwrap(); // producer on p ...
        workloads::saxpy(g, scratch, y, 64, 1.0, s).unwrap(); // ... consumer on s, no event
        let mut out = vec![0u8; 256];
        g.copy_d2h(y, &mut out).unwrap(); // sync copy on the legacy stream
        g.free(x).unwrap();
        g.free(y).unwrap();
        // `scratch` leaks.
    });
    let r = analysis::analyze(&t, CaptureQuery::default(), ALL);
    let text = r.render();
    let find = |seq_pred: &dyn Fn(&Call) -> bool| {
        t.calls
            .iter()
            .find(|c| seq_pred(&c.call))
            .map(|c| (c.seq, t.site(c.site)))
            .unwrap()
    };
    let (_, first_alloc_site) = find(&|c| matches!(c, Call::Alloc { .. }));
    let scratch = t
        .calls
        .iter()
        .filter(|c| matches!(c.call, Call::Alloc { .. }))
        .nth(2)
        .unwrap();
    let copy = t
        .calls
        .iter()
        .find(|c| matches!(c.call, Call::CopyD2H { .. }))
        .unwrap();
    let producer = t
        .calls
        .iter()
        .find(|c| matches!(c.call, Call::MemsetAsync { .. }))
        .unwrap();
    let consumer = t
        .calls
        .iter()
        .filter(|c| matches!(c.call, Call::LaunchTyped { .. }))
        .nth(1)
        .unwrap();
    // Alloc inside the step.
    assert!(r.verdicts.iter().any(|v| v.rule == "alloc-prohibited"
        && v.seq == scratch.seq
        && v.site == t.site(scratch.site)));
    // The sync copy on the legacy stream.
    assert!(r
        .verdicts
        .iter()
        .any(|v| v.rule == "sync-copy-vs-blocking" && v.seq == copy.seq));
    // The missing event between producer and consumer.
    let race = r
        .races
        .iter()
        .find(|x| x.first.0 == producer.seq)
        .expect("race found");
    assert_eq!(race.second.0, consumer.seq);
    assert_eq!(race.first.2, t.site(producer.site));
    assert_eq!(race.second.2, t.site(consumer.site));
    // The leak.
    let leak = r
        .lifetimes
        .iter()
        .find(|l| l.kind == "leak")
        .expect("leak found");
    assert_eq!(
        (leak.seq, leak.site.clone()),
        (scratch.seq, t.site(scratch.site))
    );
    assert_ne!(
        first_alloc_site, leak.site,
        "the leak names the leaking line, not the first alloc"
    );
    insta::assert_snapshot!("planted", mask_lines(&text));
}

/// An engine's capture stream while its recorded work runs on other streams: a capture of it
/// in progress is judged for the whole process, in every mode, by the rule table (on the H200
/// an `alloc` fails with 900 during a global capture from any thread, during a thread-local one
/// from the capturing thread, and not in relaxed mode).
#[test]
fn a_capture_of_a_stream_without_work_is_judged_for_the_whole_process() {
    let t = record(|g| {
        let _capturing = g.create_stream().unwrap(); // s1: no work recorded on it
        let work = g.create_stream().unwrap();
        let x = g.alloc(256).unwrap();
        let y = g.alloc(256).unwrap();
        g.memset_async(x, 0, 256, work).unwrap();
        workloads::saxpy(g, x, y, 64, 1.0, work).unwrap();
        g.synchronize(work).unwrap();
        let mut out = vec![0u8; 256];
        g.copy_d2h(y, &mut out).unwrap(); // on the legacy stream
                                          // Another thread allocates too.
        std::thread::scope(|s| {
            s.spawn(|| g.free(g.alloc(64).unwrap()).unwrap());
        });
        g.free(x).unwrap();
        g.free(y).unwrap();
    });
    let s1 = StreamRef::Id(StreamId(1));
    assert!(!analysis::has_work(&t, s1, (0, u64::MAX)));
    let capture = Sections {
        capture: true,
        races: false,
        leaks: false,
    };
    // What fails while s1 captures, per stream kind and mode: allocation, free and host syncs
    // where the mode prohibits them (thread-local: judged on the calling thread), and the
    // legacy stream's copy against a blocking stream in every mode.
    let strict = ["alloc", "copy_d2h", "free", "synchronize"];
    let cases: [(StreamKind, &str, &[&str]); 6] = [
        (StreamKind::Blocking, "global", &strict),
        (StreamKind::Blocking, "thread-local", &strict),
        (StreamKind::Blocking, "relaxed", &["copy_d2h"]),
        (
            StreamKind::NonBlocking,
            "global",
            &["alloc", "free", "synchronize"],
        ),
        (
            StreamKind::NonBlocking,
            "thread-local",
            &["alloc", "free", "synchronize"],
        ),
        (StreamKind::NonBlocking, "relaxed", &[]),
    ];
    for (kind, mode, want) in cases {
        let q = CaptureQuery {
            stream: Some(s1),
            kind,
            ..Default::default()
        };
        let r = analysis::analyze(&t, q, capture);
        let idle = r.idle_capture.as_ref().expect("s1 has no work");
        let m = idle.modes.iter().find(|m| m.mode == mode).unwrap();
        let mut calls: Vec<&str> = m.breakers.iter().map(|v| v.call.as_str()).collect();
        calls.dedup();
        calls.sort();
        calls.dedup();
        assert_eq!(calls, want, "{kind:?} {mode}");
        // The allocation on the other thread is a breaker too, where allocation is.
        let allocs = m.breakers.iter().filter(|v| v.call == "alloc").count();
        assert_eq!(allocs, if want.contains(&"alloc") { 3 } else { 0 });
    }
    // A stream with work gets the one-mode verdicts, as before.
    let busy = analysis::analyze(&t, CaptureQuery::default(), capture);
    assert!(busy.idle_capture.is_none());
    let q = CaptureQuery {
        stream: Some(s1),
        ..Default::default()
    };
    insta::assert_snapshot!(
        "idle_capture",
        mask_lines(&analysis::analyze(&t, q, capture).render())
    );
}

/// A call the recording tool makes for itself (`tools_own`: `gputape record`'s red-zone scan
/// after the steps) is in the trace, marked, and replayed, but no analysis names it.
#[test]
fn the_recording_tool_s_own_calls_are_left_out_of_the_analyses() {
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let m = mock_with(CaptureMode::Global, StreamKind::Blocking);
    let r = RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap();
    r.start().unwrap();
    let g: &dyn GpuBackend = &r;
    let s = g.create_stream().unwrap();
    let x = g.alloc(256).unwrap();
    let y = g.alloc(256).unwrap();
    g.memset_async(x, 0, 256, s).unwrap();
    workloads::saxpy(g, x, y, 64, 1.0, s).unwrap();
    g.synchronize(s).unwrap();
    assert_eq!(r.tools_own(|r| r.scan_redzones()).unwrap(), 0);
    g.free(x).unwrap();
    g.free(y).unwrap();
    r.stop().unwrap();
    let bytes = buf.lock().clone();
    let t = Trace::from_bytes(Path::new("mem"), &bytes).unwrap();
    let scan = t
        .calls
        .iter()
        .find(|c| matches!(c.call, Call::ScanRedzones))
        .expect("recorded");
    assert!(t.is_tools_own(scan), "{}", t.site(scan.site));
    assert!(t
        .site(scan.site)
        .starts_with("<gputape> tests/analysis.rs:"));
    assert_eq!(
        t.calls.iter().filter(|c| t.is_tools_own(c)).count(),
        1,
        "only the scan"
    );
    for mode in CaptureMode::ALL {
        let q = CaptureQuery {
            mode,
            ..Default::default()
        };
        let r = analysis::analyze(&t, q, ALL);
        assert!(r.verdicts.iter().all(|v| v.seq != scan.seq), "{mode:?}");
        let plan = r.graph_plan.as_ref().unwrap();
        assert!(plan.breakers.iter().all(|b| b.seq != scan.seq));
        // Still replayed: the plan keeps it in an eager segment.
        assert!(plan
            .segments
            .iter()
            .any(|seg| seg.stream.is_none() && seg.calls.contains(&(scan.seq as usize))));
        assert!(!r.render().contains("scan_redzones"), "{}", r.render());
    }
    // Made by the engine, the same call is judged as ever: a legacy-stream copy that breaks a
    // blocking capture.
    let t = record(|g| {
        let s = g.create_stream().unwrap();
        let x = g.alloc(256).unwrap();
        g.memset_async(x, 0, 256, s).unwrap();
        g.scan_redzones().unwrap();
        g.free(x).unwrap();
    });
    let v = analysis::capture_verdicts(&t, CaptureQuery::default());
    let scan = v
        .iter()
        .find(|v| v.call == "scan_redzones")
        .expect("judged");
    assert_eq!(
        (scan.category, scan.rule),
        ("fails", "sync-copy-vs-blocking")
    );
}

#[test]
fn use_after_free_and_a_free_racing_pending_work_are_found() {
    let t = record(|g| {
        let s = g.create_stream().unwrap();
        let a = g.alloc(64).unwrap();
        g.memset_async(a, 1, 64, s).unwrap();
        g.free(a).unwrap(); // no sync: work may still be pending on s
        let _ = g.memset(a, 0, 64); // use after free (the mock refuses it; it is recorded)
    });
    let r = analysis::analyze(&t, CaptureQuery::default(), ALL);
    assert!(r
        .lifetimes
        .iter()
        .any(|l| l.kind == "free-while-pending" && l.seq == 3));
    assert!(r
        .lifetimes
        .iter()
        .any(|l| l.kind == "use-after-free" && l.seq == 4));
}

#[test]
fn a_clean_step_reports_nothing_but_its_graph() {
    let m = mock_with(CaptureMode::Global, StreamKind::Blocking);
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let r = RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap();
    let g: &dyn GpuBackend = &r;
    let s = g.create_stream().unwrap();
    let x = g.alloc(256).unwrap();
    let y = g.alloc(256).unwrap();
    workloads::saxpy(g, x, y, 64, 1.0, s).unwrap(); // warms the op cache before recording
    r.start().unwrap();
    workloads::saxpy(g, x, y, 64, 1.0, s).unwrap();
    g.memset_async(x, 0, 256, s).unwrap();
    workloads::saxpy(g, x, y, 64, 2.0, s).unwrap();
    r.stop().unwrap();
    let t = Trace::from_bytes(Path::new("clean"), &buf.lock()).unwrap();
    let rep = analysis::analyze(&t, CaptureQuery::default(), ALL);
    assert!(rep.races.is_empty() && rep.lifetimes.is_empty());
    assert!(rep
        .verdicts
        .iter()
        .all(|v| matches!(v.category, "captured" | "host")));
    insta::assert_snapshot!("clean", mask_lines(&rep.render()));
}

/// Each capture-table pattern, recorded eagerly (no capture at all), judged offline as if
/// captured: the analysis derives from the trace the op and the stream's relation the table
/// is asked with, so it picks the rule the pattern was written for; and the mock's capture
/// emulation of the same pattern does what that rule says. Both sides consult the one table,
/// so this cannot show the table wrong: the driver is the judge of that, in
/// `tests/gpu.rs::capture_rules_match_the_driver` and `scripts/gpu-capture-agree.sh`.
#[test]
fn offline_analysis_picks_the_table_s_rule_for_each_recorded_pattern() {
    let code = |e: &anyhow::Error| gputape::driver_code(e).unwrap_or(0);
    let mut bad = Vec::new();
    for p in all_probes() {
        let t = record_on(mock_with(p.mode, p.kind), |g| {
            let _ = run_pattern(g, &code, p, false);
        });
        let markers: Vec<u64> = t
            .calls
            .iter()
            .filter(|c| matches!(c.call, Call::StreamIsCapturing { .. }))
            .map(|c| c.seq)
            .collect();
        let (start, end) = (markers[0], markers[1]);
        // The probed call: the last before the second marker (a second capture the pattern
        // began eagerly is aborted right after it; that is not the probed call).
        let probed = t.calls[..end as usize]
            .iter()
            .rev()
            .find(|c| {
                !matches!(
                    c.call,
                    Call::StreamIsCapturing { .. } | Call::AbortCaptureIfActive { .. }
                )
            })
            .unwrap();
        let q = CaptureQuery {
            range: (start, end),
            stream: Some(StreamRef::Id(StreamId(1))),
            mode: p.mode,
            kind: p.kind,
        };
        let v = analysis::capture_verdicts(&t, q);
        let offline = v.iter().find(|v| v.seq == probed.seq).expect("judged");
        let (rule, expected) = p.expected();
        let real = run_probe(
            &|mode, kind| -> anyhow::Result<Box<dyn GpuBackend>> {
                Ok(Box::new(mock_with(mode, kind)))
            },
            &code,
            p,
        )
        .unwrap();
        if offline.rule != rule || real != expected {
            bad.push(format!(
                "{p:?}: offline {} / table {rule}; mock did [{}], table says [{}]",
                offline.rule,
                real.describe(),
                expected.describe()
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn exports_load_as_trace_events_and_dot() {
    let t = Trace::open(Path::new("traces/mock_two_streams.gtape")).unwrap();
    let j = analysis::export::perfetto(&t, CaptureQuery::default());
    // Round-trip through text, as a viewer would read it, and check the trace-event shape.
    let parsed: serde_json::Value =
        serde_json::from_str(&serde_json::to_string(&j).unwrap()).unwrap();
    let evs = parsed["traceEvents"].as_array().unwrap();
    assert!(!evs.is_empty());
    for e in evs {
        let ph = e["ph"].as_str().unwrap();
        assert!(["X", "s", "f", "M"].contains(&ph));
        assert!(e["pid"].is_number());
        if ph == "X" {
            assert!(
                e["ts"].is_number()
                    && e["dur"].is_number()
                    && e["tid"].is_number()
                    && e["name"].is_string()
            );
        }
    }
    let flows = evs.iter().filter(|e| e["ph"] == "s").count();
    assert_eq!(flows, 1, "one event edge: record -> wait");
    assert!(evs.iter().any(|e| e["cat"] == "capture-breaker"));
    let dot = analysis::export::dot(&t, CaptureQuery::default());
    assert!(dot.starts_with("digraph") && dot.trim_end().ends_with('}'));
    // Render with Graphviz where it is installed.
    if let Ok(mut child) = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(dot.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "dot rejected the graph");
        assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
    } else {
        eprintln!("graphviz not installed: DOT checked for shape only");
    }
}

/// The graph plan (`analyze`'s "as graphs" section) judges calls in the mode asked for: a
/// relaxed capture tolerates allocation and frees (as the driver does, H200 run of
/// `scripts/gpu-capture-agree.sh`), so of `two_streams` only its host sync keeps the work out
/// of a graph; in global mode its allocations do too.
#[test]
fn the_graph_plan_judges_in_the_mode_asked_for() {
    let t = Trace::open(Path::new("traces/mock_two_streams.gtape")).unwrap();
    let rules = |mode| {
        let q = CaptureQuery {
            stream: Some(StreamRef::Id(StreamId(0))),
            mode,
            ..CaptureQuery::default()
        };
        let all = Sections {
            capture: true,
            races: false,
            leaks: false,
        };
        let rep = analysis::analyze(&t, q, all);
        let plan = rep.graph_plan.expect("the capture section plans graphs");
        plan.breakers
            .iter()
            .map(|b| b.rule.clone())
            .collect::<Vec<_>>()
    };
    let relaxed = rules(CaptureMode::Relaxed);
    assert!(
        !relaxed
            .iter()
            .any(|r| r.starts_with("alloc") || r.starts_with("free")),
        "{relaxed:?}"
    );
    assert!(relaxed.iter().any(|r| r.starts_with("sync")), "{relaxed:?}");
    let global = rules(CaptureMode::Global);
    assert!(global.iter().any(|r| r == "alloc-prohibited"), "{global:?}");
}
