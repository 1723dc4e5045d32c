//! Recorder and trace-format benchmarks. `cargo bench --bench recorder`.
//!
//! Medians over interleaved rounds, so the bare and recorded variants see the same machine
//! state. A counting allocator checks the recorder's hot path for heap allocations.

use gputape::backend::{
    DevicePtr, GpuBackend, KernelArg, KernelHandle, KernelRegistry, OpCache, ParamAccess, ParamInfo,
};
use gputape::mock::MockGpuBackend;
use gputape::recorder::{BackendDesc, FlightConfig, RecordingBackend};
use gputape::trace::{self, Frame, MmapSink, Sink, TraceWriter};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System.alloc` with `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const ROUNDS: usize = 31;
const PER_ROUND: usize = 20_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn mock() -> MockGpuBackend {
    let m = MockGpuBackend::default();
    use ParamAccess::*;
    m.register_kernel(
        "bench",
        "six",
        ParamInfo::packed(&[
            (8, Read),
            (8, Read),
            (8, Write),
            (4, Value),
            (4, Value),
            (4, Value),
        ]),
        None,
    );
    m
}

/// The mock for everything but the hot calls, which return at once: the recorder's own cost
/// per call, without the mock's (which allocates and varies with the machine's mood).
struct Null(MockGpuBackend);

/// A full recording over a `Null` backend into `path`, started.
fn null_full(path: &std::path::Path) -> RecordingBackend<Null> {
    let full = RecordingBackend::to_file(Null(mock()), path, BackendDesc::new("null")).unwrap();
    full.start().unwrap();
    full
}

/// A flight recorder over a `Null` backend, dumping into `dir`, checkpointing every 8 steps.
fn null_flight(dir: std::path::PathBuf) -> RecordingBackend<Null> {
    RecordingBackend::flight(
        Null(mock()),
        FlightConfig::new(dir),
        BackendDesc::new("null"),
    )
    .unwrap()
}

impl GpuBackend for Null {
    fn alloc(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        self.0.alloc(bytes)
    }
    fn alloc_managed(&self, bytes: usize) -> anyhow::Result<DevicePtr> {
        self.0.alloc_managed(bytes)
    }
    fn free(&self, ptr: DevicePtr) -> anyhow::Result<()> {
        self.0.free(ptr)
    }
    fn copy_h2d(&self, src: &[u8], dst: DevicePtr) -> anyhow::Result<()> {
        self.0.copy_h2d(src, dst)
    }
    fn copy_d2h(&self, src: DevicePtr, dst: &mut [u8]) -> anyhow::Result<()> {
        self.0.copy_d2h(src, dst)
    }
    fn copy_d2d(&self, src: DevicePtr, dst: DevicePtr, bytes: usize) -> anyhow::Result<()> {
        self.0.copy_d2d(src, dst, bytes)
    }
    fn launch(
        &self,
        _: KernelHandle,
        _: [u32; 3],
        _: [u32; 3],
        _: u32,
        _: u64,
        _: &mut [*mut std::ffi::c_void],
    ) -> anyhow::Result<()> {
        Ok(())
    }
    fn launch_typed(
        &self,
        _: KernelHandle,
        _: [u32; 3],
        _: [u32; 3],
        _: u32,
        _: u64,
        _: &[KernelArg<'_>],
    ) -> anyhow::Result<()> {
        Ok(())
    }
    fn record_event(&self, _: u64, _: u64) -> anyhow::Result<()> {
        Ok(())
    }
    fn stream_wait_event(&self, _: u64, _: u64) -> anyhow::Result<()> {
        Ok(())
    }
    fn synchronize(&self, stream: u64) -> anyhow::Result<()> {
        self.0.synchronize(stream)
    }
    fn default_stream(&self) -> u64 {
        self.0.default_stream()
    }
    fn kernel(&self, module: &str, func_name: &str) -> anyhow::Result<KernelHandle> {
        self.0.kernel(module, func_name)
    }
    fn kernel_registry(&self) -> Option<std::sync::Arc<KernelRegistry>> {
        self.0.kernel_registry()
    }
    fn op_cache(&self) -> &OpCache {
        self.0.op_cache()
    }
    fn memset(&self, ptr: DevicePtr, value: u8, bytes: usize) -> anyhow::Result<()> {
        self.0.memset(ptr, value, bytes)
    }
    fn memset_async(&self, ptr: DevicePtr, v: u8, bytes: usize, s: u64) -> anyhow::Result<()> {
        self.0.memset_async(ptr, v, bytes, s)
    }
    fn create_stream(&self) -> anyhow::Result<u64> {
        self.0.create_stream()
    }
    fn create_event(&self) -> anyhow::Result<u64> {
        self.0.create_event()
    }
    fn total_memory(&self) -> anyhow::Result<usize> {
        self.0.total_memory()
    }
    fn free_memory(&self) -> anyhow::Result<usize> {
        self.0.free_memory()
    }
    fn sm_count(&self) -> anyhow::Result<u32> {
        self.0.sm_count()
    }
}

/// A decode step's shape: `LAYERS` layers of `PER_LAYER` launches, each layer on its own
/// weights, two of them taking the step's position (a new value every step), then an event
/// and a wait, then the step's boundary.
const LAYERS: usize = 32;
const PER_LAYER: usize = 9;

struct Decode {
    k: KernelHandle,
    weights: Vec<DevicePtr>,
    act: [DevicePtr; 2],
    ev: u64,
    s: u64,
}

impl Decode {
    fn new(g: &dyn GpuBackend) -> Self {
        Decode {
            k: g.kernel("bench", "six").unwrap(),
            weights: (0..LAYERS * PER_LAYER)
                .map(|_| g.alloc(1024).unwrap())
                .collect(),
            act: [g.alloc(1024).unwrap(), g.alloc(1024).unwrap()],
            ev: g.create_event().unwrap(),
            s: g.create_stream().unwrap(),
        }
    }

    /// One step; returns the calls made.
    fn step(&self, g: &dyn GpuBackend, pos: u32) -> usize {
        let mut calls = 0;
        for (i, w) in self.weights.iter().enumerate() {
            let p = if i % PER_LAYER < 2 { pos } else { 0 };
            let (a, b, c) = (p.to_le_bytes(), 1.5f32.to_le_bytes(), 4096u32.to_le_bytes());
            g.launch_typed(
                self.k,
                [32, 1, 1],
                [256, 1, 1],
                0,
                self.s,
                &[
                    KernelArg::Buffer(*w),
                    KernelArg::Buffer(self.act[i % 2]),
                    KernelArg::Buffer(self.act[(i + 1) % 2]),
                    KernelArg::Bytes(&a),
                    KernelArg::Bytes(&b),
                    KernelArg::Bytes(&c),
                ],
            )
            .unwrap();
            calls += 1;
        }
        g.record_event(self.ev, self.s).unwrap();
        g.stream_wait_event(0, self.ev).unwrap();
        g.step_boundary(u64::from(pos));
        calls + 3
    }
}

struct Setup {
    k: gputape::backend::KernelHandle,
    bufs: [gputape::backend::DevicePtr; 3],
    ev: u64,
    s: u64,
}

fn setup(g: &dyn GpuBackend) -> Setup {
    Setup {
        k: g.kernel("bench", "six").unwrap(),
        bufs: [
            g.alloc(1024).unwrap(),
            g.alloc(1024).unwrap(),
            g.alloc(1024).unwrap(),
        ],
        ev: g.create_event().unwrap(),
        s: g.create_stream().unwrap(),
    }
}

fn launch6(g: &dyn GpuBackend, st: &Setup) {
    let (a, b, c) = (7u32.to_le_bytes(), 1.5f32.to_le_bytes(), 3u32.to_le_bytes());
    g.launch_typed(
        st.k,
        [4, 1, 1],
        [128, 1, 1],
        0,
        st.s,
        &[
            KernelArg::Buffer(st.bufs[0]),
            KernelArg::Buffer(st.bufs[1]),
            KernelArg::Buffer(st.bufs[2]),
            KernelArg::Bytes(&a),
            KernelArg::Bytes(&b),
            KernelArg::Bytes(&c),
        ],
    )
    .unwrap();
}

/// The `q` quantile of `v` (1.0: the largest).
fn pct(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn per_call_ns(f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..PER_ROUND {
        f();
    }
    t.elapsed().as_nanos() as f64 / PER_ROUND as f64
}

fn main() {
    let dir = std::env::temp_dir().join(format!("gputape-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // ---- recorder overhead per call ----
    let bare = mock();
    let bs = setup(&bare);
    let rec = RecordingBackend::to_file(mock(), &dir.join("rec.gtape"), BackendDesc::new("mock"))
        .unwrap();
    let rs = setup(&rec);
    rec.start().unwrap();
    // Warm up: first sightings of sites, threads and kernels allocate once.
    launch6(&rec, &rs);
    rec.record_event(rs.ev, rs.s).unwrap();
    launch6(&bare, &bs);

    if std::env::var("GPUTAPE_BENCH_HOT").as_deref() == Ok("flight") {
        // For profiling: only the flight recorder's launch loop, a step per round.
        let fr = null_flight(dir.join("flight"));
        let fs = setup(&fr);
        for r in 0..1000u64 {
            per_call_ns(&mut || launch6(&fr, &fs));
            fr.step_boundary(r);
        }
        return;
    }
    if std::env::var("GPUTAPE_BENCH_HOT").as_deref() == Ok("full") {
        // For profiling: only a full recording's launch loop, over the null backend.
        let full = null_full(&dir.join("null-hot.gtape"));
        let fs = setup(&full);
        let t = Instant::now();
        let rounds: Vec<f64> = (0..300)
            .map(|_| per_call_ns(&mut || launch6(&full, &fs)))
            .collect();
        let all = t.elapsed().as_nanos() as f64 / (300 * PER_ROUND) as f64;
        let t = Instant::now();
        full.stop().unwrap();
        println!(
            "full recording: {all:.0} ns/call over all rounds; rounds at the 50th/90th/99th percentile and slowest {:.0}/{:.0}/{:.0}/{:.0}; stop {:.0} ms",
            pct(&rounds, 0.5),
            pct(&rounds, 0.9),
            pct(&rounds, 0.99),
            pct(&rounds, 1.0),
            t.elapsed().as_secs_f64() * 1e3
        );
        return;
    }
    if std::env::var("GPUTAPE_BENCH_HOT").as_deref() == Ok("decode") {
        // For profiling: only the flight recorder on the decode step's shape.
        let fr = null_flight(dir.join("flight-decode"));
        let fd = Decode::new(&fr);
        for pos in 0..20_000 {
            fd.step(&fr, pos);
        }
        return;
    }
    if std::env::var("GPUTAPE_BENCH_HOT").is_ok_and(|v| v != "read") {
        // For profiling: only the recorded launch loop.
        let rounds: usize = std::env::var("GPUTAPE_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100);
        for _ in 0..rounds {
            if std::env::var("GPUTAPE_BENCH_HOT").as_deref() == Ok("event") {
                per_call_ns(&mut || rec.record_event(rs.ev, rs.s).unwrap());
            } else {
                per_call_ns(&mut || launch6(&rec, &rs));
            }
        }
        return;
    }
    let (mut lb, mut lr, mut eb, mut er) = (vec![], vec![], vec![], vec![]);
    let mut allocs_launch = 0;
    let mut allocs_event = 0;
    for _ in 0..ROUNDS {
        lb.push(per_call_ns(&mut || launch6(&bare, &bs)));
        let a0 = ALLOCS.load(Ordering::Relaxed);
        lr.push(per_call_ns(&mut || launch6(&rec, &rs)));
        let a1 = ALLOCS.load(Ordering::Relaxed);
        eb.push(per_call_ns(&mut || bare.record_event(bs.ev, bs.s).unwrap()));
        let a2 = ALLOCS.load(Ordering::Relaxed);
        er.push(per_call_ns(&mut || rec.record_event(rs.ev, rs.s).unwrap()));
        let a3 = ALLOCS.load(Ordering::Relaxed);
        allocs_launch += a1 - a0;
        allocs_event += a3 - a2;
    }
    // The bare mock's own launch allocates (it copies args); subtract a bare round's count.
    let b0 = ALLOCS.load(Ordering::Relaxed);
    per_call_ns(&mut || launch6(&bare, &bs));
    let bare_launch_allocs = ALLOCS.load(Ordering::Relaxed) - b0;
    let b0 = ALLOCS.load(Ordering::Relaxed);
    per_call_ns(&mut || bare.record_event(bs.ev, bs.s).unwrap());
    let bare_event_allocs = ALLOCS.load(Ordering::Relaxed) - b0;
    let stats = rec.stop().unwrap();

    let calls = (ROUNDS * PER_ROUND) as f64;
    let (mlb, mlr, meb, mer) = (median(lb), median(lr), median(eb), median(er));
    println!("recorder overhead (median of {ROUNDS} rounds x {PER_ROUND} calls, mmap file sink)");
    println!("| call | bare mock ns | recorded ns | overhead ns | recorder heap allocs/call |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| launch_typed, 6 args | {mlb:.0} | {mlr:.0} | {:.0} | {:.3} |",
        mlr - mlb,
        (allocs_launch as f64 - bare_launch_allocs as f64 * ROUNDS as f64) / calls
    );
    println!(
        "| record_event | {meb:.0} | {mer:.0} | {:.0} | {:.3} |",
        mer - meb,
        (allocs_event as f64 - bare_event_allocs as f64 * ROUNDS as f64) / calls
    );
    println!("trace: {} calls, {} bytes", stats.calls, stats.bytes);

    // ---- the flight recorder: same call, always-on mode, a step boundary per round ----
    {
        let mut cfg = FlightConfig::new(dir.join("flight"));
        cfg.checkpoint_every = 8;
        let fr = RecordingBackend::flight(mock(), cfg, BackendDesc::new("mock")).unwrap();
        let fs = setup(&fr);
        launch6(&fr, &fs);
        let (mut fb, mut fl) = (vec![], vec![]);
        for r in 0..ROUNDS {
            fb.push(per_call_ns(&mut || launch6(&bare, &bs)));
            fl.push(per_call_ns(&mut || launch6(&fr, &fs)));
            // A step per round: checkpoints every 8, so the kept spans rotate as in a run.
            fr.step_boundary(r as u64);
        }
        let h = fr.flight_held().unwrap();
        let (b, f) = (median(fb), median(fl));
        println!(
            "| flight recorder, launch_typed 6 args | {b:.0} | {f:.0} | {:.0} | held {} calls in {} bytes: {:.1} bytes/call |",
            f - b,
            h.calls,
            h.call_bytes,
            h.bytes_per_call()
        );
    }

    // ---- the recorder's own cost: a backend whose hot calls return at once ----
    {
        let null = Null(mock());
        let ns = setup(&null);
        let full = null_full(&dir.join("null.gtape"));
        let fs_full = setup(&full);
        let fr = null_flight(dir.join("flight-null"));
        let fs = setup(&fr);
        launch6(&full, &fs_full);
        launch6(&fr, &fs);
        let (mut b, mut r, mut f, mut fe) = (vec![], vec![], vec![], vec![]);
        for round in 0..ROUNDS {
            b.push(per_call_ns(&mut || launch6(&null, &ns)));
            r.push(per_call_ns(&mut || launch6(&full, &fs_full)));
            f.push(per_call_ns(&mut || launch6(&fr, &fs)));
            fe.push(per_call_ns(&mut || fr.record_event(fs.ev, fs.s).unwrap()));
            fr.step_boundary(round as u64);
        }
        let stats = full.stop().unwrap();
        let (b, r, f, fe) = (median(b), median(r), median(f), median(fe));
        println!();
        println!("the recorder's own cost: hot calls of the wrapped backend return at once (median of {ROUNDS} rounds x {PER_ROUND} calls)");
        println!("| | ns/call | over bare |");
        println!("|---|---:|---:|");
        println!("| bare launch_typed, 6 args | {b:.0} | |");
        println!(
            "| full recording (mmap file, {:.0} B/call) | {r:.0} | {:.0} |",
            stats.bytes as f64 / stats.calls as f64,
            r - b
        );
        println!("| flight recorder | {f:.0} | {:.0} |", f - b);
        println!("| flight recorder, record_event | {fe:.0} | |");
    }

    // ---- the flight recorder on a decode step's shape, over many steps ----
    {
        let steps = 400u32;
        let bare = Null(mock());
        let bd = Decode::new(&bare);
        let fr = null_flight(dir.join("flight-decode"));
        let fd = Decode::new(&fr);
        let (mut b, mut f) = (vec![], vec![]);
        let mut per_step = 0;
        for pos in 0..steps {
            let t = Instant::now();
            per_step = bd.step(&bare, pos);
            b.push(t.elapsed().as_nanos() as f64 / per_step as f64);
            let t = Instant::now();
            fd.step(&fr, pos);
            f.push(t.elapsed().as_nanos() as f64 / per_step as f64);
        }
        let h = fr.flight_held().unwrap();
        let (b, f) = (median(b), median(f));
        println!();
        println!(
            "flight recorder on a decode step's shape ({LAYERS} layers x {PER_LAYER} launches, 2 of 9 with a per-step position, an event, a wait, a step boundary: {per_step} calls a step; {steps} steps, checkpoint every 8; median per-call over steps)"
        );
        println!("| bare ns/call | flight ns/call | overhead ns/call | held | bytes/call held | of which logs |");
        println!("|---:|---:|---:|---|---:|---:|");
        println!(
            "| {b:.0} | {f:.0} | {:.0} | {} calls, {} bytes | {:.1} | {:.1} |",
            f - b,
            h.calls,
            h.call_bytes,
            h.bytes_per_call(),
            h.log_bytes_per_call()
        );
    }

    // ---- where the time goes: one Begin frame's encode alone ----
    {
        let t = trace::Trace::open(&dir.join("rec.gtape")).unwrap();
        let c = t
            .calls
            .iter()
            .find(|c| matches!(c.call, trace::Call::LaunchTyped { .. }))
            .unwrap();
        let f = Frame::Begin(trace::Begin {
            seq: 1,
            thread: 0,
            site: c.site,
            t_ns: 123456,
            call: c.call.clone(),
        });
        let mut buf = Vec::with_capacity(4096);
        let (mut by_hand, mut by_serde) = (vec![], vec![]);
        let mut n = 0;
        for _ in 0..ROUNDS {
            by_hand.push(per_call_ns(&mut || {
                buf.clear();
                let Frame::Begin(b) = black_box(&f) else {
                    unreachable!()
                };
                let (head, view) = b.launch_parts().expect("a launch");
                trace::codec::append_launch_begin(&head, &view, &mut buf);
                n = buf.len();
                black_box(&buf);
            }));
            by_serde.push(per_call_ns(&mut || {
                buf.clear();
                trace::codec::append(black_box(&f), &mut buf).unwrap();
                black_box(&buf);
            }));
        }
        println!(
            "encode of one launch Begin frame ({n} bytes): {:.0} ns as the recorder does (codec::append_launch_begin), {:.0} ns through serde",
            median(by_hand),
            median(by_serde)
        );
        let mut v = vec![];
        for _ in 0..ROUNDS {
            v.push(per_call_ns(&mut || {
                black_box(Instant::now());
            }));
        }
        println!("Instant::now: {:.0} ns", median(v));
    }

    // ---- writer and reader throughput ----
    let t = trace::Trace::open(&dir.join("rec.gtape")).unwrap();
    let sample: Vec<Frame> = t
        .calls
        .iter()
        .take(1000)
        .map(|c| {
            Frame::Begin(trace::Begin {
                seq: c.seq,
                thread: c.thread,
                site: c.site,
                t_ns: c.t_ns,
                call: c.call.clone(),
            })
        })
        .collect();
    let n = 2_000_000usize;
    if std::env::var("GPUTAPE_BENCH_HOT").as_deref() == Ok("read") {
        // For profiling: read one file of `sample` frames, many times.
        let path = dir.join("read.gtape");
        let mut w = TraceWriter::new(Box::new(MmapSink::create(&path).unwrap())).unwrap();
        for f in &sample {
            w.write(f).unwrap();
        }
        w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        for _ in 0..200 {
            for f in trace::FrameReader::new(&path, &bytes).unwrap() {
                black_box(f.unwrap());
            }
        }
        std::fs::remove_dir_all(&dir).ok();
        return;
    }
    let mut wr = vec![];
    let mut rd = vec![];
    for round in 0..5 {
        let path = dir.join(format!("w{round}.gtape"));
        let sink: Box<dyn Sink> = Box::new(MmapSink::create(&path).unwrap());
        let mut w = TraceWriter::new(sink).unwrap();
        let t0 = Instant::now();
        for i in 0..n {
            let f = &sample[i % sample.len()];
            match f {
                Frame::Begin(b) if b.call.launch().is_some() => {
                    let (head, view) = b.launch_parts().expect("a launch");
                    w.write_launch_begin(&head, &view)
                }
                _ => w.write(f),
            }
            .unwrap();
        }
        w.finish().unwrap();
        wr.push(n as f64 / t0.elapsed().as_secs_f64());
        let bytes = std::fs::read(&path).unwrap();
        let t0 = Instant::now();
        let mut r = trace::FrameReader::new(&path, &bytes).unwrap();
        let mut count = 0usize;
        for f in r.by_ref() {
            black_box(f.unwrap());
            count += 1;
        }
        rd.push(count as f64 / t0.elapsed().as_secs_f64());
        assert!(r.cut.is_none() && count == n);
        std::fs::remove_file(&path).ok();
    }
    println!();
    println!("trace format throughput (launch/event Begin records written as the recorder writes them, framing + CRC32C on, one core)");
    println!("| | median records/s |");
    println!("|---|---:|");
    println!("| writer (mmap file) | {:.2} M |", median(wr) / 1e6);
    println!(
        "| reader (decode + CRC check) | {:.2} M |",
        median(rd) / 1e6
    );
    std::fs::remove_dir_all(&dir).ok();
}
