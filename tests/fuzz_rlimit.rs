//! Hostile traces under an address-space limit. A trace is untrusted input: a length or count
//! read from a frame that lies must come back as a typed error naming the frame, never as an
//! allocation the process cannot make (which aborts it: "memory allocation of 4294967295 bytes
//! failed", seen when a length varint was set to u32::MAX). An allocation that merely succeeds
//! on a machine with memory to spare hides that, so every case here is opened and traversed in
//! a child process under `RLIMIT_AS`, where such an allocation fails at once.
//!
//! The fixture is a small trace recorded with the mock (a snapshot with a compressed blob, a
//! plain one and one large enough to be left in the file; launches raw, typed and through a
//! tensor map; two streams, a capture, hashes at syncs), plus the frames the mock's recording
//! has none of (a chunked blob and its parts, a flight dump's reason). The mutations change
//! what lies inside frames and recompute the frames' checksums, so the damage reaches the
//! decoder and what reads the decoded trace: bytes flipped, varints replaced by huge values
//! (u32::MAX, 2^33, u64::MAX), payloads shortened, files cut (with and without garbage after
//! the cut).

use gputape::analysis::{self, CaptureQuery, Sections};
use gputape::backend::{CaptureMode, GpuBackend, StreamKind};
use gputape::mock::{MockConfig, MockGpuBackend};
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::trace::{
    self, crc::crc32c, Arg, BlobId, Call, DevAddr, DumpInfo, Frame, Trace, TraceError, TraceWriter,
    VecSink, FRAME_HEADER_LEN,
};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The seed and case count CI runs: fixed, so a failure is found again by running the test
/// again (`GPUTAPE_RLIMIT_CASES` runs more). Sized for about 25 s of a debug build on one core.
const SEED: u64 = 0x6775_7a7a_2d72_6c69;
const CASES: usize = 1000;
/// Cases per child process: a child's start (a debug test binary) costs more than a case.
const PER_CHILD: usize = 150;
/// The child's address-space limit: room for a debug build's mappings and a few threads, and
/// far below what a length field set to u32::MAX or 2^33 would ask for.
const LIMIT_AS: u64 = 1 << 30;

/// A small deterministic generator (xorshift64*).
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

/// The fixture: recorded with the mock, then re-framed with frames a mock recording lacks.
fn fixture() -> Vec<u8> {
    let m = MockGpuBackend::new(MockConfig {
        total_memory: 64 << 20,
        ..Default::default()
    });
    gputape::workloads::load_kernels(&m).expect("load module blas");
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap();
    let g: &dyn GpuBackend = &rec;
    // Live before recording starts: the snapshot stores them. Mostly zeros (compressed), noise
    // (stored as it is) and noise of over a megabyte (left in the file when opened).
    let mut rng = Rng(SEED);
    let mut sparse = vec![0u8; 64 << 10];
    sparse[100..200].fill(7);
    let noise: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
    let big: Vec<u8> = (0..(1 << 20) + 4096).map(|_| rng.next() as u8).collect();
    for bytes in [&sparse, &noise, &big] {
        let p = g.alloc(bytes.len()).unwrap();
        g.copy_h2d(bytes, p).unwrap();
    }
    rec.hash_at_syncs(true);
    rec.start().unwrap();
    gputape::workloads::single_stream(g).unwrap();
    gputape::workloads::two_streams(g).unwrap();
    gputape::workloads::capture_region(g).unwrap();
    gputape::workloads::tma(g).unwrap();
    rec.stop().unwrap();
    let recorded = buf.lock().clone();
    let (mut frames, cut) = trace::read_frames(Path::new("fixture"), &recorded).unwrap();
    assert!(cut.is_none());
    // A chunked blob of two parts, and a dump's reason, before the stop record.
    let stop = frames.pop().expect("a stop record");
    let parts: Vec<(BlobId, Vec<u8>)> = [300usize, 200]
        .iter()
        .map(|&n| {
            let b: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            (BlobId::of(&b), b)
        })
        .collect();
    for (id, b) in &parts {
        frames.push(trace::blob_frame(*id, b));
    }
    let ids: Vec<BlobId> = parts.iter().map(|(id, _)| *id).collect();
    frames.push(Frame::Chunked {
        id: BlobId::chunked(500, &ids),
        len: 500,
        parts: ids,
    });
    frames.push(Frame::Dumped(DumpInfo {
        reason: "fuzz fixture".into(),
        in_flight: vec![(3, 0)],
    }));
    frames.push(stop);
    let out = VecSink::default();
    let bytes = out.0.clone();
    let mut w = TraceWriter::new(Box::new(out)).unwrap();
    for f in &frames {
        w.write(f).unwrap();
    }
    w.finish().unwrap();
    let b = bytes.lock().clone();
    b
}

/// Frame boundaries: (start, payload length).
fn frames(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut off = trace::FILE_HEADER_LEN;
    while off + FRAME_HEADER_LEN <= bytes.len() {
        let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
        if off + FRAME_HEADER_LEN + len > bytes.len() {
            break;
        }
        out.push((off, len));
        off += FRAME_HEADER_LEN + len;
    }
    out
}

/// Give the frame at `start` the payload length `len` and recompute both its checksums.
fn reseal(bytes: &mut [u8], start: usize, len: usize) {
    bytes[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    let hcrc = crc32c(&bytes[start..start + 12]);
    bytes[start + 12..start + 16].copy_from_slice(&hcrc.to_le_bytes());
    let p = start + FRAME_HEADER_LEN;
    let crc = crc32c(&bytes[p..p + len]);
    bytes[start + 16..start + 20].copy_from_slice(&crc.to_le_bytes());
}

/// The bytes of the varint that starts at `b[0]` (bincode's: one byte up to 250, else a marker
/// and 2, 4 or 8 bytes).
fn varint_len(b: &[u8]) -> usize {
    match b[0] {
        251 => 3,
        252 => 5,
        253 => 9,
        254 => 17,
        _ => 1,
    }
    .min(b.len())
}

/// Huge values in every width bincode has for them.
fn huge_varint(rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    match rng.below(5) {
        0 => {
            v.push(252);
            v.extend_from_slice(&u32::MAX.to_le_bytes());
        }
        1 => {
            v.push(253);
            v.extend_from_slice(&(1u64 << 33).to_le_bytes());
        }
        2 => {
            v.push(253);
            v.extend_from_slice(&u64::MAX.to_le_bytes());
        }
        3 => {
            v.push(252);
            v.extend_from_slice(&(rng.next() as u32 | 1 << 31).to_le_bytes());
        }
        _ => {
            v.push(251);
            v.extend_from_slice(&u16::MAX.to_le_bytes());
        }
    }
    v
}

/// What was done to a case, for the report of a case that failed.
fn mutate(orig: &[u8], case: usize) -> (Vec<u8>, String) {
    let mut rng = Rng(SEED ^ (case as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut b = orig.to_vec();
    let mut what = Vec::new();
    for _ in 0..1 + rng.below(2) {
        let fs = frames(&b);
        if fs.is_empty() {
            break;
        }
        // A frame first, then a place in it: the megabyte blob gets no more than its share.
        let (start, len) = fs[rng.below(fs.len())];
        let p = start + FRAME_HEADER_LEN;
        match rng.below(4) {
            0 if len > 0 => {
                let i = p + rng.below(len);
                b[i] ^= 1 << rng.below(8);
                what.push(format!("bit flip at {i}"));
                reseal(&mut b, start, len);
            }
            1 if len > 0 => {
                let i = p + rng.below(len);
                let old = varint_len(&b[i..p + len]);
                let new = huge_varint(&mut rng);
                what.push(format!("varint at {i} ({old} bytes) := {new:02x?}"));
                let n = new.len();
                b.splice(i..i + old, new);
                reseal(&mut b, start, len + n - old);
            }
            2 if len > 0 => {
                let k = 1 + rng.below(len.min(32));
                let i = p + rng.below(len - k + 1);
                b.drain(i..i + k);
                what.push(format!("{k} payload bytes cut at {i}"));
                reseal(&mut b, start, len - k);
            }
            _ => {
                let at = start + rng.below(FRAME_HEADER_LEN + len);
                b.truncate(at.max(1));
                if rng.below(2) == 0 {
                    let junk = 1 + rng.below(4096);
                    b.extend((0..junk).map(|_| rng.next() as u8));
                    what.push(format!("cut at {at}, {junk} bytes of garbage after"));
                } else {
                    what.push(format!("cut at {at}"));
                }
            }
        }
    }
    (b, what.join("; "))
}

/// Everything `show`, `analyze`, `export`, `report` and a mock `replay` do with a trace, and
/// every blob read whole and part by part: the first error, if any.
fn traverse(t: &Trace, whole: &Trace) -> Result<(), TraceError> {
    let _ = trace::render(t);
    let _ = trace::summary(t);
    let _ = trace::diff(whole, t);
    let all = Sections {
        capture: true,
        races: true,
        leaks: true,
    };
    let _ = analysis::analyze(t, CaptureQuery::default(), all);
    let relaxed = CaptureQuery {
        mode: CaptureMode::Relaxed,
        kind: StreamKind::NonBlocking,
        ..CaptureQuery::default()
    };
    let _ = analysis::analyze(t, relaxed, all);
    let _ = analysis::export::perfetto(t, CaptureQuery::default());
    let _ = analysis::export::dot(t, CaptureQuery::default());
    let _ = analysis::report::html(t, "fuzz");
    let _ = analysis::window::fault_windows(t);
    // Replayed on the mock, where every size a call carries meets an allocation.
    let _ = gputape::replayer::Replayer::new(t).run(
        &MockGpuBackend::new(MockConfig::default()),
        &gputape::replayer::ReplayOptions::default(),
        None,
        |_| {},
    );
    let mut first = None;
    for id in t.blobs.ids() {
        let r = t
            .blobs
            .get(&id)
            .and_then(|_| t.blobs.layout(&id))
            .and_then(|_| t.blobs.for_each_part(&id, &mut |_, _| Ok(())));
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// A case's outcome as the child reports it: `ok`, or the error's variant, the frame it names
/// (`-` for none) and its message.
fn outcome(r: Result<(), TraceError>) -> String {
    let Err(e) = r else {
        return "ok\t-\t-".into();
    };
    let (kind, frame) = match &e {
        TraceError::Corrupt { frame, .. } => ("corrupt", Some(*frame)),
        TraceError::Blob { .. } => ("blob", None),
        TraceError::NoHeader { .. } => ("no-header", None),
        TraceError::Empty { .. } => ("empty", None),
        TraceError::BadMagic { .. } => ("bad-magic", None),
        TraceError::TooNew { .. } => ("too-new", None),
        TraceError::Io { .. } => ("io", None),
        TraceError::OnlyPartial { .. } => ("only-partial", None),
        TraceError::Encode(_) => ("encode", None),
    };
    let frame = frame.map_or("-".to_string(), |f| f.to_string());
    format!(
        "{kind}\t{frame}\t{}",
        e.to_string().replace(['\t', '\n'], " ")
    )
}

/// An outcome without its details, and whether its message names the frame the error is
/// about: what the fuzz test tallies.
fn kind_of(outcome: &str) -> String {
    let f: Vec<&str> = outcome.split('\t').collect();
    match (f[0], f.get(1), f.get(2)) {
        (kind, Some(&n), Some(msg)) if n != "-" && msg.contains(&format!("frame {n} ")) => {
            format!("{kind} (frame named)")
        }
        (kind, ..) => kind.to_string(),
    }
}

/// The child, in one of two modes. Fuzz: cases `GPUTAPE_RLIMIT_CASES_FROM..TO` of the fixture
/// in directory `GPUTAPE_RLIMIT_CHILD`, each written to a file, opened from it and from
/// memory, and traversed; `start N` on stderr before each case (so a parent can name the case
/// that killed it) and `N\toutcome\toutcome` into `results-FROM` after it. Files: with
/// `GPUTAPE_RLIMIT_FILES` set instead, each `*.gtape` file of that directory the same way, a
/// line `NAME\toutcome\toutcome` each into `results-files`.
#[test]
fn rlimit_child() {
    let Ok(dir) = std::env::var("GPUTAPE_RLIMIT_CHILD") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let orig = std::fs::read(dir.join("fixture.gtape")).unwrap();
    let whole = Trace::from_bytes(Path::new("fixture"), &orig).unwrap();
    let both = |file: &Path, bytes: &[u8]| {
        let opened = Trace::open(file).and_then(|t| traverse(&t, &whole));
        let loaded = Trace::from_bytes(file, bytes).and_then(|t| traverse(&t, &whole));
        format!("{}\t{}", outcome(opened), outcome(loaded))
    };
    if let Ok(files) = std::env::var("GPUTAPE_RLIMIT_FILES") {
        let mut out = std::fs::File::create(dir.join("results-files")).unwrap();
        let mut names: Vec<PathBuf> = std::fs::read_dir(&files)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for file in names {
            eprintln!("start {}", file.display());
            let bytes = std::fs::read(&file).unwrap();
            let name = file.file_stem().unwrap().to_string_lossy().into_owned();
            writeln!(out, "{name}\t{}", both(&file, &bytes)).unwrap();
        }
        return;
    }
    let num = |k: &str| -> usize { std::env::var(k).unwrap().parse().unwrap() };
    let (from, to) = (
        num("GPUTAPE_RLIMIT_CASES_FROM"),
        num("GPUTAPE_RLIMIT_CASES_TO"),
    );
    let file = dir.join(format!("case-{}.gtape", std::process::id()));
    let mut out = std::fs::File::create(dir.join(format!("results-{from}"))).unwrap();
    for case in from..to {
        eprintln!("start {case}");
        let (bad, _) = mutate(&orig, case);
        std::fs::write(&file, &bad).unwrap();
        writeln!(out, "{case}\t{}", both(&file, &bad)).unwrap();
    }
    std::fs::remove_file(&file).ok();
}

/// This test binary as a child in `rlimit_child`'s mode `envs`, under `RLIMIT_AS`: its exit
/// status and stderr.
fn child(envs: &[(&str, &std::ffi::OsStr)]) -> (std::process::ExitStatus, String) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", "rlimit_child", "--nocapture", "--test-threads=1"])
        .envs(envs.iter().copied());
    let o = under_limit(cmd).output().unwrap();
    (o.status, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `cmd` with its address space limited to `LIMIT_AS`.
fn under_limit(mut cmd: std::process::Command) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only setrlimit, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: LIMIT_AS,
                rlim_max: LIMIT_AS,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// A scratch directory holding the fixture.
fn scratch(name: &str) -> (PathBuf, Vec<u8>) {
    let dir = std::env::temp_dir().join(format!("gputape-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let orig = fixture();
    std::fs::write(dir.join("fixture.gtape"), &orig).unwrap();
    (dir, orig)
}

/// The mutated fixture, `CASES` cases in children under `RLIMIT_AS`: no child dies by a
/// signal (an abort is SIGABRT) or a panic, and every case that fails, fails with a
/// `TraceError`, and one that finds a frame corrupt names the frame.
#[test]
fn hostile_traces_under_an_address_space_limit() {
    let cases = std::env::var("GPUTAPE_RLIMIT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let (dir, orig) = scratch("rlimit");
    let t0 = Instant::now();
    let mut died = Vec::new();
    let mut tally: std::collections::BTreeMap<String, usize> = Default::default();
    let mut from = 0;
    while from < cases {
        let to = (from + PER_CHILD).min(cases);
        let (status, stderr) = child(&[
            ("GPUTAPE_RLIMIT_CHILD", dir.as_os_str()),
            ("GPUTAPE_RLIMIT_CASES_FROM", from.to_string().as_ref()),
            ("GPUTAPE_RLIMIT_CASES_TO", to.to_string().as_ref()),
        ]);
        let results =
            std::fs::read_to_string(dir.join(format!("results-{from}"))).unwrap_or_default();
        for line in results.lines() {
            let mut f = line.splitn(2, '\t');
            let (_case, rest) = (f.next(), f.next().unwrap_or(""));
            // Two outcomes of three fields each: opened from the file, loaded from memory.
            let fields: Vec<&str> = rest.split('\t').collect();
            for o in [
                &fields[..fields.len().min(3)],
                &fields[fields.len().min(3)..],
            ] {
                *tally.entry(kind_of(&o.join("\t"))).or_default() += 1;
            }
        }
        if !status.success() {
            let last = stderr
                .lines()
                .filter_map(|l| l.strip_prefix("start "))
                .next_back()
                .and_then(|n| n.parse::<usize>().ok());
            let what = last.map(|c| {
                let (bad, what) = mutate(&orig, c);
                let keep = dir.join(format!("died-{c}.gtape"));
                std::fs::write(&keep, bad).unwrap();
                format!("case {c} ({what}), kept as {}", keep.display())
            });
            let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
            died.push(format!(
                "cases {from}..{to}: {status:?} at {}; stderr ends: {tail:?}",
                what.unwrap_or_else(|| "no case started".into()),
            ));
        }
        from = to;
    }
    eprintln!(
        "{cases} cases in {:.1} s under RLIMIT_AS {} MiB: {tally:?}",
        t0.elapsed().as_secs_f64(),
        LIMIT_AS >> 20
    );
    assert!(died.is_empty(), "children died: {died:#?}");
    assert_eq!(
        tally.get("corrupt"),
        None,
        "corruption not naming its frame"
    );
    let seen: usize = tally.values().sum();
    assert_eq!(seen, 2 * cases, "every case reported twice: {tally:?}");
    // The mutations reach past the reader: some cases open and traverse, some fail.
    assert!(tally.get("ok").copied().unwrap_or(0) > 0, "{tally:?}");
    assert!(tally.contains_key("corrupt (frame named)"), "{tally:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A length or count field of some frame: grows that field of `f` by one and returns its old
/// value, or `None` if `f` has no such field. Where the field lies in the frame's bytes is
/// then where the two encodings first differ.
type Grow = fn(&mut Frame) -> Option<u64>;

/// Every kind of length and count a frame of the fixture carries.
const FIELDS: &[(&str, Grow)] = &[
    ("site-file", |f| match f {
        Frame::Site { file, .. } => {
            file.push('x');
            Some(file.len() as u64 - 1)
        }
        _ => None,
    }),
    ("blob-data", |f| match f {
        Frame::Blob {
            zstd: false, data, ..
        } if data.len() < 1 << 20 => {
            data.push(0);
            Some(data.len() as u64 - 1)
        }
        _ => None,
    }),
    ("blob-data-left-in-file", |f| match f {
        Frame::Blob {
            zstd: false, data, ..
        } if data.len() >= 1 << 20 => {
            data.push(0);
            Some(data.len() as u64 - 1)
        }
        _ => None,
    }),
    ("blob-declared-packed", |f| match f {
        Frame::Blob {
            zstd: true, len, ..
        } => {
            *len += 1;
            Some(*len - 1)
        }
        _ => None,
    }),
    ("blob-declared-left-in-file", |f| match f {
        Frame::Blob { len, data, .. } if data.len() >= 1 << 20 => {
            *len += 1;
            Some(*len - 1)
        }
        _ => None,
    }),
    ("module-source", |f| match f {
        Frame::Module(m) => {
            let s = m.source.as_mut()?;
            s.push('x');
            Some(s.len() as u64 - 1)
        }
        _ => None,
    }),
    ("kernel-params", |f| match f {
        Frame::Kernel { info, .. } if !info.params.is_empty() => {
            info.params.push(info.params[0]);
            Some(info.params.len() as u64 - 1)
        }
        _ => None,
    }),
    ("launch-args", |f| match f {
        Frame::Begin(b) => match &mut b.call {
            Call::LaunchTyped { args, .. } => {
                args.push(Arg::Buf(DevAddr::Null));
                Some(args.len() as u64 - 1)
            }
            _ => None,
        },
        _ => None,
    }),
    ("launch-arg-bytes", |f| match f {
        Frame::Begin(b) => match &mut b.call {
            Call::LaunchTyped { args, .. } => args.iter_mut().find_map(|a| match a {
                Arg::Val(v) => {
                    v.0.push(0);
                    Some(v.0.len() as u64 - 1)
                }
                _ => None,
            }),
            _ => None,
        },
        _ => None,
    }),
    ("sync-hashes", |f| match f {
        Frame::SyncHashes { hashes, .. } if !hashes.is_empty() => {
            hashes.push(hashes[0]);
            Some(hashes.len() as u64 - 1)
        }
        _ => None,
    }),
    ("chunked-parts", |f| match f {
        Frame::Chunked { parts, .. } => {
            parts.push(parts[0]);
            Some(parts.len() as u64 - 1)
        }
        _ => None,
    }),
    ("chunked-declared", |f| match f {
        Frame::Chunked { len, .. } => {
            *len += 1;
            Some(*len - 1)
        }
        _ => None,
    }),
    ("command-line", |f| match f {
        Frame::Provenance(p) => {
            p.command_line.push("x".into());
            Some(p.command_line.len() as u64 - 1)
        }
        _ => None,
    }),
    ("dump-in-flight", |f| match f {
        Frame::Dumped(d) => {
            d.in_flight.push((0, 0));
            Some(d.in_flight.len() as u64 - 1)
        }
        _ => None,
    }),
];

/// What each field is set to: u32::MAX and 2^33, the values that aborted a process before.
const LIES: [(&str, u64); 2] = [("u32max", u32::MAX as u64), ("2pow33", 1 << 33)];

/// `n` as bincode's varint.
fn varint(n: u64) -> Vec<u8> {
    let mut v = Vec::new();
    match n {
        0..=250 => v.push(n as u8),
        251..=0xffff => {
            v.push(251);
            v.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            v.push(252);
            v.extend_from_slice(&(n as u32).to_le_bytes());
        }
        _ => {
            v.push(253);
            v.extend_from_slice(&n.to_le_bytes());
        }
    }
    v
}

/// The fixture with `field` of its first frame that has one set to `value`, checksums
/// recomputed: the bytes and the frame's index.
fn lie(orig: &[u8], field: &str, grow: Grow, value: u64) -> (Vec<u8>, usize) {
    let (decoded, _) = trace::read_frames(Path::new("fixture"), orig).unwrap();
    let spans = frames(orig);
    for (i, f) in decoded.iter().enumerate() {
        let mut grown = f.clone();
        let Some(old) = grow(&mut grown) else {
            continue;
        };
        let (start, len) = spans[i];
        let p = start + FRAME_HEADER_LEN;
        let payload = &orig[p..p + len];
        let was = trace::codec::encode_to_vec(f).unwrap();
        assert_eq!(was, payload, "frame {i} encodes as it was written");
        let now = trace::codec::encode_to_vec(&grown).unwrap();
        let d = was.iter().zip(&now).position(|(a, b)| a != b).unwrap();
        // The field's varint starts at or a few bytes before the first difference.
        let enc = varint(old);
        let at = (d.saturating_sub(8)..=d)
            .rev()
            .find(|&s| payload[s..].starts_with(&enc) && s + enc.len() > d)
            .unwrap_or_else(|| panic!("{field}: no varint {enc:02x?} at byte {d} of frame {i}"));
        let mut b = orig.to_vec();
        let new = varint(value);
        let grew = new.len() - enc.len();
        b.splice(p + at..p + at + enc.len(), new);
        reseal(&mut b, start, len + grew);
        return (b, i);
    }
    panic!("no frame of the fixture has a {field}")
}

/// Each length and count field of the fixture's frames set to u32::MAX and to 2^33, checksums
/// recomputed: opening the trace from its file and from memory, and reading everything in it,
/// under `RLIMIT_AS`, fails with `TraceError::Corrupt` naming that frame, and `gputape show`
/// exits 3 (damaged) naming it.
#[test]
fn a_lying_length_is_an_error_naming_its_frame() {
    let (dir, orig) = scratch("lies");
    let lies = dir.join("lies");
    std::fs::create_dir_all(&lies).unwrap();
    let mut expected = std::collections::BTreeMap::new();
    for (field, grow) in FIELDS {
        for (name, value) in LIES {
            let (bytes, frame) = lie(&orig, field, *grow, value);
            let stem = format!("{field}-{name}");
            std::fs::write(lies.join(format!("{stem}.gtape")), bytes).unwrap();
            expected.insert(stem, frame);
        }
    }
    let (status, stderr) = child(&[
        ("GPUTAPE_RLIMIT_CHILD", dir.as_os_str()),
        ("GPUTAPE_RLIMIT_FILES", lies.as_os_str()),
    ]);
    assert!(status.success(), "{status:?}: {stderr}");
    let results = std::fs::read_to_string(dir.join("results-files")).unwrap();
    let frame_of = expected.clone();
    let mut wrong = Vec::new();
    for line in results.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let frame = expected.remove(f[0]).expect("a file of ours").to_string();
        // Opened from the file, then loaded from memory: kind, frame, message each.
        for (how, o) in [("opened", &f[1..4]), ("loaded", &f[4..7])] {
            if o[0] != "corrupt" || o[1] != frame {
                wrong.push(format!("{} {how}: expected frame {frame}, got {o:?}", f[0]));
            }
        }
    }
    assert!(expected.is_empty(), "not reported: {expected:?}");
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The same through the command line: the damaged-trace exit status, the frame named.
    for (field, _) in FIELDS {
        let stem = format!("{field}-u32max");
        let file = lies.join(format!("{stem}.gtape"));
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"));
        cmd.arg("show").arg(&file);
        let o = under_limit(cmd).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let frame = frame_of[&stem];
        assert_eq!(o.status.code(), Some(3), "{stem}: {:?} {err}", o.status);
        assert!(err.contains(&format!("frame {frame} ")), "{stem}: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A size a call carries (an allocation's bytes, a copy's or memset's length), grown by one
/// as `Grow` does: these decode as valid calls, so the lie meets the replay, not the reader.
const CALL_SIZES: &[(&str, Grow)] = &[
    ("alloc-bytes", |f| match f {
        Frame::Begin(b) => match &mut b.call {
            Call::Alloc { bytes } => {
                *bytes += 1;
                Some(*bytes - 1)
            }
            _ => None,
        },
        _ => None,
    }),
    ("pinned-bytes", |f| match f {
        Frame::Begin(b) => match &mut b.call {
            Call::AllocHostPinned { bytes } => {
                *bytes += 1;
                Some(*bytes - 1)
            }
            _ => None,
        },
        _ => None,
    }),
    ("d2h-len", |f| match f {
        Frame::Begin(b) => match &mut b.call {
            Call::CopyD2H { len, .. } | Call::CopyD2HAsync { len, .. } => {
                *len += 1;
                Some(*len - 1)
            }
            _ => None,
        },
        _ => None,
    }),
    ("memset-len", |f| match f {
        Frame::Begin(b) => match &mut b.call {
            Call::Memset { len, .. } | Call::MemsetAsync { len, .. } => {
                *len += 1;
                Some(*len - 1)
            }
            _ => None,
        },
        _ => None,
    }),
];

/// Each size a call of the fixture carries set to u32::MAX, 2^33 and u64::MAX, checksums
/// recomputed: `gputape replay` on the mock, eager and as graphs, under `RLIMIT_AS`, exits
/// with a status of its own (a divergence, a failure to run), never by a signal or a panic; the mock's 16 GiB limit lets
/// 4 and 8 GiB allocations through to the host, which must refuse them as an error.
#[test]
fn a_lying_size_in_a_call_fails_the_replay_without_an_abort() {
    let (dir, orig) = scratch("sizes");
    let mut died = Vec::new();
    for (field, grow) in CALL_SIZES {
        for (name, value) in LIES.iter().copied().chain([("u64max", u64::MAX)]) {
            let (bytes, _) = lie(&orig, field, *grow, value);
            let file = dir.join(format!("{field}-{name}.gtape"));
            std::fs::write(&file, bytes).unwrap();
            for extra in [&[][..], &["--as-graph"][..]] {
                let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"));
                cmd.arg("replay").arg(&file).args(extra);
                let o = under_limit(cmd).output().unwrap();
                let err = String::from_utf8_lossy(&o.stderr);
                // No signal (an abort), no panic (101).
                if matches!(o.status.code(), None | Some(101))
                    || err.contains("memory allocation of")
                {
                    died.push(format!("{field}={name} {extra:?}: {:?} {err}", o.status));
                }
            }
        }
    }
    assert!(died.is_empty(), "{died:#?}");
    std::fs::remove_dir_all(&dir).ok();
}
