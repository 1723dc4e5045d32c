//! `analyze` and `export` at 10k, 100k and 1M calls: a recorded decode step (mock, tiny
//! config, 74 calls over 38 long-lived buffers) repeated as an engine repeats it, step after
//! step over the same weights and scratch. Medians of 3 runs each. `cargo bench --bench analysis`.

use gputape::analysis::{self, CaptureQuery, Sections};
use gputape::trace::Trace;
use std::path::Path;
use std::time::Instant;

/// `step`'s calls repeated until the trace holds `n` calls, renumbered.
fn repeated(step: &Trace, n: usize) -> Trace {
    let mut t = step.clone();
    t.calls.clear();
    let mut seq = 0u64;
    'fill: loop {
        for c in &step.calls {
            if t.calls.len() == n {
                break 'fill;
            }
            let mut c = c.clone();
            c.seq = seq;
            seq += 1;
            t.calls.push(c);
        }
    }
    t
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn time(f: impl Fn()) -> f64 {
    median(
        (0..3)
            .map(|_| {
                let t0 = Instant::now();
                f();
                t0.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn main() {
    let step = Trace::open(Path::new("traces/mock_tiny_step5.gtape")).expect("fixture");
    let all = Sections {
        capture: true,
        races: true,
        leaks: true,
    };
    println!("| calls | analyze (all sections), s | export perfetto + dot, s | analyze us/call |");
    println!("|---:|---:|---:|---:|");
    for n in [10_000usize, 100_000, 1_000_000] {
        let t = repeated(&step, n);
        let a = time(|| {
            std::hint::black_box(analysis::analyze(&t, CaptureQuery::default(), all));
        });
        let e = time(|| {
            std::hint::black_box(analysis::export::perfetto(&t, CaptureQuery::default()));
            std::hint::black_box(analysis::export::dot(&t, CaptureQuery::default()));
        });
        println!("| {n} | {a:.3} | {e:.3} | {:.2} |", a / n as f64 * 1e6);
    }
}
