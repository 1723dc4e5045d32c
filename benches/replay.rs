//! Mock replay throughput: calls per second replaying a recorded trace of cheap calls
//! (small async memsets, event records, launches of a kernel with no CPU body).
//! `cargo bench --bench replay`.

use gputape::backend::{GpuBackend, KernelArg, ParamAccess, ParamInfo};
use gputape::mock::MockGpuBackend;
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::{Trace, VecSink};
use std::path::Path;
use std::time::Instant;

fn mock() -> MockGpuBackend {
    let m = MockGpuBackend::default();
    m.register_kernel(
        "bench",
        "noop3",
        ParamInfo::packed(&[
            (8, ParamAccess::Read),
            (8, ParamAccess::Write),
            (4, ParamAccess::Value),
        ]),
        None,
    );
    m
}

fn main() {
    const N: usize = 100_000;
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(mock(), Box::new(sink), BackendDesc::new("mock")).unwrap();
    let g: &dyn GpuBackend = &rec;
    let s = g.create_stream().unwrap();
    let e = g.create_event().unwrap();
    let a = g.alloc(4096).unwrap();
    let b = g.alloc(4096).unwrap();
    let k = g.kernel("bench", "noop3").unwrap();
    rec.start().unwrap();
    for i in 0..N {
        match i % 3 {
            0 => g.memset_async(a, i as u8, 256, s).unwrap(),
            1 => g.record_event(e, s).unwrap(),
            _ => g
                .launch_typed(
                    k,
                    [1, 1, 1],
                    [32, 1, 1],
                    0,
                    s,
                    &[
                        KernelArg::Buffer(a),
                        KernelArg::Buffer(b),
                        KernelArg::Bytes(&7u32.to_le_bytes()),
                    ],
                )
                .unwrap(),
        }
    }
    g.synchronize(s).unwrap();
    rec.stop().unwrap();
    let t = Trace::from_bytes(Path::new("bench"), &buf.lock()).unwrap();
    let calls = t.calls.len();
    let mut rates = Vec::new();
    for _ in 0..7 {
        let m = mock();
        let t0 = Instant::now();
        let r = Replayer::new(&t)
            .run(&m, &ReplayOptions::default(), None, |_| {})
            .unwrap();
        let secs = t0.elapsed().as_secs_f64();
        assert_eq!(r.calls as usize, calls);
        rates.push(calls as f64 / secs);
    }
    rates.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("mock replay throughput ({calls} calls: memset_async / record_event / 3-arg launch)");
    println!("| | calls/s |");
    println!("|---|---:|");
    println!("| median of 7 | {:.2} M |", rates[3] / 1e6);
    println!(
        "| min / max | {:.2} M / {:.2} M |",
        rates[0] / 1e6,
        rates[6] / 1e6
    );
}
