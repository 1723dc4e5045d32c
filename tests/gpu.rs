//! The CUDA backend on a real GPU. Every test is `#[ignore]`d (run them with
//! `--include-ignored` on the GPU machine). Where no driver is present each says "skipped: no
//! CUDA driver" and returns, unless `GPUTAPE_REQUIRE_GPU=1`, which the GPU machine's scripts
//! set: then a missing driver fails every test instead of passing it unseen.

use gputape::backend::{probe, CaptureMode, GpuBackend, KernelArg, ParamAccess, StreamKind};
use gputape::cuda::{CudaBackend, CudaConfig, RedzoneConfig};
use gputape::mock::MockGpuBackend;
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::trace::{self, Trace, VecSink};
use gputape::workloads::{self, f32_bytes};
use std::path::Path;

/// No CUDA driver here: says the test is skipped, or fails it where `GPUTAPE_REQUIRE_GPU` says
/// a GPU must be there (a skip on the GPU machine is a broken setup, not a pass).
fn no_driver() -> bool {
    if gputape::cuda::driver_present() {
        return false;
    }
    let required = std::env::var("GPUTAPE_REQUIRE_GPU").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "GPUTAPE_REQUIRE_GPU is set and no CUDA driver was found"
    );
    eprintln!("skipped: no CUDA driver on this machine");
    true
}

fn gpu_with(cfg: CudaConfig) -> Option<CudaBackend> {
    if no_driver() {
        return None;
    }
    let g = CudaBackend::new(cfg).expect("open device 0");
    workloads::load_kernels(&g).expect("compile test kernels with NVRTC");
    Some(g)
}

fn gpu() -> Option<CudaBackend> {
    gpu_with(CudaConfig::from_env(0))
}

fn mock() -> MockGpuBackend {
    let m = MockGpuBackend::default();
    workloads::load_kernels(&m).expect("load module blas");
    m
}

/// The staging ring behind `copy_h2d_async` over many laps: uploads of mixed sizes, most
/// far smaller than a slot, some a third of the ring, each source scribbled over as soon as
/// the call returns, land whole, with a kernel between them on the same stream; every later
/// byte read back is the last upload's.
#[test]
#[ignore = "needs a GPU"]
fn staged_uploads_stay_whole_over_many_laps_of_the_ring() {
    let Some(g) = gpu_with(CudaConfig {
        staging_bytes: 64 << 10,
        ..CudaConfig::from_env(0)
    }) else {
        return;
    };
    let s = g.create_stream().unwrap();
    let slots = 64usize;
    let slot = 24 << 10;
    let dst = g.alloc(slots * slot).unwrap();
    let scratch = g.alloc(4096).unwrap();
    let mut want = vec![0u8; slots * slot];
    g.copy_h2d(&want, dst).unwrap();
    let mut src = Vec::new();
    for i in 0..3000usize {
        // Mostly 8 to 64 bytes, every 97th a third of the ring.
        let len = if i % 97 == 0 { 21 << 10 } else { 8 + i % 57 };
        let at = (i * 31 % slots) * slot;
        src.clear();
        src.extend((0..len).map(|k| (i.wrapping_mul(131) + k * 7) as u8));
        g.copy_h2d_async(&src, gputape::backend::DevicePtr(dst.0 + at as u64), s)
            .unwrap();
        want[at..at + len].copy_from_slice(&src);
        src.iter_mut().for_each(|b| *b = 0xEE);
        if i % 50 == 0 {
            g.memset_async(scratch, (i % 251) as u8, 4096, s).unwrap();
        }
    }
    let mut got = vec![0u8; slots * slot];
    g.copy_d2h_on_stream(dst, &mut got, s).unwrap();
    let first_bad = got.iter().zip(&want).position(|(a, b)| a != b);
    assert_eq!(
        first_bad, None,
        "staged uploads over many laps of a 64 KiB ring"
    );
}

#[test]
#[ignore = "needs a GPU"]
fn every_copy_kind_round_trips_bytes() {
    let Some(g) = gpu() else { return };
    let s = g.create_stream().unwrap();
    let n = 4096;
    let src: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    let a = g.alloc(n).unwrap();
    let b = g.alloc(n).unwrap();
    let mut out = vec![0u8; n];
    g.copy_h2d(&src, a).unwrap();
    g.copy_d2d(a, b, n).unwrap();
    g.copy_d2h(b, &mut out).unwrap();
    assert_eq!(out, src, "sync h2d/d2d/d2h");

    // Async h2d: the source is dropped (and its memory reused) right after the call.
    {
        let tmp = src.iter().map(|x| x ^ 0xFF).collect::<Vec<_>>();
        g.copy_h2d_async(&tmp, a, s).unwrap();
    }
    let _scribble = vec![0x11u8; n];
    g.copy_d2d_async(a, b, n, s).unwrap();
    g.copy_d2h_on_stream(b, &mut out, s).unwrap();
    assert!(
        out.iter().zip(&src).all(|(o, i)| *o == i ^ 0xFF),
        "async h2d staged"
    );

    // Retained and async d2h into pinned memory.
    let pinned = g.alloc_host_pinned(n).unwrap();
    // SAFETY: n bytes of pinned memory just allocated.
    let ph = unsafe { std::slice::from_raw_parts_mut(pinned, n) };
    assert!(ph.iter().all(|&x| x == 0), "pinned memory is zeroed");
    g.copy_h2d_async_retained(&src, a, s).unwrap();
    g.copy_d2h_async(a, ph, s).unwrap();
    g.synchronize(s).unwrap();
    assert_eq!(ph, &src[..]);

    // Memsets.
    g.memset(a, 0x5A, n).unwrap();
    g.memset_async(a, 0x33, 16, s).unwrap();
    g.copy_d2h_on_stream(a, &mut out, s).unwrap();
    assert!(out[..16].iter().all(|&x| x == 0x33) && out[16..].iter().all(|&x| x == 0x5A));

    // 2D: 8 rows of 100 bytes, pitches 128 -> 112.
    g.copy_h2d(&src, a).unwrap();
    g.memset(b, 0, n).unwrap();
    g.copy_d2d_2d_async(a, 128, b, 112, 100, 8, s).unwrap();
    g.copy_d2h_on_stream(b, &mut out, s).unwrap();
    for row in 0..8 {
        assert_eq!(
            &out[row * 112..row * 112 + 100],
            &src[row * 128..row * 128 + 100]
        );
        assert!(out[row * 112 + 100..row * 112 + 112]
            .iter()
            .all(|&x| x == 0));
    }

    // Mapped pinned memory: a device memset through the alias lands in host memory.
    let d = g.host_ptr_to_device(pinned).unwrap();
    g.memset(d, 0x77, 8).unwrap();
    assert!(ph[..8].iter().all(|&x| x == 0x77));
    g.free_host_pinned(pinned, n).unwrap();
    g.free(a).unwrap();
    g.free(b).unwrap();
    assert_eq!(g.live_alloc_count(), 0);
    assert!(g.total_memory().unwrap() > 100 << 30);
    assert!(g.device_free_memory().unwrap() <= g.total_memory().unwrap());
    assert!(g.free_memory().unwrap() > 0);
    // The driver's own answer, asked apart from the backend (an H200 says 132).
    let facts = gputape::cuda::probe().unwrap();
    assert_eq!(g.sm_count().unwrap(), facts[0].sm_count);
    assert!(g.sm_count().unwrap() > 0);
}

#[test]
#[ignore = "needs a GPU"]
fn kernel_with_mixed_args_and_its_layout_from_the_driver() {
    let Some(g) = gpu() else { return };
    let k = g.kernel("blas", "mixed").unwrap();
    let info = g.kernel_registry().unwrap().kernel_by_handle(k).unwrap();
    let layout: Vec<(u32, u32)> = info.params.iter().map(|p| (p.offset, p.size)).collect();
    assert_eq!(
        layout,
        vec![(0, 8), (8, 4), (16, 8), (24, 8), (32, 8)],
        "cuFuncGetParamInfo"
    );
    let out = g.alloc(32).unwrap();
    let (i, d, u) = (-7i32, 2.5f64, 1u64 << 40);
    let mut pair = Vec::new();
    pair.extend_from_slice(&3i32.to_le_bytes());
    pair.extend_from_slice(&0.25f32.to_le_bytes());
    g.launch_typed(
        k,
        [1, 1, 1],
        [32, 1, 1],
        0,
        g.default_stream(),
        &[
            KernelArg::Buffer(out),
            KernelArg::Bytes(&i.to_le_bytes()),
            KernelArg::Bytes(&d.to_le_bytes()),
            KernelArg::Bytes(&u.to_le_bytes()),
            KernelArg::Bytes(&pair),
        ],
    )
    .unwrap();
    let mut bytes = vec![0u8; 32];
    g.copy_d2h_on_stream(out, &mut bytes, g.default_stream())
        .unwrap();
    let vals: Vec<f64> = bytes
        .chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals, vec![-7.0, 2.5, (1u64 << 40) as f64, 3.25]);
    g.free(out).unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn workloads_give_the_mock_s_bytes() {
    let Some(g) = gpu() else { return };
    for (name, w) in workloads::ALL {
        let want = w(&mock()).unwrap();
        let got = w(&g).unwrap();
        assert_eq!(got, want, "workload {name}");
    }
    assert_eq!(g.live_alloc_count(), 0);
}

#[test]
#[ignore = "needs a GPU"]
fn red_zones_catch_a_planted_overrun_and_poison_bisects() {
    let mut cfg = CudaConfig::from_env(0);
    cfg.redzone = RedzoneConfig {
        bytes: 64,
        min_idx: 0,
        trace_idx: None,
        fill: 0xEE,
    };
    let Some(g) = gpu_with(cfg) else { return };
    let k = g.kernel("blas", "write_past").unwrap();
    let a = g.alloc(100).unwrap();
    let line = line!() + 1;
    let victim = g.alloc(100).unwrap();
    let c = g.alloc(100).unwrap();
    let s = g.default_stream();
    let (n, extra) = (100u32, 8u32);
    g.launch_typed(
        k,
        [1, 1, 1],
        [128, 1, 1],
        0,
        s,
        &[
            KernelArg::Buffer(victim),
            KernelArg::Bytes(&n.to_le_bytes()),
            KernelArg::Bytes(&extra.to_le_bytes()),
        ],
    )
    .unwrap();
    g.synchronize(s).unwrap();
    assert_eq!(g.scan_redzones().unwrap(), 1);
    let v = &g.last_redzone_violations()[0];
    assert_eq!(
        (v.alloc_idx, v.user_bytes, v.first, v.last, v.changed),
        (1, 100, 0, 7, 8)
    );
    assert!(
        v.site.contains(&format!("tests/gpu.rs:{line}:")),
        "{}",
        v.site
    );
    // Through the trait, the band names its allocation, so a replay can tell one band
    // written twice from two bands.
    assert_eq!(
        g.redzone_hits(),
        vec![gputape::backend::RedzoneHit {
            base: victim,
            first: 0,
            last: 7
        }]
    );
    assert_eq!(
        g.scan_redzones().unwrap(),
        0,
        "the scan refills what it reports"
    );

    // Poison: zone 1 gets 0xEE, the others 0x00.
    g.poison_redzones(1, 2).unwrap();
    let mut pad = [0u8; 64];
    for (i, p) in [a, victim, c].iter().enumerate() {
        g.copy_d2h(p.offset(100), &mut pad).unwrap();
        let want = if i == 1 { 0xEE } else { 0x00 };
        assert!(pad.iter().all(|&x| x == want), "zone {i}");
    }
    for p in [a, victim, c] {
        g.free(p).unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn ledger_attributes_to_the_caller_and_sweep_names_the_leak() {
    let Some(g) = gpu() else { return };
    let d: &dyn GpuBackend = &g;
    let line = line!() + 2;
    for _ in 0..3 {
        d.alloc(1 << 20).unwrap();
    }
    let sites = g.live_by_site();
    assert_eq!(sites.len(), 1);
    assert!(
        sites[0].site.contains(&format!("tests/gpu.rs:{line}:")),
        "{:?}",
        sites[0]
    );
    assert_eq!(d.live_bytes(), Some(3 << 20));
    assert!(d
        .alloc_report(5, 0)
        .unwrap()
        .contains(&format!("gpu.rs:{line}:")));
    assert_eq!(d.sweep_unreleased(), 3);
    assert_eq!(d.live_alloc_count(), 0);
}

#[test]
#[ignore = "needs a GPU"]
fn events_order_two_streams_and_graphs_replay() {
    let Some(g) = gpu() else { return };
    let out = workloads::two_streams(&g).unwrap();
    assert_eq!(out, f32_bytes(&[6.0; 32]));
    let out = workloads::capture_region(&g).unwrap();
    assert_eq!(out, f32_bytes(&[4.0; 16]));
    let s = g.create_stream().unwrap();
    g.begin_capture(s).unwrap();
    assert!(g.stream_is_capturing(s));
    g.abort_capture_if_active(s);
    assert!(!g.stream_is_capturing(s));
    g.synchronize(s).unwrap();
}

/// Every capture-rule probe on the driver, in every mode and stream kind. The driver is the
/// truth: a disagreement is a bug in the table.
#[test]
#[ignore = "needs a GPU"]
fn capture_rules_match_the_driver() {
    if no_driver() {
        return;
    }
    let code = |e: &anyhow::Error| gputape::driver_code(e).unwrap_or(0);
    let rows = probe::run_all(
        &|mode: CaptureMode, kind: StreamKind| -> anyhow::Result<Box<dyn GpuBackend>> {
            let mut cfg = CudaConfig::from_env(0);
            cfg.capture_mode = mode;
            cfg.stream_kind = kind;
            Ok(Box::new(CudaBackend::new(cfg)?))
        },
        &code,
    );
    let table = probe::render_rows(&rows);
    if let Ok(dir) = std::env::var("GPUTAPE_OUT") {
        std::fs::write(Path::new(&dir).join("capture_table_cuda.md"), &table).unwrap();
    }
    let bad: Vec<_> = table.lines().filter(|l| l.contains("DIFFERS")).collect();
    assert!(
        bad.is_empty(),
        "{} probes differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
#[ignore = "needs a GPU"]
fn a_workload_recorded_on_cuda_renders_like_the_mock_s() {
    let Some(g) = gpu() else { return };
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let r = RecordingBackend::new(g, Box::new(sink), BackendDesc::new("cuda")).unwrap();
    r.start().unwrap();
    workloads::two_streams(&r).unwrap();
    r.stop().unwrap();
    let t = Trace::from_bytes(Path::new("cuda"), &buf.lock()).unwrap();
    let text = trace::render(&t);
    if let Ok(dir) = std::env::var("GPUTAPE_OUT") {
        std::fs::write(Path::new(&dir).join("two_streams_cuda.txt"), &text).unwrap();
        std::fs::write(Path::new(&dir).join("two_streams_cuda.gtape"), &*buf.lock()).unwrap();
    }
    // Same calls, ids, sites and results as on the mock, and the same kernel signatures: the
    // driver's offsets and sizes, with the access modes `load_cuda_kernels` declared.
    let m = mock();
    let sink = VecSink::default();
    let mbuf = sink.0.clone();
    let r = RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap();
    r.start().unwrap();
    workloads::two_streams(&r).unwrap();
    r.stop().unwrap();
    let mt = Trace::from_bytes(Path::new("mock"), &mbuf.lock()).unwrap();
    let calls = |t: &Trace| {
        t.calls
            .iter()
            .map(|c| trace::render_call(t, c))
            .collect::<Vec<_>>()
    };
    assert_eq!(calls(&t), calls(&mt));
    let kernels = |t: &Trace| {
        t.kernels
            .iter()
            .map(|(id, k)| (*id, k.module.clone(), k.name.clone(), k.params.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(kernels(&t), kernels(&mt));
}

#[test]
#[ignore = "needs a GPU"]
fn capture_config_is_what_begin_capture_uses() {
    // Relaxed (configured) tolerates allocation inside the capture; global (the default)
    // refuses it with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: the mode is the configured one.
    let mut cfg = CudaConfig::from_env(0);
    cfg.capture_mode = CaptureMode::Relaxed;
    let Some(g) = gpu_with(cfg) else { return };
    let s = g.create_stream().unwrap();
    g.begin_capture(s).unwrap();
    let p = g.alloc(64).unwrap();
    let graph = g.end_capture(s).unwrap();
    g.destroy_graph(graph).unwrap();
    g.free(p).unwrap();
    drop(g);
    let mut cfg = CudaConfig::from_env(0);
    cfg.capture_mode = CaptureMode::Global;
    let Some(g) = gpu_with(cfg) else { return };
    let s = g.create_stream().unwrap();
    g.begin_capture(s).unwrap();
    let e = g.alloc(64).expect_err("global mode refuses allocation");
    assert_eq!(gputape::driver_code(&e), Some(900), "{e:#}");
    g.abort_capture_if_active(s);
}

fn model_gpu() -> Option<CudaBackend> {
    if no_driver() {
        return None;
    }
    let g = CudaBackend::new(CudaConfig::from_env(0)).expect("open device 0");
    gputape::model::kernels::load(&g).expect("compile the model's kernels with NVRTC");
    Some(g)
}

#[test]
#[ignore = "needs a GPU"]
fn model_kernel_layouts_from_the_driver_match_the_mock_declarations() {
    let Some(g) = model_gpu() else { return };
    for (name, _) in gputape::model::kernels::SOURCES {
        let k = g.kernel(name, name).unwrap();
        let drv: Vec<(u32, u32, ParamAccess)> = g
            .kernel_registry()
            .unwrap()
            .kernel_by_handle(k)
            .unwrap()
            .params
            .iter()
            .map(|p| (p.offset, p.size, p.access))
            .collect();
        let mock: Vec<(u32, u32, ParamAccess)> = gputape::model::kernels::layout(name)
            .iter()
            .map(|p| (p.offset, p.size, p.access))
            .collect();
        // Offsets and sizes from the driver; access modes as `load_cuda` declared them.
        assert_eq!(drv, mock, "kernel {name}");
    }
}

/// The parallel argmax kernel against the scan it replaces (the CPU twin): ties, NaNs, signed
/// zeros, lengths around the block size, on the GPU and on the mock.
#[test]
#[ignore = "needs a GPU"]
fn argmax_picks_what_the_scan_picks() {
    let Some(g) = model_gpu() else { return };
    let m = MockGpuBackend::default();
    gputape::model::kernels::load(&m).expect("load the model kernels");
    let scan = |v: &[f32]| {
        let mut best = 0;
        for i in 1..v.len() {
            if v[i] > v[best] {
                best = i;
            }
        }
        best as u32
    };
    let mut cases: Vec<Vec<f32>> = vec![
        vec![1.0],
        vec![0.0, -0.0, 0.0],
        vec![-0.0, 0.0],
        vec![f32::NAN, 5.0, 7.0],
        vec![1.0, f32::NAN, 7.0, 7.0],
        vec![f32::NEG_INFINITY; 200],
        vec![f32::NAN; 3],
        vec![3.0, 1.0, 3.0],
    ];
    for n in [31usize, 32, 127, 128, 129, 300, 4096] {
        // Ties between the last and an early element, and between lanes of different warps.
        let mut v: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32).collect();
        v[n - 1] = 200.0;
        v[n / 2] = 200.0;
        cases.push(v);
        cases.push((0..n).map(|i| -(i as f32)).collect());
    }
    for v in &cases {
        let mut got = Vec::new();
        for gpu in [&g as &dyn GpuBackend, &m] {
            let k = gpu.kernel("argmax", "argmax").unwrap();
            let buf = gpu.alloc(v.len() * 4).unwrap();
            let out = gpu.alloc(4).unwrap();
            gpu.copy_h2d(&f32_bytes(v), buf).unwrap();
            let n = (v.len() as u32).to_le_bytes();
            let s = gpu.default_stream();
            gpu.launch_typed(
                k,
                [1, 1, 1],
                [128, 1, 1],
                0,
                s,
                &[
                    KernelArg::Buffer(buf),
                    KernelArg::Bytes(&n),
                    KernelArg::Buffer(out),
                ],
            )
            .unwrap();
            gpu.synchronize(s).unwrap();
            let mut b = [0u8; 4];
            gpu.copy_d2h(out, &mut b).unwrap();
            got.push(u32::from_le_bytes(b));
            gpu.free(buf).unwrap();
            gpu.free(out).unwrap();
        }
        assert_eq!(got, [scan(v); 2], "logits {:?}", &v[..v.len().min(8)]);
    }
}

/// Programmatic dependent launch changes when a kernel starts, never what it computes: eight
/// decode steps with it give the same tokens and bit-identical logits as without.
#[test]
#[ignore = "needs a GPU"]
fn pdl_launches_give_the_same_bytes() {
    use gputape::model::{Model, ModelConfig, PROMPT};
    let Some(plain) = model_gpu() else { return };
    let mut cfg = CudaConfig::from_env(0);
    cfg.pdl = true;
    let pdl = CudaBackend::new(cfg).unwrap();
    gputape::model::kernels::load(&pdl).unwrap();
    for (name, _) in gputape::model::kernels::SOURCES {
        let k = pdl.kernel(name, name).unwrap();
        assert!(
            pdl.launches_programmatically(k),
            "{name} is not launched with PDL"
        );
        let k = plain.kernel(name, name).unwrap();
        assert!(
            !plain.launches_programmatically(k),
            "{name}: PDL is off by default"
        );
    }
    let mc = ModelConfig::default_config();
    let mut a = Model::load(&plain, mc.clone()).unwrap();
    let mut b = Model::load(&pdl, mc).unwrap();
    let (mut ta, mut tb) = (PROMPT[0], PROMPT[0]);
    for pos in 0..8 {
        let na = a.step(&plain, ta, pos).unwrap();
        let nb = b.step(&pdl, tb, pos).unwrap();
        assert_eq!(na, nb, "token at step {pos}");
        let (la, lb) = (a.logits(&plain).unwrap(), b.logits(&pdl).unwrap());
        assert!(
            la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()),
            "logits differ at step {pos}"
        );
        ta = PROMPT.get(pos + 1).copied().unwrap_or(na);
        tb = PROMPT.get(pos + 1).copied().unwrap_or(nb);
    }
}

/// 36 decode steps of the default config (4 prompt tokens, 32 generated) on the H200 and on
/// the mock, step by step: tokens, and the largest logit difference.
#[test]
#[ignore = "needs a GPU"]
fn decode_on_the_gpu_matches_the_mock() {
    use gputape::model::{Model, ModelConfig, PROMPT};
    let Some(g) = model_gpu() else { return };
    let m = MockGpuBackend::default();
    gputape::model::kernels::load(&m).expect("load the model kernels");
    let cfg = ModelConfig::default_config();
    let mut mg = Model::load(&g, cfg.clone()).unwrap();
    let mut mm = Model::load(&m, cfg).unwrap();
    let (mut tg, mut tm) = (PROMPT[0], PROMPT[0]);
    let mut lines = Vec::new();
    let mut worst = 0f32;
    let mut first_token_diff = None;
    for pos in 0..36 {
        let t0 = std::time::Instant::now();
        let ng = mg.step(&g, tg, pos).unwrap();
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let nm = mm.step(&m, tm, pos).unwrap();
        let lg = mg.logits(&g).unwrap();
        let lm = mm.logits(&m).unwrap();
        let d = lg
            .iter()
            .zip(&lm)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        worst = worst.max(d);
        if ng != nm && first_token_diff.is_none() {
            first_token_diff = Some(pos);
        }
        lines.push(format!(
            "step {pos:>2}: gpu {ng:>4} mock {nm:>4} max|dlogit| {d:.3e} gpu step {ms:.3} ms"
        ));
        tg = PROMPT.get(pos + 1).copied().unwrap_or(ng);
        tm = PROMPT.get(pos + 1).copied().unwrap_or(nm);
    }
    let text = format!(
        "{}\nworst max|dlogit| {worst:.3e}\nfirst token difference: {first_token_diff:?}\n",
        lines.join("\n")
    );
    if let Ok(dir) = std::env::var("GPUTAPE_OUT") {
        std::fs::write(Path::new(&dir).join("model_parity.txt"), &text).unwrap();
    }
    println!("{text}");
    mg.teardown(&g).unwrap();
    assert_eq!(g.sweep_unreleased(), 0);
    assert_eq!(first_token_diff, None, "{text}");
    assert!(worst < 1e-3, "{text}");
}

/// A buffer of device addresses, recorded on the GPU and replayed on a fresh backend: the
/// buffers go back to their recorded addresses through the driver's virtual memory management,
/// and the kernel reading through the table gets the recorded values.
#[test]
#[ignore = "needs a GPU"]
fn pointer_tables_replay_at_their_recorded_addresses() {
    use gputape::replayer::{ReplayOptions, Replayer};
    let Some(g) = gpu() else { return };
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let r = RecordingBackend::new(g, Box::new(sink), BackendDesc::new("cuda")).unwrap();
    r.start().unwrap();
    let want = workloads::pointer_table(&r).unwrap();
    r.stop().unwrap();
    drop(r); // the recording's memory goes back to the driver
    let t = Trace::from_bytes(Path::new("pt"), &buf.lock()).unwrap();
    let g2 = gpu().unwrap();
    let place = |addr: u64, bytes: usize| g2.place_at(addr, bytes);
    let rep = Replayer::new(&t)
        .with_fixed_addresses(&place)
        .run(&g2, &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert_eq!(
        (rep.d2h_checked, rep.d2h_matched),
        (1, 1),
        "{}",
        rep.summary()
    );
    assert_eq!(want, f32_bytes(&[10.0, 11.0, 12.0, 13.0]));
    assert_eq!(g2.live_alloc_count(), 0);
}

// ---- The seed backend's features, each exercised on the device (issue: the seed complete) ----

use gputape::testing::warnings_of as logs_of;

fn write_past(g: &CudaBackend, p: gputape::backend::DevicePtr, n: u32, extra: u32) {
    let k = g.kernel("blas", "write_past").unwrap();
    let s = g.default_stream();
    // One thread per byte written, in and past the buffer.
    g.launch_typed(
        k,
        [(n + extra).div_ceil(128), 1, 1],
        [128, 1, 1],
        0,
        s,
        &[
            KernelArg::Buffer(p),
            KernelArg::Bytes(&n.to_le_bytes()),
            KernelArg::Bytes(&extra.to_le_bytes()),
        ],
    )
    .unwrap();
    g.synchronize(s).unwrap();
}

/// The creation-index floor leaves early allocations (weights) unguarded; the fill byte is
/// what the bands hold (so a write of that very byte goes unseen, which is why a second run
/// at another fill separates reads from writes); the trace index logs a backtrace at exactly
/// that allocation.
#[test]
#[ignore = "needs a GPU"]
fn red_zone_floor_fill_and_backtrace_index() {
    let mut cfg = CudaConfig::from_env(0);
    cfg.redzone = RedzoneConfig {
        bytes: 64,
        min_idx: 1,
        trace_idx: Some(2),
        fill: 0x05,
    };
    let Some(g) = gpu_with(cfg) else { return };
    let ((weights, guarded, traced), logs) = logs_of(|| {
        (
            g.alloc(128).unwrap(),
            g.alloc(128).unwrap(),
            g.alloc(128).unwrap(),
        )
    });
    assert_eq!(
        logs.matches("red-zone trace: allocation #").count(),
        1,
        "{logs}"
    );
    assert!(logs.contains("allocation #2 (128 bytes)"), "{logs}");
    assert!(
        logs.contains("tests/gpu.rs:"),
        "the backtrace names the test: {logs}"
    );
    let mut pad = [0u8; 64];
    g.copy_d2h(guarded.offset(128), &mut pad).unwrap();
    assert!(
        pad.iter().all(|&b| b == 0x05),
        "the band holds the fill: {pad:?}"
    );
    // Below the floor: no band, so an overrun there is not seen.
    write_past(&g, weights, 128, 8);
    assert_eq!(
        g.scan_redzones().unwrap(),
        0,
        "allocation #0 is below the floor"
    );
    // write_past writes byte (i & 0x7f) at i: past a 128-byte buffer, 0, 1, 2, ... The sixth
    // byte is 5, the fill, so of six written bytes five differ from the band.
    write_past(&g, guarded, 128, 6);
    assert_eq!(g.scan_redzones().unwrap(), 1);
    let v = &g.last_redzone_violations()[0];
    assert_eq!((v.alloc_idx, v.first, v.last, v.changed), (1, 0, 4, 5));
    for p in [weights, guarded, traced] {
        g.free(p).unwrap();
    }
}

/// The watchdog reads the driver's free memory without a backend; a planted threshold above
/// the card's memory trips it on its third reading, once, and a second watchdog cannot start
/// beside it.
#[test]
#[ignore = "needs a GPU"]
fn oom_watchdog_reads_the_driver_and_trips_once() {
    use gputape::cuda::watchdog::{spawn_oom_watchdog, OnTrip};
    if no_driver() {
        return;
    }
    let (free, total) = gputape::cuda::device_memory(0).unwrap();
    assert!(free > 0 && free <= total, "{free} of {total}");
    let polled = gputape::cuda::polled_free_memory(0).unwrap();
    assert!(
        polled <= total,
        "a discrete card's reading never exceeds it: {polled} > {total}"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let threshold_mb = (total >> 20) * 2;
    let w = spawn_oom_watchdog(
        threshold_mb,
        std::time::Duration::from_millis(10),
        || gputape::cuda::polled_free_memory(0),
        OnTrip::Call(Box::new(move |free| tx.send(free).unwrap())),
    )
    .expect("starts");
    assert!(
        spawn_oom_watchdog(1, std::time::Duration::from_secs(1), || None, OnTrip::Exit).is_none()
    );
    let got = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    assert!(got > 0 && got <= total);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(rx.try_recv().is_err(), "tripped twice");
    w.stop();
    // A backend told to watch starts one, and only one.
    let mut cfg = CudaConfig::from_env(0);
    cfg.oom_watchdog_mb = Some(1);
    let Some(_g) = gpu_with(cfg) else { return };
    assert!(
        spawn_oom_watchdog(1, std::time::Duration::from_secs(1), || None, OnTrip::Exit).is_none()
    );
}

/// Managed memory round-trips through copies and a kernel, and records and replays.
#[test]
#[ignore = "needs a GPU"]
fn managed_memory_round_trips_and_replays() {
    let Some(g) = gpu() else { return };
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(g, Box::new(sink), BackendDesc::new("cuda")).unwrap();
    rec.start().unwrap();
    let n = 1024usize;
    let x = rec.alloc_managed(n * 4).unwrap();
    let y = rec.alloc_managed(n * 4).unwrap();
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    rec.copy_h2d(&f32_bytes(&xs), x).unwrap();
    rec.memset(y, 0, n * 4).unwrap();
    let k = rec.kernel("blas", "saxpy").unwrap();
    let s = rec.default_stream();
    rec.launch_typed(
        k,
        [(n as u32).div_ceil(128), 1, 1],
        [128, 1, 1],
        0,
        s,
        &[
            KernelArg::Buffer(x),
            KernelArg::Buffer(y),
            KernelArg::Bytes(&(n as u32).to_le_bytes()),
            KernelArg::Bytes(&2.0f32.to_le_bytes()),
        ],
    )
    .unwrap();
    rec.synchronize(s).unwrap();
    let mut out = vec![0u8; n * 4];
    rec.copy_d2h(y, &mut out).unwrap();
    let got: Vec<f32> = out
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(got.iter().enumerate().all(|(i, v)| *v == 2.0 * i as f32));
    rec.free(x).unwrap();
    rec.free(y).unwrap();
    rec.stop().unwrap();
    let t = Trace::from_bytes(Path::new("managed"), &buf.lock()).unwrap();
    assert!(t
        .calls
        .iter()
        .any(|c| matches!(c.call, trace::Call::AllocManaged { .. })));
    let Some(g2) = gpu() else { return };
    let rep = gputape::replayer::Replayer::new(&t)
        .run(&g2, &Default::default(), None, |_| {})
        .unwrap();
    assert!(rep.passed() && rep.d2h_checked == 1, "{}", rep.summary());
    // The same trace on the mock.
    let rep = gputape::replayer::Replayer::new(&t)
        .run(&mock(), &Default::default(), None, |_| {})
        .unwrap();
    assert!(rep.passed() && rep.d2h_checked == 1, "{}", rep.summary());
}

/// The audit lists this run's modules and each lookup that did not resolve, with its site.
#[test]
#[ignore = "needs a GPU"]
fn kernel_audit_names_an_unresolved_lookup_and_its_site() {
    let Some(g) = gpu() else { return };
    let reg = g.kernel_registry().unwrap();
    let a = reg.audit();
    assert!(a.modules.contains(&"blas".to_string()), "{a:?}");
    g.kernel("blas", "saxpy").unwrap();
    let line = line!() + 1;
    assert!(g.kernel("blas", "no_such_kernel").is_err());
    assert!(g.kernel("nope", "x").is_err());
    let a = reg.audit();
    assert_eq!(a.unresolved.len(), 2, "{a:?}");
    assert!(
        a.unresolved[0]
            .site
            .contains(&format!("tests/gpu.rs:{line}:")),
        "{a:?}"
    );
    assert!(a
        .render()
        .contains("unresolved: blas::no_such_kernel looked up at tests/gpu.rs:"));
    assert!(a.unresolved[1]
        .error
        .as_deref()
        .unwrap()
        .contains("not loaded"));
    assert!(a.resolved.iter().any(|r| r.func == "saxpy"));
    // A new run starts clean.
    reg.begin_run();
    assert_eq!(reg.audit(), Default::default());
}

/// `gputape demo` on CUDA with an illegal address planted at step 4, in a child process (the
/// fault ends its context), with a sync after every launch when `debug_sync`: its stdout and
/// stderr. `None` without a driver. `GPUTAPE_BIN` names the binary where the test was carried.
fn faulting_demo(debug_sync: bool) -> Option<(String, String)> {
    if no_driver() {
        return None;
    }
    let bin = std::env::var("GPUTAPE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_gputape").into());
    let mut cmd = std::process::Command::new(bin);
    cmd.args([
        "demo",
        "--backend",
        "cuda",
        "--config",
        "tiny",
        "--steps",
        "8",
        "--fault-step",
        "4",
        "--fault-overrun",
        "268435456",
    ]);
    if debug_sync {
        cmd.env("GPUTAPE_DEBUG_SYNC_KERNELS", "1");
    } else {
        cmd.env_remove("GPUTAPE_DEBUG_SYNC_KERNELS");
    }
    let o = cmd.output().unwrap();
    Some((
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    ))
}

/// After a sticky fault, teardown's sweep says once that the context took the memory with it,
/// instead of one line per allocation. Run in a child process: the fault ends its context.
#[test]
#[ignore = "needs a GPU"]
fn sweep_after_a_sticky_fault_is_one_summary() {
    let Some((out, err)) = faulting_demo(false) else {
        return;
    };
    assert!(out.contains("step 4 failed"), "{out}\n{err}");
    let sweep: Vec<&str> = err.lines().filter(|l| l.contains("sweep:")).collect();
    assert_eq!(
        sweep.len(),
        1,
        "one summary, not one line per allocation: {err}"
    );
    assert!(
        sweep[0].contains("go with the context, unusable after CUDA_ERROR_ILLEGAL_ADDRESS (700)"),
        "{err}"
    );
    assert!(
        err.lines().filter(|l| l.contains("WARN")).count() <= 4,
        "teardown after a fault floods the log: {err}"
    );
    // The fault probe: the copy that reported it says how many launches were in flight.
    assert!(
        out.contains("launches in flight since their streams' last syncs"),
        "{out}"
    );
}

/// With a sync after every launch, one launch is in flight when the fault is reported: the
/// probe names it, its site and the allocations its arguments lie in.
#[test]
#[ignore = "needs a GPU"]
fn the_fault_probe_names_the_one_launch_in_flight() {
    let Some((out, _)) = faulting_demo(true) else {
        return;
    };
    let line = out
        .lines()
        .find(|l| l.starts_with("step 4 failed"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("the one launch in flight since its stream's last sync: silu_mul::silu_mul at src/model/mod.rs:"),
        "{line}"
    );
    assert!(
        line.contains("bytes from src/model/resources.rs:"),
        "{line}"
    );
}

/// A TMA kernel (cp.async.bulk.tensor through a tensor map the backend encoded) gives the
/// mock's bytes, records with the map's description, and replays on a fresh backend whose
/// buffers land elsewhere with identical results: the replay encodes the map again.
#[test]
#[ignore = "needs a GPU"]
fn a_tma_kernel_records_and_replays_on_a_remapped_buffer() {
    let Some(g) = gpu() else { return };
    let want = workloads::tma(&mock()).unwrap();
    assert_eq!(
        workloads::tma(&g).unwrap(),
        want,
        "TMA on the device vs the mock's twin"
    );
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(g, Box::new(sink), BackendDesc::new("cuda")).unwrap();
    rec.start().unwrap();
    assert_eq!(workloads::tma(&rec).unwrap(), want);
    rec.stop().unwrap();
    let t = Trace::from_bytes(Path::new("tma"), &buf.lock()).unwrap();
    let (_, args) = t.calls.iter().find_map(|c| c.call.launch()).unwrap();
    assert!(matches!(args[0], trace::Arg::TensorMap(_)), "{args:?}");
    let Some(g2) = gpu() else { return };
    let _shift = g2.alloc(64 << 20).unwrap();
    for _ in 0..3 {
        let rep = gputape::replayer::Replayer::new(&t)
            .run(&g2, &Default::default(), None, |_| {})
            .unwrap();
        assert!(rep.passed() && rep.d2h_checked == 1, "{}", rep.summary());
    }
    // (That the replay encodes the map for the buffer's new address, not the recorded one,
    // is shown on the mock, whose addresses are deterministic: tests/replay.rs.)
}

/// The bf16 batched step's kernels on CUDA against their CPU twins: tokens, logits and the KV
/// cache bit for bit, at head sizes below and above a warp, for each gemv width (batch 1, 3,
/// 16).
#[test]
#[ignore = "needs a GPU"]
fn the_bf16_step_gives_the_mock_s_bytes() {
    use gputape::model::hf::HfConfig;
    use gputape::model::llama::{Llama, LlamaOptions};
    let Some(g) = gpu() else { return };
    let shape = |hidden: usize, ffn: usize, heads: usize, kv: usize, vocab: usize| {
        HfConfig::parse(&format!(
            r#"{{"model_type": "llama", "hidden_size": {hidden}, "intermediate_size": {ffn},
                "num_hidden_layers": 2, "num_attention_heads": {heads},
                "num_key_value_heads": {kv}, "vocab_size": {vocab},
                "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                "torch_dtype": "bfloat16"}}"#
        ))
        .unwrap()
    };
    for (cfg, batch) in [
        (shape(64, 128, 4, 2, 256), 1),
        (shape(256, 512, 4, 2, 1000), 3),
        (shape(512, 1024, 4, 1, 1000), 16),
    ] {
        let m = MockGpuBackend::default();
        let opts = LlamaOptions::staggered(batch, 512, 11);
        let mut on_gpu = Llama::load(&g, &cfg, opts.clone()).unwrap();
        let mut on_mock = Llama::load(&m, &cfg, opts).unwrap();
        let mut tokens: Vec<u32> = (0..batch as u32).map(|b| b * 13 % 256).collect();
        for step in 0..3 {
            let a = on_gpu.step(&g, &tokens).unwrap();
            let b = on_mock.step(&m, &tokens).unwrap();
            let what = format!("hidden {}, batch {batch}, step {step}", cfg.hidden_size);
            assert_eq!(a, b, "{what}: tokens");
            assert!(
                on_gpu.logits(&g).unwrap() == on_mock.logits(&m).unwrap(),
                "{what}: logits differ"
            );
            tokens = a;
        }
        for l in 0..cfg.num_hidden_layers {
            let (gk, _) = on_gpu.kv_pools(l);
            let (mk, _) = on_mock.kv_pools(l);
            let n = 512 / 16 * batch * 16 * cfg.num_key_value_heads * cfg.head_dim * 2;
            let (mut x, mut y) = (vec![0u8; n], vec![0u8; n]);
            g.copy_d2h(gk, &mut x).unwrap();
            m.copy_d2h(mk, &mut y).unwrap();
            assert!(x == y, "layer {l}'s K cache differs");
        }
        on_gpu.release(&g).unwrap();
        on_mock.release(&m).unwrap();
    }
}

/// Loading a module again: the same code changes nothing; new code under the same name is
/// what new lookups find, and a handle to the old code, cached anywhere, still launches it
/// (the old module is kept until the backend drops; unloading it crashed the process).
#[test]
#[ignore = "needs a GPU"]
fn reloading_a_module_keeps_handles_to_the_old_code_valid() {
    let Some(g) = gpu() else { return };
    let src = |v: u32| format!("extern \"C\" __global__ void put(unsigned* o) {{ *o = {v}u; }}");
    g.load_source("reload_probe", &src(1)).unwrap();
    let old = g.op_cache().kernel(&g, "reload_probe", "put").unwrap();
    g.load_source("reload_probe", &src(1)).unwrap();
    assert_eq!(g.op_cache().kernel(&g, "reload_probe", "put").unwrap(), old);
    g.load_source("reload_probe", &src(2)).unwrap();
    let new = g.op_cache().kernel(&g, "reload_probe", "put").unwrap();
    assert_ne!(new, old, "the op cache forgot the replaced module's handle");
    let out = g.alloc(4).unwrap();
    for (k, want) in [(old, 1u32), (new, 2)] {
        g.launch_typed(
            k,
            [1, 1, 1],
            [1, 1, 1],
            0,
            g.default_stream(),
            &[KernelArg::Buffer(out)],
        )
        .unwrap();
        let mut b = [0u8; 4];
        g.copy_d2h(out, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), want);
    }
    g.free(out).unwrap();
}

/// One rank over NCCL (the H200 machine has one GPU): a communicator of one, an all-reduce, a
/// broadcast and an all-gather of known values, then two in one group, through the recorder,
/// then the trace replayed
/// on a fresh backend, which makes its own communicator and checks the read backs. NCCL is
/// found on the loader's path or through `GPUTAPE_NCCL_LIB`; without it the test says so.
#[test]
#[ignore = "needs a GPU"]
fn one_rank_collectives_over_nccl_record_and_replay() {
    use gputape::backend::{CollDtype, Collective, ReduceOp};
    let Some((r, buf)) = nccl_recorder() else {
        return;
    };
    let id = r.comm_unique_id().unwrap();
    let comm = r.comm_init(id, 1, 0).unwrap();
    let s = r.create_stream().unwrap();
    let n = 1024usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let (a, b) = (r.alloc(n * 4).unwrap(), r.alloc(n * 4).unwrap());
    r.copy_h2d(&f32_bytes(&x), a).unwrap();
    let mut out = vec![0u8; n * 4];
    for op in [
        Collective::AllReduce(ReduceOp::Sum),
        Collective::Broadcast { root: 0 },
        Collective::AllGather,
    ] {
        r.memset(b, 0, n * 4).unwrap();
        r.collective(comm, op, a, b, n as u64, CollDtype::F32, s)
            .unwrap();
        r.copy_d2h_on_stream(b, &mut out, s).unwrap();
        // One rank: each of these hands the rank its own elements.
        assert_eq!(out, f32_bytes(&x), "{}", op.name());
    }
    // Two collectives issued as one group (ncclGroupStart/End), recorded and replayed.
    r.memset(b, 0, n * 4).unwrap();
    r.comm_group_start().unwrap();
    let sum = Collective::AllReduce(ReduceOp::Sum);
    r.collective(comm, sum, a, b, n as u64, CollDtype::F32, s)
        .unwrap();
    r.collective(
        comm,
        Collective::Broadcast { root: 0 },
        a,
        b,
        n as u64,
        CollDtype::F32,
        s,
    )
    .unwrap();
    r.comm_group_end().unwrap();
    r.copy_d2h_on_stream(b, &mut out, s).unwrap();
    assert_eq!(out, f32_bytes(&x), "grouped");
    r.comm_destroy(comm).unwrap();
    r.free(a).unwrap();
    r.free(b).unwrap();
    r.stop().unwrap();
    drop(r);
    let rep = replay_on_fresh_gpu("nccl", &buf.lock());
    assert_eq!(
        (rep.d2h_checked, rep.d2h_matched),
        (4, 4),
        "{}",
        rep.summary()
    );
}

/// One rank's all-reduce captured into a CUDA graph with the kernel before it (as vLLM
/// captures its decode): NCCL's kernel is a node of the graph, so each launch reduces again.
/// Recorded through the recorder, then replayed on a fresh backend, which captures the
/// collective again on its own communicator; every launch's read back matches.
#[test]
#[ignore = "needs a GPU"]
fn one_rank_all_reduce_captured_into_a_graph_records_and_replays() {
    use gputape::backend::{CollDtype, Collective, ReduceOp};
    let Some((r, buf)) = nccl_recorder() else {
        return;
    };
    let id = r.comm_unique_id().unwrap();
    let comm = r.comm_init(id, 1, 0).unwrap();
    let s = r.create_stream().unwrap();
    let n = 1024u32;
    let bytes = n as usize * 4;
    let (x, y, sum) = (
        r.alloc(bytes).unwrap(),
        r.alloc(bytes).unwrap(),
        r.alloc(bytes).unwrap(),
    );
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    r.copy_h2d(&f32_bytes(&xs), x).unwrap();
    r.memset(y, 0, bytes).unwrap();
    r.begin_capture(s).unwrap();
    gputape::workloads::saxpy(&r, x, y, n, 1.0, s).unwrap();
    r.collective(
        comm,
        Collective::AllReduce(ReduceOp::Sum),
        y,
        sum,
        n as u64,
        CollDtype::F32,
        s,
    )
    .unwrap();
    let graph = r.end_capture(s).unwrap();
    let mut out = vec![0u8; bytes];
    for k in 1..=3u32 {
        r.launch_graph(graph, s).unwrap();
        r.copy_d2h_on_stream(sum, &mut out, s).unwrap();
        // One rank: the sum is its own y, k times x after k launches.
        let want: Vec<f32> = xs.iter().map(|v| v * k as f32).collect();
        assert_eq!(out, f32_bytes(&want), "launch {k}");
    }
    r.destroy_graph(graph).unwrap();
    r.comm_destroy(comm).unwrap();
    r.stop().unwrap();
    drop(r);
    let rep = replay_on_fresh_gpu("nccl-graph", &buf.lock());
    assert!(rep.passed(), "{}", rep.summary());
    assert_eq!(
        (rep.d2h_checked, rep.d2h_matched),
        (3, 3),
        "{}",
        rep.summary()
    );
}

/// Where a `VecSink` puts what it is given.
type SinkBytes = std::sync::Arc<parking_lot::Mutex<Vec<u8>>>;

/// A recording backend on the GPU with the workloads' kernels, recording into the returned
/// buffer; `None` (said why) without a GPU or without NCCL.
fn nccl_recorder() -> Option<(RecordingBackend<CudaBackend>, SinkBytes)> {
    let g = gpu()?;
    if !gputape::cuda::nccl::available() {
        eprintln!("skipped: NCCL not found (set GPUTAPE_NCCL_LIB)");
        return None;
    }
    eprintln!("{}", gputape::cuda::nccl::describe().unwrap());
    workloads::load_kernels(&g).unwrap();
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let r = RecordingBackend::new(g, Box::new(sink), BackendDesc::new("cuda")).unwrap();
    r.start().unwrap();
    Some((r, buf))
}

/// The trace in `bytes` replayed on a fresh backend with the workloads' kernels.
fn replay_on_fresh_gpu(name: &str, bytes: &[u8]) -> gputape::replayer::ReplayReport {
    use gputape::replayer::{ReplayOptions, Replayer};
    let t = Trace::from_bytes(Path::new(name), bytes).unwrap();
    let g = gpu().unwrap();
    workloads::load_kernels(&g).unwrap();
    Replayer::new(&t)
        .run(&g, &ReplayOptions::default(), None, |_| {})
        .unwrap()
}

/// Whole workloads, recorded with no capture, then judged offline as if a capture of a fresh
/// stream were in progress throughout (`analyze --capture --stream S --mode M --stream-kind
/// K`), and run for real inside such a capture: the first call the analysis says fails is the
/// first the driver fails, with the same code, or neither fails. Four workloads in five
/// (mode, stream kind) settings; the table is written to `$GPUTAPE_OUT/capture_agree.md`.
#[test]
#[ignore = "needs a GPU"]
fn whole_workloads_captured_for_real_agree_with_the_offline_verdicts() {
    use gputape::analysis::{capture_verdicts, CaptureQuery};
    use gputape::backend::{Verdict, CAPTURE_RULES};
    use gputape::trace::{Call, Ret, Value};
    type Work = fn(&dyn GpuBackend) -> anyhow::Result<Vec<u8>>;
    let works: [(&str, Work); 4] = [
        ("single_stream", workloads::single_stream),
        ("two_streams", workloads::two_streams),
        ("missing_event", workloads::missing_event),
        ("pointer_table", workloads::pointer_table),
    ];
    let settings = [
        (CaptureMode::Global, StreamKind::Blocking),
        (CaptureMode::Global, StreamKind::NonBlocking),
        (CaptureMode::ThreadLocal, StreamKind::Blocking),
        (CaptureMode::Relaxed, StreamKind::Blocking),
        (CaptureMode::Relaxed, StreamKind::NonBlocking),
    ];
    let mut table = String::from(
        "| workload | mode | kind | predicted | driver | |\n|---|---|---|---|---|---|\n",
    );
    let (mut agree, mut total) = (0, 0);
    for (name, work) in works {
        for (mode, kind) in settings {
            let cfg = || {
                let mut c = CudaConfig::from_env(0);
                c.capture_mode = mode;
                c.stream_kind = kind;
                c
            };
            // Recorded with no capture: the stream that will capture is made first, idle.
            let Some(g) = gpu_with(cfg()) else { return };
            let sink = VecSink::default();
            let buf = sink.0.clone();
            let r = RecordingBackend::new(g, Box::new(sink), BackendDesc::new("cuda")).unwrap();
            r.start().unwrap();
            r.create_stream().unwrap();
            work(&r).unwrap();
            r.stop().unwrap();
            drop(r);
            let t = Trace::from_bytes(Path::new(name), &buf.lock()).unwrap();
            // The capturing stream as the trace names it: the first one made.
            let cap = t
                .calls
                .iter()
                .find(|c| matches!(c.call, Call::CreateStream))
                .and_then(|c| match &c.ret {
                    Some(Ret::Ok(Value::Stream(s))) => Some(*s),
                    _ => None,
                })
                .expect("the capturing stream's creation is recorded");
            let q = CaptureQuery {
                stream: Some(cap),
                mode,
                kind,
                ..CaptureQuery::default()
            };
            let predicted = capture_verdicts(&t, q)
                .into_iter()
                .filter(|v| v.category == "fails")
                .find_map(|v| {
                    let rule = CAPTURE_RULES.iter().find(|r| r.id == v.rule)?;
                    match rule.verdict {
                        Verdict::Fails { code, .. } => Some((v.call.clone(), code)),
                        _ => None,
                    }
                });
            // For real: the same workload inside a capture of that stream.
            let Some(g) = gpu_with(cfg()) else { return };
            let s = g.create_stream().unwrap();
            g.begin_capture(s).unwrap();
            let real = work(&g)
                .err()
                .map(|e| gputape::driver_code(&e).unwrap_or(0) as u32);
            g.abort_capture_if_active(s);
            drop(g);
            let same = predicted.as_ref().map(|p| p.1) == real;
            total += 1;
            agree += same as usize;
            let p = predicted.map_or("nothing fails".into(), |(c, code)| {
                format!("{c} fails {code}")
            });
            let d = real.map_or("nothing fails".into(), |code| format!("fails {code}"));
            table += &format!(
                "| {name} | {mode:?} | {kind:?} | {p} | {d} | {} |\n",
                if same { "agree" } else { "DIFFERS" }
            );
        }
    }
    table += &format!("\n{agree} of {total} agree\n");
    eprintln!("{table}");
    if let Ok(dir) = std::env::var("GPUTAPE_OUT") {
        std::fs::write(Path::new(&dir).join("capture_agree.md"), &table).unwrap();
    }
    assert_eq!(agree, total, "{table}");
}
