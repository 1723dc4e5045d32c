//! Traces that hold large buffers, at the smallest size that exercises the same code: a
//! buffer of a few parts (`CHUNK_BYTES` each), stored chunk by chunk, opened without reading
//! the parts, restored part by part, recovered after a kill inside a part, and shared through
//! a blob store so a second recording does not store the same bytes again.

use gputape::backend::{DevicePtr, GpuBackend};
use gputape::mock::MockGpuBackend;
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::replayer::{ReplayError, ReplayOptions, Replayer};
use gputape::trace::{BlobId, Trace, TraceError, CHUNK_BYTES};
use std::path::{Path, PathBuf};

/// Two and a half parts.
const BIG: usize = CHUNK_BYTES * 5 / 2;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-scale-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Bytes no two parts share and zstd cannot shrink (as weights are): each part a blob of its
/// own, stored as it is.
fn pattern(seed: u8) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ seed as u64;
    let mut v = Vec::with_capacity(BIG);
    while v.len() < BIG {
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        v.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    v
}

/// Record a mid-run start over a live `BIG` buffer (and a small one), then a readback of both
/// and a write to the small one, into `out`; `store` puts large blobs into a shared store.
fn record(out: &Path, seed: u8, store: Option<&Path>) -> (Vec<u8>, u64) {
    // The engine runs through the recorder from the start; recording starts later.
    let rec = RecordingBackend::to_file(MockGpuBackend::default(), out, BackendDesc::new("mock"))
        .unwrap();
    let g: &dyn GpuBackend = &rec;
    let big = g.alloc(BIG).unwrap();
    let small = g.alloc(4096).unwrap();
    let data = pattern(seed);
    g.copy_h2d(&data, big).unwrap();
    g.memset(small, seed, 4096).unwrap();
    if let Some(d) = store {
        rec.blob_store(d);
    }
    rec.start().unwrap();
    let mut back = vec![0u8; BIG];
    g.copy_d2h(big, &mut back).unwrap();
    g.memset(small, seed.wrapping_add(1), 4096).unwrap();
    let mut s = vec![0u8; 4096];
    g.copy_d2h(small, &mut s).unwrap();
    assert_eq!(back, data);
    let stats = rec.stop().unwrap();
    (data, stats.bytes)
}

fn replay(t: &Trace) -> Result<gputape::replayer::ReplayReport, ReplayError> {
    Replayer::new(t).run(
        &MockGpuBackend::default(),
        &ReplayOptions::default(),
        None,
        |_| {},
    )
}

/// The big buffer's initial blob.
fn big_blob(t: &Trace) -> BlobId {
    t.initial
        .iter()
        .find(|i| i.bytes == BIG as u64)
        .expect("the big buffer is in the initial state")
        .data
}

/// Where each frame of a trace file starts, and its payload length.
fn frames(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut at = gputape::trace::FILE_HEADER_LEN;
    let mut v = Vec::new();
    while at + gputape::trace::FRAME_HEADER_LEN <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if len == 0 && bytes[at..at + 20].iter().all(|&b| b == 0) {
            break;
        }
        v.push((at, len));
        at += gputape::trace::FRAME_HEADER_LEN + len;
    }
    v
}

#[test]
fn a_large_buffer_is_stored_in_parts_and_replays_part_by_part() {
    let d = dir("parts");
    let path = d.join("big.gtape");
    let (data, _) = record(&path, 7, None);
    let t = Trace::open(&path).unwrap();
    let id = big_blob(&t);
    let parts = t
        .blobs
        .parts(&id)
        .expect("a buffer over CHUNK_BYTES is chunked")
        .to_vec();
    assert_eq!(parts.len(), 3);
    assert_eq!(BlobId::chunked(BIG as u64, &parts), id);
    assert_eq!(t.blob(id).unwrap(), &data[..]);
    let r = replay(&t).unwrap();
    assert!(r.divergence.is_none(), "{}", r.summary());
    // Rewritten (what trim and minimize do), the parts travel along and the trace still replays.
    let again = Trace::from_bytes(&path, &t.to_bytes().unwrap()).unwrap();
    assert_eq!(again.blobs.parts(&id).unwrap(), &parts[..]);
    assert!(replay(&again).unwrap().divergence.is_none());
}

#[test]
fn opening_reads_frame_headers_and_a_damaged_part_is_named_when_read() {
    let d = dir("lazy");
    let path = d.join("big.gtape");
    record(&path, 9, None);
    let mut bytes = std::fs::read(&path).unwrap();
    // Damage a byte in the middle of the largest frame (a part's payload).
    let (at, len) = *frames(&bytes).iter().max_by_key(|f| f.1).unwrap();
    assert!(len >= CHUNK_BYTES, "a part is one frame");
    bytes[at + 20 + len / 2] ^= 0xff;
    let bad = d.join("bad.gtape");
    std::fs::write(&bad, &bytes).unwrap();
    // The parts are not read to open, render or analyse the trace...
    let t = Trace::open(&bad).expect("opening reads no part");
    assert!(gputape::trace::render(&t).contains("copy_d2h"));
    // ...and the damage is a typed error naming the frame when the part is read.
    let e = t.try_blob(big_blob(&t)).unwrap_err();
    assert!(
        matches!(&e, TraceError::Corrupt { detail, .. } if detail.contains("checksum")),
        "{e}"
    );
    let e = replay(&t).unwrap_err();
    assert!(
        matches!(&e, ReplayError::Trace(TraceError::Corrupt { detail, .. }) if detail.contains("checksum")),
        "{e}"
    );
}

#[test]
fn a_kill_inside_a_part_keeps_every_part_before_it() {
    let d = dir("torn");
    let path = d.join("big.gtape");
    let (data, _) = record(&path, 11, None);
    let bytes = std::fs::read(&path).unwrap();
    let fr = frames(&bytes);
    let big: Vec<&(usize, usize)> = fr.iter().filter(|f| f.1 >= CHUNK_BYTES).collect();
    let (second, len) = *big[1];
    // Killed while copying the second part: its payload half there, its header not yet.
    let mut torn = bytes[..second + 20 + len / 2].to_vec();
    torn[second..second + 20].fill(0);
    let cut_path = d.join("torn.gtape");
    std::fs::write(&cut_path, &torn).unwrap();
    let t = Trace::open(&cut_path).expect("a torn part is a cut, not corruption");
    let cut = t.cut.as_ref().expect("the trace says where it was cut");
    assert_eq!(cut.offset, second as u64, "{}", cut.reason);
    // The first part is there and whole.
    let first = BlobId::of(&data[..CHUNK_BYTES]);
    assert_eq!(t.blob(first).unwrap(), &data[..CHUNK_BYTES]);
    // The same cut with the torn header left as it is (a kill between two stores of it).
    let mut half = bytes[..second + 20 + len / 2].to_vec();
    half[second + 4..second + 20].fill(0);
    std::fs::write(&cut_path, &half).unwrap();
    match Trace::open(&cut_path) {
        Ok(t) => assert!(t.cut.is_some()),
        Err(e) => assert!(
            matches!(e, TraceError::Corrupt { frame, .. } if frame as usize == fr.iter().position(|f| f.0 == second).unwrap()),
            "{e}"
        ),
    }
}

#[test]
fn a_shared_store_keeps_the_same_bytes_once() {
    let d = dir("store");
    let store = d.join("blobs");
    let (_, alone) = record(&d.join("alone.gtape"), 3, None);
    let (_, first) = record(&d.join("one.gtape"), 3, Some(&store));
    let (_, second) = record(&d.join("two.gtape"), 3, Some(&store));
    let stored = |dir: &Path| -> usize {
        walk(dir)
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "blob"))
            .count()
    };
    // The big buffer's three parts are in the store once, though two traces name them.
    assert_eq!(stored(&store), 3);
    assert!(
        first < alone / 50,
        "{first} bytes with a store vs {alone} without"
    );
    assert!(second <= first + 64, "{second} vs {first}");
    for name in ["one.gtape", "two.gtape"] {
        let t = Trace::open(&d.join(name)).unwrap();
        assert!(replay(&t).unwrap().divergence.is_none(), "{name}");
    }
    // Moved, the store is found where --blobs says...
    let moved = d.join("moved");
    std::fs::rename(&store, &moved).unwrap();
    let t = Trace::open_with(&d.join("two.gtape"), Some(&moved)).unwrap();
    assert!(replay(&t).unwrap().divergence.is_none());
    // ...and without it, reading a stored part is an error that says what to do.
    let t = Trace::open(&d.join("two.gtape")).unwrap();
    let e = t.try_blob(big_blob(&t)).unwrap_err();
    assert!(e.to_string().contains("blob store"), "{e}");
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            v.extend(walk(&p));
        } else {
            v.push(p);
        }
    }
    v
}

#[test]
fn a_buffer_copied_in_during_recording_is_chunked_too() {
    let d = dir("h2d");
    let path = d.join("h2d.gtape");
    let rec = RecordingBackend::to_file(MockGpuBackend::default(), &path, BackendDesc::new("mock"))
        .unwrap();
    rec.start().unwrap();
    let g: &dyn GpuBackend = &rec;
    let p: DevicePtr = g.alloc(BIG).unwrap();
    let data = pattern(5);
    g.copy_h2d(&data, p).unwrap();
    let mut back = vec![0u8; BIG];
    g.copy_d2h(p, &mut back).unwrap();
    g.free(p).unwrap();
    rec.stop().unwrap();
    let t = Trace::open(&path).unwrap();
    let chunked = t
        .blobs
        .ids()
        .into_iter()
        .filter(|id| t.blobs.parts(id).is_some())
        .count();
    assert_eq!(chunked, 1, "the copied-in bytes are one chunked blob");
    assert!(replay(&t).unwrap().divergence.is_none());
}

/// A trace with large blobs, damaged anywhere (a flipped byte, a cut, a zeroed run) and read
/// through the file path that leaves parts unread: every open, blob read and replay gives a
/// result or a typed error, never a panic, and the damage is reported by one of them.
#[test]
fn damaged_large_traces_give_errors_never_panics_or_pass_as_whole() {
    let d = dir("fuzz");
    let path = d.join("big.gtape");
    record(&path, 13, None);
    let clean = std::fs::read(&path).unwrap();
    let fr = frames(&clean);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut rnd = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let bad = d.join("bad.gtape");
    for round in 0..40 {
        let mut b = clean.clone();
        // Aim at frame headers and blob heads half the time: that is where a reader trusts most.
        let at = if round % 2 == 0 {
            let (f, _) = fr[rnd(fr.len())];
            (f + rnd(48)).min(b.len() - 1)
        } else {
            rnd(b.len())
        };
        match round % 4 {
            0 | 1 => b[at] ^= 1 << rnd(8),
            2 => b.truncate(at),
            _ => b[at..(at + 64).min(clean.len())].fill(0),
        }
        if b == clean {
            continue;
        }
        std::fs::write(&bad, &b).unwrap();
        // Each damage is reported somewhere: the open fails, the trace stops short of a clean
        // end, a blob read fails, or the replay fails or diverges; never a whole, clean trace.
        let t = match Trace::open(&bad) {
            Err(e) => {
                assert!(e.to_string().contains("bad.gtape"), "names the file: {e}");
                continue;
            }
            Ok(t) => t,
        };
        let blob_err = t.blobs.ids().into_iter().any(|id| t.try_blob(id).is_err());
        let _ = gputape::trace::render(&t);
        let replayed_clean = replay(&t).is_ok_and(|r| r.passed());
        assert!(
            t.cut.is_some() || !t.stopped || blob_err || !replayed_clean,
            "round {round}: damage at byte {at} went unnoticed"
        );
    }
}
