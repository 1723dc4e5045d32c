//! Trace assertions for an engine's own tests: run a step under a recorder, in memory, and
//! check what it asked of the GPU.
//!
//! The second reason to record calls is to guard a refactor: "the decode step must not gain a
//! host sync", "it must stay capturable into one CUDA graph", "its call sequence is part of the
//! review". [`Harness`] records a closure against any backend (the mock with your CPU twins, or
//! a backend of your own whose kernels are opaque to gputape), and the [`Recording`] it returns
//! renders stably for `insta` snapshots and checks rules, each failure naming the call, its
//! site and the rule.
//!
//! ```
//! use gputape::backend::GpuBackend;
//! use gputape::testing::Harness;
//!
//! // Your engine's step, written against the trait.
//! fn step(g: &dyn GpuBackend, buf: gputape::backend::DevicePtr) -> anyhow::Result<()> {
//!     g.memset_async(buf, 0, 256, g.default_stream())
//! }
//!
//! let h = Harness::new(gputape::mock::MockGpuBackend::default());
//! let buf = h.gpu().alloc(256).unwrap(); // setup: not recorded
//! let (r, rec) = h.record(|g| step(g, buf)).unwrap();
//! r.unwrap();
//! rec.assert_no_host_sync();
//! rec.assert_no_device_alloc();
//! rec.assert_capturable(Default::default());
//! assert_eq!(rec.launches().values().sum::<usize>(), 0);
//! // insta::assert_snapshot!(rec.render());
//! ```
//!
//! Reviewing a change: a snapshot that moved shows the calls the change added or removed;
//! `cargo insta review` walks through them, and an accepted snapshot is the new contract. Call
//! sites appear as file only (lines are masked), so editing an unrelated line never moves one.

#![warn(missing_docs)]

use crate::analysis::{self, CaptureQuery, Sections};
use crate::backend::GpuBackend;
use crate::recorder::{BackendDesc, RecordError, RecordingBackend};
use crate::trace::{self, Call, CallRecord, HostAddr, Trace, TraceError, VecSink};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Why a harness could not give a recording back.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The recorder could not start or stop.
    #[error("recording failed: {0}")]
    Record(#[from] RecordError),
    /// The recorded bytes did not read back as a trace.
    #[error("the in-memory trace does not read back: {0}")]
    Trace(#[from] TraceError),
}

/// A backend under a recorder whose trace stays in memory. Calls made through [`Harness::gpu`]
/// before [`Harness::record`] are set-up: not recorded, but their buffers are known, and the
/// recording starts with their contents.
pub struct Harness<B: GpuBackend> {
    rec: RecordingBackend<B>,
    buf: Arc<parking_lot::Mutex<Vec<u8>>>,
}

impl<B: GpuBackend + 'static> Harness<B> {
    /// Put `inner` under a recorder that keeps its trace in memory; nothing is recorded until
    /// `record`.
    pub fn new(inner: B) -> Self {
        let sink = VecSink::default();
        let buf = sink.0.clone();
        let rec = RecordingBackend::new(inner, Box::new(sink), BackendDesc::new("test"))
            .expect("an in-memory sink cannot fail to open");
        Harness { rec, buf }
    }

    /// The backend to set up with (and what `record` hands its closure).
    pub fn gpu(&self) -> &(dyn GpuBackend + 'static) {
        &self.rec
    }

    /// Record `f` and return its result with the recording. One recording per harness.
    pub fn record<R>(
        &self,
        f: impl FnOnce(&(dyn GpuBackend + 'static)) -> R,
    ) -> Result<(R, Recording), HarnessError> {
        self.rec.start()?;
        let r = f(&self.rec);
        self.rec.stop()?;
        let bytes = std::mem::take(&mut *self.buf.lock());
        let trace = Trace::from_bytes(Path::new("<harness>"), &bytes)?;
        Ok((r, Recording { trace }))
    }
}

/// A broken rule: the call that broke it and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule broken (`no-host-sync`, `capturable/...`, ...).
    pub rule: String,
    /// The call's sequence number in the trace.
    pub seq: u64,
    /// The call's kind (`alloc`, `launch`, ...).
    pub call: String,
    /// Where the recorded program made the call (`file:line:col`).
    pub site: String,
    /// What the call did that the rule forbids.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] call #{} {} at {}: {}",
            self.rule, self.seq, self.call, self.site, self.detail
        )
    }
}

/// Every violation of one rule, or none.
fn verdict(v: Vec<Violation>) -> Result<(), Vec<Violation>> {
    if v.is_empty() {
        Ok(())
    } else {
        Err(v)
    }
}

#[track_caller]
fn fail(v: Result<(), Vec<Violation>>) {
    if let Err(v) = v {
        let lines: Vec<String> = v.iter().map(|x| format!("  {x}")).collect();
        panic!("{} violation(s):\n{}", v.len(), lines.join("\n"));
    }
}

/// A recorded trace, with renderings and rules for tests.
pub struct Recording {
    /// The trace, as read back from the recorder's bytes.
    pub trace: Trace,
}

impl Recording {
    /// The calls as text for a snapshot: ids (never addresses), call sites as file only,
    /// scalar arguments as recorded, no times.
    pub fn render(&self) -> String {
        mask_lines(&trace::render(&self.trace))
    }

    fn violation(&self, rule: &str, c: &CallRecord, detail: impl Into<String>) -> Violation {
        Violation {
            rule: rule.into(),
            seq: c.seq,
            call: c.call.kind().name().into(),
            site: self.trace.site(c.site),
            detail: detail.into(),
        }
    }

    fn each(
        &self,
        rule: &str,
        bad: impl Fn(&Call) -> Option<String>,
    ) -> Result<(), Vec<Violation>> {
        verdict(
            self.trace
                .calls
                .iter()
                .filter_map(|c| bad(&c.call).map(|d| self.violation(rule, c, d)))
                .collect(),
        )
    }

    /// No call that makes the host wait for the device (syncs, blocking copies, event syncs).
    pub fn check_no_host_sync(&self) -> Result<(), Vec<Violation>> {
        self.each("no-host-sync", |c| {
            c.is_host_sync()
                .then(|| "the host waits for the device here".to_string())
        })
    }

    /// No device allocation or free.
    pub fn check_no_device_alloc(&self) -> Result<(), Vec<Violation>> {
        self.each("no-device-alloc", |c| match c {
            Call::Alloc { bytes } | Call::AllocManaged { bytes } => {
                Some(format!("allocates {bytes} bytes of device memory"))
            }
            Call::Free { .. } => Some("frees device memory".into()),
            _ => None,
        })
    }

    /// No asynchronous copy to or from host memory that is not pinned (the copy is then not
    /// asynchronous, and a graph cannot capture it).
    pub fn check_no_pageable_async_copy(&self) -> Result<(), Vec<Violation>> {
        self.each("no-pageable-async-copy", |c| match c {
            Call::CopyD2HAsync {
                dst: HostAddr::Unknown,
                len,
                ..
            } => Some(format!("copies {len} bytes into pageable host memory")),
            Call::CopyH2DAsyncRetained {
                src: HostAddr::Unknown,
                len,
                ..
            } => Some(format!("copies {len} bytes from pageable host memory")),
            _ => None,
        })
    }

    /// The whole recording could be captured as one CUDA graph in `q`'s capture mode and
    /// stream kind: no call fails or invalidates the capture, none runs outside the graph,
    /// none is a hazard.
    pub fn check_capturable(&self, q: CaptureQuery) -> Result<(), Vec<Violation>> {
        let by_seq: BTreeMap<u64, &CallRecord> =
            self.trace.calls.iter().map(|c| (c.seq, c)).collect();
        verdict(
            analysis::capture_verdicts(&self.trace, q)
                .into_iter()
                .filter(|v| matches!(v.category, "fails" | "outside-graph" | "hazard"))
                .map(|v| Violation {
                    rule: format!("capturable/{}", v.rule),
                    seq: v.seq,
                    call: v.call,
                    site: by_seq
                        .get(&v.seq)
                        .map_or(v.site, |c| self.trace.site(c.site)),
                    detail: format!("{}: {}", v.category, v.detail),
                })
                .collect(),
        )
    }

    /// No two accesses to the same bytes on different streams, one a write, unordered.
    pub fn check_no_race(&self) -> Result<(), Vec<Violation>> {
        let r = analysis::analyze(
            &self.trace,
            CaptureQuery::default(),
            Sections {
                capture: false,
                races: true,
                leaks: false,
            },
        );
        verdict(
            r.races
                .into_iter()
                .map(|x| Violation {
                    rule: "no-race".into(),
                    seq: x.second.0,
                    call: x.second.1,
                    site: x.second.2,
                    detail: format!(
                        "{} race on {} with call #{} {} at {}",
                        x.kind, x.buffer, x.first.0, x.first.1, x.first.2
                    ),
                })
                .collect(),
        )
    }

    /// Nothing allocated in the recording is left allocated at its end, and nothing is used
    /// after it was freed.
    pub fn check_no_leak(&self) -> Result<(), Vec<Violation>> {
        let r = analysis::analyze(
            &self.trace,
            CaptureQuery::default(),
            Sections {
                capture: false,
                races: false,
                leaks: true,
            },
        );
        verdict(
            r.lifetimes
                .into_iter()
                .map(|l| Violation {
                    // A step the harness records owns what it allocates: what it never frees
                    // is a leak here even when it frees nothing at all (what `analyze` calls
                    // held until exit, as a caching allocator holds its memory).
                    rule: format!("no-leak/{}", if l.is_problem() { l.kind } else { "leak" }),
                    seq: l.seq,
                    call: self
                        .trace
                        .calls
                        .iter()
                        .find(|c| c.seq == l.seq)
                        .map_or("?".into(), |c| c.call.kind().name().to_string()),
                    site: l.site,
                    detail: format!("{}: {}", l.buffer, l.detail),
                })
                .collect(),
        )
    }

    /// At most `n` kernel launches.
    pub fn check_at_most_launches(&self, n: usize) -> Result<(), Vec<Violation>> {
        let launches: Vec<&CallRecord> = self
            .trace
            .calls
            .iter()
            .filter(|c| c.call.launch().is_some())
            .collect();
        match launches.get(n) {
            None => Ok(()),
            Some(c) => Err(vec![self.violation(
                "at-most-launches",
                c,
                format!(
                    "launch {} of {} (at most {n} allowed): {}",
                    n + 1,
                    launches.len(),
                    c.call
                        .launch()
                        .map_or("?".into(), |(k, _)| self.trace.kernel_name(k))
                ),
            )]),
        }
    }

    /// Panic, listing every violation, unless [`Self::check_no_host_sync`] passes.
    #[track_caller]
    pub fn assert_no_host_sync(&self) {
        fail(self.check_no_host_sync())
    }

    /// Panic, listing every violation, unless [`Self::check_no_device_alloc`] passes.
    #[track_caller]
    pub fn assert_no_device_alloc(&self) {
        fail(self.check_no_device_alloc())
    }

    /// Panic, listing every violation, unless [`Self::check_no_pageable_async_copy`] passes.
    #[track_caller]
    pub fn assert_no_pageable_async_copy(&self) {
        fail(self.check_no_pageable_async_copy())
    }

    /// Panic, listing every violation, unless [`Self::check_capturable`] passes.
    #[track_caller]
    pub fn assert_capturable(&self, q: CaptureQuery) {
        fail(self.check_capturable(q))
    }

    /// Panic, listing every violation, unless [`Self::check_no_race`] passes.
    #[track_caller]
    pub fn assert_no_race(&self) {
        fail(self.check_no_race())
    }

    /// Panic, listing every violation, unless [`Self::check_no_leak`] passes.
    #[track_caller]
    pub fn assert_no_leak(&self) {
        fail(self.check_no_leak())
    }

    /// Panic, listing every violation, unless [`Self::check_at_most_launches`] passes.
    #[track_caller]
    pub fn assert_at_most_launches(&self, n: usize) {
        fail(self.check_at_most_launches(n))
    }

    /// Launches by kernel (`module::name`).
    pub fn launches(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for c in &self.trace.calls {
            if let Some((k, _)) = c.call.launch() {
                *m.entry(self.trace.kernel_name(k)).or_default() += 1;
            }
        }
        m
    }

    /// Bytes copied host to device and device to host (synchronous and asynchronous).
    pub fn bytes_copied(&self) -> (u64, u64) {
        let (mut h2d, mut d2h) = (0, 0);
        for c in &self.trace.calls {
            match &c.call {
                Call::CopyH2D { len, .. }
                | Call::CopyH2DAsync { len, .. }
                | Call::CopyH2DAsyncRetained { len, .. } => h2d += len,
                Call::CopyD2H { len, .. }
                | Call::CopyD2HOnStream { len, .. }
                | Call::CopyD2HAsync { len, .. } => d2h += len,
                _ => {}
            }
        }
        (h2d, d2h)
    }

    /// Calls that make the host wait for the device.
    pub fn host_syncs(&self) -> usize {
        self.trace
            .calls
            .iter()
            .filter(|c| c.call.is_host_sync())
            .count()
    }
}

/// `trace format 16` (this build's format, which `render` and `show` print) becomes
/// `trace format <this build's>`, so that a snapshot does not change when the format does.
pub fn mask_format(text: &str) -> String {
    text.replace(
        &format!("trace format {}", crate::trace::FORMAT_VERSION),
        "trace format <this build's>",
    )
}

/// `src/model/mod.rs:346:18` becomes `src/model/mod.rs:_`, wherever a Rust source path with a
/// line (and optional column) appears in `text`.
pub fn mask_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(".rs:") {
        let (head, tail) = rest.split_at(i + 4);
        out.push_str(head);
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            rest = tail;
            continue;
        }
        let mut end = digits;
        let after = &tail[digits..];
        if let Some(col) = after.strip_prefix(':') {
            let d = col.bytes().take_while(u8::is_ascii_digit).count();
            if d > 0 {
                end += 1 + d;
            }
        }
        out.push('_');
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// What `f` logs through `tracing` on this thread at warning level and up, as plain text.
/// For tests of what a backend tells an operator (one sweep line after a fault, say), which is
/// part of its contract as much as its return values.
pub fn warnings_of<T>(f: impl FnOnce() -> T) -> (T, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut v) = self.0.lock() {
                v.extend_from_slice(b);
            }
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let out = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || out.clone())
        .finish();
    let r = tracing::subscriber::with_default(sub, || {
        // Another thread may have met a call site first, with no subscriber, and cached that
        // it is never enabled: look again now that this one is in place.
        tracing::callsite::rebuild_interest_cache();
        f()
    });
    let text = buf
        .0
        .lock()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .unwrap_or_default();
    (r, text)
}

#[cfg(test)]
mod tests {
    use super::mask_lines;

    #[test]
    fn lines_and_columns_are_masked_and_nothing_else() {
        assert_eq!(
            mask_lines("at src/a.rs:12:5, b.rs:7 and c.rs: none; x.rs:9:"),
            "at src/a.rs:_, b.rs:_ and c.rs: none; x.rs:_:"
        );
        assert_eq!(mask_lines("no sites"), "no sites");
    }
}
