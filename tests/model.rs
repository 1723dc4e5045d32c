//! The decode step on the mock: deterministic tokens, clean teardown, recorded steps.

use gputape::backend::{CallKind, GpuBackend, TeardownError};
use gputape::mock::MockGpuBackend;
use gputape::model::{self, FaultPlan, Model, ModelConfig};
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::trace::{self, Call, Trace, VecSink};
use std::path::Path;

fn mock() -> MockGpuBackend {
    let m = MockGpuBackend::default();
    model::kernels::load(&m).expect("load the model kernels");
    m
}

fn run(cfg: ModelConfig, steps: usize) -> (Vec<u32>, Vec<f32>) {
    let g = mock();
    let mut m = Model::load(&g, cfg).unwrap();
    let toks = model::generate(&g, &mut m, steps, |_, _, _| {}).unwrap();
    let logits = m.logits(&g).unwrap();
    m.teardown(&g).unwrap();
    assert_eq!(g.live_alloc_count(), 0, "teardown frees everything");
    assert_eq!(g.sweep_unreleased(), 0, "nothing left for the sweep");
    (toks, logits)
}

#[test]
fn tokens_are_deterministic_and_teardown_is_clean() {
    let (a, la) = run(ModelConfig::tiny(), 12);
    let (b, lb) = run(ModelConfig::tiny(), 12);
    assert_eq!(a, b);
    assert_eq!(la, lb);
    assert_eq!(a.len(), 12 - model::PROMPT.len() + 1);
    insta::assert_snapshot!("tiny_tokens", format!("{a:?}"));
}

#[test]
fn the_default_config_runs_and_tears_down() {
    let (toks, logits) = run(ModelConfig::default_config(), 6);
    assert_eq!(logits.len(), 512);
    assert!(logits.iter().all(|x| x.is_finite()));
    insta::assert_snapshot!("default_tokens", format!("{toks:?}"));
}

#[test]
fn teardown_is_idempotent_and_resources_release_once() {
    let g = mock();
    let mut m = Model::load(&g, ModelConfig::tiny()).unwrap();
    m.step(&g, 1, 0).unwrap();
    m.teardown(&g).unwrap();
    m.teardown(&g).unwrap();
    assert_eq!(g.live_alloc_count(), 0);
}

/// One failed release does not stop a teardown: every other release is still made, and the
/// error names each failure with what it was releasing.
#[test]
fn teardown_goes_on_past_failed_releases_and_names_each() {
    let g = mock();
    let mut m = Model::load(&g, ModelConfig::tiny()).unwrap();
    m.step(&g, 1, 0).unwrap();
    assert!(g.live_alloc_count() > 30);
    // The third free (the arena's `q`), the pinned staging's free and the event's destroy fail.
    g.fail_nth(CallKind::Free, 3);
    g.fail_nth(CallKind::FreeHostPinned, 1);
    g.fail_nth(CallKind::DestroyEvent, 1);
    let e = m.teardown(&g).unwrap_err();
    let t = e.downcast_ref::<TeardownError>().expect("a TeardownError");
    let named: Vec<_> = t
        .failures
        .iter()
        .map(|f| (f.resource, f.what.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            ("activation arena", "buffer q"),
            ("model", "pinned staging"),
            ("model", "event inputs_ready"),
        ]
    );
    for f in &t.failures {
        assert!(f.to_string().contains("injected failure"), "{f}");
    }
    let msg = format!("{e:#}");
    assert!(
        msg.starts_with("3 release(s) failed at teardown (activation arena, model): "),
        "{msg}"
    );
    // Every other allocation was freed: only the one whose free failed is left.
    assert_eq!(g.live_alloc_count(), 1);
    // Each release was attempted once: a second teardown frees nothing again.
    m.teardown(&g).unwrap();
    assert_eq!(g.live_alloc_count(), 1);
    assert_eq!(g.sweep_unreleased(), 1);
}

/// After a sticky fault every release fails (the context is dead, and the memory goes with
/// it): the teardown still makes each one, so the error lists them all and nothing is left.
#[test]
fn teardown_after_a_sticky_fault_attempts_every_release() {
    let g = mock();
    let mut m = Model::load(&g, ModelConfig::tiny()).unwrap();
    m.fault = PLANTED;
    let mut token = model::PROMPT[0];
    let mut failed = false;
    for pos in 0..8 {
        match m.step(&g, token, pos) {
            Ok(next) => token = model::PROMPT.get(pos + 1).copied().unwrap_or(next),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the planted fault is raised");
    let owned = g.live_alloc_count();
    let e = m.teardown(&g).unwrap_err();
    let t = e.downcast_ref::<TeardownError>().expect("a TeardownError");
    // Every buffer's free, and the pinned staging's and the event's releases, failed.
    assert!(
        t.failures.len() >= owned + 2,
        "{} < {owned} + 2",
        t.failures.len()
    );
    assert!(
        t.failures.iter().any(|f| f.what == "tensor lm_head"),
        "{e:#}"
    );
    assert!(
        t.failures.iter().any(|f| f.what == "V pool of layer 1"),
        "{e:#}"
    );
    assert_eq!(g.live_alloc_count(), 0, "each free was made, and each went");
    assert_eq!(g.sweep_unreleased(), 0, "nothing left for the sweep");
}

fn record_step(k: usize, fault: Option<FaultPlan>) -> (Vec<u8>, anyhow::Result<u32>) {
    record_step_on(mock(), k, fault)
}

fn record_step_on(
    m: MockGpuBackend,
    k: usize,
    fault: Option<FaultPlan>,
) -> (Vec<u8>, anyhow::Result<u32>) {
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let mut m = Model::load(gpu, ModelConfig::tiny()).unwrap();
    m.fault = fault;
    let mut token = model::PROMPT[0];
    let mut last = Ok(0);
    for pos in 0..=k {
        if pos == k {
            rec.start().unwrap();
        }
        last = m.step(gpu, token, pos);
        if pos < k {
            let next = last.as_ref().copied().unwrap();
            token = model::PROMPT.get(pos + 1).copied().unwrap_or(next);
        }
    }
    rec.stop().unwrap();
    let _ = m.teardown(gpu);
    let b = buf.lock().clone();
    (b, last)
}

#[test]
fn a_recorded_decode_step_is_self_contained_and_snapshot_stable() {
    let (bytes, r) = record_step(5, None);
    r.unwrap();
    assert!(
        bytes.len() < 5 << 20,
        "tiny step trace is {} bytes",
        bytes.len()
    );
    let t = Trace::from_bytes(Path::new("step5"), &bytes).unwrap();
    // The initial state holds every live allocation (weights, arena, KV pools, scratch).
    assert!(t.initial.len() > 20);
    // All nine kernels' modules, with their CUDA source, travel with the trace.
    assert_eq!(t.modules.len(), 9);
    assert!(t
        .modules
        .iter()
        .all(|m| m.source.as_ref().is_some_and(|s| s.contains("__global__"))));
    // The step ends in the synchronous token readback.
    let last = t.calls.last().unwrap();
    assert!(matches!(last.call, Call::CopyD2H { len: 4, .. }));
    insta::assert_snapshot!(
        "tiny_step5",
        gputape::testing::mask_format(&gputape::testing::mask_lines(&format!(
            "{}\n{}",
            trace::render(&t),
            trace::summary(&t)
        )))
    );
}

const PLANTED: Option<FaultPlan> = Some(FaultPlan {
    step: 4,
    overrun: 16,
});

/// As an engine sees it: no sync after each launch, so the overrun surfaces at the step's
/// blocking token readback, and the error still names the kernel that raised it.
#[test]
fn the_planted_fault_is_recorded_at_the_next_blocking_copy() {
    let (t, failed) = the_one_failure(record_step(4, PLANTED));
    assert!(matches!(failed.call, Call::CopyD2H { len: 4, .. }));
    let err = failed.ret.as_ref().unwrap().as_ref().unwrap_err();
    assert!(err.message.contains("silu_mul"), "{}", err.message);
    let _ = t;
}

/// A recorded faulting step: its error names silu_mul, and exactly one call failed, with an
/// illegal address.
fn the_one_failure(
    (bytes, r): (Vec<u8>, anyhow::Result<u32>),
) -> (Trace, gputape::trace::CallRecord) {
    let e = r.unwrap_err();
    assert!(format!("{e:#}").contains("silu_mul"), "{e:#}");
    let t = Trace::from_bytes(Path::new("fault"), &bytes).unwrap();
    let failed: Vec<_> = t
        .calls
        .iter()
        .filter(|c| matches!(c.ret, Some(Err(_))))
        .cloned()
        .collect();
    assert_eq!(failed.len(), 1);
    let err = failed[0].ret.as_ref().unwrap().as_ref().unwrap_err();
    assert_eq!(err.code, Some(700));
    let f = failed[0].clone();
    (t, f)
}

#[test]
fn the_planted_fault_is_recorded_at_its_kernel_with_debug_sync() {
    let m = MockGpuBackend::new(gputape::mock::MockConfig {
        debug_sync_kernels: true,
        ..Default::default()
    });
    model::kernels::load(&m).expect("load the model kernels");
    let (t, failed) = the_one_failure(record_step_on(m, 4, PLANTED));
    assert!(t.site(failed.site).starts_with("src/model/mod.rs:"));
    let Call::LaunchTyped {
        head: gputape::trace::LaunchHead { kernel, .. },
        ..
    } = &failed.call
    else {
        panic!("the failing call is a launch");
    };
    assert_eq!(t.kernels[kernel].name, "silu_mul");
}

/// Our own decode step held to the rules an engine's CI would hold it to: one host sync (the
/// token readback), no allocation in a steady-state step, and its launch budget.
#[test]
fn the_decode_step_keeps_its_budget() {
    let h = gputape::testing::Harness::new(mock());
    let mut m = Model::load(h.gpu(), ModelConfig::tiny()).unwrap();
    // The first step allocates argmax's scratch (lazily, through the op cache): a steady-state
    // step is the one to hold to "no allocation".
    m.step(h.gpu(), model::PROMPT[0], 0).unwrap();
    let (tok, rec) = h.record(|g| m.step(g, model::PROMPT[1], 1)).unwrap();
    tok.unwrap();
    assert_eq!(rec.host_syncs(), 1);
    rec.assert_no_device_alloc();
    rec.assert_no_pageable_async_copy();
    rec.assert_no_race();
    let launches: usize = rec.launches().values().sum();
    rec.assert_at_most_launches(launches);
    assert!(rec.check_at_most_launches(launches - 1).is_err());
    // The readback keeps it out of one graph; the message names the copy.
    let e = rec
        .check_capturable(gputape::analysis::CaptureQuery::default())
        .unwrap_err();
    assert!(e.iter().any(|v| v.call == "copy_d2h"), "{e:?}");
    m.teardown(h.gpu()).unwrap();
    drop(m);
}
