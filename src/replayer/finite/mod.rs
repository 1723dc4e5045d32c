//! `replay --check-finite`: which launch first wrote a NaN (or, on request, an Inf).
//!
//! The trace replays in recorded order with every graph's captured calls run eagerly (a sync
//! after each node, so the check sees each node's own output). After each launch, every
//! float buffer it may write is scanned on the launch's stream (`kernel.rs`, `scan.rs`); before it,
//! every buffer it touches whose contents the check has not yet seen is scanned too, so a
//! launch whose inputs already held NaN is told apart from the one that produced it. Scan
//! results collect on the device and are read back in batches; the verdict is worked out
//! afterwards, in recorded order.
//!
//! What a pointer points at comes from `--dtype`, else the kernel's owner (`KernelDesc::
//! with_elems`), else its C signature (`float*`, `__half*`, `__nv_bfloat16*`). Whether a
//! launch writes through it comes from the declared access, else from `const` in the
//! signature. A scan covers the pointer to the end of its buffer: the trace has no write
//! extents.

mod kernel;
mod run;
mod scan;

use super::state::{sync_all, Guard, State};
use super::{ModuleLoader, ReplayError, Replayer};
use crate::backend::{ElemType, GpuBackend};
use crate::trace::*;
use run::Run;
use scan::Scanner;
use serde::Serialize;
use std::time::Instant;

/// What a finding under a guessed element type says of itself.
const SUSPECTED: &str = " (suspected: its element type is a guess)";
/// Result slots per batch read back.
const SLOTS: usize = 4096;
/// Writers listed after the first.
const MAX_WRITERS: usize = 16;

/// What the check looks for and how it reads buffers.
#[derive(Clone, Debug, Default)]
pub struct FiniteOptions {
    /// Count +Inf and -Inf too (masked logits and running maxima start at -inf, so they are
    /// legitimate in places: off by default).
    pub inf: bool,
    /// Buffers never checked.
    pub ignore: Vec<BufferId>,
    /// Element types given by the user, which win over the kernel's and the signature's.
    pub dtypes: Vec<(BufferId, ElemType)>,
    /// `--dtype` rules for kernels whose names say no type.
    pub rules: Vec<crate::trace::kernel_types::TypeRule>,
    /// What a replay measured each launch writing (`Replayer::measure_writes`): a launch's
    /// undeclared pointers are then checked over the bytes it wrote, and typed from them when
    /// nothing else says their type.
    pub writes: Option<std::sync::Arc<super::writes::WriteExtents>>,
}

/// A non-finite value a launch wrote.
#[derive(Clone, Debug, Serialize)]
pub struct NonFinite {
    /// The launch's seq (for a graph's node, the captured call's).
    pub seq: u64,
    /// Where it ran in recorded order: its own seq, or its graph's launch.
    pub at: u64,
    /// The graph launch it ran in, when it is a graph's node (`graph0 launched at #N`).
    pub in_graph: Option<String>,
    /// `module::kernel`.
    pub kernel: String,
    /// Where the recorded program launched it.
    pub site: String,
    /// The launch as `show` prints it, scalar arguments by their C types.
    pub call: String,
    /// Which parameter points at the values.
    pub param: usize,
    /// Which pointer inside that by-value parameter, when it holds several (PyTorch's array
    /// of data pointers).
    pub pointer: Option<usize>,
    /// The buffer the pointer points into.
    pub buffer: String,
    /// The pointer's byte offset in it.
    pub offset: u64,
    /// Where the buffer was allocated.
    pub buffer_site: String,
    /// The element type the values were read as.
    pub elem: &'static str,
    /// How that type was known (`declared`, `its C signature`, `its name's template
    /// arguments`, ...).
    pub elem_how: &'static str,
    /// The first non-finite element, counted from the pointer.
    pub index: u64,
    /// `NaN`, `inf` or `-inf`.
    pub value: &'static str,
    /// NaN elements in the range checked: the bytes the launch was measured writing
    /// (`measured`), else from the pointer to the end of the buffer.
    pub nan: u64,
    /// Inf elements (either sign) there.
    pub inf: u64,
    /// The range is the bytes the launch was measured writing; `offset` is where they start.
    pub measured: bool,
    /// The element type was guessed (inferred from the bytes, or an unconfirmed name code):
    /// the value may be no NaN at all.
    pub suspected: bool,
    /// The launch's inputs that already held non-finite values before it ran (empty: it
    /// produced them).
    pub inputs: Vec<String>,
}

/// A recorded readback that holds non-finite values: what the recorded program saw.
#[derive(Clone, Debug, Serialize)]
pub struct RecordedNonFinite {
    /// The readback's seq.
    pub seq: u64,
    /// The readback, by seq and kind.
    pub call: String,
    /// The buffer it read.
    pub buffer: String,
    /// The element type its bytes were read as (the last kernel to write the buffer said).
    pub elem: &'static str,
    /// The first non-finite element.
    pub index: u64,
    /// `NaN`, `inf` or `-inf`.
    pub value: &'static str,
    /// Non-finite elements read back.
    pub count: u64,
}

/// What `check_finite` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FiniteReport {
    /// Launches replayed (graph nodes counted each time they ran).
    pub launches: u64,
    /// Launches with at least one float buffer they write checked.
    pub checked: u64,
    /// Scans run (before and after launches).
    pub scans: u64,
    /// Bytes the scans read.
    pub bytes_scanned: u64,
    /// Kernels with a written pointer of unknown element type: `module::kernel param i`.
    pub untyped: Vec<String>,
    /// Launches whose writes a replay measured (`WriteExtents`), when it did.
    pub measured_launches: Option<u64>,
    /// Kernels this backend cannot run, so their outputs were not checked.
    pub opaque: Vec<String>,
    /// The first launch that wrote a non-finite value from finite inputs, else the first that
    /// wrote one at all.
    pub first: Option<NonFinite>,
    /// Every launch that turned a buffer non-finite, in order (the first few).
    pub writers: Vec<NonFinite>,
    /// The first recorded readback holding non-finite values.
    pub recorded: Option<RecordedNonFinite>,
    /// Where the non-finite value the first writer read came from, when that writer's inputs
    /// already held one and an upload or memset put it there.
    pub planted: Option<Planted>,
    /// Why the flight recorder dumped, when the trace is a dump.
    pub dump_reason: Option<String>,
    /// The replay stopped early: the call and the error.
    pub stopped: Option<String>,
    /// Wall time of the whole check, setup included.
    pub elapsed_ms: f64,
    /// Wall time of the calls and their scans alone (what a plain replay's loop time
    /// compares with: setup excluded).
    pub replay_ms: f64,
    /// Count Inf as well as NaN.
    pub inf_checked: bool,
}

impl FiniteReport {
    /// Whether the check agrees with the recording: nothing non-finite anywhere, or the
    /// recorded non-finite readback reproduced with a launch before it named as its writer.
    pub fn passed(&self) -> bool {
        match (&self.recorded, &self.first) {
            _ if self.stopped.is_some() || self.checked_nothing() => false,
            (None, None) => true,
            (Some(r), Some(f)) => f.at < r.seq,
            _ => false,
        }
    }

    /// Launches ran but none could be checked (opaque kernels, unknown types): no answer.
    pub fn checked_nothing(&self) -> bool {
        self.launches > 0 && self.checked == 0
    }

    /// The report as text, verdict last.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let what = if self.inf_checked { "NaN/Inf" } else { "NaN" };
        let _ = writeln!(
            s,
            "finite check ({what}): {} launches replayed, {} checked; {} scans read {}; calls and scans {:.3} ms ({:.1} ms with setup)",
            self.launches,
            self.checked,
            self.scans,
            bytes_text(self.bytes_scanned),
            self.replay_ms,
            self.elapsed_ms
        );
        if let Some(n) = self.measured_launches {
            let _ = writeln!(
                s,
                "  what {n} launches wrote was measured at replay: their undeclared pointers are checked over the bytes they wrote"
            );
        }
        for u in &self.untyped {
            let _ = writeln!(
                s,
                "  not checked: {u} (element type unknown: declare it with KernelDesc::with_elems, or pass --dtype BUF=TYPE or --dtype 'KERNEL_GLOB:ARG=TYPE')"
            );
        }
        for o in &self.opaque {
            let _ = writeln!(s, "  not checked: {o} cannot run on this backend");
        }
        if let Some(r) = &self.dump_reason {
            let _ = writeln!(s, "dumped because: {r}");
        }
        self.write_found(&mut s, what);
        let later: Vec<&NonFinite> = self
            .writers
            .iter()
            .filter(|w| self.first.as_ref().is_none_or(|f| f.seq != w.seq))
            .collect();
        if !later.is_empty() {
            let _ = writeln!(s, "other launches that wrote non-finite values:");
            for w in later {
                let from = if w.inputs.is_empty() {
                    "from finite inputs"
                } else {
                    "inputs already non-finite"
                };
                let _ = writeln!(
                    s,
                    "  #{} {} -> {}+{} ({} {}, first at {}; {from})",
                    w.seq,
                    w.kernel,
                    w.buffer,
                    w.offset,
                    w.nan + w.inf,
                    w.elem,
                    w.index
                );
            }
        }
        if let Some(r) = &self.recorded {
            let _ = writeln!(
                s,
                "recorded: {} read back {} non-finite {} value(s) from {}, the first at element {} ({})",
                r.call, r.count, r.elem, r.buffer, r.index, r.value
            );
        }
        if let Some(e) = &self.stopped {
            let _ = writeln!(s, "the replay stopped: {e}");
        }
        let _ = writeln!(s, "{}", self.verdict(what));
        s
    }

    /// Where the first non-finite value came from: the upload that planted it, the first
    /// launch that wrote one, what that launch read.
    fn write_found(&self, s: &mut String, what: &str) {
        use std::fmt::Write;
        if let Some(p) = &self.planted {
            let _ = writeln!(
                s,
                "non-finite value planted: {} at {}+{} ({} as launch #{} reads it), put there by call #{} @ {}",
                p.value, p.buffer, p.offset, p.elem, p.reader_seq, p.seq, p.site
            );
            let _ = writeln!(s, "  the call: {}", p.call);
            let _ = writeln!(s, "  its first reader: #{} {}", p.reader_seq, p.reader);
        }
        if let Some(f) = &self.first {
            let graph = f
                .in_graph
                .as_ref()
                .map(|g| format!(", a node of {g}"))
                .unwrap_or_default();
            let suspected = if f.suspected { SUSPECTED } else { "" };
            let _ = writeln!(
                s,
                "first non-finite value{suspected}: {} written by call #{} {}{graph} @ {}",
                f.value, f.seq, f.kernel, f.site
            );
            let range = match f.measured {
                true => "in the bytes it wrote (measured at replay)",
                false => "from the pointer to the end of the buffer",
            };
            let _ = writeln!(
                s,
                "  into parameter {}{} = {}+{} ({} from {}, allocated at {}): element {} is {}; {} NaN, {} inf {range}",
                f.param,
                f.pointer.map(|j| format!(" pointer {j}")).unwrap_or_default(),
                f.buffer,
                f.offset,
                f.elem,
                f.elem_how,
                f.buffer_site,
                f.index,
                f.value,
                f.nan,
                f.inf
            );
            let _ = writeln!(s, "  the launch: {}", f.call);
            if f.inputs.is_empty() {
                let _ = writeln!(
                    s,
                    "  its inputs held no {what} before it ran: it produced the value"
                );
            } else {
                for i in &f.inputs {
                    let _ = writeln!(s, "  an input already held non-finite values: {i}");
                }
            }
        }
    }

    /// The last line: what the check concludes, and what it rests on.
    fn verdict(&self, what: &str) -> String {
        let planted = self
            .planted
            .as_ref()
            .filter(|_| self.first.as_ref().is_none_or(|f| !f.inputs.is_empty()));
        match (&self.recorded, &self.first) {
            _ if self.stopped.is_some() => "-> check INCOMPLETE".to_string(),
            (_, Some(f)) if planted.is_some_and(|p| p.reader_seq <= f.seq) => {
                let p = planted.expect("checked");
                format!(
                    "-> {} PLANTED by call #{} (no launch made it), first read by {} at #{}",
                    p.value, p.seq, p.reader, p.reader_seq
                )
            }
            _ if self.checked_nothing() => {
                "-> NOTHING CHECKED: no launch that writes floats could run and be scanned here"
                    .to_string()
            }
            (None, None) if self.untyped.is_empty() && self.opaque.is_empty() => {
                format!("-> no {what} written")
            }
            // Said with what it rests on: a launch not checked may have written one.
            (None, None) => format!(
                "-> no {what} written by the {} of {} launches checked; {} pointer(s) of \
                 unknown element type and {} kernel(s) this backend cannot run were not \
                 (listed above)",
                self.checked,
                self.launches,
                self.untyped.len(),
                self.opaque.len()
            ),
            (Some(r), Some(f)) if f.at < r.seq => format!(
                "-> {} REPRODUCED: first written by {} at #{}{}",
                r.value,
                f.kernel,
                f.seq,
                if f.suspected { SUSPECTED } else { "" }
            ),
            (Some(r), _) => format!(
                "-> the recorded {} at #{} was NOT REPRODUCED before it",
                r.value, r.seq
            ),
            (None, Some(f)) => format!(
                "-> {} written by {} at #{}{}, though the recording read back none",
                f.value,
                f.kernel,
                f.seq,
                if f.suspected { SUSPECTED } else { "" }
            ),
        }
    }
}

/// Where a non-finite value some launch read came from, when no launch made it: an upload or a
/// memset, found by reading its bytes as the launch read them.
#[derive(Clone, Debug, Serialize)]
pub struct Planted {
    /// The copy's or memset's seq.
    pub seq: u64,
    /// It, as `show` prints it.
    pub call: String,
    /// Where the recorded program made it.
    pub site: String,
    /// The buffer and byte offset of the first non-finite element it put there.
    pub buffer: String,
    /// That byte offset.
    pub offset: u64,
    /// The element type it was read as (the reading launch's).
    pub elem: &'static str,
    /// `NaN`, `inf` or `-inf`.
    pub value: &'static str,
    /// The first launch that read it.
    pub reader_seq: u64,
    /// That launch's kernel.
    pub reader: String,
}

/// `812 B`, `4.0 KiB`, `1.5 GiB`.
pub(in crate::replayer) fn bytes_text(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{b} B"),
        _ => format!("{v:.1} {}", units[u]),
    }
}

pub(super) fn class_name(c: usize) -> &'static str {
    ["NaN", "inf", "-inf"][c.min(2)]
}

impl Replayer<'_> {
    /// Replay the trace on `gpu`, scanning what each launch writes for NaN (and Inf when
    /// asked), and name the first launch that wrote one. See the module docs.
    pub fn check_finite(
        &self,
        gpu: &dyn GpuBackend,
        opts: &FiniteOptions,
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<FiniteReport, ReplayError> {
        let t0 = Instant::now();
        let kernels = self.kernels(gpu, loader)?;
        let mut report = FiniteReport {
            dump_reason: self.trace.dump.as_ref().map(|d| d.reason.clone()),
            inf_checked: opts.inf,
            ..Default::default()
        };
        let mut guard = Guard {
            r: self,
            gpu,
            st: State::new(&kernels),
        };
        self.setup(gpu, &mut guard.st)?;
        let mut scanner = Scanner::new(gpu).map_err(|e| ReplayError::Setup {
            what: "loading the finite-value scan kernel".into(),
            cause: format!("{e:#}"),
        })?;
        let mut run = Run::new(self, opts);
        report.measured_launches = opts.writes.as_ref().map(|w| w.launches.len() as u64);
        let t_run = Instant::now();
        let st = &mut guard.st;
        for (n, graph) in self.eager_calls() {
            if let Err(e) = run.one(gpu, st, &mut scanner, n, graph, &mut report) {
                report.stopped = Some(e);
                break;
            }
            // A graph's nodes on several streams ordered by events inside the capture: one
            // at a time, so each scan sees its own node's output.
            if graph.is_some() && n.call.launch().is_some() {
                if let Err(e) = sync_all(gpu, st) {
                    report.stopped = Some(format!("graph node #{}: {e:#}", n.seq));
                    break;
                }
            }
        }
        if let Err(e) = scanner.flush(gpu, st) {
            report
                .stopped
                .get_or_insert(format!("reading the scans back: {e:#}"));
        }
        report.replay_ms = t_run.elapsed().as_secs_f64() * 1e3;
        report.scans = scanner.done.len() as u64;
        report.opaque = {
            let mut v: Vec<String> = st
                .opaque
                .iter()
                .map(|k| self.trace.kernel_name(*k))
                .collect();
            v.sort();
            v
        };
        report.untyped = std::mem::take(&mut run.typing.untyped);
        run.verdict(&scanner.done, &mut report);
        if let Err(e) = scanner.release(gpu) {
            tracing::warn!("finite check: freeing its results buffer: {e:#}");
        }
        report.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
        drop(guard);
        Ok(report)
    }
}
