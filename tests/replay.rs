//! The replayer on the mock: every trace in traces/ replays and matches what was recorded.

use gputape::backend::{CaptureMode, GpuBackend, StreamKind};
use gputape::mock::MockGpuBackend;
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::{self, Trace, TraceError};
use std::path::{Path, PathBuf};

fn mock() -> MockGpuBackend {
    let m = MockGpuBackend::default();
    gputape::workloads::load_kernels(&m).expect("load module blas");
    gputape::model::kernels::load(&m).expect("load the model kernels");
    m
}

fn traces() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir("traces")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gtape"))
        .collect();
    v.sort();
    assert!(v.len() >= 4, "traces/ holds the fixtures");
    v
}

/// A trace whose recording saw something go wrong: a failed call, or red zones written.
fn faulty(t: &Trace) -> bool {
    t.calls.iter().any(|c| match (&c.call, &c.ret) {
        (_, Some(Err(_))) | (_, None) => true,
        (trace::Call::ScanRedzones, Some(Ok(trace::Value::Count(n)))) => *n > 0,
        _ => false,
    })
}

/// Call sites keep their file, not their line: snapshots do not move with unrelated edits.
fn redact_replayer_lines(s: &str) -> String {
    gputape::testing::mask_lines(s)
}

fn name(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

#[test]
fn every_trace_replays_on_the_mock_and_matches_its_recording() {
    for p in traces() {
        let t = Trace::open(&p).unwrap();
        let g = mock();
        let opts = ReplayOptions {
            loops: 2,
            ..Default::default()
        };
        let r = Replayer::new(&t).run(&g, &opts, None, |_| {}).unwrap();
        insta::assert_snapshot!(
            format!("replay_{}", name(&p)),
            redact_replayer_lines(&r.summary())
        );
        let redzone = Replayer::new(&t)
            .windows()
            .iter()
            .any(|w| w.kind == gputape::replayer::WindowKind::Redzone);
        if redzone {
            // On the H200 the planted overrun landed in a red zone and the launch succeeded;
            // the mock checks every write, so the replay catches the write itself, at the
            // launch inside the red-zone scan's window.
            assert!(r.passed(), "{}", r.summary());
            let f = &r.faults[0];
            assert_eq!(f.call, "scan_redzones");
            let c = f.raised_by.as_ref().expect("pinned to its launch");
            assert_eq!((c.seq, c.kernel.as_str()), (30, "silu_mul::silu_mul"));
            assert_eq!(c.past_end, Some(64));
            assert!(c
                .buffer
                .as_deref()
                .is_some_and(|b| b.starts_with("buf30 (512 bytes")));
            assert_eq!(g.live_alloc_count(), 0);
            continue;
        }
        assert!(r.divergence.is_none(), "{}: {}", p.display(), r.summary());
        assert_eq!(r.d2h_checked, r.d2h_matched, "{}", p.display());
        // Every recorded failure happens again at the same call, up to the first that leaves
        // the context unusable (the replay stops there, as the recorded process had to).
        let mut recorded_faults = 0;
        for c in &t.calls {
            if let Some(Err(e)) = &c.ret {
                recorded_faults += 1;
                if e.code.is_some_and(gputape::backend::is_sticky) {
                    // An asynchronous fault: the replay stops at the launch that raised it,
                    // inside the recorded call's window.
                    let w = Replayer::new(&t)
                        .windows()
                        .iter()
                        .find(|w| w.observed == c.seq)
                        .copied()
                        .expect("a sticky fault has a window");
                    let at = r.stopped_at.expect("the replay stops at the fault");
                    assert!(
                        w.contains(at),
                        "{}: stopped at #{at}, window {w:?}",
                        p.display()
                    );
                    break;
                }
            }
        }
        assert_eq!(r.faults.len(), recorded_faults, "{}", p.display());
        assert!(
            r.faults.iter().all(|f| f.reproduced),
            "{}: {}",
            p.display(),
            r.summary()
        );
        assert_eq!(g.live_alloc_count(), 0, "replay state is torn down");
    }
}

/// Loops after the first restore the initial contents into the first loop's buffers and drop
/// what the calls made (buffers, events, graphs): every loop checks every readback, and nothing
/// is left allocated, for traces that allocate, free, fork streams and capture graphs.
#[test]
fn later_loops_restore_the_initial_state_in_place() {
    for stem in ["mock_tiny_step5", "mock_two_streams", "mock_capture_region"] {
        let t = Trace::open(&Path::new("traces").join(format!("{stem}.gtape"))).unwrap();
        let once = {
            let g = mock();
            Replayer::new(&t)
                .run(&g, &ReplayOptions::default(), None, |_| {})
                .unwrap()
        };
        assert!(once.d2h_checked > 0 || stem != "mock_tiny_step5");
        let g = mock();
        let opts = ReplayOptions {
            loops: 3,
            ..Default::default()
        };
        let r = Replayer::new(&t).run(&g, &opts, None, |_| {}).unwrap();
        assert!(r.divergence.is_none(), "{stem}: {}", r.summary());
        assert_eq!(r.d2h_checked, 3 * once.d2h_checked, "{stem}");
        assert_eq!(r.d2h_matched, r.d2h_checked, "{stem}");
        assert_eq!(r.loop_ms.len(), 3, "{stem}");
        assert_eq!(g.live_alloc_count(), 0, "{stem}: torn down");
    }
}

#[test]
fn every_trace_replays_as_graphs_with_the_same_results() {
    for p in traces() {
        let t = Trace::open(&p).unwrap();
        if faulty(&t) {
            continue; // a faulting step has no graph to build
        }
        let g = mock();
        let r = Replayer::new(&t).run_as_graph(&g, None, 3, None).unwrap();
        assert_eq!(
            r.d2h_checked,
            r.d2h_matched,
            "{}: {}",
            p.display(),
            r.summary()
        );
        // The captured part was also timed alone, as graphs and eagerly, once per launch.
        let timed = if r.plan.graph_count() > 0 { 3 } else { 0 };
        assert_eq!(r.graphs_only_ms.len(), timed, "{}", p.display());
        assert_eq!(r.captured_eager_ms.len(), timed, "{}", p.display());
        insta::assert_snapshot!(
            format!("graph_{}", name(&p)),
            redact_replayer_lines(&r.summary())
        );
    }
}

#[test]
fn the_decode_step_is_kept_out_of_one_graph_by_its_token_copy() {
    let t = Trace::open(Path::new("traces/mock_tiny_step5.gtape")).unwrap();
    let plan = gputape::replayer::plan_segments(
        &t,
        (0, u64::MAX),
        (CaptureMode::Global, StreamKind::Blocking),
        false,
    );
    let copy = plan
        .breakers
        .iter()
        .find(|b| b.call == "copy_d2h")
        .expect("the token readback is a breaker");
    assert_eq!(copy.rule, "sync-copy-vs-blocking");
    assert!(copy.site.starts_with("src/model/mod.rs:"));
}

#[test]
fn range_and_stop_replay_only_what_was_asked() {
    let t = Trace::open(Path::new("traces/mock_tiny_step5.gtape")).unwrap();
    let g = mock();
    let r = Replayer::new(&t)
        .run(
            &g,
            &ReplayOptions {
                range: Some((10, 30)),
                ..Default::default()
            },
            None,
            |_| {},
        )
        .unwrap();
    assert_eq!(r.calls, 20);
    let r = Replayer::new(&t)
        .run(
            &g,
            &ReplayOptions {
                stop_at: Some(4),
                ..Default::default()
            },
            None,
            |_| {},
        )
        .unwrap();
    assert_eq!(r.calls, 5);
}

#[test]
fn a_corrupted_step_diverges_at_the_named_call_and_buffer() {
    // Flip one weight byte in the initial snapshot: the token readback must diverge, and the
    // report names the readback, its buffer and the kernel that last wrote it.
    let mut t = Trace::open(Path::new("traces/mock_tiny_step5.gtape")).unwrap();
    let lm_head = t
        .initial
        .iter()
        .find(|i| i.bytes == 128 * 64 * 4 && i.buf.0 == 20)
        .unwrap()
        .clone();
    let mut bytes = t.blob(lm_head.data).expect("recorded").to_vec();
    for b in bytes.iter_mut().take(4096) {
        *b ^= 0x55;
    }
    let id = trace::BlobId::of(&bytes);
    t.blobs.insert(id, bytes);
    t.initial
        .iter_mut()
        .find(|i| i.buf == lm_head.buf)
        .unwrap()
        .data = id;
    let g = mock();
    let r = Replayer::new(&t)
        .run(&g, &ReplayOptions::default(), None, |_| {})
        .unwrap();
    let d = r.divergence.expect("diverges");
    assert_eq!(d.call, "copy_d2h");
    assert_eq!(d.last_writer.as_deref(), Some("argmax::argmax"));
    assert!(d.site.starts_with("src/model/mod.rs:"));
}

#[test]
fn a_damaged_trace_file_gives_the_trace_layer_s_errors() {
    let bytes = std::fs::read("traces/mock_tiny_step5.gtape").unwrap();
    let mut bad = bytes.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 1;
    assert!(matches!(
        Trace::from_bytes(Path::new("bad"), &bad),
        Err(TraceError::Corrupt { .. })
    ));
    // A cut trace opens and replays what it has.
    let t = Trace::from_bytes(Path::new("cut"), &bytes[..bytes.len() - 300]).unwrap();
    assert!(t.cut.is_some());
    let g = mock();
    let r = Replayer::new(&t)
        .run(&g, &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(r.calls > 0 && r.calls < 74);
}

#[test]
fn diff_ignores_id_renaming_and_counts_what_changed() {
    let a = Trace::open(Path::new("traces/mock_two_streams.gtape")).unwrap();
    let b = Trace::open(Path::new("traces/mock_capture_region.gtape")).unwrap();
    insta::assert_snapshot!(
        "diff_two_streams_capture",
        gputape::testing::mask_lines(&trace::diff(&a, &b))
    );
    assert!(trace::diff(&a, &a).starts_with("call lists are identical"));
}

/// Two recordings of one program whose inputs differ make the same calls but read back
/// different bytes: `diff` says they differ, at which readback and by how much.
#[test]
fn diff_compares_what_the_calls_returned() {
    let run = |a: f32| {
        record(|g| {
            gputape::workloads::load_kernels(g).unwrap();
            let s = g.create_stream().unwrap();
            let (x, y) = (g.alloc(64).unwrap(), g.alloc(64).unwrap());
            g.copy_h2d(&gputape::workloads::f32_bytes(&[1.0; 16]), x)
                .unwrap();
            g.memset(y, 0, 64).unwrap();
            gputape::workloads::saxpy(g, x, y, 16, a, s).unwrap();
            g.synchronize(s).unwrap();
            let mut out = vec![0u8; 64];
            g.copy_d2h(y, &mut out).unwrap();
        })
    };
    let (a, b) = (run(2.0), run(2.5));
    let (text, differs) = trace::diff_report(&a, &a);
    assert!(!differs, "{text}");
    assert!(
        text.contains("results are identical (1 readbacks"),
        "{text}"
    );
    let (text, differs) = trace::diff_report(&a, &b);
    assert!(differs, "{text}");
    // The scalar differs first, in the launch's text; the results before it are compared.
    assert!(text.contains("first difference at call index"), "{text}");
    let r = trace::result_diff(&a, &b, a.calls.len());
    let d = r.difference.expect("the readback differs");
    assert!(d.what.contains("A returned"), "{d:?}");
    let detail = d.detail.expect("bytes compared");
    assert!(
        detail.contains("64 of 64 bytes differ") || detail.contains("of 64 bytes differ"),
        "{detail}"
    );
    assert!(
        detail.contains("as f32, the largest difference is 0.5"),
        "{detail}"
    );
    // The command line: different recordings exit 1, the same one twice exits 0.
    let dir = std::env::temp_dir().join(format!("gputape-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pa, pb) = (dir.join("a.gtape"), dir.join("b.gtape"));
    std::fs::write(&pa, a.to_bytes().unwrap()).unwrap();
    std::fs::write(&pb, b.to_bytes().unwrap()).unwrap();
    let diff = |x: &Path, y: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
            .arg("diff")
            .args([x, y])
            .arg("--json")
            .output()
            .unwrap()
    };
    let o = diff(&pa, &pb);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "gputape.diff.v2");
    assert_eq!(v["differs"], true);
    assert_eq!(diff(&pa, &pa).status.code(), Some(0));
    std::fs::remove_dir_all(&dir).ok();
}

/// The replayer takes any `&dyn GpuBackend`: the mock by reference, boxed and shared behind
/// an `Arc` (the forwarding impls in `backend/boxed.rs`) replay each committed mock trace to
/// the same report, readbacks and faults alike.
#[test]
fn replaying_through_a_trait_object_works_for_any_backend() {
    let mut seen = 0;
    for name in [
        "mock_capture_region",
        "mock_two_streams",
        "mock_tiny_step5",
        "mock_tiny_fault_step4",
    ] {
        let t = Trace::open(Path::new(&format!("traces/{name}.gtape"))).unwrap();
        let run = |g: &dyn GpuBackend| {
            let r = Replayer::new(&t)
                .run(g, &ReplayOptions::default(), None, |_| {})
                .unwrap();
            (r.summary(), r.d2h_checked, r.d2h_matched, r.faults.len())
        };
        let plain = run(&mock());
        let boxed: Box<dyn GpuBackend> = Box::new(mock());
        let shared = std::sync::Arc::new(mock());
        assert_eq!(run(&*boxed), plain, "{name}: boxed");
        assert_eq!(run(&shared), plain, "{name}: Arc");
        seen += plain.1 as usize + plain.3;
    }
    assert!(seen > 0, "the traces check readbacks or faults");
}

#[test]
fn buffers_holding_device_addresses_are_replayed_at_their_addresses_or_refused() {
    use gputape::recorder::{BackendDesc, RecordingBackend};
    use gputape::replayer::ReplayError;
    // Record the pointer-table workload after an allocation the replay will not repeat, so a
    // plain replay puts every buffer somewhere else.
    let sink = gputape::trace::VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(mock(), Box::new(sink), BackendDesc::new("mock")).unwrap();
    let g: &dyn GpuBackend = &rec;
    let gone = g.alloc(1 << 20).unwrap();
    g.free(gone).unwrap();
    rec.start().unwrap();
    let want = gputape::workloads::pointer_table(g).unwrap();
    rec.stop().unwrap();
    let t = Trace::from_bytes(Path::new("pt"), &buf.lock()).unwrap();

    let r = Replayer::new(&t);
    let hidden = r.hidden();
    assert_eq!(hidden.len(), 4, "the table holds four addresses");
    // Ids count from the recorder's construction: `gone` was buf0, the four targets are
    // buf1..buf4 and the table buf5.
    assert!(hidden.iter().all(|h| h.holder.0 == 5 && h.seq.is_some()));
    let targets: Vec<u32> = hidden.iter().map(|h| h.target.0).collect();
    assert_eq!(targets, vec![1, 2, 3, 4]);

    let m = mock();
    let err = r
        .run(&m, &ReplayOptions::default(), None, |_| {})
        .unwrap_err();
    assert!(
        matches!(err, ReplayError::HiddenPointer { holder, target, .. } if holder.0 == 5 && target.0 == 1),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("buf5 holds the device address of buf1"),
        "{err}"
    );

    let m = mock();
    let place = |addr: u64, bytes: usize| m.alloc_at(addr, bytes);
    let r = Replayer::new(&t).with_fixed_addresses(&place);
    let rep = r.run(&m, &ReplayOptions::default(), None, |_| {}).unwrap();
    assert_eq!(
        (rep.d2h_checked, rep.d2h_matched),
        (1, 1),
        "{}",
        rep.summary()
    );
    assert_eq!(
        want,
        gputape::workloads::f32_bytes(&[10.0, 11.0, 12.0, 13.0])
    );
}

/// A mock whose saxpy's CPU body is subtly wrong when a == 3 (a kernel change planted through
/// the registration hook).
fn subtly_wrong_saxpy() -> MockGpuBackend {
    use gputape::backend::{ParamAccess::*, ParamInfo};
    let m = mock();
    m.register_kernel(
        "blas",
        "saxpy",
        ParamInfo::packed(&[(8, Read), (8, ReadWrite), (4, Value), (4, Value)]),
        Some(std::sync::Arc::new(|ctx| {
            let (x, y, n, a) = (ctx.ptr(0)?, ctx.ptr(1)?, ctx.u32(2)? as usize, ctx.f32(3)?);
            let xs = ctx.read_f32(x, n)?;
            let mut ys = ctx.read_f32(y, n)?;
            for (y, x) in ys.iter_mut().zip(xs) {
                *y += if a == 3.0 { 2.5 } else { a } * x;
            }
            ctx.write_f32(y, &ys)
        })),
    );
    m
}

/// `replay --against`: the same trace on a mock and on one whose saxpy was changed, in
/// lockstep; the second saxpy (a == 3) is named, with its buffer and largest difference;
/// against an unchanged twin, nothing differs.
#[test]
fn lockstep_names_the_launch_whose_output_differs() {
    use gputape::replayer::{LockstepOptions, Tolerance};
    let t = record(|g| {
        gputape::workloads::load_kernels(g).unwrap();
        let s = g.create_stream().unwrap();
        let (x, y, z) = (
            g.alloc(64).unwrap(),
            g.alloc(64).unwrap(),
            g.alloc(64).unwrap(),
        );
        g.copy_h2d(&gputape::workloads::f32_bytes(&[1.0; 16]), x)
            .unwrap();
        g.memset(y, 0, 64).unwrap();
        g.memset(z, 0, 64).unwrap();
        gputape::workloads::saxpy(g, x, z, 16, 1.0, s).unwrap();
        gputape::workloads::saxpy(g, x, y, 16, 3.0, s).unwrap();
        g.synchronize(s).unwrap();
    });
    let (a, b, same) = (mock(), subtly_wrong_saxpy(), mock());
    let opts = LockstepOptions::default();
    let r = Replayer::new(&t)
        .lockstep((&a, &same), ("mock", "twin"), &opts, (None, None))
        .unwrap();
    assert!(r.passed(), "{}", r.summary());
    assert_eq!(r.compared, 2, "{}", r.summary());
    let r = Replayer::new(&t)
        .lockstep((&a, &b), ("mock", "changed"), &opts, (None, None))
        .unwrap();
    assert!(!r.passed());
    let d = r.first.as_ref().expect("a difference");
    assert_eq!(d.kernel, "blas::saxpy");
    assert!(d.call.contains("3.0f"), "{}", r.summary());
    assert_eq!((d.elem, d.differing, d.of), ("f32", 16, 16));
    assert_eq!((d.a_value.as_str(), d.b_value.as_str()), ("3", "2.5"));
    assert!(r.summary().contains("-> DIFFERENT"), "{}", r.summary());
    // Within a relative tolerance of 20%, the change is in the noise.
    let loose = LockstepOptions {
        tolerance: Tolerance::Rel(0.2),
        ..Default::default()
    };
    let r = Replayer::new(&t)
        .lockstep((&a, &b), ("mock", "changed"), &loose, (None, None))
        .unwrap();
    assert!(r.passed(), "{}", r.summary());
}

#[test]
fn hashes_at_syncs_name_the_first_buffer_and_the_kernels_that_took_it() {
    use gputape::recorder::{BackendDesc, RecordingBackend};
    let sink = gputape::trace::VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(mock(), Box::new(sink), BackendDesc::new("mock")).unwrap();
    rec.hash_at_syncs(true);
    rec.start().unwrap();
    let g: &dyn GpuBackend = &rec;
    let s = g.create_stream().unwrap();
    let x = g.alloc(64).unwrap();
    let y = g.alloc(64).unwrap();
    let z = g.alloc(64).unwrap();
    g.copy_h2d(&gputape::workloads::f32_bytes(&[1.0; 16]), x)
        .unwrap();
    g.memset(y, 0, 64).unwrap();
    g.memset(z, 0, 64).unwrap();
    gputape::workloads::saxpy(g, x, z, 16, 1.0, s).unwrap(); // z: fine either way
    g.synchronize(s).unwrap();
    gputape::workloads::saxpy(g, x, y, 16, 3.0, s).unwrap(); // y: the kernel that will differ
    g.synchronize(s).unwrap();
    let mut out = vec![0u8; 64];
    g.copy_d2h(y, &mut out).unwrap();
    rec.stop().unwrap();
    let t = Trace::from_bytes(Path::new("h"), &buf.lock()).unwrap();
    assert!(t.sync_hashes.len() >= 4);

    // Replay on a mock whose saxpy is subtly wrong when a == 3.
    let m = subtly_wrong_saxpy();
    let r = Replayer::new(&t)
        .run(&m, &ReplayOptions::default(), None, |_| {})
        .unwrap();
    let d = r.divergence.expect("diverges");
    assert_eq!(
        d.call, "synchronize",
        "caught at the sync, before the readback"
    );
    assert_eq!(d.buffer.as_deref(), Some("buf1"));
    assert!(d.detail.contains("blas::saxpy"), "{}", d.detail);
    assert!(
        !d.detail.contains(&format!(
            "#{} ",
            t.calls
                .iter()
                .find(|c| matches!(c.call, gputape::trace::Call::LaunchTyped { .. }))
                .unwrap()
                .seq
        )),
        "the first saxpy (into z) is not a suspect: {}",
        d.detail
    );
}

/// Record, on the mock, a fork/join step: a fill on a side stream, an event, the main stream
/// waiting on it and filling after it, then a readback; optionally an `event_synchronize` on
/// that event after the step, which only an eager event can serve.
fn fork_join_trace(sync_event_after: bool) -> Trace {
    use gputape::recorder::{BackendDesc, RecordingBackend};
    let sink = trace::VecSink::default();
    let bytes = sink.0.clone();
    let rec = RecordingBackend::new(mock(), Box::new(sink), BackendDesc::new("mock")).unwrap();
    rec.start().unwrap();
    let (side, main) = (rec.create_stream().unwrap(), rec.create_stream().unwrap());
    let ev = rec.create_event().unwrap();
    let buf = rec.alloc(256).unwrap();
    rec.memset_async(buf, 7, 256, side).unwrap();
    rec.record_event(ev, side).unwrap();
    rec.stream_wait_event(main, ev).unwrap();
    rec.memset_async(buf, 9, 128, main).unwrap();
    let mut out = [0u8; 256];
    rec.copy_d2h(buf, &mut out).unwrap();
    assert_eq!((out[0], out[255]), (9, 7));
    if sync_event_after {
        rec.event_synchronize(ev).unwrap();
    }
    rec.stop().unwrap();
    let b = bytes.lock().clone();
    Trace::from_bytes(Path::new("fork-join"), &b).unwrap()
}

#[test]
fn a_fork_join_step_is_one_graph_that_starts_on_the_side_stream() {
    let t = fork_join_trace(false);
    let plan = gputape::replayer::plan_segments(
        &t,
        (0, u64::MAX),
        (CaptureMode::Global, StreamKind::Blocking),
        false,
    );
    let graphs: Vec<_> = plan
        .segments
        .iter()
        .filter(|s| s.stream.is_some())
        .collect();
    assert_eq!(graphs.len(), 1, "{plan:#?}");
    let g = graphs[0];
    assert_eq!(g.calls.len(), 4, "fill, record, wait, fill: {plan:#?}");
    assert_eq!(g.forked.len(), 1);
    assert_ne!(g.stream, Some(g.forked[0]));
    // Only the allocation (illegal in a global-mode capture) and the readback keep the step
    // from being one graph; the side stream's work no longer does.
    let breakers: Vec<_> = plan.breakers.iter().map(|b| b.call.as_str()).collect();
    assert_eq!(breakers, ["alloc", "copy_d2h"]);
    // Replayed as that graph, launched three times: the readback sees both fills each time.
    let r = Replayer::new(&t)
        .run_as_graph(&mock(), None, 3, None)
        .unwrap();
    assert_eq!((r.d2h_checked, r.d2h_matched), (3, 3), "{}", r.summary());
}

#[test]
fn an_event_used_after_the_step_keeps_its_record_out_of_the_graph() {
    let t = fork_join_trace(true);
    let plan = gputape::replayer::plan_segments(
        &t,
        (0, u64::MAX),
        (CaptureMode::Global, StreamKind::Blocking),
        false,
    );
    assert!(
        plan.segments.iter().all(|s| s.forked.is_empty()),
        "the event is synchronised after the step, so it cannot live inside a graph: {plan:#?}"
    );
    let r = Replayer::new(&t)
        .run_as_graph(&mock(), None, 3, None)
        .unwrap();
    assert_eq!((r.d2h_checked, r.d2h_matched), (3, 3), "{}", r.summary());
}

/// What `replay --json` says of each fixture that records a fault, without its timings: the
/// shape scripts read (see tests/cli.rs for the envelope around it).
#[test]
fn fault_reports_as_json() {
    for p in traces() {
        let t = Trace::open(&p).unwrap();
        let r = Replayer::new(&t);
        if r.windows().is_empty() {
            continue;
        }
        let rep = r
            .run(&mock(), &ReplayOptions::default(), None, |_| {})
            .unwrap();
        assert!(rep.passed(), "{}: {}", p.display(), rep.summary());
        let mut v = serde_json::to_value(&rep).unwrap();
        for timing in ["loop_ms", "per_call_us", "recorded_ms", "restore_ms"] {
            v.as_object_mut().unwrap().remove(timing);
        }
        insta::assert_snapshot!(
            format!("fault_json_{}", name(&p)),
            redact_replayer_lines(&serde_json::to_string_pretty(&v).unwrap())
        );
    }
}

/// The planted overrun of a recorded step shrinks to its launch and the sync that saw it, with
/// only the three buffers `silu_mul` takes; the small trace is an ordinary trace again.
#[test]
fn minimize_keeps_the_faulting_launch_and_only_its_buffers() {
    let t = Trace::open(Path::new("traces/mock_tiny_async_illegal_step4.gtape")).unwrap();
    let mut oracle = |c: &Trace| -> anyhow::Result<Option<gputape::replayer::FaultSignature>> {
        let opts = ReplayOptions {
            verify: false,
            ..Default::default()
        };
        Ok(Replayer::new(c)
            .run(&mock(), &opts, None, |_| {})
            .ok()
            .and_then(|r| gputape::replayer::signature(&r).map(|(s, _)| s)))
    };
    let m = gputape::replayer::minimize(&t, &mut oracle, 400, &mut |_, _| {}).unwrap();
    assert_eq!(m.signature.code, Some(700));
    assert_eq!(m.signature.kernel.as_deref(), Some("silu_mul::silu_mul"));
    assert!(m.trace.calls.len() <= 5);
    let silu = t
        .calls
        .iter()
        .find(|c| {
            c.call
                .launch()
                .is_some_and(|(k, _)| t.kernel_name(k) == "silu_mul::silu_mul")
        })
        .unwrap();
    let touched = trace::refs(&silu.call).bufs;
    assert!(m.trace.initial.iter().all(|i| touched.contains(&i.buf)));
    // It round-trips through the file format and reproduces on replay.
    let back = Trace::from_bytes(Path::new("small"), &m.trace.to_bytes().unwrap()).unwrap();
    let r = Replayer::new(&back)
        .run(&mock(), &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(r.passed(), "{}", r.summary());
    insta::assert_snapshot!(
        "minimized_async_illegal_step4",
        redact_replayer_lines(&format!("{}\n{}", trace::render(&back), r.summary()))
    );
}

/// A step cut at its 30th call starts from the state the first 30 left, and its readback
/// still matches the recording.
#[test]
fn trim_starts_from_the_state_at_the_cut() {
    let t = Trace::open(Path::new("traces/mock_tiny_step5.gtape")).unwrap();
    let cut = Replayer::new(&t)
        .trim(&mock(), (30, u64::MAX), None)
        .unwrap();
    assert_eq!(cut.calls.len(), t.calls.len() - 30);
    assert_eq!(cut.calls[0].call, t.calls[30].call);
    let back = Trace::from_bytes(Path::new("cut"), &cut.to_bytes().unwrap()).unwrap();
    let r = Replayer::new(&back)
        .run(&mock(), &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(
        r.passed() && r.d2h_checked == 1 && r.d2h_matched == 1,
        "{}",
        r.summary()
    );
    insta::assert_snapshot!(
        "trimmed_tiny_step5_from_30",
        redact_replayer_lines(&trace::summary(&back))
    );
    // Inside a capture there is no state to start from.
    let cap = Trace::open(Path::new("traces/mock_capture_region.gtape")).unwrap();
    let begin = cap
        .calls
        .iter()
        .find(|c| matches!(c.call, trace::Call::BeginCapture { .. }))
        .unwrap()
        .seq;
    let e = Replayer::new(&cap)
        .trim(&mock(), (begin + 1, u64::MAX), None)
        .unwrap_err();
    assert!(e.to_string().contains("inside the capture"), "{e}");
}

fn record(f: impl FnOnce(&dyn GpuBackend)) -> Trace {
    let sink = trace::VecSink::default();
    let buf = sink.0.clone();
    let rec = gputape::recorder::RecordingBackend::new(
        mock(),
        Box::new(sink),
        gputape::recorder::BackendDesc::new("mock"),
    )
    .unwrap();
    rec.start().unwrap();
    f(&rec);
    rec.stop().unwrap();
    let bytes = buf.lock().clone();
    Trace::from_bytes(Path::new("tma"), &bytes).unwrap()
}

/// A tensor map holds its buffer's address inside a by-value parameter. The recorder keeps what
/// built it (typed and raw launches alike), and a replay whose buffers land elsewhere encodes
/// the map again: same bytes out. Replaying the recorded map bytes instead would read the
/// address the buffer had when recorded.
#[test]
fn a_tensor_map_argument_replays_on_a_remapped_buffer() {
    let t = record(|g| {
        gputape::workloads::tma(g).unwrap();
    });
    let launch = t.calls.iter().find(|c| c.call.launch().is_some()).unwrap();
    let (_, args) = launch.call.launch().unwrap();
    assert!(matches!(args[0], trace::Arg::TensorMap(_)), "{args:?}");
    // Elsewhere: a replay on a mock whose first allocations are taken.
    let shifted = mock();
    let _taken = shifted.alloc(1 << 20).unwrap();
    let rep = Replayer::new(&t)
        .run(&shifted, &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(rep.passed() && rep.d2h_checked == 1, "{}", rep.summary());

    // The raw launch path (a parameter array, as engines launch) records the same.
    let t = record(|g| {
        use gputape::backend::{TensorMapDesc, TensorMapDtype};
        let (rows, cols) = (16u32, 32u32);
        let src = g.alloc(2048).unwrap();
        let out = g.alloc(2048).unwrap();
        let data: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
        g.copy_h2d(&gputape::workloads::f32_bytes(&data), src)
            .unwrap();
        let mut map = g
            .encode_tensor_map(
                src,
                &TensorMapDesc::tiled_2d(TensorMapDtype::F32, 16, 32, 16, 32),
            )
            .unwrap();
        let k = g.kernel("blas", "tma_copy").unwrap();
        let (mut o, mut r, mut c, mut br, mut bc) = (out.0, rows, cols, rows, cols);
        let mut params: Vec<*mut std::ffi::c_void> = vec![
            map.as_mut_ptr().cast(),
            (&mut o as *mut u64).cast(),
            (&mut r as *mut u32).cast(),
            (&mut c as *mut u32).cast(),
            (&mut br as *mut u32).cast(),
            (&mut bc as *mut u32).cast(),
        ];
        g.launch(
            k,
            [1, 1, 1],
            [128, 1, 1],
            0,
            g.default_stream(),
            &mut params,
        )
        .unwrap();
        let mut back = vec![0u8; 2048];
        g.copy_d2h(out, &mut back).unwrap();
        assert_eq!(back, gputape::workloads::f32_bytes(&data));
    });
    let launch = t
        .calls
        .iter()
        .find(|c| matches!(c.call, trace::Call::Launch { .. }))
        .unwrap();
    let (_, args) = launch.call.launch().unwrap();
    assert!(matches!(args[0], trace::Arg::TensorMap(_)), "{args:?}");
    let shifted = mock();
    let _taken = shifted.alloc(3 << 20).unwrap();
    let rep = Replayer::new(&t)
        .run(&shifted, &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(rep.passed() && rep.d2h_checked == 1, "{}", rep.summary());
    // A map that runs past its buffer is refused where it is made, naming the rule.
    let m = mock();
    let small = m.alloc(256).unwrap();
    let e = m
        .encode_tensor_map(
            small,
            &gputape::backend::TensorMapDesc::tiled_2d(
                gputape::backend::TensorMapDtype::F32,
                16,
                32,
                16,
                32,
            ),
        )
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("encode_tensor_map") && e.contains("out of bounds"),
        "{e}"
    );
}

/// A dump begun at a later checkpoint (`Trace::rebased`): the capture workload with a
/// checkpoint placed after its graph's first launch (#12), holding what that launch left
/// (buf1 = 2 x buf0). Begun there, the trace keeps the capture of the graph it launches again
/// (#5..=#11) and drops the rest before it; its replay reads back what the whole run read
/// back. A checkpoint inside the capture, or past the trace, is refused by name.
#[test]
fn a_trace_begun_at_a_later_checkpoint_keeps_the_captures_it_launches() {
    use gputape::trace::{Adopted, BufferId, InitialBuffer, Restart, RestartError, SiteId};
    let mut t = Trace::open(Path::new("traces/mock_capture_region.gtape")).unwrap();
    let upload = t
        .calls
        .iter()
        .find_map(|c| match &c.call {
            trace::Call::CopyH2D { data, .. } => Some(*data),
            _ => None,
        })
        .unwrap();
    let x: Vec<f32> = t
        .blobs
        .get(&upload)
        .unwrap()
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let y: Vec<u8> = x.iter().flat_map(|v| (2.0 * v).to_le_bytes()).collect();
    let y_id = trace::BlobId::of(&y);
    t.blobs.insert(y_id, y);
    let at = |seq: u64| Restart {
        step: 1,
        first_seq: seq,
        initial: vec![
            InitialBuffer {
                buf: BufferId(0),
                bytes: 64,
                data: upload,
                site: SiteId(0),
            },
            InitialBuffer {
                buf: BufferId(1),
                bytes: 64,
                data: y_id,
                site: SiteId(0),
            },
        ],
        adopted: vec![Adopted::Stream {
            id: trace::StreamId(1),
            is_default: false,
        }],
        addresses: Vec::new(),
    };
    t.restarts = vec![at(13), at(8), at(99)];
    let r = t.rebased(0).unwrap();
    let seqs: Vec<u64> = r.calls.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, [5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18]);
    let rep = Replayer::new(&r)
        .run(&mock(), &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(rep.passed(), "{}", rep.summary());
    assert_eq!(
        (rep.d2h_checked, rep.d2h_matched),
        (1, 1),
        "{}",
        rep.summary()
    );
    // The same with buf1 as the run began (zero): the readback differs, so the check bites.
    let mut wrong = t.clone();
    wrong.restarts[0].initial[1].data = wrong.restarts[0].initial[0].data;
    let rep = Replayer::new(&wrong.rebased(0).unwrap())
        .run(&mock(), &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert_eq!(rep.d2h_matched, 0, "{}", rep.summary());
    assert_eq!(
        t.rebased(1).unwrap_err(),
        RestartError::InsideCapture {
            index: 1,
            step: 1,
            begun: 5
        }
    );
    assert!(matches!(
        t.rebased(2).unwrap_err(),
        RestartError::NoFirstCall { seq: 99, .. }
    ));
    assert!(matches!(
        t.rebased(3).unwrap_err(),
        RestartError::NoSuch { index: 3, held: 3 }
    ));
    // Written out and read back, a trace keeps its later checkpoints, in call order; one
    // whose call it does not hold goes.
    let again = Trace::from_bytes(Path::new("again"), &t.to_bytes().unwrap()).unwrap();
    assert_eq!(
        again.restarts,
        [t.restarts[1].clone(), t.restarts[0].clone()]
    );
}

/// A launch the mock refuses at its own call (an engine kernel's CPU body that fails: its
/// misaligned access or trap) is the fault `replay` reproduces, and `minimize` keeps it: the
/// launch is its own observer, the calls it does not need go.
#[test]
fn minimize_keeps_a_launch_that_failed_at_its_call() {
    use gputape::backend::{KernelArg, ParamAccess, ParamInfo};
    use gputape::recorder::{BackendDesc, RecordingBackend};
    use gputape::replayer::{minimize, signature};
    let engine = || {
        let m = mock();
        m.register_kernel(
            "eng",
            "trap",
            ParamInfo::packed(&[(8, ParamAccess::Write)]),
            Some(std::sync::Arc::new(|ctx| {
                Err(ctx.bad_args("misaligned address 0x...3 (a trap)"))
            })),
        );
        m
    };
    let sink = trace::VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(engine(), Box::new(sink), BackendDesc::new("mock")).unwrap();
    rec.start().unwrap();
    let g: &dyn GpuBackend = &rec;
    let unrelated = g.alloc(256).unwrap();
    g.memset(unrelated, 1, 256).unwrap();
    let out = g.alloc(64).unwrap();
    let s = g.create_stream().unwrap();
    let k = g.kernel("eng", "trap").unwrap();
    let e = g
        .launch_typed(k, [1, 1, 1], [32, 1, 1], 0, s, &[KernelArg::Buffer(out)])
        .expect_err("the body fails");
    rec.stop().unwrap();
    drop(rec);
    let t = Trace::from_bytes(Path::new("trap"), &buf.lock()).unwrap();
    let recorded = gputape::driver_code(&e);
    assert!(recorded.is_some(), "{e:#}");
    let mut oracle = |cand: &Trace| -> anyhow::Result<_> {
        let r = Replayer::new(cand).run(&engine(), &ReplayOptions::default(), None, |_| {})?;
        Ok(signature(&r).map(|(s, _)| s))
    };
    let m = minimize(&t, &mut oracle, 200, &mut |_, _| {}).expect("a fault to keep");
    assert_eq!(m.signature.code, recorded);
    assert!(
        m.trace.calls.len() < t.calls.len(),
        "{} of {}",
        m.trace.calls.len(),
        t.calls.len()
    );
    assert!(
        m.trace.calls.iter().any(|c| c.call.launch().is_some()),
        "the launch is kept"
    );
}

/// Each committed trace replayed on the mock with its execution logged: what the replay
/// allocated (size, buffer, placement against the recording's), freed, and ran per stream in
/// the order the mock ran it, with the events between. Taken from what the mock did, so a
/// change in how a replay allocates or orders work shows here; sites keep their file only.
#[test]
fn every_trace_s_replay_allocates_and_orders_as_snapshotted() {
    for p in traces() {
        let t = Trace::open(&p).unwrap();
        let (text, _) = gputape::replayer::replay_layout(&t, &mock()).unwrap();
        insta::assert_snapshot!(format!("layout_{}", name(&p)), text);
    }
}

/// The layout is read off what the mock ran, not the trace: under chaos the same trace's
/// work runs in another interleaving for some seed (the numbers change), while each stream's
/// own order, records and waits included, stays.
#[test]
fn a_replay_s_layout_shows_the_order_the_mock_ran_the_work_in() {
    use gputape::mock::MockConfig;
    use gputape::recorder::{BackendDesc, RecordingBackend};
    // Two streams with nothing ordering them (the consumer forgot its wait).
    let sink = trace::VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(mock(), Box::new(sink), BackendDesc::new("mock")).unwrap();
    rec.start().unwrap();
    gputape::workloads::missing_event(&rec).unwrap();
    rec.stop().unwrap();
    drop(rec);
    let t = Trace::from_bytes(Path::new("missing_event"), &buf.lock()).unwrap();
    let (plain, _) = gputape::replayer::replay_layout(&t, &mock()).unwrap();
    let per_stream = |s: &str| -> Vec<String> {
        s.lines()
            .filter_map(|l| l.trim().split_once(". ").map(|(_, w)| w.to_string()))
            .collect()
    };
    let mut differed = false;
    for seed in 0..32 {
        let m = MockGpuBackend::new(MockConfig {
            chaos: Some(seed),
            ..Default::default()
        });
        gputape::workloads::load_kernels(&m).unwrap();
        let (text, _) = gputape::replayer::replay_layout(&t, &m).unwrap();
        let mut a = per_stream(&text);
        let mut b = per_stream(&plain);
        a.sort();
        b.sort();
        assert_eq!(a, b, "seed {seed}: the same work ran");
        // Each stream's own items in the order of the plain replay: a record after the copy
        // before it, a wait before the work after it.
        let own = |text: &str, s: &str| -> Vec<String> {
            let part = text
                .split(&format!("  {s}:\n"))
                .nth(1)
                .expect("the stream ran work");
            part.lines()
                .take_while(|l| l.starts_with("    "))
                .filter_map(|l| l.trim().split_once(". ").map(|(_, w)| w.to_string()))
                .collect()
        };
        for s in ["s1", "s2"] {
            assert_eq!(own(&text, s), own(&plain, s), "seed {seed}, {s}: {text}");
        }
        differed |= text != plain;
    }
    assert!(differed, "some seed interleaves the streams otherwise");
}

/// Record, on the mock, an eager program: its work on the legacy stream (as PyTorch's is), an
/// upload, then three steps of a fill, a saxpy and a readback.
fn eager_trace() -> Trace {
    use gputape::recorder::{BackendDesc, RecordingBackend};
    let sink = trace::VecSink::default();
    let bytes = sink.0.clone();
    let rec = RecordingBackend::new(mock(), Box::new(sink), BackendDesc::new("mock")).unwrap();
    rec.start().unwrap();
    gputape::workloads::load_kernels(&rec).unwrap();
    let legacy = rec.default_stream();
    let (x, y) = (rec.alloc(64).unwrap(), rec.alloc(64).unwrap());
    rec.copy_h2d(&gputape::workloads::f32_bytes(&[1.0; 16]), x)
        .unwrap();
    for _ in 0..3 {
        rec.memset_async(y, 0, 64, legacy).unwrap();
        gputape::workloads::saxpy(&rec, x, y, 16, 2.0, legacy).unwrap();
        let mut out = [0u8; 64];
        rec.copy_d2h(y, &mut out).unwrap();
        assert_eq!(out[..4], 2.0f32.to_le_bytes());
    }
    rec.stop().unwrap();
    let b = bytes.lock().clone();
    let mut t = Trace::from_bytes(Path::new("eager"), &b).unwrap();
    // The trait names its default stream as a stream of the backend's; a driver-level
    // recording names it the legacy stream, as here.
    for c in &mut t.calls {
        if let gputape::trace::Call::MemsetAsync { stream, .. }
        | gputape::trace::Call::LaunchTyped {
            head: gputape::trace::LaunchHead { stream, .. },
            ..
        } = &mut c.call
        {
            *stream = gputape::trace::StreamRef::Legacy;
        }
    }
    t
}

/// `replay --as-graph` of an eager program: no capture can begin on the legacy stream, so its
/// repeated step is moved to a stream of the replay's and captured there, as
/// `torch.cuda.graph` would; the readback that ends the step is what stays out.
#[test]
fn an_eager_program_s_step_is_replayed_as_a_graph_on_a_stream_of_its_own() {
    let t = eager_trace();
    let legacy_only = gputape::replayer::plan_segments(
        &t,
        (0, u64::MAX),
        (CaptureMode::Global, StreamKind::Blocking),
        false,
    );
    assert_eq!(legacy_only.graph_count(), 0, "{legacy_only:#?}");
    let r = Replayer::new(&t)
        .run_as_graph(&mock(), None, 3, None)
        .unwrap();
    let summary = r.summary();
    assert!(
        r.eager
            .as_deref()
            // The first step also looked its kernel up: two of the three are alike.
            .is_some_and(|n| n.contains("repeated 2 times")),
        "{summary}"
    );
    assert_eq!(r.plan.graph_count(), 1, "{summary}");
    let graph = r.plan.segments.iter().find(|s| s.stream.is_some()).unwrap();
    assert_eq!(graph.calls.len(), 2, "the fill and the saxpy: {summary}");
    let breakers: Vec<_> = r.plan.breakers.iter().map(|b| b.call.as_str()).collect();
    assert_eq!(breakers, ["copy_d2h"], "{summary}");
    assert_eq!((r.d2h_checked, r.d2h_matched), (3, 3), "{summary}");
    assert!(r.recorded_ms.is_some(), "{summary}");
}

/// A mock with two compiled-looking kernels nobody described (no declared element types, no
/// source: only their mangled template names say `float`): `fill<float>(float*, int)` writes
/// finite values, `poison<float>(float*, int)` writes a NaN at element 3.
fn undescribed_kernels() -> MockGpuBackend {
    use gputape::backend::{ParamAccess::*, ParamInfo};
    let m = mock();
    for (name, nan) in [("_Z4fillIfEvPT_i", false), ("_Z6poisonIfEvPT_i", true)] {
        m.register_kernel(
            "compiled",
            name,
            ParamInfo::packed(&[(8, Unknown), (4, Value)]),
            Some(std::sync::Arc::new(move |ctx| {
                let (p, n) = (ctx.ptr(0)?, ctx.u32(1)? as usize);
                let mut v: Vec<f32> = (0..n).map(|i| i as f32).collect();
                if nan {
                    v[3] = f32::NAN;
                }
                ctx.write_f32(p, &v)
            })),
        );
    }
    m
}

/// `--check-finite` on kernels nobody described: the element type comes from the kernel's
/// name, the poisoning launch is named as the first writer (its inputs clean), and the tensor
/// it wrote is the second of a shared allocation, as a caching allocator lays them out.
#[test]
fn check_finite_types_undescribed_kernels_by_their_names() {
    use gputape::backend::KernelArg;
    let sink = trace::VecSink::default();
    let bytes = sink.0.clone();
    let rec = gputape::recorder::RecordingBackend::new(
        undescribed_kernels(),
        Box::new(sink),
        gputape::recorder::BackendDesc::new("mock"),
    )
    .unwrap();
    rec.start().unwrap();
    let s = rec.create_stream().unwrap();
    let segment = rec.alloc(1024).unwrap();
    let fill = rec.kernel("compiled", "_Z4fillIfEvPT_i").unwrap();
    let poison = rec.kernel("compiled", "_Z6poisonIfEvPT_i").unwrap();
    let n = 16u32;
    for (k, off) in [(fill, 0), (poison, 512), (fill, 0)] {
        rec.launch_typed(
            k,
            [1, 1, 1],
            [32, 1, 1],
            0,
            s,
            &[KernelArg::Buffer(segment.offset(off)), KernelArg::u32(&n)],
        )
        .unwrap();
    }
    rec.synchronize(s).unwrap();
    let mut out = [0u8; 1024];
    rec.copy_d2h(segment, &mut out).unwrap();
    rec.stop().unwrap();
    let t = Trace::from_bytes(Path::new("undescribed"), &bytes.lock().clone()).unwrap();
    let r = Replayer::new(&t)
        .check_finite(
            &undescribed_kernels(),
            &gputape::replayer::FiniteOptions::default(),
            None,
        )
        .unwrap();
    let summary = r.summary();
    let first = r.first.as_ref().unwrap_or_else(|| panic!("{summary}"));
    assert!(first.kernel.contains("poison"), "{summary}");
    assert_eq!(
        (first.elem, first.elem_how, first.offset, first.index),
        ("f32", "its mangled name's parameter types", 512, 3),
        "{summary}"
    );
    assert!(first.inputs.is_empty(), "{summary}");
    // The later fill of the same allocation's first tensor is no writer: the NaN it sees
    // beyond its pointer was there before it ran.
    assert_eq!(r.writers.len(), 1, "{summary}");
    assert!(r.untyped.is_empty(), "{summary}");
}
