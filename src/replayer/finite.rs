//! `replay --check-finite`: which launch first wrote a NaN (or, on request, an Inf).
//!
//! The trace replays in recorded order with every graph's captured calls run eagerly (a sync
//! after each node, so the check sees each node's own output). After each launch, every
//! float buffer it may write is scanned on the launch's stream (`finite_kernel`); before it,
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

use super::finite_kernel as fk;
use super::state::{resolve_stream, sync_all, Guard, State};
use super::views::Typing;
use super::{ModuleLoader, Outcome, ReplayError, Replayer};
use crate::backend::{DevicePtr, ElemType, GpuBackend, KernelArg, KernelHandle};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde::Serialize;
use std::time::Instant;

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
            let suspected = match f.suspected {
                true => " (suspected: its element type is a guess)",
                false => "",
            };
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
        let planted = self
            .planted
            .as_ref()
            .filter(|_| self.first.as_ref().is_none_or(|f| !f.inputs.is_empty()));
        let verdict = match (&self.recorded, &self.first) {
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
                if f.suspected {
                    " (suspected: its element type is a guess)"
                } else {
                    ""
                }
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
                if f.suspected {
                    " (suspected: its element type is a guess)"
                } else {
                    ""
                }
            ),
        };
        let _ = writeln!(s, "{verdict}");
        s
    }
}

/// One pointer argument as the check reads it.
#[derive(Clone, Copy, Debug)]
struct View {
    param: usize,
    pointer: Option<usize>,
    how: &'static str,
    buf: BufferId,
    off: u64,
    n: u64,
    elem: ElemType,
    written: bool,
    measured: bool,
}

type Key = (BufferId, u64, u64, ElemType);

/// What a copy or memset put in place.
#[derive(Clone, Copy)]
enum Fill {
    /// An upload's bytes, in the trace.
    Blob(BlobId),
    /// One byte, repeated.
    Byte(u8),
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

impl View {
    fn key(&self) -> Key {
        (self.buf, self.off, self.n, self.elem)
    }
}

/// What happened, in recorded order, for the verdict.
enum Event {
    /// Bytes reached `buf` without a kernel: every view of it is unknown again.
    Untyped { buf: BufferId, seq: u64 },
    /// Bytes the trace holds reached `buf` at `off`: what the host uploaded or a memset's
    /// byte, which may be where a non-finite value came from.
    Planting {
        seq: u64,
        buf: BufferId,
        off: u64,
        len: u64,
        bytes: Fill,
    },
    /// A launch and its scans (slot before, slot after).
    Launch {
        seq: u64,
        graph: Option<(u64, GraphId)>,
        kernel: KernelId,
        views: Vec<(View, Option<usize>, Option<usize>)>,
    },
    /// A recorded readback.
    Readback { seq: u64, buf: BufferId },
}

/// Per-class first index and count of one scan.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    first: [u64; fk::CLASSES],
    count: [u64; fk::CLASSES],
}

impl Counts {
    /// The first bad class and its first index, NaN always, Inf when asked.
    fn bad(&self, inf: bool) -> Option<(usize, u64)> {
        (0..fk::CLASSES)
            .filter(|c| *c == 0 || inf)
            .filter(|c| self.count[*c] > 0)
            .min_by_key(|c| self.first[*c])
            .map(|c| (c, self.first[c]))
    }
}

/// `812 B`, `4.0 KiB`, `1.5 GiB`.
pub(super) fn bytes_text(b: u64) -> String {
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

fn class_name(c: usize) -> &'static str {
    ["NaN", "inf", "-inf"][c.min(2)]
}

/// The device side of a check: the scan kernel and its results buffer.
struct Scanner {
    handle: KernelHandle,
    results: DevicePtr,
    used: usize,
    sm: u32,
    /// Results of every scan so far, by slot number across batches.
    done: Vec<Counts>,
}

impl Scanner {
    fn new(gpu: &dyn GpuBackend) -> anyhow::Result<Scanner> {
        gpu.load_module(&fk::module())?;
        let handle = gpu.kernel(fk::MODULE, fk::KERNEL)?;
        let results = gpu.alloc(SLOTS * fk::CLASSES * 16)?;
        let s = Scanner {
            handle,
            results,
            used: 0,
            sm: gpu.sm_count().unwrap_or(1).max(1),
            done: Vec::new(),
        };
        s.reset(gpu)?;
        Ok(s)
    }

    fn reset(&self, gpu: &dyn GpuBackend) -> anyhow::Result<()> {
        let half = SLOTS * fk::CLASSES * 8;
        gpu.memset(self.results, 0xff, half)?;
        gpu.memset(self.results.offset(half), 0, half)
    }

    /// Enqueue a scan of `n` elements at `p` on `stream`; its slot number.
    fn scan(
        &mut self,
        gpu: &dyn GpuBackend,
        st: &State,
        p: DevicePtr,
        n: u64,
        elem: ElemType,
        stream: u64,
    ) -> anyhow::Result<usize> {
        if self.used == SLOTS {
            self.flush(gpu, st)?;
        }
        let (firsts, counts) = fk::slot_ptrs(self.results, SLOTS, self.used);
        let words = (n * elem.size()).div_ceil(16).max(1);
        let grid = words.div_ceil(fk::BLOCK as u64).min(self.sm as u64 * 8) as u32;
        let (nb, eb) = (n.to_le_bytes(), fk::elem_code(elem).to_le_bytes());
        gpu.launch_typed(
            self.handle,
            [grid.max(1), 1, 1],
            [fk::BLOCK, 1, 1],
            0,
            stream,
            &[
                KernelArg::Buffer(p),
                KernelArg::Bytes(&nb),
                KernelArg::Bytes(&eb),
                KernelArg::Buffer(firsts),
                KernelArg::Buffer(counts),
            ],
        )?;
        self.used += 1;
        Ok(self.done.len() + self.used - 1)
    }

    /// Give the results buffer back (the replay's own buffers go with its state).
    fn release(self, gpu: &dyn GpuBackend) -> anyhow::Result<()> {
        gpu.free(self.results)
    }

    /// Wait for every stream, read the batch's results back, start a new batch.
    fn flush(&mut self, gpu: &dyn GpuBackend, st: &State) -> anyhow::Result<()> {
        if self.used == 0 {
            return Ok(());
        }
        sync_all(gpu, st)?;
        let mut bytes = vec![0u8; SLOTS * fk::CLASSES * 16];
        gpu.copy_d2h(self.results, &mut bytes)?;
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        for s in 0..self.used {
            let mut c = Counts::default();
            for k in 0..fk::CLASSES {
                c.first[k] = word(s * fk::CLASSES + k);
                c.count[k] = word(SLOTS * fk::CLASSES + s * fk::CLASSES + k);
            }
            self.done.push(c);
        }
        self.used = 0;
        self.reset(gpu)
    }
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
        let mut run = Run {
            r: self,
            opts,
            events: Vec::new(),
            known: HashSet::default(),
            touched: HashSet::default(),
            written_as: HashMap::default(),
            typing: Typing::new(&opts.dtypes, &opts.rules, &opts.ignore),
        };
        run.typing.writes = opts.writes.as_deref();
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

/// One check in progress.
struct Run<'a, 't> {
    r: &'a Replayer<'t>,
    opts: &'a FiniteOptions,
    events: Vec<Event>,
    /// Views whose contents a scan has seen since bytes last reached their buffer untyped.
    known: HashSet<Key>,
    /// Buffers some replayed call has written. A read-only view of any other still holds the
    /// initial snapshot, which the verdict reads from the trace on the host when it must
    /// (a step's weights are not read twice on the device to learn they are finite).
    touched: HashSet<BufferId>,
    typing: Typing<'a>,
    /// The element type each tensor (buffer, offset) was last written as. A kernel reads its
    /// inputs as what wrote them: a conversion kernel's name gives one type for every pointer
    /// (`direct_copy_kernel<float>` reading bf16), the writer's view is the input's truth.
    /// And how many bytes were written there: a later reader's input is that tensor, not the
    /// rest of the allocation from its pointer (where other tensors' stale values lie).
    written_as: HashMap<(BufferId, u64), (ElemType, u64)>,
}

/// How an input's type is said when it came from the launch that wrote it.
const AS_WRITTEN: &str = "the launch that wrote it";

impl Run<'_, '_> {
    /// Issue one call (scans around a launch); an error that stops the check.
    fn one(
        &mut self,
        gpu: &dyn GpuBackend,
        st: &mut State,
        scanner: &mut Scanner,
        c: &CallRecord,
        graph: Option<(u64, GraphId)>,
        report: &mut FiniteReport,
    ) -> Result<(), String> {
        let fail = |e: &dyn std::fmt::Display| {
            format!("call #{} at {}: {e}", c.seq, self.r.trace.site(c.site))
        };
        let launch = c.call.launch();
        let mut views = Vec::new();
        let mut stream = 0;
        if let Some((kernel, args)) = launch {
            report.launches += 1;
            views = self.views(c.seq, kernel, args);
            if !st.opaque.contains(&kernel) {
                if let Some(s) = c.call.work_stream() {
                    stream = resolve_stream(st, s, c).map_err(|e| fail(&e))?;
                }
            }
        }
        let runs = launch.is_some_and(|(k, _)| !st.opaque.contains(&k));
        let mut scans: Vec<(View, Option<usize>, Option<usize>)> = Vec::new();
        for v in &views {
            let unseen = !self.known.contains(&v.key());
            let snapshot_input = !v.written && !self.touched.contains(&v.buf);
            let before = match runs && unseen && !snapshot_input {
                true => Some(
                    self.scan(gpu, st, scanner, v, stream, report)
                        .map_err(|e| fail(&format!("{e:#}")))?,
                ),
                false => None,
            };
            scans.push((*v, before, None));
        }
        match self.r.issue(gpu, st, c, false).map_err(|e| fail(&e))? {
            Outcome::Failed(e) if !matches!(c.ret, Some(Err(_))) => {
                return Err(fail(&format!("{e:#}")));
            }
            _ => {}
        }
        if launch.is_none() {
            let planting = match &c.call {
                Call::CopyH2D { dst, data, len }
                | Call::CopyH2DAsync { dst, data, len, .. }
                | Call::CopyH2DAsyncRetained { dst, data, len, .. } => {
                    Some((dst, *len, Fill::Blob(*data)))
                }
                Call::Memset { dst, value, len }
                | Call::MemsetAsync {
                    dst, value, len, ..
                } => Some((dst, *len, Fill::Byte(*value))),
                _ => None,
            };
            if let Some((DevAddr::Buf { buf, off }, len, bytes)) = planting {
                self.events.push(Event::Planting {
                    seq: c.seq,
                    buf: *buf,
                    off: *off,
                    len,
                    bytes,
                });
            }
            for buf in written_by(&c.call) {
                self.touched.insert(buf);
                self.known.retain(|k| k.0 != buf);
                self.events.push(Event::Untyped { buf, seq: c.seq });
            }
        }
        if let Some(DevAddr::Buf { buf, .. }) = c.call.readback_src() {
            self.events.push(Event::Readback {
                seq: c.seq,
                buf: *buf,
            });
        }
        let Some((kernel, _)) = launch else {
            return Ok(());
        };
        if runs && scans.iter().any(|(v, _, _)| v.written) {
            report.checked += 1;
        }
        // Other views of a buffer this launch wrote are stale: a caching allocator's segment
        // holds many tensors, reached through many pointers, so the next launch that uses one
        // scans it first.
        let now: Vec<Key> = scans
            .iter()
            .filter(|(v, _, _)| runs && v.written)
            .map(|(v, _, _)| v.key())
            .collect();
        self.known
            .retain(|k| !now.iter().any(|n| n.0 == k.0) || now.contains(k));
        for (v, before, after) in scans.iter_mut() {
            if runs && v.written {
                self.touched.insert(v.buf);
                self.written_as
                    .insert((v.buf, v.off), (v.elem, v.n * v.elem.size()));
                *after = Some(
                    self.scan(gpu, st, scanner, v, stream, report)
                        .map_err(|e| fail(&format!("{e:#}")))?,
                );
                self.known.insert(v.key());
            } else if runs && before.is_some() {
                // A snapshot input not scanned stays unknown: once its buffer is written, the
                // next launch that reads it scans it first.
                self.known.insert(v.key());
            }
        }
        self.events.push(Event::Launch {
            seq: c.seq,
            graph,
            kernel,
            views: scans,
        });
        Ok(())
    }

    fn scan(
        &self,
        gpu: &dyn GpuBackend,
        st: &State,
        scanner: &mut Scanner,
        v: &View,
        stream: u64,
        report: &mut FiniteReport,
    ) -> anyhow::Result<usize> {
        let (base, _) = st
            .bufs
            .get(&v.buf)
            .ok_or_else(|| anyhow::anyhow!("{} is not live", v.buf))?;
        report.bytes_scanned += v.n * v.elem.size();
        scanner.scan(gpu, st, base.offset(v.off as usize), v.n, v.elem, stream)
    }

    /// The launch's float pointer arguments, typed, with whether it writes through each.
    fn views(&mut self, seq: u64, kernel: KernelId, args: &[Arg]) -> Vec<View> {
        self.typing
            .views(self.r.trace, seq, kernel, args)
            .into_iter()
            .filter_map(|v| {
                let written = self.written_as.get(&(v.buf, v.off)).filter(|_| !v.written);
                let (elem, how) = match written {
                    Some((e, _)) if v.elem != Some(*e) => (*e, AS_WRITTEN),
                    _ => (v.elem?, v.how),
                };
                let bytes = written.map_or(v.bytes, |(_, b)| v.bytes.min(*b));
                let n = bytes / elem.size();
                (n > 0).then_some(View {
                    param: v.param,
                    pointer: v.inner,
                    how,
                    buf: v.buf,
                    off: v.off,
                    n,
                    elem,
                    written: v.written,
                    measured: v.measured,
                })
            })
            .collect()
    }

    /// Walk the events in order with the scans' results: the writers, the first, and the
    /// recorded readbacks that held non-finite values.
    fn verdict(&self, done: &[Counts], report: &mut FiniteReport) {
        let t = self.r.trace;
        let inf = self.opts.inf;
        // What each view held when last scanned, and where its contents came from.
        let mut status: HashMap<Key, (Counts, String)> = HashMap::default();
        let mut source: HashMap<BufferId, String> = HashMap::default();
        // Who wrote the tensor at (buffer, offset) last.
        let mut writer_of: HashMap<(BufferId, u64), String> = HashMap::default();
        let mut last_elem: HashMap<BufferId, ElemType> = HashMap::default();
        let alloc_sites = alloc_sites(t);
        let mut plantings: Vec<&Event> = Vec::new();
        for ev in &self.events {
            match ev {
                Event::Planting { .. } => plantings.push(ev),
                Event::Untyped { buf, seq } => {
                    status.retain(|k, _| k.0 != *buf);
                    source.insert(*buf, format!("written by call #{seq}"));
                }
                Event::Readback { seq, buf } => {
                    if report.recorded.is_some() {
                        continue;
                    }
                    let Some(elem) = self
                        .opts
                        .dtypes
                        .iter()
                        .find(|(b, _)| b == buf)
                        .map(|(_, e)| *e)
                        .or(last_elem.get(buf).copied())
                    else {
                        continue;
                    };
                    let Some(bytes) = self.r.by_seq.get(seq).and_then(|c| recorded_bytes(t, c))
                    else {
                        continue;
                    };
                    let (first, count) = fk::scan_bytes(bytes, elem);
                    let c = Counts { first, count };
                    if let Some((class, index)) = c.bad(inf) {
                        let call = self
                            .r
                            .by_seq
                            .get(seq)
                            .map(|c| format!("call #{seq} {}", c.call.kind().name()))
                            .unwrap_or_else(|| format!("call #{seq}"));
                        report.recorded = Some(RecordedNonFinite {
                            seq: *seq,
                            call,
                            buffer: buf.to_string(),
                            elem: elem.name(),
                            index,
                            value: class_name(class),
                            count: count[0] + if inf { count[1] + count[2] } else { 0 },
                        });
                    }
                }
                Event::Launch {
                    seq,
                    graph,
                    kernel,
                    views,
                } => {
                    for (v, before, _) in views {
                        if let Some(c) = before.and_then(|s| done.get(s)) {
                            let from = writer_of
                                .get(&(v.buf, v.off))
                                .cloned()
                                .or_else(|| {
                                    source.get(&v.buf).map(|s| {
                                        format!(
                                            "no launch checked wrote it there ({} {s} last)",
                                            v.buf
                                        )
                                    })
                                })
                                .unwrap_or_else(|| "from the initial snapshot".into());
                            status.insert(v.key(), (*c, from));
                        }
                    }
                    // A launch that turned a view non-finite (more bad values than before it
                    // ran: a view may reach past its tensor): what its inputs held before it
                    // ran decides whether it produced the values.
                    let grew = |v: &View, after: &Option<usize>| {
                        let Some(c) = after.and_then(|s| done.get(s)) else {
                            return false;
                        };
                        c.bad(inf).is_some()
                            && status.get(&v.key()).is_none_or(|(p, _)| {
                                (0..fk::CLASSES)
                                    .filter(|k| *k == 0 || inf)
                                    .any(|k| c.count[k] > p.count[k])
                            })
                    };
                    let suspect = views.iter().any(|(v, _, after)| grew(v, after));
                    // What a measured output held before the launch is not its input, unless
                    // another pointer of the launch names the same bytes (an in-place op).
                    let is_input = |v: &View| {
                        !v.written
                            || !v.measured
                            || views.iter().any(|(o, _, _)| {
                                (o.param, o.pointer) != (v.param, v.pointer)
                                    && (o.buf, o.off) == (v.buf, v.off)
                            })
                    };
                    for (v, _, _) in views.iter().filter(|_| suspect) {
                        if !status.contains_key(&v.key()) && !source.contains_key(&v.buf) {
                            if let Some(c) = snapshot_counts(t, v) {
                                status.insert(v.key(), (c, "from the initial snapshot".into()));
                            }
                        }
                    }
                    let mut inputs: Vec<String> = views
                        .iter()
                        .filter(|(v, _, _)| suspect && is_input(v))
                        .filter_map(|(v, _, _)| {
                            let (c, from) = status.get(&v.key())?;
                            let (class, index) = c.bad(inf)?;
                            Some(format!(
                                "parameter {} = {}+{} ({}): {} NaN, {} inf, the first ({}) at element {index}; {from}",
                                v.param,
                                v.buf,
                                v.off,
                                v.elem.name(),
                                c.count[0],
                                c.count[1] + c.count[2],
                                class_name(class)
                            ))
                        })
                        .collect();
                    // A parameter struct names one tensor many times (cuBLAS's).
                    let mut seen = HashSet::default();
                    inputs.retain(|i| seen.insert(i.clone()));
                    if report.planted.is_none() && !inputs.is_empty() {
                        let bad = views.iter().map(|(v, _, _)| v).filter(|v| {
                            is_input(v)
                                && status
                                    .get(&v.key())
                                    .is_some_and(|(c, _)| c.bad(inf).is_some())
                        });
                        report.planted = bad
                            .into_iter()
                            .find_map(|v| planted_in(t, &plantings, v, inf))
                            .map(|mut p| {
                                p.reader_seq = *seq;
                                p.reader = t.kernel_name(*kernel);
                                p
                            });
                    }
                    let rec = self.r.by_seq.get(seq).copied();
                    for (v, _, _) in views.iter().filter(|(v, _, _)| v.written) {
                        last_elem.insert(v.buf, v.elem);
                    }
                    for (v, _, after) in views {
                        let Some(c) = after.and_then(|s| done.get(s)) else {
                            continue;
                        };
                        // A view reaches to the end of its allocation, which a caching
                        // allocator shares among tensors: what counts is more bad values
                        // than before, not any.
                        let was_bad = status.get(&v.key()).is_some_and(|(p, _)| {
                            (0..fk::CLASSES)
                                .filter(|k| *k == 0 || inf)
                                .all(|k| c.count[k] <= p.count[k])
                        });
                        let writer = format!("written by call #{seq} {}", t.kernel_name(*kernel));
                        status.insert(v.key(), (*c, writer.clone()));
                        writer_of.insert((v.buf, v.off), writer.clone());
                        source.insert(v.buf, writer);
                        let Some((class, index)) = c.bad(inf) else {
                            continue;
                        };
                        if was_bad {
                            continue;
                        }
                        let found = NonFinite {
                            seq: *seq,
                            at: graph.map_or(*seq, |(at, _)| at),
                            in_graph: graph.map(|(at, g)| format!("{g} launched at #{at}")),
                            kernel: t.kernel_name(*kernel),
                            site: rec.map(|c| t.site(c.site)).unwrap_or_default(),
                            call: rec.map(|c| render_call(t, c)).unwrap_or_default(),
                            param: v.param,
                            pointer: v.pointer,
                            buffer: v.buf.to_string(),
                            offset: v.off,
                            buffer_site: alloc_sites
                                .get(&v.buf)
                                .cloned()
                                .unwrap_or_else(|| "?".into()),
                            elem: v.elem.name(),
                            elem_how: v.how,
                            index,
                            value: class_name(class),
                            nan: c.count[0],
                            inf: c.count[1] + c.count[2],
                            measured: v.measured,
                            suspected: super::views::is_guess(v.how),
                            inputs: inputs.clone(),
                        };
                        let better = match &report.first {
                            None => true,
                            Some(f) => !f.inputs.is_empty() && found.inputs.is_empty(),
                        };
                        if better {
                            report.first = Some(found.clone());
                        }
                        if report.writers.len() < MAX_WRITERS {
                            report.writers.push(found);
                        }
                    }
                }
            }
        }
    }
}

/// The latest upload or memset before now that put a non-finite value (as `v` reads its
/// elements) where `v` reads.
fn planted_in(t: &Trace, plantings: &[&Event], v: &View, inf: bool) -> Option<Planted> {
    let size = v.elem.size();
    let (lo, hi) = (v.off, v.off + v.n * size);
    plantings.iter().rev().find_map(|ev| {
        let Event::Planting {
            seq,
            buf,
            off,
            len,
            bytes,
        } = ev
        else {
            return None;
        };
        let (from, to) = ((*off).max(lo), (off + len).min(hi));
        if *buf != v.buf || from >= to || (from - lo) % size != 0 {
            return None;
        }
        let (class, at) = match bytes {
            Fill::Byte(b) => {
                let one = vec![*b; size as usize];
                let (first, count) = fk::scan_bytes(&one, v.elem);
                let c = Counts { first, count };
                (c.bad(inf)?.0, from)
            }
            Fill::Blob(id) => {
                let data = t.try_blob(*id).ok().flatten()?;
                let part = data.get((from - off) as usize..(to - off) as usize)?;
                let (first, count) = fk::scan_bytes(part, v.elem);
                let (class, index) = Counts { first, count }.bad(inf)?;
                (class, from + index * size)
            }
        };
        let c = t.calls.iter().find(|c| c.seq == *seq)?;
        Some(Planted {
            seq: *seq,
            call: render_call(t, c),
            site: t.site(c.site),
            buffer: buf.to_string(),
            offset: at,
            elem: v.elem.name(),
            value: class_name(class),
            reader_seq: 0,
            reader: String::new(),
        })
    })
}

/// What a view of a buffer the replay never wrote holds: its initial snapshot, scanned on the
/// host (only asked for the inputs of launches under suspicion, and only once each).
fn snapshot_counts(t: &Trace, v: &View) -> Option<Counts> {
    let init = t.initial.iter().find(|i| i.buf == v.buf)?;
    let bytes = t.try_blob(init.data).ok().flatten()?;
    let from = usize::try_from(v.off).ok()?.min(bytes.len());
    let (first, count) = fk::scan_bytes(&bytes[from..], v.elem);
    Some(Counts { first, count })
}

/// Where each buffer was allocated (or snapshotted), as `file:line:col`.
fn alloc_sites(t: &Trace) -> HashMap<BufferId, String> {
    let mut m: HashMap<BufferId, String> =
        t.initial.iter().map(|i| (i.buf, t.site(i.site))).collect();
    for c in &t.calls {
        if let Some(Ok(Value::Buffer(b))) = &c.ret {
            m.insert(*b, t.site(c.site));
        }
    }
    m
}

/// The bytes call `c` read back when recorded.
fn recorded_bytes<'t>(t: &'t Trace, c: &CallRecord) -> Option<&'t [u8]> {
    t.try_blob(t.readback_blob(c)?).ok().flatten()
}
