//! `replay --against`: the same trace on two backends in lockstep, and the first launch whose
//! written bytes differ between them.
//!
//! Both replays issue each call in turn (graphs' captured calls eagerly, as the value checks
//! do). After each launch both wait for their streams and read back every buffer range the
//! launch may write; the first range that differs beyond the tolerance names the launch, the
//! buffer, the element with the largest difference and both values. The replays stop there:
//! past a difference every later launch reads diverged inputs.
//!
//! With `LockstepOptions::in_stream_order` (`replay --chaos`) nothing waits after a launch:
//! what it may write is copied, on its own stream, into pinned host memory on each side, and
//! the copies are compared in launch order once both sides have been waited for (at the end,
//! or whenever the copies not yet compared hold a gigabyte), so streams overlap as far as the
//! trace lets them. Whatever order a side ran the launches in, each copy holds what its launch
//! wrote. A difference found is explained where the trace can say why (`chaos.rs`).

use super::state::{resolve_stream, sync_all, Guard, State};
use super::views::{Typing, View};
use super::{ModuleLoader, Outcome, ReplayError, Replayer};
use crate::backend::{ElemType, GpuBackend};
use crate::trace::*;
use serde::Serialize;
use std::time::Instant;

/// How far two values may be apart and still count as equal.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Tolerance {
    /// Bit for bit (NaN payloads included).
    #[default]
    Exact,
    /// At most this many units in the last place (by the element type's bit patterns).
    Ulps(u32),
    /// `|a - b| <= r * max(|a|, |b|)`.
    Rel(f64),
}

impl Tolerance {
    /// `exact`, `ulps:N` or `rel:X`.
    pub fn parse(s: &str) -> Result<Tolerance, String> {
        match s.split_once(':') {
            None if s == "exact" => Ok(Tolerance::Exact),
            Some(("ulps", n)) => n
                .parse()
                .map(Tolerance::Ulps)
                .map_err(|_| format!("{n:?} is not a count of ulps")),
            Some(("rel", x)) => x
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .map(Tolerance::Rel)
                .ok_or_else(|| format!("{x:?} is not a relative tolerance")),
            _ => Err(format!("{s:?}: try exact, ulps:4 or rel:1e-3")),
        }
    }
}

/// What to compare and how.
#[derive(Clone, Debug, Default)]
pub struct LockstepOptions {
    /// How far values may differ.
    pub tolerance: Tolerance,
    /// Element types given by the user, which win over the kernels'.
    pub dtypes: Vec<(BufferId, ElemType)>,
    /// `--dtype` rules for kernels whose names say no type.
    pub rules: Vec<crate::trace::kernel_types::TypeRule>,
    /// Buffers never compared.
    pub ignore: Vec<BufferId>,
    /// Read each launch's output back on its own stream without waiting, and compare when
    /// both sides have been waited for (see the module docs): what a schedule-perturbing
    /// backend needs, since a wait after every launch would order every launch before the
    /// next one.
    pub in_stream_order: bool,
    /// Hold the second side's streams at random before its launches (seed, longest delay in
    /// ns): CUDA's chaos, which lets work that should have waited for another stream run
    /// first (see `delay_kernel`).
    pub delays: Option<(u64, u64)>,
    /// What a replay measured each launch writing (`Replayer::measure_writes`): an undeclared
    /// pointer is then compared over the bytes it wrote, or from the pointer to the end where
    /// its parameter was measured writing in another launch of the kernel (a launch that
    /// wrote the values already there changes nothing a hash sees), and not at all where it
    /// never was.
    pub writes: Option<std::sync::Arc<super::writes::WriteExtents>>,
}

/// The first launch whose output differs between the two backends.
#[derive(Clone, Debug, Serialize)]
pub struct LaunchDifference {
    /// The launch's seq (a graph node's captured call).
    pub seq: u64,
    /// The graph launch it ran in, when it is a graph's node.
    pub in_graph: Option<String>,
    /// `module::kernel`.
    pub kernel: String,
    /// Where the recorded program launched it.
    pub site: String,
    /// The launch as `show` prints it.
    pub call: String,
    /// Which parameter points at the range that differs.
    pub param: usize,
    /// The buffer.
    pub buffer: String,
    /// The pointer's byte offset in it.
    pub offset: u64,
    /// What the bytes were compared as (`bytes` where no type is known).
    pub elem: &'static str,
    /// Elements (or bytes) beyond the tolerance.
    pub differing: u64,
    /// Of how many.
    pub of: u64,
    /// The element with the largest difference.
    pub index: u64,
    /// Its value on the first backend.
    pub a_value: String,
    /// Its value on the second.
    pub b_value: String,
    /// That largest difference (`inf` when one side is NaN).
    pub largest: f64,
    /// Its place among the calls as the value checks replay them (`eager_calls`).
    #[serde(skip)]
    pub(crate) at: usize,
}

/// What a lockstep replay found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LockstepReport {
    /// The first backend's name, as the command line gave it.
    pub a: String,
    /// The second's.
    pub b: String,
    /// Launches replayed on both.
    pub launches: u64,
    /// Launches whose written ranges were compared.
    pub compared: u64,
    /// Bytes read back from each side and compared.
    pub bytes_compared: u64,
    /// Kernels that cannot run on one of the backends, so their launches were not compared.
    pub not_compared: Vec<String>,
    /// The first launch whose output differs.
    pub first: Option<LaunchDifference>,
    /// Why it may differ, where the trace says: a dependency between streams nothing orders,
    /// bytes it read that no call had written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<super::chaos::Cause>,
    /// A replay failed: which side, which call, the error.
    pub stopped: Option<String>,
    /// Wall time of the whole comparison, setup included.
    pub elapsed_ms: f64,
    /// The tolerance, as text.
    pub tolerance: String,
}

impl LockstepReport {
    /// Nothing differed, and something was compared.
    pub fn passed(&self) -> bool {
        self.first.is_none() && self.stopped.is_none() && self.compared > 0
    }

    /// The report as text, verdict last.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "lockstep {} vs {} ({}): {} launches replayed on both, {} compared ({} bytes from each side) in {:.1} ms",
            self.a, self.b, self.tolerance, self.launches, self.compared, self.bytes_compared, self.elapsed_ms
        );
        for k in &self.not_compared {
            let _ = writeln!(s, "  not compared: {k}");
        }
        if let Some(d) = &self.first {
            let graph = d
                .in_graph
                .as_ref()
                .map(|g| format!(", a node of {g}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "first difference: call #{} {}{graph} @ {}",
                d.seq, d.kernel, d.site
            );
            let _ = writeln!(
                s,
                "  parameter {} = {}+{} ({}): {} of {} differ; the largest at element {}: {} on {}, {} on {} (difference {})",
                d.param, d.buffer, d.offset, d.elem, d.differing, d.of, d.index, d.a_value, self.a, d.b_value, self.b, d.largest
            );
            let _ = writeln!(s, "  the launch: {}", d.call);
            for c in &self.causes {
                let _ = writeln!(s, "  cause: {c}");
            }
        }
        if let Some(e) = &self.stopped {
            let _ = writeln!(s, "the replay stopped: {e}");
        }
        let verdict = match (&self.first, &self.stopped) {
            (Some(d), _) => format!("-> DIFFERENT: first at #{} {}", d.seq, d.kernel),
            (None, Some(_)) => "-> INCOMPLETE".to_string(),
            (None, None) if self.compared == 0 => "-> NOTHING COMPARED".to_string(),
            (None, None) => format!("-> no difference in {} launches", self.compared),
        };
        let _ = writeln!(s, "{verdict}");
        s
    }
}

/// One side of the lockstep.
struct Side<'r, 't> {
    guard: Guard<'r, 't>,
    name: &'r str,
}

/// Deferred readbacks not compared yet may hold at most this many bytes (or the replay's
/// host memory limit, if lower) before both sides are waited for and they are compared.
const MAX_PENDING: u64 = 1 << 30;

/// A range compared and found different: (elements beyond the tolerance, elements, the
/// index of the largest difference, the two values there, that difference).
type Diff = (u64, u64, u64, String, String, f64);

/// A launch whose output is compared: its call, the graph launch it ran in, its kernel, and
/// its place among the calls as the value checks replay them.
struct Launch<'t> {
    c: &'t CallRecord,
    graph: Option<(u64, GraphId)>,
    kernel: KernelId,
    at: usize,
}

/// Pinned host memory a deferred readback lands in, given back when dropped, after its
/// stream has been waited for (the copy may still be writing it).
struct Landing<'g> {
    gpu: &'g dyn GpuBackend,
    ptr: *mut u8,
    len: usize,
    stream: u64,
}

impl Landing<'_> {
    /// The bytes; read only once the copy's stream has been waited for.
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is a live pinned region of `len` bytes from `alloc_host_pinned`,
        // freed only when this landing is dropped.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        let _ = self.gpu.synchronize(self.stream);
        let _ = self.gpu.free_host_pinned(self.ptr, self.len);
    }
}

/// A launch's readbacks not compared yet: one landing per view, on each side.
struct Pending<'t, 'g> {
    launch: Launch<'t>,
    views: Vec<View>,
    landed: [Vec<Landing<'g>>; 2],
}

/// Copy the ranges `c` may write into pinned host memory on each side, on the launch's own
/// stream, without waiting. An error comes with the side's name.
fn land_all<'r>(
    sides: &[Side<'r, '_>],
    c: &CallRecord,
    views: &[View],
) -> Result<[Vec<Landing<'r>>; 2], (&'r str, anyhow::Error)> {
    let mut out: [Vec<Landing<'r>>; 2] = [Vec::new(), Vec::new()];
    for (i, s) in sides.iter().enumerate().take(2) {
        let (g, st) = (s.guard.gpu, &s.guard.st);
        let name = s.name;
        let fail = |e: anyhow::Error| (name, e);
        let stream = c
            .call
            .work_stream()
            .ok_or_else(|| fail(anyhow::anyhow!("call #{} has no stream", c.seq)))?;
        let stream = resolve_stream(st, stream, c).map_err(|e| fail(e.into()))?;
        for v in views {
            let (p, _) = st
                .bufs
                .get(&v.buf)
                .ok_or_else(|| fail(anyhow::anyhow!("{} is not live", v.buf)))?;
            let len = v.bytes as usize;
            let ptr = g.alloc_host_pinned(len).map_err(fail)?;
            let landing = Landing {
                gpu: g,
                ptr,
                len,
                stream,
            };
            // SAFETY: `ptr` is `len` bytes of pinned memory that `landing` owns; dropping it
            // waits for `stream` before freeing, so the destination outlives the copy.
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
            g.copy_d2h_async(p.offset(v.off as usize), dst, stream)
                .map_err(fail)?;
            out[i].push(landing);
        }
    }
    Ok(out)
}

impl Replayer<'_> {
    /// Replay on `a` and `b` in lockstep, comparing what each launch wrote (see the module
    /// docs). `names` are how the report calls the two.
    pub fn lockstep(
        &self,
        (a, b): (&dyn GpuBackend, &dyn GpuBackend),
        names: (&str, &str),
        opts: &LockstepOptions,
        (load_a, load_b): (Option<ModuleLoader<'_>>, Option<ModuleLoader<'_>>),
    ) -> Result<LockstepReport, ReplayError> {
        let t0 = Instant::now();
        let mut report = LockstepReport {
            a: names.0.into(),
            b: names.1.into(),
            tolerance: format!("{:?}", opts.tolerance).to_lowercase(),
            ..Default::default()
        };
        let ka = self.kernels(a, load_a)?;
        let kb = self.kernels(b, load_b)?;
        let mut sides = [
            Side {
                guard: Guard {
                    r: self,
                    gpu: a,
                    st: State::new(&ka),
                },
                name: names.0,
            },
            Side {
                guard: Guard {
                    r: self,
                    gpu: b,
                    st: State::new(&kb),
                },
                name: names.1,
            },
        ];
        for s in sides.iter_mut() {
            self.setup(s.guard.gpu, &mut s.guard.st)?;
        }
        let mut delays = match opts.delays {
            Some((seed, max_ns)) => Some(
                super::delay_kernel::Delays::new(b, seed, max_ns).map_err(|e| {
                    ReplayError::Setup {
                        what: "loading the delay kernel".into(),
                        cause: format!("{e:#}"),
                    }
                })?,
            ),
            None => None,
        };
        let mut typing = Typing::new(&opts.dtypes, &opts.rules, &opts.ignore);
        typing.writes = opts.writes.as_deref();
        typing.same_value_writes = true;
        let mut skipped = std::collections::BTreeSet::new();
        let mut pending: Vec<Pending<'_, '_>> = Vec::new();
        let mut pending_bytes = 0u64;
        'calls: for (at, (c, graph)) in self.eager_calls().into_iter().enumerate() {
            if let Some(stop) = self.issue_on_both(&mut sides, c, delays.as_mut())? {
                report.stopped = Some(stop);
                break 'calls;
            }
            let Some((kernel, args)) = c.call.launch() else {
                continue;
            };
            report.launches += 1;
            if sides.iter().any(|s| s.guard.st.opaque.contains(&kernel)) {
                skipped.insert(self.trace.kernel_name(kernel));
                continue;
            }
            let views: Vec<View> = typing
                .views(self.trace, c.seq, kernel, args)
                .into_iter()
                .filter(|v| v.written)
                .collect();
            if views.is_empty() {
                continue;
            }
            let launch = Launch {
                c,
                graph,
                kernel,
                at,
            };
            if opts.in_stream_order {
                match land_all(&sides, c, &views) {
                    Ok(landed) => {
                        pending_bytes += views.iter().map(|v| v.bytes).sum::<u64>();
                        pending.push(Pending {
                            launch,
                            views,
                            landed,
                        });
                    }
                    Err((side, e)) => {
                        report.stopped = Some(format!(
                            "on {side}, reading back what call #{} wrote: {e:#}",
                            c.seq
                        ));
                        break 'calls;
                    }
                }
                if pending_bytes >= self.max_host_bytes.min(MAX_PENDING) {
                    pending_bytes = 0;
                    if self.settle_pending(&sides, &mut pending, opts.tolerance, &mut report) {
                        break 'calls;
                    }
                }
                continue;
            }
            let read = match read_now(&sides, &views) {
                Ok(read) => read,
                Err((side, e)) => {
                    report.stopped = Some(format!(
                        "on {side}, reading back what call #{} wrote: {e:#}",
                        c.seq
                    ));
                    break 'calls;
                }
            };
            report.compared += 1;
            for (i, v) in views.iter().enumerate() {
                report.bytes_compared += v.bytes;
                if let Some(d) = compare(&read[0][i], &read[1][i], v.elem, opts.tolerance) {
                    report.first = Some(self.difference(&launch, v, d));
                    break 'calls;
                }
            }
        }
        if !pending.is_empty() {
            // Launches read back before a stop are still compared: a difference there may be
            // what the stop follows from.
            self.settle_pending(&sides, &mut pending, opts.tolerance, &mut report);
        }
        if let Some(d) = &report.first {
            report.causes = self.explain(d);
        }
        report.not_compared = skipped
            .into_iter()
            .map(|k| format!("{k} cannot run on one of the backends"))
            .collect();
        drop(sides);
        report.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(report)
    }
}

impl Replayer<'_> {
    /// Issue one call on both sides (the second delayed first when `delays` asks). `Some` is
    /// why the lockstep stops: a side failed a call the recording saw succeed.
    fn issue_on_both(
        &self,
        sides: &mut [Side<'_, '_>],
        c: &CallRecord,
        mut delays: Option<&mut super::delay_kernel::Delays>,
    ) -> Result<Option<String>, ReplayError> {
        for (i, s) in sides.iter_mut().enumerate() {
            let g = s.guard.gpu;
            let launch_stream = c.call.launch().and(c.call.work_stream());
            if let (1, Some(d), Some(stream)) = (i, delays.as_deref_mut(), launch_stream) {
                let held = super::state::resolve_stream(&s.guard.st, stream, c)
                    .map_err(anyhow::Error::from)
                    .and_then(|st| d.before_launch(g, st));
                if let Err(e) = held {
                    return Ok(Some(format!(
                        "on {}, delaying call #{}: {e:#}",
                        s.name, c.seq
                    )));
                }
            }
            match self.issue(g, &mut s.guard.st, c, false)? {
                Outcome::Failed(e) if !matches!(c.ret, Some(Err(_))) => {
                    return Ok(Some(format!(
                        "on {}, call #{} at {}: {e:#}",
                        s.name,
                        c.seq,
                        self.trace.site(c.site)
                    )));
                }
                _ => {}
            }
        }
        Ok(None)
    }
}

/// What a launch wrote, read back from both sides now (each side waited for first): per side,
/// per view, its bytes. The error names the side that could not be read.
fn read_now<'r>(
    sides: &[Side<'r, '_>],
    views: &[View],
) -> Result<Vec<Vec<Vec<u8>>>, (&'r str, anyhow::Error)> {
    sides
        .iter()
        .map(|s| {
            let (g, st) = (s.guard.gpu, &s.guard.st);
            sync_all(g, st)
                .and_then(|()| {
                    views
                        .iter()
                        .map(|v| {
                            let (p, _) = st
                                .bufs
                                .get(&v.buf)
                                .ok_or_else(|| anyhow::anyhow!("{} is not live", v.buf))?;
                            let mut out = vec![0u8; v.bytes as usize];
                            g.copy_d2h(p.offset(v.off as usize), &mut out)?;
                            Ok(out)
                        })
                        .collect::<anyhow::Result<Vec<Vec<u8>>>>()
                })
                .map_err(|e| (s.name, e))
        })
        .collect()
}

impl Replayer<'_> {
    /// Wait for both sides, then compare the deferred readbacks in launch order. True when
    /// comparing stops: a difference, or a side that could not be waited for.
    fn settle_pending(
        &self,
        sides: &[Side<'_, '_>],
        pending: &mut Vec<Pending<'_, '_>>,
        tol: Tolerance,
        report: &mut LockstepReport,
    ) -> bool {
        for s in sides {
            if let Err(e) = sync_all(s.guard.gpu, &s.guard.st) {
                report.stopped.get_or_insert_with(|| {
                    format!("on {}, waiting for the launches read back: {e:#}", s.name)
                });
                pending.clear();
                return true;
            }
        }
        for p in pending.drain(..) {
            report.compared += 1;
            for (i, v) in p.views.iter().enumerate() {
                report.bytes_compared += v.bytes;
                let (x, y) = (p.landed[0][i].bytes(), p.landed[1][i].bytes());
                if let Some(d) = compare(x, y, v.elem, tol) {
                    report.first = Some(self.difference(&p.launch, v, d));
                    return true;
                }
            }
        }
        false
    }

    /// The report's account of a launch whose range `v` differs by `d`.
    fn difference(&self, l: &Launch<'_>, v: &View, d: Diff) -> LaunchDifference {
        let (differing, of, index, a_value, b_value, largest) = d;
        let rec = self.by_seq.get(&l.c.seq).copied().unwrap_or(l.c);
        LaunchDifference {
            seq: l.c.seq,
            in_graph: l.graph.map(|(at, g)| format!("{g} launched at #{at}")),
            kernel: self.trace.kernel_name(l.kernel),
            site: self.trace.site(rec.site),
            call: render_call(self.trace, rec),
            param: v.param,
            buffer: v.buf.to_string(),
            offset: v.off,
            elem: v.elem.map_or("bytes", |e| e.name()),
            differing,
            of,
            index,
            a_value,
            b_value,
            largest,
            at: l.at,
        }
    }
}

/// An element's value and an integer on which ulps are counted (sign-magnitude made
/// monotonic).
fn decode(b: &[u8], e: ElemType) -> (f64, i64) {
    let (v, bits) = e.decode(b).unwrap_or((f64::NAN, 0));
    let bits = bits as u64;
    let sign = 1u64 << (e.size() * 8 - 1);
    let ord = if bits & sign != 0 {
        -((bits & !sign) as i64)
    } else {
        bits as i64
    };
    (v, ord)
}

/// Compare two ranges: `None` when equal within `tol`, else (elements beyond it, elements,
/// the index of the largest difference, the two values there, that difference).
fn compare(x: &[u8], y: &[u8], elem: Option<ElemType>, tol: Tolerance) -> Option<Diff> {
    if x == y {
        return None;
    }
    let Some(e) = elem else {
        let differing = x.iter().zip(y).filter(|(p, q)| p != q).count() as u64;
        let i = x.iter().zip(y).position(|(p, q)| p != q).unwrap_or(0);
        return Some((
            differing,
            x.len() as u64,
            i as u64,
            format!("{:#04x}", x[i]),
            format!("{:#04x}", y[i]),
            (x[i] as f64 - y[i] as f64).abs(),
        ));
    };
    let w = e.size() as usize;
    let mut differing = 0u64;
    let mut worst: Option<(usize, f64, f64, f64)> = None;
    for (i, (p, q)) in x.chunks_exact(w).zip(y.chunks_exact(w)).enumerate() {
        if p == q {
            continue;
        }
        let ((a, oa), (b, ob)) = (decode(p, e), decode(q, e));
        let equal = match tol {
            _ if a.is_nan() && b.is_nan() => tol != Tolerance::Exact,
            Tolerance::Exact => false,
            Tolerance::Ulps(n) => oa.abs_diff(ob) <= n as u64,
            Tolerance::Rel(r) => (a - b).abs() <= r * a.abs().max(b.abs()),
        };
        if equal {
            continue;
        }
        differing += 1;
        let d = if a.is_nan() || b.is_nan() {
            f64::INFINITY
        } else {
            (a - b).abs()
        };
        if worst.is_none_or(|(_, _, _, w)| d > w) {
            worst = Some((i, a, b, d));
        }
    }
    let (i, a, b, d) = worst?;
    Some((
        differing,
        (x.len() / w) as u64,
        i as u64,
        format!("{a}"),
        format!("{b}"),
        d,
    ))
}
