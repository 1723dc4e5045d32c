//! Nothing lost, nothing unsafe: hostile traces through every consumer, a recorder killed at
//! many points, a full disk, a stop while other threads are inside calls, and edge cases.

use gputape::analysis::{self, CaptureQuery, Sections};
use gputape::backend::GpuBackend;
use gputape::mock::{MockConfig, MockGpuBackend};
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::{self, crc::crc32c, Trace, VecSink};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A small deterministic generator (xorshift64*), so a failing case can be found again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A mock small enough that whatever a hostile trace allocates stays cheap.
fn small_mock() -> MockGpuBackend {
    let m = MockGpuBackend::new(MockConfig {
        total_memory: 64 << 20,
        ..Default::default()
    });
    gputape::workloads::load_kernels(&m).expect("load module blas");
    gputape::model::kernels::load(&m).expect("load the model kernels");
    m
}

/// Every consumer of a trace (reader, renderings, analyses, exports, the report page, a mock
/// replay and a trim), on one candidate file. Errors are fine; panics are not (an
/// abort or signal ends the test process, which fails the test just the same).
fn consume(bytes: &[u8], whole: &Trace) {
    let Ok(t) = Trace::from_bytes(Path::new("fuzz"), bytes) else {
        return;
    };
    let _ = trace::render(&t);
    let _ = trace::summary(&t);
    let _ = trace::diff(whole, &t);
    let all = Sections {
        capture: true,
        races: true,
        leaks: true,
    };
    let _ = analysis::analyze(&t, CaptureQuery::default(), all);
    let _ = analysis::export::perfetto(&t, CaptureQuery::default());
    let _ = analysis::export::dot(&t, CaptureQuery::default());
    let _ = analysis::report::html(&t, "fuzz");
    let _ = Replayer::new(&t).with_max_memory(16 << 20).trim(
        &small_mock(),
        (t.calls.len() as u64 / 2, u64::MAX),
        None,
    );
    let opts = ReplayOptions {
        verify: true,
        ..Default::default()
    };
    let _ = Replayer::new(&t)
        .with_max_memory(16 << 20)
        .run(&small_mock(), &opts, None, |_| {});
    // A dump's later checkpoints: begun at each, and a rank set aligned on them.
    for i in 0..t.restarts.len().min(4) {
        if let Ok(r) = t.rebased(i) {
            let _ = trace::render(&r);
            let _ =
                Replayer::new(&r)
                    .with_max_memory(16 << 20)
                    .run(&small_mock(), &opts, None, |_| {});
        }
    }
    let _ = gputape::replayer::aligned(&[t.clone(), whole.clone()]);
    let _ = analysis::ranks::match_ranks(&[t, whole.clone()]);
}

/// Frame boundaries of a current-format trace: (start, payload length).
fn frames(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut off = trace::FILE_HEADER_LEN;
    while off + trace::FRAME_HEADER_LEN <= bytes.len() {
        let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
        if off + trace::FRAME_HEADER_LEN + len > bytes.len() {
            break;
        }
        out.push((off, len));
        off += trace::FRAME_HEADER_LEN + len;
    }
    out
}

/// Recompute a frame's checksums, as a buggy writer or a hostile file would have them.
fn reseal(bytes: &mut [u8], start: usize, len: usize) {
    let h = start;
    bytes[h..h + 4].copy_from_slice(&(len as u32).to_le_bytes());
    let hcrc = crc32c(&bytes[h..h + 12]);
    bytes[h + 12..h + 16].copy_from_slice(&hcrc.to_le_bytes());
    let p = h + trace::FRAME_HEADER_LEN;
    let crc = crc32c(&bytes[p..p + len]);
    bytes[h + 16..h + 20].copy_from_slice(&crc.to_le_bytes());
}

/// One damaged copy of `orig`: raw bytes changed, inserted, removed or cut.
fn raw_mutation(rng: &mut Rng, orig: &[u8]) -> Vec<u8> {
    let mut b = orig.to_vec();
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(b.len());
        match rng.below(4) {
            0 => b[i] ^= 1 << rng.below(8),
            1 => b[i] = rng.next() as u8,
            2 => b.insert(i, rng.next() as u8),
            _ => b.truncate(i.max(1)),
        }
    }
    b
}

/// One damaged copy whose frames still check out: payload bytes changed (small values and
/// extremes, where sizes and ids live) and the checksums recomputed, so the damage reaches the
/// decoder and everything after it.
fn resealed_mutation(rng: &mut Rng, orig: &[u8]) -> Vec<u8> {
    let mut b = orig.to_vec();
    let fs = frames(&b);
    for _ in 0..1 + rng.below(3) {
        let (start, len) = fs[rng.below(fs.len())];
        if len == 0 {
            continue;
        }
        let p = start + trace::FRAME_HEADER_LEN + rng.below(len);
        b[p] = match rng.below(5) {
            0 => 0,
            1 => 0xff,
            2 => b[p].wrapping_add(1),
            3 => b[p].wrapping_sub(1),
            _ => rng.next() as u8,
        };
        // Varints: a large value's marker bytes (251..=253 in bincode's encoding).
        if rng.below(8) == 0 {
            b[p] = 251 + rng.below(3) as u8;
        }
        reseal(&mut b, start, len);
    }
    b
}

fn fuzz_cases() -> usize {
    std::env::var("GPUTAPE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000)
}

/// The reader and every consumer over damaged fixtures, with both mutators. Bounded by a case
/// count (`GPUTAPE_FUZZ_CASES`, default 5000 per mutator) and, unless the count was given, by
/// a time budget that fits CI.
#[test]
fn hostile_traces_give_errors_never_panics() {
    let fixtures = [
        "traces/mock_two_streams.gtape",
        "traces/mock_capture_region.gtape",
        "traces/mock_graph_fault.gtape",
        "traces/h200_graph_fault.gtape",
        // Format 3: a provenance frame, a tensor-map argument and its encode call.
        "traces/mock_tma.gtape",
        // Format 11: a rank's flight dump (examples/tp_fault.rs) with a later checkpoint
        // (in traces/ranks/: it replays only with its peer's, so not among the fixtures
        // every trace of traces/ is replayed alone from).
        "traces/ranks/mock_tp_fault_rank0.gtape",
    ];
    let budget = match std::env::var("GPUTAPE_FUZZ_CASES") {
        Ok(_) => Duration::MAX,
        Err(_) => Duration::from_secs(40),
    };
    type Mutator = fn(&mut Rng, &[u8]) -> Vec<u8>;
    let mutators: [(&str, Mutator); 2] = [("raw", raw_mutation), ("resealed", resealed_mutation)];
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut report = Vec::new();
    let t0 = Instant::now();
    for (name, mutate) in mutators {
        let mut rng = Rng(0x6770_7574_6170_6521);
        let (mut cases, mut failures) = (0usize, Vec::new());
        while cases < fuzz_cases() && t0.elapsed() < budget {
            let f = fixtures[cases % fixtures.len()];
            let orig = std::fs::read(f).unwrap();
            let whole = Trace::from_bytes(Path::new(f), &orig).unwrap();
            let bad = mutate(&mut rng, &orig);
            if std::panic::catch_unwind(|| consume(&bad, &whole)).is_err() {
                failures.push(format!("{name} case {cases} of {f}"));
            }
            cases += 1;
        }
        report.push((name, cases, failures));
    }
    std::panic::set_hook(quiet);
    for (name, cases, failures) in &report {
        eprintln!("fuzz {name}: {cases} cases, {} failures", failures.len());
        assert!(*cases > 0);
        assert!(failures.is_empty(), "{name}: {failures:?}");
    }
}

/// A scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-rob-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Run as a child of `a_recorder_killed_anywhere_leaves_every_earlier_frame`: record 4 MiB
/// uploads (each a multi-megabyte blob frame) and small calls until killed.
#[test]
fn recorder_child_until_killed() {
    let Ok(path) = std::env::var("GPUTAPE_KILL_CHILD") else {
        return;
    };
    let m = MockGpuBackend::default();
    gputape::workloads::load_kernels(&m).expect("load module blas");
    let rec = RecordingBackend::to_file(m, Path::new(&path), BackendDesc::new("mock")).unwrap();
    rec.start().unwrap();
    let g: &dyn GpuBackend = &rec;
    let n = 1u32 << 20;
    let x = g.alloc(n as usize * 4).unwrap();
    let y = g.alloc(n as usize * 4).unwrap();
    // Incompressible bytes, made once: the loop's time then goes to hashing, compressing and
    // copying frames, so kills land inside multi-megabyte frame copies too.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut data: Vec<u8> = (0..n as usize * 4).map(|_| rng.next() as u8).collect();
    // Never outlive the test that kills it (a parent that aborted once left this filling the
    // disk): stop when reparented, or at 16 GiB of uploads (minutes; the kill comes in one
    // second).
    let parent = std::os::unix::process::parent_id();
    for round in 0u64..4096 {
        if std::os::unix::process::parent_id() != parent {
            return;
        }
        // Distinct contents each time, so every upload is a new blob frame.
        data[..8].copy_from_slice(&round.to_le_bytes());
        g.copy_h2d(&data, x).unwrap();
        // Small calls between the big ones, as an engine's step has.
        g.memset_async(y, (round % 251) as u8, 64, g.default_stream())
            .unwrap();
        g.synchronize(g.default_stream()).unwrap();
    }
}

/// SIGKILL at 24 points, inside and between multi-megabyte frames: each trace left behind opens
/// with every complete frame before the kill and replays its complete calls.
#[test]
fn a_recorder_killed_anywhere_leaves_every_earlier_frame() {
    let d = scratch("kill");
    let exe = std::env::current_exe().unwrap();
    let mut opened = 0;
    let mut inside_frames = 0;
    let points = 24;
    for i in 0..points {
        let path = d.join(format!("k{i}.gtape"));
        let mut child = std::process::Command::new(&exe)
            .args(["--exact", "recorder_child_until_killed", "--nocapture"])
            .env("GPUTAPE_KILL_CHILD", &path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Kill times spread over the recording's first second, at sub-millisecond offsets so
        // kills land inside copies as well as between them.
        std::thread::sleep(Duration::from_micros(
            40_000 + i * 37_000 + (i * i * 311) % 5_000,
        ));
        child.kill().unwrap();
        child.wait().unwrap();
        let partial = trace::partial_path(&path);
        if !partial.exists() {
            continue; // killed before the file was created
        }
        let bytes = std::fs::read(&partial).unwrap();
        let t = match Trace::from_bytes(&partial, &bytes) {
            Ok(t) => t,
            Err(trace::TraceError::Empty { .. } | trace::TraceError::NoHeader { .. }) => continue,
            Err(e) => panic!("kill point {i}: {e}"),
        };
        let cut = t.cut.as_ref().expect("a killed trace says it is cut");
        if cut.reason.contains("never written") || cut.reason.contains("payload bytes present") {
            inside_frames += 1;
        }
        let r = Replayer::new(&t)
            .run(&small_big_mock(), &ReplayOptions::default(), None, |_| {})
            .unwrap_or_else(|e| panic!("kill point {i}: {e}"));
        assert!(r.divergence.is_none(), "kill point {i}: {}", r.summary());
        opened += 1;
    }
    eprintln!(
        "kill points: {points}, traces that opened and replayed: {opened}, cut inside a frame: {inside_frames}"
    );
    assert!(opened >= points as usize / 2, "{opened} of {points}");
    std::fs::remove_dir_all(&d).ok();
}

fn small_big_mock() -> MockGpuBackend {
    let m = MockGpuBackend::default();
    gputape::workloads::load_kernels(&m).expect("load module blas");
    m
}

/// A file-size limit stands in for a full disk where no small file system can be mounted: the
/// recorder's reservation fails, recording stops with a message, the recorded program goes on,
/// and what was recorded opens.
#[test]
fn a_full_disk_stops_recording_not_the_program() {
    let d = scratch("full");
    let out = d.join("x.gtape");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"));
    cmd.args(["record", "--config", "default", "--step", "3", "-o"])
        .arg(&out);
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls (setrlimit, signal).
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 256 << 10,
                rlim_max: 256 << 10,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let code = o.status.code();
    assert!(
        code.is_some(),
        "killed by a signal: {:?} {stderr}",
        o.status
    );
    assert!(
        stderr.contains("recording stopped"),
        "exit {code:?}: {stderr}"
    );
    // The program ran its step to the end.
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("produced token"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let p = if out.exists() {
        out.clone()
    } else {
        trace::partial_path(&out)
    };
    let t = Trace::open(&p).unwrap();
    assert!(t.header.is_some());
    assert!(std::fs::metadata(&p).unwrap().len() <= 256 << 10);
    std::fs::remove_dir_all(&d).ok();
}

/// Eight threads inside calls when `stop` comes: every call in the trace has its End frame.
#[test]
fn stop_waits_for_calls_in_flight() {
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let m = MockGpuBackend::default();
    let rec = std::sync::Arc::new(
        RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap(),
    );
    rec.start().unwrap();
    let go = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (rec, go) = (rec.clone(), go.clone());
            std::thread::spawn(move || {
                while go.load(std::sync::atomic::Ordering::Relaxed) {
                    let p = rec.alloc(64).unwrap();
                    rec.memset(p, 1, 64).unwrap();
                    rec.free(p).unwrap();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    rec.stop().unwrap();
    go.store(false, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let t = Trace::from_bytes(Path::new("stop"), &buf.lock()).unwrap();
    assert!(t.stopped && t.cut.is_none());
    assert!(t.calls.len() > 100);
    assert!(
        t.calls.iter().all(|c| c.ret.is_some()),
        "a call lost its end"
    );
    assert!(t.unfinished().is_none());
}

#[test]
fn edge_cases_are_answered_not_wrapped() {
    // --stop-at at the largest number replays everything.
    let t = Trace::open(Path::new("traces/mock_two_streams.gtape")).unwrap();
    let opts = ReplayOptions {
        stop_at: Some(u64::MAX),
        ..Default::default()
    };
    let r = Replayer::new(&t)
        .run(&small_big_mock(), &opts, None, |_| {})
        .unwrap();
    assert_eq!(r.calls, t.calls.len() as u64);
    // A complete trace followed by zeros is complete.
    let mut padded = std::fs::read("traces/mock_two_streams.gtape").unwrap();
    padded.extend(std::iter::repeat_n(0u8, 4096));
    let p = Trace::from_bytes(Path::new("padded"), &padded).unwrap();
    assert!(p.cut.is_none() && p.stopped);
    // Three bytes are not a trace.
    assert!(Trace::from_bytes(Path::new("three"), b"GPU").is_err());
    // A zero header followed by payload bytes (a writer killed mid-frame) is a cut there.
    let whole = std::fs::read("traces/mock_two_streams.gtape").unwrap();
    let fs = frames(&whole);
    let (start, len) = fs[fs.len() / 2];
    let mut torn = whole[..start + trace::FRAME_HEADER_LEN + len].to_vec();
    torn[start..start + trace::FRAME_HEADER_LEN].fill(0);
    let t2 = Trace::from_bytes(Path::new("torn"), &torn).unwrap();
    let cut = t2.cut.expect("cut");
    assert_eq!(cut.offset as usize, start);
    assert!(cut.reason.contains("never written"), "{}", cut.reason);
}

/// With many recording threads, a sync's buffer hashes leave out buffers other threads' calls
/// are still writing: a replay, issuing the calls in order, then agrees with every hash.
#[test]
fn sync_hashes_hold_with_eight_recording_threads() {
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let m = MockGpuBackend::default();
    gputape::workloads::load_kernels(&m).expect("load module blas");
    let rec = std::sync::Arc::new(
        RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap(),
    );
    let work: Vec<_> = (0..8)
        .map(|_| (rec.alloc(4096).unwrap(), rec.create_stream().unwrap()))
        .collect();
    rec.hash_at_syncs(true);
    rec.start().unwrap();
    let threads: Vec<_> = work
        .into_iter()
        .enumerate()
        .map(|(i, (b, s))| {
            let rec = rec.clone();
            std::thread::spawn(move || {
                for k in 0..60u32 {
                    rec.memset_async(b, (k * 8 + i as u32) as u8, 4096, s)
                        .unwrap();
                    rec.synchronize(s).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    rec.stop().unwrap();
    let t = Trace::from_bytes(Path::new("threads"), &buf.lock()).unwrap();
    let hashed: usize = t.sync_hashes.values().map(|h| h.len()).sum();
    assert!(hashed > 100, "{hashed} buffer hashes");
    let r = Replayer::new(&t)
        .run(&small_big_mock(), &ReplayOptions::default(), None, |_| {})
        .unwrap();
    assert!(r.divergence.is_none(), "{}", r.summary());
}

/// A trace cut inside a frame and followed by garbage (a copy interrupted, a disk that filled
/// mid-write) opens with its intact frames and says where it was torn; damage followed by
/// intact frames is still corruption.
#[test]
fn a_torn_tail_with_garbage_after_it_opens_with_its_intact_frames() {
    let bytes = std::fs::read("traces/mock_tiny_step5.gtape").unwrap();
    let whole = gputape::trace::Trace::from_bytes(std::path::Path::new("whole"), &bytes).unwrap();
    let mut seed = 0x2545f4914f6cdd1du64;
    // More garbage than the largest frame of this trace, so the torn frame's declared length
    // ends inside it.
    let mut garbage = Vec::new();
    for _ in 0..(256 << 10) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        garbage.push(seed as u8);
    }
    for frac in [0.3, 0.6, 0.9] {
        let cut = (bytes.len() as f64 * frac) as usize;
        let mut torn = bytes[..cut].to_vec();
        torn.extend_from_slice(&garbage);
        let t = gputape::trace::Trace::from_bytes(std::path::Path::new("torn"), &torn)
            .unwrap_or_else(|e| panic!("cut at {frac}: {e}"));
        let c = t.cut.as_ref().expect("the trace says where it was torn");
        assert!(c.reason.contains("torn"), "{}", c.reason);
        assert!(c.offset as usize <= cut);
        for (a, b) in t.calls.iter().zip(&whole.calls) {
            assert_eq!((a.seq, &a.call), (b.seq, &b.call));
        }
        assert!(t.calls.len() <= whole.calls.len());
    }
    // The same garbage in the middle, with the rest of the trace after it: corrupt.
    let mid = bytes.len() / 2;
    let mut bad = bytes.clone();
    bad[mid..mid + 64].copy_from_slice(&garbage[..64]);
    assert!(matches!(
        gputape::trace::Trace::from_bytes(std::path::Path::new("bad"), &bad),
        Err(gputape::trace::TraceError::Corrupt { .. })
    ));
}
