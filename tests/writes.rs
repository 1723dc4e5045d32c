//! Write extents measured at replay (`replayer::writes`), on the mock, with kernels whose
//! access nobody declared: what the replay finds each launch wrote is checked against what the
//! kernels' CPU bodies are known to write.

use gputape::backend::{GpuBackend, KernelArg, ParamAccess::*, ParamInfo};
use gputape::mock::MockGpuBackend;
use gputape::replayer::writes::{LaunchWrites, WriteExtents, WriteOptions};
use gputape::replayer::{FiniteOptions, Replayer};
use gputape::trace::{self, Trace};
use std::path::Path;
use std::sync::Arc;

const FILL: &str = "_Z4fillIfEvPT_i";
const SCALE: &str = "_Z5scaleIfEvPT_S1_i";
const POISON: &str = "_Z6poisonIfEvPT_i";
const LOG: &str = "_Z4logfIfEvPT_S1_i";

/// A kernel body's arithmetic on one element.
type Unary = fn(f32) -> f32;

/// Kernels as a compiled program's arrive: no declared access, no source. `fill(out, n)` writes
/// the square roots of 1..=n, `scale(out, in, n)` writes 2*in, `poison(out, n)` writes what
/// fill does with a NaN at 3, `logf(out, in, n)` writes ln(in - 2) (NaN below 2).
fn compiled() -> MockGpuBackend {
    let m = MockGpuBackend::new(gputape::mock::MockConfig::default());
    for (name, nan) in [(FILL, false), (POISON, true)] {
        m.register_kernel(
            "compiled",
            name,
            ParamInfo::packed(&[(8, Unknown), (4, Value)]),
            Some(Arc::new(move |ctx| {
                let (p, n) = (ctx.ptr(0)?, ctx.u32(1)? as usize);
                let mut v: Vec<f32> = (1..=n).map(|i| (i as f32).sqrt()).collect();
                if nan {
                    v[3] = f32::NAN;
                }
                ctx.write_f32(p, &v)
            })),
        );
    }
    let elementwise: [(&str, Unary); 2] = [(LOG, |x| (x - 2.0).ln()), (SCALE, |x| 2.0 * x)];
    for (name, f) in elementwise {
        m.register_kernel(
            "compiled",
            name,
            ParamInfo::packed(&[(8, Unknown), (8, Unknown), (4, Value)]),
            Some(Arc::new(move |ctx| {
                let (out, inp, n) = (ctx.ptr(0)?, ctx.ptr(1)?, ctx.u32(2)? as usize);
                let v: Vec<f32> = ctx
                    .read(inp, n * 4)?
                    .chunks_exact(4)
                    .map(|w| f(f32::from_le_bytes([w[0], w[1], w[2], w[3]])))
                    .collect();
                ctx.write_f32(out, &v)
            })),
        );
    }
    m
}

/// One allocation holding several tensors, as a caching allocator's segment does: fill its
/// first `n` floats, scale 16 of them into the tensor at 1024 (at 16384 when `n` is larger),
/// fill the first again (the same values: a write nothing can see), poison the tensor after it,
/// and read it all back.
fn recorded(n: u32) -> Trace {
    let sink = trace::VecSink::default();
    let bytes = sink.0.clone();
    let rec = gputape::recorder::RecordingBackend::new(
        compiled(),
        Box::new(sink),
        gputape::recorder::BackendDesc::new("mock"),
    )
    .unwrap();
    rec.start().unwrap();
    let s = rec.create_stream().unwrap();
    let (second, third) = if n > 16 { (16384, 20480) } else { (1024, 2048) };
    let seg = rec.alloc(2 * third).unwrap();
    let (fill, scale, poison) = (
        rec.kernel("compiled", FILL).unwrap(),
        rec.kernel("compiled", SCALE).unwrap(),
        rec.kernel("compiled", POISON).unwrap(),
    );
    let small = 16u32;
    let launch = |k, args: &[KernelArg]| {
        rec.launch_typed(k, [1, 1, 1], [32, 1, 1], 0, s, args)
            .unwrap()
    };
    launch(fill, &[KernelArg::Buffer(seg), KernelArg::u32(&n)]);
    launch(
        scale,
        &[
            KernelArg::Buffer(seg.offset(second)),
            KernelArg::Buffer(seg),
            KernelArg::u32(&small),
        ],
    );
    launch(fill, &[KernelArg::Buffer(seg), KernelArg::u32(&n)]);
    launch(
        poison,
        &[KernelArg::Buffer(seg.offset(third)), KernelArg::u32(&small)],
    );
    rec.synchronize(s).unwrap();
    let mut out = vec![0u8; 2 * third];
    rec.copy_d2h(seg, &mut out).unwrap();
    rec.stop().unwrap();
    let recorded = bytes.lock().clone();
    Trace::from_bytes(Path::new("compiled"), &recorded).unwrap()
}

fn measure(t: &Trace, chunk: u64) -> WriteExtents {
    Replayer::new(t)
        .measure_writes(
            &compiled(),
            &WriteOptions {
                chunk,
                ..Default::default()
            },
            "key".into(),
            None,
        )
        .unwrap()
}

/// A pointer's parameter and the byte ranges found written through it.
type Found = (usize, Vec<(u64, u64)>);

/// Each launch's pointers as (param, ranges), in launch order.
fn ranges(w: &WriteExtents) -> Vec<Vec<Found>> {
    w.launches
        .iter()
        .map(|l: &LaunchWrites| {
            l.pointers
                .iter()
                .map(|p| (p.param, p.ranges.clone()))
                .collect()
        })
        .collect()
}

/// With 4-byte chunks the extents are exactly the bytes each body writes that changed; the
/// input of `scale` is found read-only; the second fill, which wrote what was there, is found
/// writing nothing (the pitfall the module names).
#[test]
fn extents_found_equal_what_the_kernels_write() {
    let t = recorded(16);
    let w = measure(&t, 4);
    assert!(w.stopped.is_none(), "{}", w.summary(&t));
    assert_eq!(
        ranges(&w),
        vec![
            vec![(0, vec![(0, 64)])],
            vec![(0, vec![(1024, 1088)]), (1, vec![])],
            vec![(0, vec![])],
            vec![(0, vec![(2048, 2112)])],
        ],
        "{}",
        w.summary(&t)
    );
    assert_eq!(w.replayed, 4);
}

/// With the default 512-byte chunks, changes that lie in the 4 KiB sampled at each pointer are
/// known to the byte; the type of what `fill` wrote is inferred from its bytes.
#[test]
fn small_extents_are_exact_and_typed_from_their_bytes() {
    let t = recorded(16);
    let w = measure(&t, 512);
    assert_eq!(
        ranges(&w),
        vec![
            vec![(0, vec![(0, 64)])],
            vec![(0, vec![(1024, 1088)]), (1, vec![])],
            vec![(0, vec![])],
            vec![(0, vec![(2048, 2112)])],
        ],
        "{}",
        w.summary(&t)
    );
    let inferred = w.launches[0].pointers[0]
        .inferred
        .expect("fill's bytes typed");
    assert_eq!(inferred.elem, gputape::backend::ElemType::F32);
    assert_eq!(
        inferred.values, 16,
        "what it wrote, not the rest of the sample"
    );
}

/// A write reaching past the sampled bytes is known to its chunk: `fill` of 3000 floats
/// (12000 bytes) from the start of the allocation changes 24 chunks.
#[test]
fn large_extents_are_rounded_to_their_chunks() {
    let t = recorded(3000);
    let w = measure(&t, 512);
    assert_eq!(
        w.launches[0].pointers[0].ranges,
        vec![(0, 12288)],
        "{}",
        w.summary(&t)
    );
    assert_eq!(
        w.launches[0].pointers[0]
            .inferred
            .map(|i| (i.values, i.elem)),
        Some((1024, gputape::backend::ElemType::F32)),
        "typed from the 4 KiB sampled"
    );
}

/// An allocation larger than a launch's reach (an expandable segment holding a whole process's
/// tensors) is hashed only so far past each pointer, pointers far apart in separate regions;
/// the cut is counted and said.
#[test]
fn regions_stop_at_their_reach_and_say_so() {
    let t = recorded(3000);
    let w = Replayer::new(&t)
        .measure_writes(
            &compiled(),
            &WriteOptions {
                chunk: 512,
                reach: 4096,
            },
            String::new(),
            None,
        )
        .unwrap();
    let summary = w.summary(&t);
    assert_eq!(
        w.launches[0].pointers[0].ranges,
        vec![(0, 4096)],
        "{summary}"
    );
    // scale's output (16384) and input (0) lie further apart than the reach: both measured.
    let scale: Vec<(usize, Vec<(u64, u64)>)> = w.launches[1]
        .pointers
        .iter()
        .map(|p| (p.param, p.ranges.clone()))
        .collect();
    assert_eq!(
        scale,
        vec![(0, vec![(16384, 16448)]), (1, vec![])],
        "{summary}"
    );
    assert!(w.bounded > 0, "{summary}");
    assert!(summary.contains("hashed only to 4.0 KiB past"), "{summary}");
}

/// A stored measurement is used only for the trace and chunk size it was made for, and a
/// damaged one is an error naming the file.
#[test]
fn stored_extents_are_keyed_by_trace_and_chunk() {
    let t = recorded(16);
    let w = measure(&t, 512);
    let dir = std::env::temp_dir().join(format!("gputape-writes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = WriteExtents::path_for(&dir.join("t.gtape"));
    w.save(&path).unwrap();
    let back = WriteExtents::load(&path, "key", 512)
        .unwrap()
        .expect("same key");
    assert_eq!(back.launches, w.launches);
    assert!(back.ever_writes(&w.launches[0].kernel, 0, None));
    assert!(!back.ever_writes(&w.launches[1].kernel, 1, None));
    assert!(WriteExtents::load(&path, "other", 512).unwrap().is_none());
    assert!(WriteExtents::load(&path, "key", 4).unwrap().is_none());
    // A range past its buffer (a hostile or stale file) is refused before any check reads it.
    let mut bad = w.clone();
    bad.launches[0].pointers[0].ranges = vec![(0, 1 << 40)];
    bad.save(&path).unwrap();
    let back = WriteExtents::load(&path, "key", 512)
        .unwrap()
        .expect("same key");
    let e = back.checked(&t, &path).unwrap_err().to_string();
    assert!(e.contains("do not lie in order inside"), "{e}");
    assert!(w.clone().checked(&t, &path).is_ok());
    std::fs::write(&path, b"{\"format\": 1, \"trac").unwrap();
    let e = WriteExtents::load(&path, "key", 512)
        .unwrap_err()
        .to_string();
    assert!(e.contains("t.gtape.writes.json"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With measured extents, `--check-finite` scans only what each launch wrote: the NaN of the
/// tensor at 2048 is named in the poison launch's own tensor, and the earlier launches'
/// pointers into the same allocation are not charged with it.
#[test]
fn check_finite_reads_only_the_measured_writes() {
    let t = recorded(16);
    let w = measure(&t, 512);
    let opts = FiniteOptions {
        writes: Some(Arc::new(w)),
        ..Default::default()
    };
    let r = Replayer::new(&t)
        .check_finite(&compiled(), &opts, None)
        .unwrap();
    let summary = r.summary();
    let first = r.first.as_ref().unwrap_or_else(|| panic!("{summary}"));
    assert!(first.kernel.contains("poison"), "{summary}");
    assert_eq!(
        (first.offset, first.index, first.nan),
        (2048, 3, 1),
        "{summary}"
    );
    assert!(first.measured, "{summary}");
    assert!(summary.contains("in the bytes it wrote"), "{summary}");
    assert_eq!(r.writers.len(), 1, "{summary}");
}

/// What `inspect --writes` shows of a launch: each written tensor cut to its measured bytes and
/// typed (here from its name's template arguments); without a measurement, from the pointer
/// to the end of the allocation, the read-only input included.
#[test]
fn written_tensors_are_the_measured_ranges() {
    use gputape::replayer::written_tensors;
    let t = recorded(16);
    let w = measure(&t, 512);
    let scale = w.launches[1].seq;
    let got: Vec<(u64, u64, bool)> = written_tensors(&t, scale, Some(&w), &[])
        .iter()
        .map(|x| (x.off, x.bytes, x.measured))
        .collect();
    assert_eq!(got, vec![(1024, 64, true)]);
    let typed = &written_tensors(&t, scale, Some(&w), &[])[0];
    assert_eq!(
        (typed.elem.map(|e| e.name()), typed.how),
        (Some("f32"), "its mangled name's parameter types")
    );
    let got: Vec<(u64, u64, bool)> = written_tensors(&t, scale, None, &[])
        .iter()
        .map(|x| (x.off, x.bytes, x.measured))
        .collect();
    assert_eq!(got, vec![(1024, 3072, false), (0, 4096, false)]);
}

#[test]
fn a_chunk_that_is_no_power_of_two_is_refused() {
    let t = recorded(16);
    let e = Replayer::new(&t)
        .measure_writes(
            &compiled(),
            &WriteOptions {
                chunk: 24,
                ..Default::default()
            },
            String::new(),
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("24 bytes"), "{e}");
}

/// An Inf the host uploads (a weight set from Python, `w[5, 7] = inf`) is no launch's doing:
/// `--check-finite --inf` names the upload that planted it and the launch that first read it.
#[test]
fn an_uploaded_inf_is_named_as_planted_with_its_first_reader() {
    let sink = trace::VecSink::default();
    let bytes = sink.0.clone();
    let rec = gputape::recorder::RecordingBackend::new(
        compiled(),
        Box::new(sink),
        gputape::recorder::BackendDesc::new("mock"),
    )
    .unwrap();
    rec.start().unwrap();
    let s = rec.create_stream().unwrap();
    let seg = rec.alloc(4096).unwrap();
    let scale = rec.kernel("compiled", SCALE).unwrap();
    let n = 16u32;
    let mut weight: Vec<u8> = (0..n)
        .flat_map(|i| (i as f32 + 0.5).to_le_bytes())
        .collect();
    weight[20..24].copy_from_slice(&f32::INFINITY.to_le_bytes());
    rec.copy_h2d(&weight, seg).unwrap();
    let args = [
        KernelArg::Buffer(seg.offset(1024)),
        KernelArg::Buffer(seg),
        KernelArg::u32(&n),
    ];
    rec.launch_typed(scale, [1, 1, 1], [32, 1, 1], 0, s, &args)
        .unwrap();
    rec.synchronize(s).unwrap();
    rec.stop().unwrap();
    let recorded = bytes.lock().clone();
    let t = Trace::from_bytes(Path::new("planted"), &recorded).unwrap();
    let opts = FiniteOptions {
        inf: true,
        writes: Some(Arc::new(measure(&t, 512))),
        ..Default::default()
    };
    let r = Replayer::new(&t)
        .check_finite(&compiled(), &opts, None)
        .unwrap();
    let summary = r.summary();
    let p = r.planted.as_ref().unwrap_or_else(|| panic!("{summary}"));
    assert_eq!((p.offset, p.value, p.elem), (20, "inf", "f32"), "{summary}");
    assert!(p.call.contains("copy_h2d"), "{summary}");
    assert!(p.reader.contains("scale"), "{summary}");
    assert!(summary.contains("-> inf PLANTED by call #"), "{summary}");
    let f = r.first.as_ref().expect("the reader wrote the inf on");
    assert!(!f.inputs.is_empty(), "{summary}");
    // What `inspect --writes` shows of the upload: the 64 bytes it wrote, not its buffer.
    let wrote: Vec<(u64, u64)> = gputape::replayer::written_tensors(&t, p.seq, None, &[])
        .iter()
        .map(|w| (w.off, w.bytes))
        .collect();
    assert_eq!(wrote, vec![(0, 64)]);
}

/// A launch's input is the tensor its writer wrote, not the rest of the allocation from its
/// pointer: NaN left in later tensors of the same segment does not make `logf`, which makes
/// its own NaN from finite inputs below 2, look like it only passed one on.
#[test]
fn an_input_is_the_tensor_its_writer_wrote() {
    let sink = trace::VecSink::default();
    let bytes = sink.0.clone();
    let rec = gputape::recorder::RecordingBackend::new(
        compiled(),
        Box::new(sink),
        gputape::recorder::BackendDesc::new("mock"),
    )
    .unwrap();
    rec.start().unwrap();
    let s = rec.create_stream().unwrap();
    let seg = rec.alloc(8192).unwrap();
    let (fill, poison, scale, log) = (
        rec.kernel("compiled", FILL).unwrap(),
        rec.kernel("compiled", POISON).unwrap(),
        rec.kernel("compiled", SCALE).unwrap(),
        rec.kernel("compiled", LOG).unwrap(),
    );
    let (n, three) = (16u32, 3u32);
    let launch = |k, args: &[KernelArg]| {
        rec.launch_typed(k, [1, 1, 1], [32, 1, 1], 0, s, args)
            .unwrap()
    };
    let at = |off: usize| KernelArg::Buffer(seg.offset(off));
    launch(poison, &[at(4096), KernelArg::u32(&n)]);
    launch(scale, &[at(1024), at(4096), KernelArg::u32(&n)]);
    launch(fill, &[at(0), KernelArg::u32(&n)]);
    launch(log, &[at(2048), at(0), KernelArg::u32(&three)]);
    rec.synchronize(s).unwrap();
    rec.stop().unwrap();
    let recorded = bytes.lock().clone();
    let t = Trace::from_bytes(Path::new("inputs"), &recorded).unwrap();
    let opts = FiniteOptions {
        writes: Some(Arc::new(measure(&t, 512))),
        ..Default::default()
    };
    let r = Replayer::new(&t)
        .check_finite(&compiled(), &opts, None)
        .unwrap();
    let summary = r.summary();
    let by = |k: &str| r.writers.iter().find(|w| w.kernel.contains(k));
    assert!(
        by("poison").is_some_and(|w| w.inputs.is_empty()),
        "{summary}"
    );
    assert!(
        by("scale").is_some_and(|w| !w.inputs.is_empty()),
        "{summary}"
    );
    assert!(
        by("logf").is_some_and(|w| w.inputs.is_empty()),
        "logf made its NaN from the 16 finite floats fill wrote: {summary}"
    );
}
