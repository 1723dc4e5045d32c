//! The mock's chaos mode (`MockConfig::chaos`) and `replay --chaos`: streams run deferred and
//! out of order as far as events and syncs allow, fresh memory is poisoned, and a lockstep
//! against the plain mock names the launch whose output a missing event or a read of
//! never-written memory changed, and why.

use gputape::backend::{DevicePtr, GpuBackend};
use gputape::mock::{MockConfig, MockGpuBackend, POISON};
use gputape::replayer::{LockstepOptions, LockstepReport, ReplayOptions, Replayer};
use gputape::trace::{Trace, VecSink};
use gputape::workloads::{f32_bytes, load_kernels, saxpy};
use std::path::Path;

fn mock(chaos: Option<u64>) -> MockGpuBackend {
    let m = MockGpuBackend::new(MockConfig {
        chaos,
        ..Default::default()
    });
    load_kernels(&m).expect("load module blas");
    gputape::model::kernels::load(&m).expect("load the model kernels");
    m
}

fn record(f: impl FnOnce(&dyn GpuBackend)) -> Trace {
    use gputape::recorder::{BackendDesc, RecordingBackend};
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(mock(None), Box::new(sink), BackendDesc::new("mock")).unwrap();
    rec.start().unwrap();
    f(&rec);
    rec.stop().unwrap();
    let bytes = buf.lock().clone();
    Trace::from_bytes(Path::new("chaos"), &bytes).unwrap()
}

fn read_f32(g: &dyn GpuBackend, p: DevicePtr, n: usize) -> Vec<f32> {
    let mut out = vec![0u8; n * 4];
    g.copy_d2h(p, &mut out).unwrap();
    out.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A producer on one stream, a consumer of its output on another, ordered by an event when
/// `with_event`, else by nothing: the consumer's stream is synchronised and its result read.
/// x = 1; producer y += 2x (y = 2); consumer z += 3y (z = 6).
fn producer_consumer(g: &dyn GpuBackend, with_event: bool) -> Vec<f32> {
    load_kernels(g).unwrap();
    let (s1, s2) = (g.create_stream().unwrap(), g.create_stream().unwrap());
    let ev = g.create_event().unwrap();
    let (x, y, z) = (
        g.alloc(64).unwrap(),
        g.alloc(64).unwrap(),
        g.alloc(64).unwrap(),
    );
    g.copy_h2d(&f32_bytes(&[1.0; 16]), x).unwrap();
    g.memset(y, 0, 64).unwrap();
    g.memset(z, 0, 64).unwrap();
    saxpy(g, x, y, 16, 2.0, s1).unwrap();
    if with_event {
        g.record_event(ev, s1).unwrap();
        g.stream_wait_event(s2, ev).unwrap();
    }
    saxpy(g, y, z, 16, 3.0, s2).unwrap();
    g.synchronize(s2).unwrap();
    let out = read_f32(g, z, 16);
    g.synchronize(s1).unwrap();
    g.destroy_event(ev).unwrap();
    for p in [x, y, z] {
        g.free(p).unwrap();
    }
    out
}

/// A kernel reading memory nobody wrote: x is allocated and never written, y += 1 * x.
fn reads_unwritten(g: &dyn GpuBackend) -> Vec<f32> {
    load_kernels(g).unwrap();
    let s = g.create_stream().unwrap();
    let (x, y) = (g.alloc(64).unwrap(), g.alloc(64).unwrap());
    g.memset(y, 0, 64).unwrap();
    saxpy(g, x, y, 16, 1.0, s).unwrap();
    g.synchronize(s).unwrap();
    let out = read_f32(g, y, 16);
    g.free(x).unwrap();
    g.free(y).unwrap();
    out
}

fn lockstep(t: &Trace, seed: u64) -> LockstepReport {
    let opts = LockstepOptions {
        in_stream_order: true,
        ..Default::default()
    };
    let name = format!("mock --chaos {seed}");
    Replayer::new(t)
        .lockstep(
            (&mock(None), &mock(Some(seed))),
            ("mock", &name),
            &opts,
            (None, None),
        )
        .unwrap()
}

/// The seeds under which `replay --chaos` runs the consumer of `producer_consumer` without an
/// event before its producer (found by trying 0..40: about two in five do; 0 does not). The
/// schedule is a function of the seed and the calls, so these stay what they are.
const PERTURBING: [u64; 3] = [1, 2, 3];

#[test]
fn chaos_is_off_by_default_and_fresh_memory_is_zeroed() {
    assert_eq!(MockConfig::default().chaos, None);
    let m = mock(None);
    let s = m.create_stream().unwrap();
    let (x, y) = (m.alloc(64).unwrap(), m.alloc(64).unwrap());
    saxpy(&m, x, y, 16, 1.0, s).unwrap();
    assert_eq!(m.chaos_pending(), 0, "work runs at submission");
    assert_eq!(read_f32(&m, y, 16), vec![0.0; 16]);
}

#[test]
fn chaos_poisons_fresh_memory_until_it_is_written() {
    let m = mock(Some(7));
    let p = m.alloc(64).unwrap();
    let mut out = vec![0u8; 64];
    m.copy_d2h(p, &mut out).unwrap();
    assert_eq!(out, vec![POISON; 64]);
    assert!(read_f32(&m, p, 16).iter().all(|v| v.is_nan()));
    m.memset(p, 0, 16).unwrap();
    let s = m.create_stream().unwrap();
    m.copy_h2d_async(&f32_bytes(&[2.0; 4]), p.offset(16), s)
        .unwrap();
    m.synchronize(s).unwrap();
    m.copy_d2h(p, &mut out).unwrap();
    assert_eq!(&out[..16], &[0u8; 16][..]);
    assert_eq!(&out[16..32], &f32_bytes(&[2.0; 4])[..]);
    assert_eq!(&out[32..], &[POISON; 32][..]);
}

#[test]
fn chaos_defers_stream_work_until_a_wait_forces_it() {
    let m = mock(Some(7));
    let s = m.create_stream().unwrap();
    let (x, y) = (m.alloc(64).unwrap(), m.alloc(64).unwrap());
    m.memset(x, 0, 64).unwrap();
    m.memset(y, 0, 64).unwrap();
    for _ in 0..4 {
        saxpy(&m, x, y, 16, 1.0, s).unwrap();
    }
    assert!(m.chaos_pending() > 0, "queued, not run");
    m.synchronize(s).unwrap();
    assert_eq!(m.chaos_pending(), 0);
    // A synchronous copy runs on the legacy stream, after every blocking stream's work.
    saxpy(&m, x, y, 16, 1.0, s).unwrap();
    assert_eq!(read_f32(&m, y, 16), vec![0.0; 16]);
    assert_eq!(m.chaos_pending(), 0);
}

#[test]
fn under_chaos_an_event_orders_two_streams_and_its_absence_does_not() {
    let mut without = std::collections::BTreeSet::new();
    for seed in 0..40 {
        let good = producer_consumer(&mock(Some(seed)), true);
        assert_eq!(good, vec![6.0; 16], "seed {seed}, with the event");
        let bad = producer_consumer(&mock(Some(seed)), false);
        // The same seed, the same schedule.
        assert_eq!(
            bad,
            producer_consumer(&mock(Some(seed)), false),
            "seed {seed}"
        );
        without.insert(bad[0].to_bits());
    }
    assert_eq!(
        without,
        [0.0f32.to_bits(), 6.0f32.to_bits()].into(),
        "without the event the consumer runs before its producer under some seeds"
    );
    assert_eq!(producer_consumer(&mock(None), false), vec![6.0; 16]);
}

#[test]
fn an_upload_destination_holds_poison_until_the_copy_runs() {
    // An upload on s1 and, with nothing ordering them, a copy of its destination on s2: the
    // copy sees the old bytes, the poison, or the upload, as the seed has it.
    let run = |seed: u64, event: bool| {
        let m = mock(Some(seed));
        let (s1, s2) = (m.create_stream().unwrap(), m.create_stream().unwrap());
        let ev = m.create_event().unwrap();
        let (dst, out) = (m.alloc(16).unwrap(), m.alloc(16).unwrap());
        m.memset(dst, 0, 16).unwrap();
        m.copy_h2d_async(&[7u8; 16], dst, s1).unwrap();
        if event {
            m.record_event(ev, s1).unwrap();
            m.stream_wait_event(s2, ev).unwrap();
        }
        m.copy_d2d_async(dst, out, 16, s2).unwrap();
        m.synchronize(s2).unwrap();
        let mut b = [0u8; 16];
        m.copy_d2h(out, &mut b).unwrap();
        b[0]
    };
    let seen: std::collections::BTreeSet<u8> = (0..40).map(|s| run(s, false)).collect();
    assert!(seen.contains(&POISON), "{seen:?}");
    assert!(seen.contains(&7), "{seen:?}");
    assert!((0..40).all(|s| run(s, true) == 7));
}

/// The clean fixtures replay under chaos and match their recordings: a program whose streams
/// are ordered computes the same bytes whatever the schedule (the model's step included).
#[test]
fn clean_fixtures_replay_under_chaos_and_match() {
    for f in [
        "mock_two_streams",
        "mock_capture_region",
        "mock_tiny_step5",
        "mock_tma",
    ] {
        let t = Trace::open(&Path::new("traces").join(format!("{f}.gtape"))).unwrap();
        for seed in 0..4 {
            let m = mock(Some(seed));
            let r = Replayer::new(&t)
                .run(&m, &ReplayOptions::default(), None, |_| {})
                .unwrap();
            assert!(r.passed(), "{f}, seed {seed}: {}", r.summary());
            let r = lockstep(&t, seed);
            assert!(r.passed(), "{f}, seed {seed}: {}", r.summary());
        }
    }
}

/// `replay --chaos` on a planted missing event: the consumer is named, with the producer it
/// should wait for; with the event nothing differs under any seed tried.
#[test]
fn chaos_replay_names_the_consumer_of_a_missing_event() {
    let t = record(|g| {
        producer_consumer(g, false);
    });
    for seed in PERTURBING {
        let r = lockstep(&t, seed);
        let d = r.first.as_ref().expect("a difference");
        assert_eq!(
            (d.seq, d.kernel.as_str()),
            (13, "blas::saxpy"),
            "{}",
            r.summary()
        );
        assert!(
            d.call.contains("s2>>>(buf1+0, buf2+0, 16, 3.0f)"),
            "{}",
            d.call
        );
        assert_eq!((d.a_value.as_str(), d.b_value.as_str()), ("6", "0"));
        assert_eq!(r.causes.len(), 1, "{}", r.summary());
        let why = r.causes[0].to_string();
        assert!(
            why.starts_with("missing dependency: #11 blas::saxpy (")
                && why.contains(") on s1 -> #13 blas::saxpy (")
                && why.contains(") on s2 (read-write on buf1"),
            "{why}"
        );
        assert!(
            r.summary().contains(&format!("  cause: {why}\n")),
            "{}",
            r.summary()
        );
    }
    let t = record(|g| {
        producer_consumer(g, true);
    });
    for seed in 0..16 {
        let r = lockstep(&t, seed);
        assert!(r.passed(), "seed {seed}: {}", r.summary());
        assert_eq!(r.compared, 2);
    }
}

/// `replay --chaos` on a kernel reading memory nobody wrote: named, with the range.
#[test]
fn chaos_replay_names_a_read_of_never_written_memory() {
    let t = record(|g| {
        reads_unwritten(g);
    });
    for seed in [0, 1] {
        let r = lockstep(&t, seed);
        let d = r.first.as_ref().expect("a difference");
        assert_eq!(
            (d.seq, d.kernel.as_str()),
            (6, "blas::saxpy"),
            "{}",
            r.summary()
        );
        assert_eq!((d.a_value.as_str(), d.b_value.as_str()), ("0", "NaN"));
        let causes: Vec<String> = r.causes.iter().map(|c| c.to_string()).collect();
        assert_eq!(causes, ["reads never-written memory: buf0+0..64"]);
    }
}

fn gputape(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn chaos_on_the_command_line() {
    let dir = std::env::temp_dir().join(format!("gputape-chaos-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, t: &Trace| {
        let p = dir.join(name);
        std::fs::write(&p, t.to_bytes().unwrap()).unwrap();
        p.to_string_lossy().into_owned()
    };
    let racy = write(
        "racy.gtape",
        &record(|g| {
            producer_consumer(g, false);
        }),
    );
    let ordered = write(
        "ordered.gtape",
        &record(|g| {
            producer_consumer(g, true);
        }),
    );
    let unwritten = write(
        "unwritten.gtape",
        &record(|g| {
            reads_unwritten(g);
        }),
    );
    let seed = PERTURBING[0].to_string();
    let o = gputape(&["replay", &racy, "--chaos", &seed]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("first difference: call #13 blas::saxpy"),
        "{out}"
    );
    assert!(
        out.contains("cause: missing dependency: #11 blas::saxpy ("),
        "{out}"
    );
    assert!(out.contains(") on s1 -> #13 blas::saxpy ("), "{out}");
    assert!(
        out.contains("-> DIFFERENT: first at #13 blas::saxpy"),
        "{out}"
    );
    // The same seed, the same report.
    let again = gputape(&["replay", &racy, "--chaos", &seed]);
    let strip = |s: &str| -> String {
        s.lines()
            .filter(|l| !l.starts_with("lockstep "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&out), strip(&String::from_utf8_lossy(&again.stdout)));
    let o = gputape(&["replay", &racy, "--chaos", &seed, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["lockstep"]["first"]["seq"], 13);
    assert_eq!(v["lockstep"]["causes"][0]["kind"], "missing_dependency");
    assert_eq!(v["lockstep"]["causes"][0]["buffer"], "buf1");

    let o = gputape(&["replay", &ordered, "--chaos", &seed]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("-> no difference in 2 launches"), "{out}");

    let o = gputape(&["replay", &unwritten, "--chaos", "5"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("first difference: call #6 blas::saxpy"),
        "{out}"
    );
    assert!(
        out.contains("cause: reads never-written memory: buf0+0..64"),
        "{out}"
    );

    // --chaos does not go with --against; on CUDA it holds streams at random instead, so on
    // a machine without a driver the backend is not available (exit 4).
    let o = gputape(&["replay", &racy, "--chaos", "1", "--against", "mock"]);
    assert_eq!(o.status.code(), Some(2));
    let o = gputape(&["replay", &racy, "--chaos", "1", "--on", "cuda"]);
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("no CUDA driver") {
        assert_eq!(o.status.code(), Some(4), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
