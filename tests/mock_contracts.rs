//! The trait's contracts, checked on the mock (no GPU needed).

use gputape::backend::probe::{all_probes, run_probe};
use gputape::backend::{
    CallKind, CaptureMode, GpuBackend, KernelArg, ParamAccess, ParamInfo, StreamKind,
};
use gputape::mock::{KernelBody, MockConfig, MockError, MockGpuBackend};
use std::sync::Arc;

fn mock() -> MockGpuBackend {
    MockGpuBackend::default()
}

fn err_of(e: anyhow::Error) -> MockError {
    e.downcast::<gputape::backend::DeviceError>()
        .expect("a DeviceError")
        .into_inner::<MockError>()
        .expect("from the mock")
}

#[test]
fn alloc_through_dyn_is_attributed_to_the_caller_line() {
    let m = mock();
    let g: &dyn GpuBackend = &m;
    let line = line!() + 1;
    let p = g.alloc(1000).unwrap();
    let sites = m.live_by_site();
    assert_eq!(sites.len(), 1);
    assert!(
        sites[0]
            .site
            .starts_with(&format!("tests/mock_contracts.rs:{line}:")),
        "attributed to {}",
        sites[0].site
    );
    g.free(p).unwrap();
}

#[test]
fn addresses_are_deterministic_and_aligned() {
    let run = || {
        let m = mock();
        (0..5)
            .map(|i| m.alloc(100 + i * 333).unwrap().0)
            .collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run());
    assert!(a.iter().all(|p| p % 256 == 0));
}

#[test]
fn pinned_memory_is_zeroed_and_aliased() {
    let m = mock();
    let p = m.alloc_host_pinned(4096).unwrap();
    // SAFETY: 4096 bytes just allocated by the backend.
    let s = unsafe { std::slice::from_raw_parts_mut(p, 4096) };
    assert!(s.iter().all(|&b| b == 0));
    s[10] = 7;
    let d = m.host_ptr_to_device(p).unwrap();
    let mut out = [0u8; 1];
    m.copy_d2h(d.offset(10), &mut out).unwrap();
    assert_eq!(out[0], 7);
    // A device write through the alias lands in host memory.
    m.memset(d.offset(20), 9, 2).unwrap();
    assert_eq!(&s[20..22], &[9, 9]);
    m.free_host_pinned(p, 4096).unwrap();
    // After the region is freed, the alias is a use-after-free.
    let e = err_of(m.copy_d2h(d, &mut out).unwrap_err());
    assert!(matches!(e, MockError::UseAfterFree { .. }), "{e}");
}

/// The trait lets a caller drop an async upload's source as soon as the call returns. Under
/// chaos the mock queues the copy and runs it later, so the bytes the copy writes are the ones
/// it took at the call, not what the source's memory holds by then (here, freed and filled
/// with 0xFF by another allocation before the copy runs).
#[test]
fn copy_h2d_async_source_may_be_dropped_before_the_copy_runs() {
    let mut queued = 0;
    for seed in 0..64 {
        let m = MockGpuBackend::new(MockConfig {
            chaos: Some(seed),
            ..Default::default()
        });
        let d = m.alloc(64).unwrap();
        let s = m.create_stream().unwrap();
        let before = m.chaos_pending();
        {
            let src: Vec<u8> = (0..64).collect();
            m.copy_h2d_async(&src, d, s).unwrap();
            drop(src);
            let other = vec![0xFFu8; 64];
            std::hint::black_box(&other);
        }
        if m.chaos_pending() > before {
            queued += 1;
        }
        m.synchronize(s).unwrap();
        let mut out = vec![0u8; 64];
        m.copy_d2h(d, &mut out).unwrap();
        assert_eq!(out, (0..64).collect::<Vec<u8>>(), "seed {seed}");
    }
    // Some seeds left the copy queued past the drop: the case the contract is about was met.
    assert!(queued > 0, "no seed queued the copy");
}

#[test]
fn every_bounds_violation_is_its_own_error() {
    let m = mock();
    let a = m.alloc(100).unwrap();
    let mut buf = [0u8; 8];
    // Out of bounds: reading 8 bytes at offset 96 overruns by 4.
    match err_of(m.copy_d2h(a.offset(96), &mut buf).unwrap_err()) {
        MockError::OutOfBounds {
            over, alloc, site, ..
        } => {
            assert_eq!(over, 4);
            assert_eq!(alloc.size, 100);
            assert!(site.file().ends_with("mock_contracts.rs"));
        }
        e => panic!("{e}"),
    }
    // Wild pointer.
    assert!(matches!(
        err_of(
            m.memset(gputape::backend::DevicePtr(0x1234), 0, 1)
                .unwrap_err()
        ),
        MockError::WildPointer { .. }
    ));
    // Interior free.
    assert!(matches!(
        err_of(m.free(a.offset(8)).unwrap_err()),
        MockError::FreeInterior { .. }
    ));
    m.free(a).unwrap();
    // Use after free names where it was freed.
    let e = err_of(m.copy_h2d(&buf, a).unwrap_err());
    assert!(matches!(e, MockError::UseAfterFree { .. }), "{e}");
    assert!(
        e.to_string().contains("freed at tests/mock_contracts.rs"),
        "{e}"
    );
    // Double free.
    assert!(matches!(
        err_of(m.free(a).unwrap_err()),
        MockError::DoubleFree { .. }
    ));
    // D2D bounds on both sides.
    let b = m.alloc(16).unwrap();
    let c = m.alloc(8).unwrap();
    assert!(matches!(
        err_of(m.copy_d2d(b, c, 16).unwrap_err()),
        MockError::OutOfBounds { .. }
    ));
    // 2D copies check every row before writing any.
    let e = m.copy_d2d_2d_async(b, 8, c, 4, 4, 3, m.default_stream());
    assert!(matches!(
        err_of(e.unwrap_err()),
        MockError::OutOfBounds { .. }
    ));
}

#[test]
fn memory_limit_makes_alloc_fail_cleanly() {
    let m = MockGpuBackend::new(MockConfig {
        total_memory: 1000,
        ..Default::default()
    });
    let a = m.alloc(600).unwrap();
    let e = err_of(m.alloc(600).unwrap_err());
    assert!(matches!(
        e,
        MockError::OutOfMemory {
            requested: 600,
            live: 600,
            limit: 1000,
            ..
        }
    ));
    assert_eq!(e.cuda_code(), 2);
    assert_eq!(m.live_alloc_count(), 1);
    assert_eq!(m.free_memory().unwrap(), 400);
    m.free(a).unwrap();
    m.alloc(1000).unwrap();
}

#[test]
fn injected_failure_surfaces_and_keeps_the_ledger_consistent() {
    let m = mock();
    m.fail_nth(CallKind::Alloc, 2);
    let a = m.alloc(10).unwrap();
    let e = err_of(m.alloc(20).unwrap_err());
    assert!(matches!(
        e,
        MockError::Injected {
            kind: CallKind::Alloc,
            n: 2,
            ..
        }
    ));
    assert_eq!(m.live_alloc_count(), 1);
    assert_eq!(m.live_bytes(), Some(10));
    let b = m.alloc(30).unwrap();
    assert_eq!(m.live_bytes(), Some(40));
    m.fail_nth(CallKind::Free, 1);
    assert!(m.free(a).is_err());
    assert_eq!(m.live_alloc_count(), 2, "a failed free frees nothing");
    m.free(a).unwrap();
    m.free(b).unwrap();
    assert_eq!(m.live_bytes(), Some(0));
}

#[test]
fn sweep_names_the_leaking_site_and_alloc_report_ranks_sites() {
    let m = mock();
    let g: &dyn GpuBackend = &m;
    let keep = g.alloc(10).unwrap();
    let leak_line = line!() + 2;
    for _ in 0..3 {
        g.alloc(1 << 20).unwrap();
    }
    let report = g.alloc_report(10, 0).unwrap();
    let first = report.lines().nth(1).unwrap();
    assert!(
        first.contains(&format!("mock_contracts.rs:{leak_line}:")),
        "{report}"
    );
    assert!(first.contains("x3"), "{report}");
    g.free(keep).unwrap();
    assert_eq!(g.sweep_unreleased(), 3);
    let sweep = m.last_sweep();
    assert_eq!(sweep.len(), 1);
    assert!(sweep[0]
        .site
        .contains(&format!("mock_contracts.rs:{leak_line}:")));
    assert_eq!(sweep[0].bytes, 3 << 20);
    assert_eq!(g.live_alloc_count(), 0);
    assert_eq!(g.sweep_unreleased(), 0);
}

fn saxpy_body() -> KernelBody {
    Arc::new(|ctx| {
        let x = ctx.ptr(0)?;
        let y = ctx.ptr(1)?;
        let n = ctx.u32(2)? as usize;
        let a = ctx.f32(3)?;
        let xs = ctx.read_f32(x, n)?;
        let mut ys = ctx.read_f32(y, n)?;
        for (y, x) in ys.iter_mut().zip(xs) {
            *y += a * x;
        }
        ctx.write_f32(y, &ys)
    })
}

fn saxpy_layout() -> Vec<ParamInfo> {
    use ParamAccess::*;
    ParamInfo::packed(&[(8, Read), (8, ReadWrite), (4, Value), (4, Value)])
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

#[test]
fn kernels_run_their_cpu_body_through_raw_and_typed_launch() {
    let m = mock();
    m.register_kernel("blas", "saxpy", saxpy_layout(), Some(saxpy_body()));
    let k = m.kernel("blas", "saxpy").unwrap();
    let x = m.alloc(16).unwrap();
    let y = m.alloc(16).unwrap();
    m.copy_h2d(&f32_bytes(&[1.0, 2.0, 3.0, 4.0]), x).unwrap();
    m.copy_h2d(&f32_bytes(&[10.0; 4]), y).unwrap();
    let n = 4u32;
    let a = 2.0f32;
    let s = m.default_stream();
    m.launch_typed(
        k,
        [1, 1, 1],
        [4, 1, 1],
        0,
        s,
        &[
            KernelArg::Buffer(x),
            KernelArg::Buffer(y),
            KernelArg::Bytes(&n.to_le_bytes()),
            KernelArg::Bytes(&a.to_le_bytes()),
        ],
    )
    .unwrap();
    // The same through raw params.
    let (mut px, mut py, mut pn, mut pa) = (x.0, y.0, n, a);
    let mut params = [
        (&mut px as *mut u64).cast(),
        (&mut py as *mut u64).cast(),
        (&mut pn as *mut u32).cast(),
        (&mut pa as *mut f32).cast(),
    ];
    m.launch(k, [1, 1, 1], [4, 1, 1], 0, s, &mut params)
        .unwrap();
    let mut out = vec![0u8; 16];
    m.copy_d2h_on_stream(y, &mut out, s).unwrap();
    assert_eq!(out, f32_bytes(&[14.0, 18.0, 22.0, 26.0]));
}

/// Launch saxpy over 4 floats into a 12-byte `y`: one float too far.
fn overrunning_saxpy(m: &MockGpuBackend) -> anyhow::Result<()> {
    m.register_kernel("blas", "saxpy", saxpy_layout(), Some(saxpy_body()));
    let k = m.kernel("blas", "saxpy").unwrap();
    let x = m.alloc(64).unwrap();
    let y = m.alloc(12).unwrap();
    let n = 4u32;
    m.launch_typed(
        k,
        [1; 3],
        [1; 3],
        0,
        1,
        &[
            KernelArg::Buffer(x),
            KernelArg::Buffer(y),
            KernelArg::Bytes(&n.to_le_bytes()),
            KernelArg::Bytes(&1f32.to_le_bytes()),
        ],
    )
}

#[test]
fn a_kernel_that_overruns_is_caught_at_the_write_with_debug_sync() {
    let m = MockGpuBackend::new(MockConfig {
        debug_sync_kernels: true,
        ..Default::default()
    });
    let e = overrunning_saxpy(&m).unwrap_err();
    assert_eq!(gputape::driver_code(&e), Some(700));
    let d = gputape::backend::device_error(&e).unwrap();
    assert_eq!(d.kernel.as_deref(), Some("blas::saxpy"));
    let a = d.alloc.as_ref().expect("the allocation is named");
    assert_eq!((a.bytes, a.past_end), (12, 4));
    let msg = err_of(e).to_string();
    assert!(
        msg.contains("blas::saxpy") && msg.contains("overruns by 4"),
        "{msg}"
    );
}

/// Without a sync after each launch the driver reports a kernel's fault at the next call that
/// waits, and the context is dead from then on: the mock does the same.
#[test]
fn a_kernel_fault_surfaces_at_the_next_call_that_waits_and_stays() {
    let m = mock();
    overrunning_saxpy(&m).expect("the launch itself succeeds");
    // Work queued after the fault does not run and reports nothing yet.
    let z = m.alloc(8).unwrap();
    m.memset_async(z, 1, 8, 1)
        .expect("async work is only queued");
    let e = m.synchronize(1).unwrap_err();
    assert_eq!(gputape::driver_code(&e), Some(700));
    let msg = format!("{e:#}");
    assert!(
        msg.contains("synchronize at")
            && msg.contains("before this call waited")
            && msg.contains("overruns by 4"),
        "{msg}"
    );
    let d = gputape::backend::device_error(&e).unwrap();
    assert_eq!(d.kernel.as_deref(), Some("blas::saxpy"));
    let again = m.alloc(8).unwrap_err();
    assert_eq!(gputape::driver_code(&again), Some(700));
    assert!(format!("{again:#}").contains("unusable after an earlier fault"));
}

#[test]
fn bodiless_kernels_still_check_pointer_arguments_and_unknown_kernels_fail() {
    // A sync after each launch, so the fault is the launch's own result.
    let m = MockGpuBackend::new(MockConfig {
        debug_sync_kernels: true,
        ..Default::default()
    });
    m.register_kernel(
        "k",
        "noop",
        ParamInfo::packed(&[(8, ParamAccess::Write)]),
        None,
    );
    let k = m.kernel("k", "noop").unwrap();
    let a = m.alloc(8).unwrap();
    m.launch_typed(k, [1; 3], [1; 3], 0, 1, &[KernelArg::Buffer(a)])
        .unwrap();
    m.free(a).unwrap();
    let e = m
        .launch_typed(k, [1; 3], [1; 3], 0, 1, &[KernelArg::Buffer(a)])
        .unwrap_err();
    assert!(err_of(e).to_string().contains("freed at"));
    // The context is dead after that fault; a fresh one for the synchronous checks.
    let m = mock();
    m.register_kernel(
        "k",
        "noop",
        ParamInfo::packed(&[(8, ParamAccess::Write)]),
        None,
    );
    let k = m.kernel("k", "noop").unwrap();
    assert!(matches!(
        err_of(m.kernel("k", "missing").unwrap_err()),
        MockError::UnknownKernel { .. }
    ));
    // Wrong argument count.
    assert!(matches!(
        err_of(m.launch_typed(k, [1; 3], [1; 3], 0, 1, &[]).unwrap_err()),
        MockError::BadParams { .. }
    ));
}

#[test]
fn events_order_two_streams_and_graphs_replay() {
    let m = mock();
    let s1 = m.create_stream().unwrap();
    let s2 = m.create_stream().unwrap();
    let e = m.create_event().unwrap();
    let a = m.alloc(32).unwrap();
    let b = m.alloc(32).unwrap();
    m.memset_async(a, 5, 32, s1).unwrap();
    m.record_event(e, s1).unwrap();
    m.stream_wait_event(s2, e).unwrap();
    m.copy_d2d_async(a, b, 32, s2).unwrap();
    m.event_synchronize(e).unwrap();
    m.synchronize(s2).unwrap();
    let mut out = [0u8; 32];
    m.copy_d2h(b, &mut out).unwrap();
    assert_eq!(out, [5u8; 32]);

    // Capture a memset; nothing runs until the graph is launched, then it runs each time.
    m.memset(b, 0, 32).unwrap();
    m.begin_capture(s1).unwrap();
    assert!(m.stream_is_capturing(s1));
    m.memset_async(b, 9, 32, s1).unwrap();
    let gr = m.end_capture(s1).unwrap();
    assert!(!m.stream_is_capturing(s1));
    m.copy_d2h(b, &mut out).unwrap();
    assert_eq!(out, [0u8; 32]);
    m.launch_graph(gr, s1).unwrap();
    m.synchronize(s1).unwrap();
    m.copy_d2h(b, &mut out).unwrap();
    assert_eq!(out, [9u8; 32]);
    m.destroy_graph(gr).unwrap();
    assert!(m.launch_graph(gr, s1).is_err());
}

#[test]
fn abort_capture_returns_the_stream_to_normal() {
    let m = mock();
    let s = m.create_stream().unwrap();
    m.begin_capture(s).unwrap();
    assert!(m.synchronize(s).is_err());
    m.abort_capture_if_active(s);
    assert!(!m.stream_is_capturing(s));
    m.synchronize(s).unwrap();
    m.abort_capture_if_active(s);
}

#[test]
fn unjoined_fork_fails_end_capture() {
    let m = mock();
    let a = m.create_stream().unwrap();
    let b = m.create_stream().unwrap();
    let e = m.create_event().unwrap();
    let buf = m.alloc(8).unwrap();
    m.begin_capture(a).unwrap();
    m.record_event(e, a).unwrap();
    m.stream_wait_event(b, e).unwrap();
    assert!(m.stream_is_capturing(b));
    m.memset_async(buf, 1, 8, b).unwrap();
    let err = m.end_capture(a).unwrap_err();
    assert_eq!(gputape::driver_code(&err), Some(904));
}

fn make_mock(mode: CaptureMode, kind: StreamKind) -> anyhow::Result<Box<dyn GpuBackend>> {
    Ok(Box::new(MockGpuBackend::new(MockConfig {
        capture_mode: mode,
        stream_kind: kind,
        ..Default::default()
    })))
}

/// Every row of the capture table, run as a call pattern on the mock: what the mock does must
/// be what the table says. (The GPU suite runs the same probes on the driver.)
#[test]
fn every_capture_rule_behaves_as_the_table_says_on_the_mock() {
    let code = |e: &anyhow::Error| gputape::driver_code(e).unwrap_or(0);
    let mut bad = Vec::new();
    let mut seen_rules = std::collections::BTreeSet::new();
    for p in all_probes() {
        let (rule, want) = p.expected();
        seen_rules.insert(rule);
        let got = run_probe(&make_mock, &code, p).unwrap();
        if got != want {
            bad.push(format!(
                "{p:?} rule {rule}: table says [{}], mock did [{}]",
                want.describe(),
                got.describe()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // Every probe ends its capture through the plain `end-capture` row.
    seen_rules.insert("end-capture");
    let unreached: Vec<_> = gputape::backend::CAPTURE_RULES
        .iter()
        .map(|r| r.id)
        .filter(|id| !seen_rules.contains(id))
        .collect();
    assert!(
        unreached.is_empty(),
        "rules no probe reaches: {unreached:?}"
    );
}

/// Every capture probe leaves nothing allocated on the backend it probed, captured or eager.
#[test]
fn capture_probes_free_what_they_make() {
    use gputape::backend::probe::run_pattern;
    let code = |e: &anyhow::Error| gputape::driver_code(e).unwrap_or(0);
    for p in all_probes() {
        for capture in [true, false] {
            let m = MockGpuBackend::new(MockConfig {
                capture_mode: p.mode,
                stream_kind: p.kind,
                ..Default::default()
            });
            let _ = run_pattern(&m, &code, p, capture);
            assert_eq!(
                m.live_alloc_count(),
                0,
                "{p:?} (capture {capture}) left buffers"
            );
        }
    }
}

/// The kernel audit: this run's modules, and every lookup that did not resolve with the line
/// that made it; a new run (the next model's load) starts with an empty audit.
#[test]
fn kernel_audit_names_an_unresolved_lookup_and_its_site() {
    let m = mock();
    gputape::model::kernels::load(&m).expect("load the model kernels");
    let reg = m.kernel_registry().unwrap();
    let a = reg.audit();
    assert_eq!(a.modules.len(), 9, "{a:?}");
    assert!(a.unresolved.is_empty());
    m.kernel("gemv", "gemv").unwrap();
    let line = line!() + 1;
    assert!(m.kernel("gemv", "gemv_bf16").is_err());
    let a = reg.audit();
    assert_eq!(a.resolved.len(), 1);
    assert_eq!(a.unresolved.len(), 1);
    let u = &a.unresolved[0];
    assert_eq!((u.module.as_str(), u.func.as_str()), ("gemv", "gemv_bf16"));
    assert!(
        u.site.contains(&format!("tests/mock_contracts.rs:{line}:")),
        "{u:?}"
    );
    assert!(
        a.render().contains("1 lookup(s) unresolved"),
        "{}",
        a.render()
    );
    // A second model on the same backend: the audit restarts with its load.
    gputape::model::kernels::load(&m).expect("load the model kernels");
    let a = reg.audit();
    assert!(a.unresolved.is_empty() && a.resolved.is_empty(), "{a:?}");
}

/// Managed memory: the same bytes through copies and a kernel as device memory.
#[test]
fn managed_memory_round_trips_through_a_kernel() {
    let m = mock();
    m.register_kernel("blas", "saxpy", saxpy_layout(), Some(saxpy_body()));
    let n = 256usize;
    let x = m.alloc_managed(n * 4).unwrap();
    let y = m.alloc_managed(n * 4).unwrap();
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    m.copy_h2d(&f32_bytes(&xs), x).unwrap();
    m.memset(y, 0, n * 4).unwrap();
    let k = m.kernel("blas", "saxpy").unwrap();
    m.launch_typed(
        k,
        [2, 1, 1],
        [128, 1, 1],
        0,
        m.default_stream(),
        &[
            KernelArg::Buffer(x),
            KernelArg::Buffer(y),
            KernelArg::Bytes(&(n as u32).to_le_bytes()),
            KernelArg::Bytes(&2.0f32.to_le_bytes()),
        ],
    )
    .unwrap();
    let mut out = vec![0u8; n * 4];
    m.copy_d2h(y, &mut out).unwrap();
    let want: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
    assert_eq!(out, f32_bytes(&want));
    m.free(x).unwrap();
    m.free(y).unwrap();
    assert_eq!(m.live_alloc_count(), 0);
}

/// After a sticky fault the owners' frees fail (the memory goes with the context), and the
/// sweep of what is left says so in one line, not one per allocation.
#[test]
fn sweep_after_a_sticky_fault_is_one_summary() {
    let m = mock();
    let bufs: Vec<_> = (0..10).map(|_| m.alloc(64).unwrap()).collect();
    // Two more allocations, and a kernel that overruns one of them.
    overrunning_saxpy(&m).ok();
    assert!(
        m.synchronize(m.default_stream()).is_err(),
        "the fault is sticky"
    );
    // The owners of half the buffers try to free them: each fails, and each goes.
    for b in &bufs[..5] {
        assert!(m.free(*b).is_err());
    }
    assert_eq!(
        m.sweep_unreleased(),
        5 + 2,
        "the sweep gets what no owner tried to free"
    );
    let line = m.last_sweep_line().expect("the sweep says what it found");
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(
        line.starts_with("sweep: 7 allocation(s)")
            && line
                .contains("go with the context, unusable after CUDA_ERROR_ILLEGAL_ADDRESS (700)"),
        "{line}"
    );
    // Nothing left: nothing said.
    assert_eq!(m.sweep_unreleased(), 0);
    assert_eq!(m.last_sweep_line(), None);
}
