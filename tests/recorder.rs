//! The recorder and the trace format, on the mock.

use gputape::backend::{CallKind, GpuBackend};
use gputape::mock::MockGpuBackend;
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::testing::{mask_format, mask_lines};
use gputape::trace::{self, Call, Finding, Trace, TraceError, VecSink};
use gputape::workloads::{self, f32_bytes};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;

type Rec = RecordingBackend<MockGpuBackend>;

fn recorder() -> (Rec, Arc<Mutex<Vec<u8>>>) {
    let m = MockGpuBackend::default();
    workloads::load_kernels(&m).expect("load module blas");
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let r = RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap();
    (r, buf)
}

/// Record `f` from the first call, return the trace's bytes.
fn record(f: impl FnOnce(&dyn GpuBackend)) -> Vec<u8> {
    let (r, buf) = recorder();
    r.start().unwrap();
    f(&r);
    r.stop().unwrap();
    let b = buf.lock().clone();
    b
}

fn load(bytes: &[u8]) -> Trace {
    Trace::from_bytes(Path::new("mem"), bytes).unwrap()
}

fn show(bytes: &[u8]) -> String {
    let t = load(bytes);
    format!("{}\n{}", trace::render(&t), trace::summary(&t))
}

#[test]
fn snapshots_of_recorded_workloads() {
    for (name, w) in workloads::ALL {
        let bytes = record(|g| {
            w(g).unwrap();
        });
        insta::assert_snapshot!(name, mask_format(&mask_lines(&show(&bytes))));
    }
}

#[test]
fn recording_forwards_unchanged_results() {
    for (_, w) in workloads::ALL {
        let bare = MockGpuBackend::default();
        workloads::load_kernels(&bare).expect("load module blas");
        let want = w(&bare).unwrap();
        let mut got = None;
        record(|g| got = Some(w(g).unwrap()));
        assert_eq!(got.unwrap(), want);
    }
}

#[test]
fn two_recordings_give_identical_call_lists() {
    let a = load(&record(|g| {
        workloads::two_streams(g).unwrap();
    }));
    let b = load(&record(|g| {
        workloads::two_streams(g).unwrap();
    }));
    let calls = |t: &Trace| {
        t.calls
            .iter()
            .map(|c| (c.seq, c.site, c.call.clone(), c.ret.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(calls(&a), calls(&b));
    assert!(!a.calls.is_empty());
}

#[test]
fn raw_launch_params_are_decoded_into_buffer_ids() {
    let t = load(&record(|g| {
        workloads::single_stream(g).unwrap();
    }));
    let raw = t
        .calls
        .iter()
        .find_map(|c| match &c.call {
            Call::Launch { args, .. } => Some(args.clone()),
            _ => None,
        })
        .expect("a raw launch");
    assert!(matches!(
        raw[0],
        trace::Arg::Buf(trace::DevAddr::Buf { .. })
    ));
    assert!(matches!(
        raw[1],
        trace::Arg::Buf(trace::DevAddr::Buf { .. })
    ));
    assert_eq!(
        raw[2],
        trace::Arg::Val(64u32.to_le_bytes().as_slice().into())
    );
    // The module and the kernel layout travel with the trace.
    assert!(t
        .kernels
        .values()
        .any(|k| k.name == "saxpy" && k.params.len() == 4));
}

#[test]
fn mid_run_start_snapshots_live_memory() {
    let (r, buf) = recorder();
    let g: &dyn GpuBackend = &r;
    let w = g.alloc(4 * 8).unwrap();
    g.copy_h2d(&f32_bytes(&[3.0; 8]), w).unwrap();
    let scratch = g.alloc(4 * 8).unwrap();
    r.start().unwrap();
    workloads::saxpy(g, w, scratch, 8, 1.0, g.default_stream()).unwrap();
    let mut out = vec![0u8; 32];
    g.copy_d2h_on_stream(scratch, &mut out, g.default_stream())
        .unwrap();
    r.stop().unwrap();
    let t = load(&buf.lock());
    assert_eq!(t.initial.len(), 2);
    assert_eq!(
        t.blob(t.initial[0].data).unwrap(),
        f32_bytes(&[3.0; 8]).as_slice()
    );
    assert_eq!(t.blob(t.initial[1].data).unwrap(), &[0u8; 32]);
    // No call before start is in the trace, and the kernel looked up before start is defined.
    assert!(t
        .calls
        .iter()
        .all(|c| !matches!(c.call, Call::Alloc { .. })));
    assert_eq!(t.kernels.len(), 1);
    insta::assert_snapshot!(
        "mid_run_start",
        mask_format(&mask_lines(&show(&buf.lock())))
    );
}

#[test]
fn errors_are_recorded_with_their_code_and_flushed() {
    let bytes = record(|g| {
        let a = g.alloc(16).unwrap();
        let mut out = [0u8; 32];
        assert!(g.copy_d2h(a, &mut out).is_err());
        g.free(a).unwrap();
        assert!(g.free(a).is_err());
    });
    let t = load(&bytes);
    let errs: Vec<_> = t
        .calls
        .iter()
        .filter_map(|c| c.ret.as_ref().unwrap().as_ref().err())
        .collect();
    assert_eq!(errs.len(), 2);
    assert_eq!(errs[0].code, Some(1));
    assert!(
        errs[0].message.contains("overruns by 16"),
        "{}",
        errs[0].message
    );
    insta::assert_snapshot!("error_path", mask_format(&mask_lines(&show(&bytes))));
}

#[test]
fn async_readback_is_recorded_at_the_sync() {
    let t = load(&record(|g| {
        workloads::two_streams(g).unwrap();
    }));
    let d2h = t
        .calls
        .iter()
        .find(|c| matches!(c.call, Call::CopyD2HAsync { .. }))
        .unwrap();
    let blob = t
        .d2h_async
        .get(&d2h.seq)
        .expect("bytes captured at the sync");
    assert_eq!(t.blob(*blob).unwrap(), f32_bytes(&[6.0; 32]).as_slice());
}

#[test]
fn a_retained_source_that_changes_before_the_sync_is_a_finding() {
    let t = load(&record(|g| {
        let s = g.create_stream().unwrap();
        let d = g.alloc(8).unwrap();
        let mut src = vec![1u8; 8];
        g.copy_h2d_async_retained(&src, d, s).unwrap();
        src[3] = 9; // broken promise
        g.synchronize(s).unwrap();
        let ok = vec![2u8; 8];
        g.copy_h2d_async_retained(&ok, d, s).unwrap();
        g.synchronize(s).unwrap();
    }));
    assert_eq!(t.findings.len(), 1);
    let Finding::RetainedSourceChanged { seq, .. } = t.findings[0] else {
        panic!("{:?}", t.findings[0]);
    };
    assert!(matches!(
        t.calls[seq as usize].call,
        Call::CopyH2DAsyncRetained { .. }
    ));
}

#[test]
fn identical_host_payloads_are_stored_once() {
    let bytes = record(|g| {
        let d = g.alloc(4096).unwrap();
        for _ in 0..10 {
            g.copy_h2d(&[7u8; 4096], d).unwrap();
        }
    });
    let t = load(&bytes);
    assert_eq!(t.blobs.len(), 1);
    assert!(
        bytes.len() < 4096,
        "the 4 KiB payload compressed and stored once: {}",
        bytes.len()
    );
}

#[test]
fn failure_injection_shows_up_in_the_trace_and_the_ledger_stays_right() {
    let (r, buf) = recorder();
    r.inner().fail_nth(CallKind::Alloc, 2);
    r.start().unwrap();
    let g: &dyn GpuBackend = &r;
    let a = g.alloc(8).unwrap();
    assert!(g.alloc(8).is_err());
    let b = g.alloc(8).unwrap();
    g.free(a).unwrap();
    g.free(b).unwrap();
    r.stop().unwrap();
    let t = load(&buf.lock());
    let rets: Vec<String> = t
        .calls
        .iter()
        .map(|c| format!("{:?}", c.ret.as_ref().unwrap().as_ref().map_err(|e| e.code)))
        .collect();
    assert_eq!(rets[1], "Err(Some(999))");
    // The failed alloc got no id: the next one is buf1.
    assert_eq!(rets[2], "Ok(Buffer(BufferId(1)))");
}

// ---- the file format ----

fn sample() -> Vec<u8> {
    record(|g| {
        workloads::two_streams(g).unwrap();
        workloads::capture_region(g).unwrap();
    })
}

#[test]
fn a_trace_cut_at_any_byte_opens_with_every_complete_record() {
    let full = sample();
    let whole = load(&full);
    assert!(whole.cut.is_none() && whole.stopped);
    let mut last_calls = 0;
    for n in 0..full.len() {
        match Trace::from_bytes(Path::new("cut"), &full[..n]) {
            Err(TraceError::Empty { .. }) => assert_eq!(n, 0),
            // Cut before the header frame was whole: nothing was recorded.
            Err(TraceError::NoHeader { .. }) => assert_eq!(last_calls, 0, "cut at {n}"),
            Err(e) => panic!("cut at {n}: {e}"),
            Ok(t) => {
                let cut = t.cut.as_ref().expect("a cut trace says so");
                assert!(cut.offset <= n as u64);
                assert!(t.calls.len() >= last_calls, "records never disappear");
                last_calls = t.calls.len();
                // Every complete record is the same as in the whole trace.
                for (a, b) in t.calls.iter().zip(&whole.calls) {
                    assert_eq!((a.seq, &a.call), (b.seq, &b.call));
                }
            }
        }
    }
    assert_eq!(last_calls, whole.calls.len());
}

#[test]
fn corruption_in_the_middle_names_frame_and_offset() {
    let mut bytes = sample();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    match Trace::from_bytes(Path::new("bad.gtape"), &bytes) {
        Err(TraceError::Corrupt { frame, offset, .. }) => {
            assert!(frame > 0);
            assert!(offset as usize <= mid && mid < offset as usize + 200_000);
            let msg = TraceError::Corrupt {
                path: "bad.gtape".into(),
                frame,
                offset,
                detail: "x".into(),
            }
            .to_string();
            assert!(msg.contains(&format!("frame {frame}")) && msg.contains(&offset.to_string()));
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn bad_headers_are_typed_errors() {
    let p = Path::new("x");
    assert!(matches!(
        Trace::from_bytes(p, b""),
        Err(TraceError::Empty { .. })
    ));
    assert!(matches!(
        Trace::from_bytes(p, b"PK\x03\x04 not a trace at all"),
        Err(TraceError::BadMagic { .. })
    ));
    // A file written by a later build that this one may not read: a typed error with both
    // versions, whatever this build's version is.
    let ours = gputape::trace::FORMAT_VERSION;
    let mut newer = sample();
    newer[8..10].copy_from_slice(&(ours + 2).to_le_bytes());
    newer[10..12].copy_from_slice(&(ours + 1).to_le_bytes());
    let e = Trace::from_bytes(p, &newer).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::TooNew { format, min_reader, ours: o, .. }
                if format == ours + 2 && min_reader == ours + 1 && o == ours
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(&format!("format {}", ours + 2)),
        "{e}"
    );
    // A newer format that old readers may still read opens.
    let mut compatible = sample();
    compatible[8..10].copy_from_slice(&3u16.to_le_bytes());
    assert!(Trace::from_bytes(p, &compatible).is_ok());
}

#[test]
fn a_changed_byte_is_never_read_as_the_trace_it_was() {
    let base = sample();
    let whole = load(&base);
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut unnoticed = Vec::new();
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut b = base.clone();
        let i = (seed as usize) % b.len();
        b[i] = (seed >> 32) as u8;
        // The file header's version fields and reserved bytes are read as they say (a
        // lower format this reader also reads is no damage); its magic and every frame are
        // checked.
        if b == base || (8..trace::FILE_HEADER_LEN).contains(&i) {
            continue;
        }
        // Every frame is checksummed: the change is an error, or the trace stops short of a
        // clean end (at the damaged frame), never the same trace read as whole.
        match Trace::from_bytes(Path::new("fuzz"), &b) {
            Err(e) => assert!(!e.to_string().is_empty()),
            Ok(t) if t.cut.is_some() || !t.stopped => {}
            Ok(t) if trace::render(&t) != trace::render(&whole) => {}
            Ok(_) => unnoticed.push(i),
        }
    }
    assert!(
        unnoticed.is_empty(),
        "bytes changed unnoticed: {unnoticed:?}"
    );
}

#[test]
fn file_round_trip_and_a_killed_recorder_leaves_a_readable_trace() {
    let dir = std::env::temp_dir().join(format!("gputape-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Clean: file == in-memory rendering.
    let path = dir.join("clean.gtape");
    let m = MockGpuBackend::default();
    workloads::load_kernels(&m).expect("load module blas");
    let r = RecordingBackend::to_file(m, &path, BackendDesc::new("mock")).unwrap();
    r.start().unwrap();
    workloads::two_streams(&r).unwrap();
    r.stop().unwrap();
    let from_file = Trace::open(&path).unwrap();
    assert_eq!(
        trace::render(&from_file),
        trace::render(&load(&sample_two()))
    );

    // Killed: the recorder is never stopped or dropped, as when the process dies.
    let path = dir.join("killed.gtape");
    let m = MockGpuBackend::default();
    workloads::load_kernels(&m).expect("load module blas");
    let r = RecordingBackend::to_file(m, &path, BackendDesc::new("mock")).unwrap();
    r.start().unwrap();
    workloads::two_streams(&r).unwrap();
    let _ = r.alloc(8).unwrap();
    std::mem::forget(r);
    // Until it is finished, the trace is written beside its name; asked for by its name, the
    // reader points there.
    let e = Trace::open(&path).unwrap_err();
    assert!(matches!(e, TraceError::OnlyPartial { .. }), "{e}");
    let t = Trace::open(&trace::partial_path(&path)).unwrap();
    let cut = t.cut.as_ref().expect("an unclosed trace is cut");
    assert!(cut.reason.contains("zero padding"), "{}", cut.reason);
    assert!(!t.stopped);
    assert!(matches!(
        t.calls.last().unwrap().call,
        Call::Alloc { bytes: 8 }
    ));
    std::fs::remove_dir_all(&dir).ok();
}

fn sample_two() -> Vec<u8> {
    record(|g| {
        workloads::two_streams(g).unwrap();
    })
}

/// The same bytes; a fixture of an older format may differ in its file header's version fields
/// only (its frames are still this build's frames).
fn same_but_version(out: &[u8], fixture: &[u8]) -> bool {
    if u16::from_le_bytes([fixture[8], fixture[9]]) == trace::FORMAT_VERSION {
        out == fixture
    } else {
        out.len() == fixture.len() && out[..8] == fixture[..8] && out[12..] == fixture[12..]
    }
}

/// The writer's encoder is our own; bincode defines the format. Every fixture in traces/ of
/// format 2 or 3, decoded and written again, gives the same file byte for byte (but for the
/// version fields of a format-2 file); every frame of the older ones encodes as bincode
/// encodes it.
#[test]
fn every_fixture_re_encodes_byte_identically() {
    let (mut rewritten, mut by_hand) = (0, 0);
    for entry in std::fs::read_dir("traces").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("gtape") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let (frames, cut) = trace::read_frames(&path, &bytes).unwrap();
        assert!(cut.is_none(), "{}: {cut:?}", path.display());
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(
                trace::codec::encode_to_vec(f).unwrap(),
                trace::codec::encode_with_bincode(f).unwrap(),
                "{} frame {i}",
                path.display()
            );
        }
        // Format 3 only added a frame, so format-2 files re-encode the same but for the
        // version numbers in the file header.
        if (2..=trace::FORMAT_VERSION).contains(&u16::from_le_bytes([bytes[8], bytes[9]])) {
            let sink = VecSink::default();
            let out = sink.0.clone();
            let mut w = trace::TraceWriter::new(Box::new(sink)).unwrap();
            for f in &frames {
                w.write(f).unwrap();
            }
            let out = out.lock();
            assert!(
                same_but_version(&out, &bytes),
                "{} rewrites differently",
                path.display()
            );
            // Again as the recorder writes: launches and unit Ends through the codec's
            // hand-written encoders.
            let sink = VecSink::default();
            let out = sink.0.clone();
            let mut w = trace::TraceWriter::new(Box::new(sink)).unwrap();
            for f in &frames {
                match f {
                    trace::Frame::Begin(b) if b.launch_parts().is_some() => {
                        let (head, view) = b.launch_parts().unwrap();
                        by_hand += 1;
                        w.write_launch_begin(&head, &view).unwrap()
                    }
                    trace::Frame::End(e) => {
                        by_hand += 1;
                        w.write_end(e.seq, e.dur_ns, &e.ret).unwrap()
                    }
                    f => w.write(f).unwrap(),
                }
            }
            let out = out.lock();
            assert!(
                same_but_version(&out, &bytes),
                "{} rewrites differently through the recorder's encoders",
                path.display()
            );
            rewritten += 1;
        }
    }
    assert!(rewritten >= 4, "only {rewritten} current-format fixtures");
    assert!(by_hand > 200, "only {by_hand} launch Begin and End frames");
}

/// The reader's decoder is our own too. On every frame of every fixture it must give what
/// bincode gives; on thousands of damaged copies (a byte changed, the record cut short) it must
/// return an error or a frame, never panic, and any frame it returns must be the one bincode
/// reads from the same bytes. (bincode is not asked first: a damaged string length makes
/// bincode 2.0.1 allocate the claimed size up front, which aborts the process; our decoder
/// never allocates more than the record holds.)
#[test]
fn the_decoder_agrees_with_bincode_on_good_and_damaged_frames() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut frames_seen, mut damaged, mut rejected) = (0, 0, 0);
    for entry in std::fs::read_dir("traces").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("gtape") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let (frames, _) = trace::read_frames(&path, &bytes).unwrap();
        for f in frames {
            let good = trace::codec::encode_to_vec(&f).unwrap();
            assert_eq!(trace::codec::decode(&good).unwrap(), f);
            assert_eq!(trace::codec::decode_with_bincode(&good).unwrap(), f);
            frames_seen += 1;
            for k in 0..24 {
                let mut bad = good.clone();
                if k % 4 == 3 {
                    bad.truncate((next() as usize) % bad.len().max(1));
                } else {
                    let i = (next() as usize) % bad.len();
                    bad[i] = next() as u8;
                }
                match trace::codec::decode(&bad) {
                    Ok(a) => assert_eq!(
                        Some(a),
                        trace::codec::decode_with_bincode(&bad).ok(),
                        "{}: {bad:02x?}",
                        path.display()
                    ),
                    Err(_) => rejected += 1,
                }
                damaged += 1;
            }
        }
    }
    assert!(frames_seen > 300, "{frames_seen} frames");
    assert!(
        rejected > damaged / 10,
        "{rejected} of {damaged} damaged frames rejected"
    );
}

/// The flight recorder's writer writes through a sink that keeps nothing and hands each frame
/// to the store: each once, as a file's sink would have got it.
#[test]
fn a_writer_keeping_its_last_frame_hands_each_over_once_as_the_sink_got_it() {
    let sink = VecSink::default();
    let out = sink.0.clone();
    let mut w = trace::TraceWriter::new(Box::new(sink)).unwrap();
    w.keep_last();
    assert!(w.take_last().is_none(), "the file header is not a frame");
    let before = out.lock().len();
    w.write(&trace::Frame::Stop).unwrap();
    let (class, payload) = w.take_last().expect("kept");
    assert_eq!(class, trace::FrameClass::Call);
    assert!(!payload.is_empty() && out.lock()[before..].ends_with(payload));
    assert!(w.take_last().is_none(), "handed over once");
    w.write_encoded(trace::FrameClass::Definition, b"encoded", 0)
        .unwrap();
    assert_eq!(
        w.take_last(),
        Some((trace::FrameClass::Definition, &b"encoded"[..]))
    );
}
