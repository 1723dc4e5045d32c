//! One check in progress: each call issued with its scans around it, what happened kept as
//! events, and the verdict worked out from them afterwards in recorded order.

use super::kernel as fk;
use super::scan::{Counts, Scanner};
use super::{
    class_name, FiniteOptions, FiniteReport, NonFinite, Planted, RecordedNonFinite, MAX_WRITERS,
};
use crate::backend::{ElemType, GpuBackend};
use crate::replayer::state::{resolve_stream, State};
use crate::replayer::views::Typing;
use crate::replayer::{Outcome, Replayer};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

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

/// One check in progress.
pub(super) struct Run<'a, 't> {
    r: &'a Replayer<'t>,
    opts: &'a FiniteOptions,
    events: Vec<Event>,
    /// Views whose contents a scan has seen since bytes last reached their buffer untyped.
    known: HashSet<Key>,
    /// Buffers some replayed call has written. A read-only view of any other still holds the
    /// initial snapshot, which the verdict reads from the trace on the host when it must
    /// (a step's weights are not read twice on the device to learn they are finite).
    touched: HashSet<BufferId>,
    pub(super) typing: Typing<'a>,
    /// The element type each tensor (buffer, offset) was last written as. A kernel reads its
    /// inputs as what wrote them: a conversion kernel's name gives one type for every pointer
    /// (`direct_copy_kernel<float>` reading bf16), the writer's view is the input's truth.
    /// And how many bytes were written there: a later reader's input is that tensor, not the
    /// rest of the allocation from its pointer (where other tensors' stale values lie).
    written_as: HashMap<(BufferId, u64), (ElemType, u64)>,
}

/// How an input's type is said when it came from the launch that wrote it.
const AS_WRITTEN: &str = "the launch that wrote it";

impl<'a, 't> Run<'a, 't> {
    /// A check of `r`'s trace with `opts`, nothing issued yet.
    pub(super) fn new(r: &'a Replayer<'t>, opts: &'a FiniteOptions) -> Run<'a, 't> {
        let mut typing = Typing::new(&opts.dtypes, &opts.rules, &opts.ignore);
        typing.writes = opts.writes.as_deref();
        Run {
            r,
            opts,
            events: Vec::new(),
            known: HashSet::default(),
            touched: HashSet::default(),
            typing,
            written_as: HashMap::default(),
        }
    }

    /// Issue one call (scans around a launch); an error that stops the check.
    pub(super) fn one(
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
    pub(super) fn verdict(&self, done: &[Counts], report: &mut FiniteReport) {
        let mut v = Verdict {
            run: self,
            done,
            inf: self.opts.inf,
            status: HashMap::default(),
            source: HashMap::default(),
            writer_of: HashMap::default(),
            last_elem: HashMap::default(),
            alloc_sites: alloc_sites(self.r.trace),
            plantings: Vec::new(),
        };
        for ev in &self.events {
            match ev {
                Event::Planting { .. } => v.plantings.push(ev),
                Event::Untyped { buf, seq } => {
                    v.status.retain(|k, _| k.0 != *buf);
                    v.source.insert(*buf, format!("written by call #{seq}"));
                }
                Event::Readback { seq, buf } => v.readback(*seq, *buf, report),
                Event::Launch {
                    seq,
                    graph,
                    kernel,
                    views,
                } => v.launch((*seq, *graph, *kernel), views, report),
            }
        }
    }
}

/// A launch's scanned views: each with its scan slot before and after it.
type Scanned = [(View, Option<usize>, Option<usize>)];

/// The verdict being worked out, event by event.
struct Verdict<'v, 'a, 't> {
    run: &'v Run<'a, 't>,
    done: &'v [Counts],
    inf: bool,
    /// What each view held when last scanned, and where its contents came from.
    status: HashMap<Key, (Counts, String)>,
    /// Who last wrote each buffer.
    source: HashMap<BufferId, String>,
    /// Who wrote the tensor at (buffer, offset) last.
    writer_of: HashMap<(BufferId, u64), String>,
    /// The element type each buffer was last written as (how a readback of it is read).
    last_elem: HashMap<BufferId, ElemType>,
    alloc_sites: HashMap<BufferId, String>,
    /// Uploads and memsets so far, where a value no launch made may have come from.
    plantings: Vec<&'v Event>,
}

impl Verdict<'_, '_, '_> {
    /// A recorded readback: the first one holding non-finite values is what the recording saw.
    fn readback(&mut self, seq: u64, buf: BufferId, report: &mut FiniteReport) {
        let (t, inf) = (self.run.r.trace, self.inf);
        if report.recorded.is_some() {
            return;
        }
        let given = self.run.opts.dtypes.iter().find(|(b, _)| *b == buf);
        let Some(elem) = given.map(|(_, e)| *e).or(self.last_elem.get(&buf).copied()) else {
            return;
        };
        let rec = self.run.r.by_seq.get(&seq);
        let Some(bytes) = rec.and_then(|c| recorded_bytes(t, c)) else {
            return;
        };
        let (first, count) = fk::scan_bytes(bytes, elem);
        let Some((class, index)) = (Counts { first, count }).bad(inf) else {
            return;
        };
        let call = rec
            .map(|c| format!("call #{seq} {}", c.call.kind().name()))
            .unwrap_or_else(|| format!("call #{seq}"));
        report.recorded = Some(RecordedNonFinite {
            seq,
            call,
            buffer: buf.to_string(),
            elem: elem.name(),
            index,
            value: class_name(class),
            count: count[0] + if inf { count[1] + count[2] } else { 0 },
        });
    }

    /// A launch: what its views held before it, whether it turned one non-finite, and from
    /// what inputs.
    fn launch(
        &mut self,
        (seq, graph, kernel): (u64, Option<(u64, GraphId)>, KernelId),
        views: &Scanned,
        report: &mut FiniteReport,
    ) {
        self.note_before(views);
        // A launch that turned a view non-finite (more bad values than before it ran: a view
        // may reach past its tensor): what its inputs held before it ran decides whether it
        // produced the values.
        let suspect = views.iter().any(|(v, _, after)| {
            let c = after.and_then(|s| self.done.get(s));
            c.is_some_and(|c| c.bad(self.inf).is_some() && !self.no_worse(v, c))
        });
        let inputs = match suspect {
            true => self.inputs(views),
            false => Vec::new(),
        };
        if report.planted.is_none() && !inputs.is_empty() {
            let t = self.run.r.trace;
            report.planted = views
                .iter()
                .map(|(v, _, _)| v)
                .filter(|v| is_input(v, views) && self.bad_before(v))
                .find_map(|v| planted_in(t, &self.plantings, v, self.inf))
                .map(|mut p| {
                    p.reader_seq = seq;
                    p.reader = t.kernel_name(kernel);
                    p
                });
        }
        for (v, _, _) in views.iter().filter(|(v, _, _)| v.written) {
            self.last_elem.insert(v.buf, v.elem);
        }
        for (v, _, after) in views {
            if let Some(c) = after.and_then(|s| self.done.get(s)) {
                self.written((seq, graph, kernel), v, *c, &inputs, report);
            }
        }
    }

    /// Each view's scan before the launch, with where its contents came from.
    fn note_before(&mut self, views: &Scanned) {
        for (v, before, _) in views {
            let Some(c) = before.and_then(|s| self.done.get(s)) else {
                continue;
            };
            let from = self
                .writer_of
                .get(&(v.buf, v.off))
                .cloned()
                .or_else(|| {
                    let last = self.source.get(&v.buf)?;
                    Some(format!(
                        "no launch checked wrote it there ({} {last} last)",
                        v.buf
                    ))
                })
                .unwrap_or_else(|| "from the initial snapshot".into());
            self.status.insert(v.key(), (*c, from));
        }
    }

    /// Whether `after` holds no more bad values than `v` did before the launch.
    fn no_worse(&self, v: &View, after: &Counts) -> bool {
        self.status.get(&v.key()).is_some_and(|(p, _)| {
            (0..fk::CLASSES)
                .filter(|k| *k == 0 || self.inf)
                .all(|k| after.count[k] <= p.count[k])
        })
    }

    /// Whether `v` held bad values before the launch.
    fn bad_before(&self, v: &View) -> bool {
        let held = self.status.get(&v.key());
        held.is_some_and(|(c, _)| c.bad(self.inf).is_some())
    }

    /// The launch's inputs that already held bad values, each said once (a parameter struct
    /// names one tensor many times: cuBLAS's).
    fn inputs(&mut self, views: &Scanned) -> Vec<String> {
        let t = self.run.r.trace;
        for (v, _, _) in views {
            if !self.status.contains_key(&v.key()) && !self.source.contains_key(&v.buf) {
                if let Some(c) = snapshot_counts(t, v) {
                    let from = "from the initial snapshot".to_string();
                    self.status.insert(v.key(), (c, from));
                }
            }
        }
        let mut seen = HashSet::default();
        views
            .iter()
            .filter(|(v, _, _)| is_input(v, views))
            .filter_map(|(v, _, _)| {
                let (c, from) = self.status.get(&v.key())?;
                let (class, index) = c.bad(self.inf)?;
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
            .filter(|i| seen.insert(i.clone()))
            .collect()
    }

    /// View `v` as the launch left it (`c`): a writer when it holds more bad values than before.
    fn written(
        &mut self,
        (seq, graph, kernel): (u64, Option<(u64, GraphId)>, KernelId),
        v: &View,
        c: Counts,
        inputs: &[String],
        report: &mut FiniteReport,
    ) {
        let t = self.run.r.trace;
        let was_bad = self.no_worse(v, &c);
        let writer = format!("written by call #{seq} {}", t.kernel_name(kernel));
        self.status.insert(v.key(), (c, writer.clone()));
        self.writer_of.insert((v.buf, v.off), writer.clone());
        self.source.insert(v.buf, writer);
        let Some((class, index)) = c.bad(self.inf) else {
            return;
        };
        if was_bad {
            return;
        }
        let rec = self.run.r.by_seq.get(&seq).copied();
        let found = NonFinite {
            seq,
            at: graph.map_or(seq, |(at, _)| at),
            in_graph: graph.map(|(at, g)| format!("{g} launched at #{at}")),
            kernel: t.kernel_name(kernel),
            site: rec.map(|c| t.site(c.site)).unwrap_or_default(),
            call: rec.map(|c| render_call(t, c)).unwrap_or_default(),
            param: v.param,
            pointer: v.pointer,
            buffer: v.buf.to_string(),
            offset: v.off,
            buffer_site: self
                .alloc_sites
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
            suspected: crate::replayer::views::is_guess(v.how),
            inputs: inputs.to_vec(),
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

/// Whether `v` is an input of its launch: a view it does not write; what a measured output
/// held before the launch is not, unless another pointer of the launch names the same bytes
/// (an in-place op).
fn is_input(v: &View, views: &Scanned) -> bool {
    !v.written
        || !v.measured
        || views.iter().any(|(o, _, _)| {
            (o.param, o.pointer) != (v.param, v.pointer) && (o.buf, o.off) == (v.buf, v.off)
        })
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
