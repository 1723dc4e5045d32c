//! `minimize`: the smallest trace that still reproduces a recorded fault.
//!
//! Delta debugging (Zeller's ddmin) over the calls before the recorded fault: a subset is kept
//! when a replay of the trace built from it still reports the same fault (driver code, and the
//! kernel that raised it). A trace built from a subset stays well formed: every buffer, stream,
//! event, graph and pinned region a kept call names comes with what created it (its allocation
//! call, or its initial contents), a graph launch with its whole capture, and only the modules,
//! blobs and initial buffers the kept calls use travel along. The call that observed the fault
//! is kept as a synchronisation of the legacy stream carrying the recorded error, so what it read
//! need not come along. Calls are renumbered from 0; buffer ids stay as recorded, so a buffer in
//! the small trace has the name it has in the original.

use super::{fault_windows, Culprit, FaultWindow, ReplayReport, WindowKind};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// What makes two replays "the same fault": the same kernel, and codes that
/// `backend::same_fault` takes for one fault (a candidate's buffers land elsewhere, which can
/// turn an illegal address into an invalid address space).
#[derive(Clone, Debug, Eq, serde::Serialize)]
pub struct FaultSignature {
    /// The driver error code the replay reported (`None`: a fault without one, such as a red-zone
    /// hit).
    pub code: Option<u32>,
    /// The kernel that raised it, when the replay could tell.
    pub kernel: Option<String>,
    /// A hang: the replay did not finish by its deadline (code and kernel are then `None`).
    pub hang: bool,
    /// A wrong value rather than an error (`NaN`, `inf`): the recorded readback held it and the
    /// replay's finite check named `kernel` as its first writer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// A compute-sanitizer finding in `kernel` (`minimize --sanitize`: "Invalid __global__
    /// read of size 4 bytes"), whatever code the driver returned under the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<String>,
}

impl FaultSignature {
    /// A replay that hung, as a hang's dump expects.
    pub fn hang() -> Self {
        FaultSignature {
            code: None,
            kernel: None,
            hang: true,
            value: None,
            finding: None,
        }
    }

    /// A non-finite value (`NaN`, `inf`) whose first writer is `kernel`.
    pub fn value(value: &str, kernel: &str) -> Self {
        FaultSignature {
            code: None,
            kernel: Some(kernel.to_string()),
            hang: false,
            value: Some(value.to_string()),
            finding: None,
        }
    }

    /// A compute-sanitizer finding (`what`) in `kernel`.
    pub fn finding(what: &str, kernel: &str) -> Self {
        FaultSignature {
            code: None,
            kernel: Some(kernel.to_string()),
            hang: false,
            value: None,
            finding: Some(what.to_string()),
        }
    }
}

impl PartialEq for FaultSignature {
    fn eq(&self, other: &Self) -> bool {
        let codes = match (self.code, other.code) {
            (Some(a), Some(b)) => crate::backend::same_fault(a, b),
            (a, b) => a == b,
        };
        codes
            && self.kernel == other.kernel
            && self.hang == other.hang
            && self.value == other.value
            && self.finding == other.finding
    }
}

impl std::fmt::Display for FaultSignature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(what) = &self.finding {
            write!(f, "{what} (compute-sanitizer)")?;
            if let Some(k) = &self.kernel {
                write!(f, " in {k}")?;
            }
            return Ok(());
        }
        match (self.code, self.hang) {
            _ if self.value.is_some() => {
                write!(f, "{}", self.value.as_deref().unwrap_or_default())?;
                if let Some(k) = &self.kernel {
                    write!(f, " first written by {k}")?;
                }
                return Ok(());
            }
            (_, true) => write!(f, "a hang")?,
            (Some(c), false) => write!(f, "{} ({c})", crate::backend::cuda_error_name(c))?,
            (None, false) => write!(f, "a fault")?,
        }
        if let Some(k) = &self.kernel {
            write!(f, " raised by {k}")?;
        }
        Ok(())
    }
}

/// The first reproduced fault of a replay, as a signature, with the launch that raised it.
pub fn signature(r: &ReplayReport) -> Option<(FaultSignature, Option<Culprit>)> {
    let f = r.faults.iter().find(|f| f.reproduced)?;
    Some((
        FaultSignature {
            code: f.replayed_code,
            kernel: f
                .raised_by
                .as_ref()
                .map(|c| c.kernel.clone())
                .or_else(|| f.kernel.clone()),
            hang: false,
            value: None,
            finding: None,
        },
        f.raised_by.clone(),
    ))
}

/// Why `minimize` could not shrink a trace.
#[derive(Debug, thiserror::Error)]
pub enum MinimizeError {
    /// The trace records no fault, so there is nothing to keep.
    #[error("the trace records no fault to keep (no call failed with a device error, no red zone was found written)")]
    NoFault,
    /// The whole trace's replay does not reproduce its recorded fault on this backend; the text
    /// says what it did instead.
    #[error("the trace's fault does not reproduce on this backend, so there is nothing to keep while shrinking: {0}")]
    NotReproduced(String),
    /// A rank set in which more than one rank records a fault of its own: which one to keep
    /// is the caller's to say.
    #[error("ranks {0:?} (places in the list given) each record a fault of their own; say which one to keep")]
    WhichRank(Vec<usize>),
    /// A candidate trace could not be written.
    #[error("a candidate trace could not be written: {0}")]
    Write(#[from] TraceError),
    /// The oracle could not run a candidate (an error, not a fault that failed to reproduce).
    #[error("an attempt failed to run: {0:#}")]
    Attempt(anyhow::Error),
}

/// What `minimize` made.
pub struct Minimized {
    /// The smallest trace found that still reproduces the fault, its calls renumbered from 0.
    pub trace: Trace,
    /// The fault it reproduces, as the replay of the whole trace reported it.
    pub signature: FaultSignature,
    /// Replays run, the first (of the whole trace) included.
    pub attempts: usize,
    /// Whether it stopped early at the attempt budget.
    pub budget_hit: bool,
}

/// Runs one candidate and says which fault it reproduced (`None`: none).
pub type Oracle<'a> = dyn FnMut(&Trace) -> anyhow::Result<Option<FaultSignature>> + 'a;

/// Shrink `t` while `oracle` still reports the fault it reports for `t` itself, in at most
/// `max_attempts` replays. `progress` hears (attempt, calls kept).
pub fn minimize(
    t: &Trace,
    oracle: &mut Oracle<'_>,
    max_attempts: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Minimized, MinimizeError> {
    if let Some(w) = fault_windows(t).first() {
        return shrink_to(t, *w, false, oracle, max_attempts, progress);
    }
    // A launch refused at its own call (the mock raises a kernel's misaligned access or trap
    // there; a driver refuses a launch it cannot run): no sync observed it, so the launch is
    // its own observer, kept as recorded.
    let failed = launch_failure(t).ok_or(MinimizeError::NoFault)?;
    shrink_to(t, failed, true, oracle, max_attempts, progress)
}

/// Whether `t` records a fault `minimize` can keep: a fault window, or a launch refused.
pub fn records_fault(t: &Trace) -> bool {
    !fault_windows(t).is_empty() || launch_failure(t).is_some()
}

/// Shrink `t` while `oracle` still finds what it finds in launch `seq` and before (a
/// compute-sanitizer finding no driver error marks: a race, a read of unwritten memory); the
/// launch is kept, and nothing after it.
pub fn minimize_at(
    t: &Trace,
    seq: u64,
    oracle: &mut Oracle<'_>,
    max_attempts: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Minimized, MinimizeError> {
    let w = FaultWindow {
        start: seq,
        observed: seq,
        kind: WindowKind::Error,
        code: None,
    };
    shrink_to(t, w, true, oracle, max_attempts, progress)
}

/// The first launch whose recorded result is a driver error, as a window of its own.
fn launch_failure(t: &Trace) -> Option<FaultWindow> {
    t.calls.iter().find_map(|c| {
        let code = c.ret.as_ref()?.as_ref().err()?.code?;
        c.call.launch()?;
        Some(FaultWindow {
            start: c.seq,
            observed: c.seq,
            kind: WindowKind::Error,
            code: Some(code),
        })
    })
}

/// Shrink `t` while `oracle` still finds the wrong value the recorded readback at `observed`
/// holds (a NaN, its first writer named), in at most `max_attempts` replays. The readback is
/// kept as itself: its recorded bytes are what a candidate must reproduce.
pub fn minimize_value(
    t: &Trace,
    observed: u64,
    oracle: &mut Oracle<'_>,
    max_attempts: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Minimized, MinimizeError> {
    let w = FaultWindow {
        start: t.calls.first().map_or(0, |c| c.seq),
        observed,
        kind: WindowKind::Error,
        code: None,
    };
    shrink_to(t, w, true, oracle, max_attempts, progress)
}

/// The search both share: the calls before `w.observed`, shrunk with ddmin, the observer kept
/// as recorded (`keep_observer`) or replaced by a sync.
fn shrink_to(
    t: &Trace,
    w: FaultWindow,
    keep_observer: bool,
    oracle: &mut Oracle<'_>,
    max_attempts: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Minimized, MinimizeError> {
    let want = oracle(t)
        .map_err(MinimizeError::Attempt)?
        .ok_or_else(|| MinimizeError::NotReproduced("the whole trace replays without it".into()))?;
    let mut shrink = Shrink::new(t, w.observed);
    shrink.keep_observer = keep_observer;
    let mut attempts = 1usize;
    let mut budget_hit = false;
    let mut test = |keep: &[u64]| -> Result<bool, MinimizeError> {
        if attempts >= max_attempts {
            budget_hit = true;
            return Ok(false);
        }
        attempts += 1;
        let cand = shrink.build(keep);
        let got = oracle(&cand).map_err(MinimizeError::Attempt)?;
        progress(attempts, cand.calls.len());
        Ok(got.as_ref() == Some(&want))
    };
    let all: Vec<u64> = t
        .calls
        .iter()
        .map(|c| c.seq)
        .filter(|s| *s < w.observed)
        .collect();
    // First guess: only the launches of the fault's window that ran the kernel it names.
    let guess: Vec<u64> = t
        .calls
        .iter()
        .filter(|c| w.contains(c.seq) && c.seq < w.observed)
        .filter(|c| {
            c.call
                .launch()
                .is_some_and(|(k, _)| want.kernel.as_deref() == Some(t.kernel_name(k).as_str()))
        })
        .map(|c| c.seq)
        .collect();
    let start = if !guess.is_empty() && test(&guess)? {
        guess
    } else if test(&all)? {
        all
    } else {
        // The trace rebuilt for shrinking (the observer a sync) does not fault the same way:
        // nothing smaller can be promised.
        return Err(MinimizeError::NotReproduced(
            "the trace rebuilt for shrinking (its calls before the fault, then a sync) does not reproduce it".into(),
        ));
    };
    let kept = ddmin(start, &mut test)?;
    Ok(Minimized {
        trace: shrink.build(&kept),
        signature: want,
        attempts,
        budget_hit,
    })
}

/// Zeller's ddmin: a subset of `items` for which `test` holds and from which no single chunk
/// at the finest granularity tried can be removed.
pub(super) fn ddmin(
    mut items: Vec<u64>,
    test: &mut dyn FnMut(&[u64]) -> Result<bool, MinimizeError>,
) -> Result<Vec<u64>, MinimizeError> {
    let mut n = 2usize;
    while items.len() >= 2 {
        let chunk = items.len().div_ceil(n);
        let parts: Vec<Vec<u64>> = items.chunks(chunk).map(|c| c.to_vec()).collect();
        let mut reduced = false;
        for p in &parts {
            if test(p)? {
                items = p.clone();
                n = 2;
                reduced = true;
                break;
            }
        }
        if !reduced && parts.len() > 2 {
            for i in 0..parts.len() {
                let rest: Vec<u64> = parts
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .flat_map(|(_, p)| p.iter().copied())
                    .collect();
                if test(&rest)? {
                    items = rest;
                    n = (n - 1).max(2);
                    reduced = true;
                    break;
                }
            }
        }
        if !reduced {
            if n >= items.len() {
                break;
            }
            n = (n * 2).min(items.len());
        }
    }
    // A single call may still go (the observer alone reproduces a fault the trace's initial
    // state already holds, say).
    if items.len() == 1 && test(&[])? {
        items.clear();
    }
    Ok(items)
}

/// What a subset of calls needs, and how to build a trace of it.
pub(super) struct Shrink<'t> {
    t: &'t Trace,
    observed: u64,
    by_seq: HashMap<u64, &'t CallRecord>,
    /// The call that created each buffer, stream, event, graph and pinned region.
    made_buf: HashMap<BufferId, u64>,
    made_stream: HashMap<StreamId, u64>,
    made_event: HashMap<EventId, u64>,
    made_host: HashMap<HostId, u64>,
    /// A graph's capture: its begin_capture, end_capture and captured work.
    graph_calls: HashMap<GraphId, Vec<u64>>,
    /// begin_capture and end_capture pairs, each to the other.
    pair: HashMap<u64, u64>,
    /// Keep the observer as recorded even when it is not a launch (a readback whose bytes are
    /// the evidence).
    keep_observer: bool,
}

impl<'t> Shrink<'t> {
    pub(super) fn new(t: &'t Trace, observed: u64) -> Self {
        let mut s = Shrink {
            t,
            observed,
            by_seq: t.calls.iter().map(|c| (c.seq, c)).collect(),
            made_buf: HashMap::default(),
            made_stream: HashMap::default(),
            made_event: HashMap::default(),
            made_host: HashMap::default(),
            graph_calls: HashMap::default(),
            pair: HashMap::default(),
            keep_observer: false,
        };
        let captured = super::captured_work(t);
        let mut begun: HashMap<StreamRef, u64> = HashMap::default();
        for c in &t.calls {
            match (&c.call, &c.ret) {
                (_, Some(Ok(Value::Buffer(b)))) => {
                    s.made_buf.insert(*b, c.seq);
                }
                (_, Some(Ok(Value::Stream(StreamRef::Id(id))))) => {
                    s.made_stream.insert(*id, c.seq);
                }
                (_, Some(Ok(Value::Event(e)))) => {
                    s.made_event.insert(*e, c.seq);
                }
                (_, Some(Ok(Value::Host(h)))) => {
                    s.made_host.insert(*h, c.seq);
                }
                _ => {}
            }
            match &c.call {
                Call::BeginCapture { stream } => {
                    begun.insert(*stream, c.seq);
                }
                Call::EndCapture { stream } => {
                    if let Some(b) = begun.remove(stream) {
                        s.pair.insert(b, c.seq);
                        s.pair.insert(c.seq, b);
                        if let Some(Ok(Value::Graph(g))) = &c.ret {
                            let mut calls = vec![b, c.seq];
                            calls.extend(captured.get(g).into_iter().flatten().copied());
                            s.graph_calls.insert(*g, calls);
                        }
                    }
                }
                _ => {}
            }
        }
        s
    }

    /// `keep` and everything it needs, in trace order.
    fn closure(&self, keep: &[u64]) -> Vec<u64> {
        let mut set: HashSet<u64> = keep.iter().copied().collect();
        let mut todo: Vec<u64> = keep.to_vec();
        while let Some(seq) = todo.pop() {
            let Some(c) = self.by_seq.get(&seq) else {
                continue;
            };
            let r = refs(&c.call);
            let mut need: Vec<u64> = Vec::new();
            need.extend(r.bufs.iter().filter_map(|b| self.made_buf.get(b)));
            need.extend(r.streams.iter().filter_map(|x| self.made_stream.get(x)));
            need.extend(r.events.iter().filter_map(|x| self.made_event.get(x)));
            need.extend(r.hosts.iter().filter_map(|x| self.made_host.get(x)));
            for g in &r.graphs {
                need.extend(self.graph_calls.get(g).into_iter().flatten());
            }
            need.extend(self.pair.get(&seq));
            for n in need {
                // The observer itself comes along only when it is kept as it was (a launch, a
                // scan); a substituted one is the sync `build` appends.
                let limit_ok =
                    n < self.observed || (n == self.observed && !self.substitute_observer());
                if limit_ok && set.insert(n) {
                    todo.push(n);
                }
            }
        }
        let mut out: Vec<u64> = set.into_iter().collect();
        out.sort_unstable();
        out
    }

    /// Whether the observer is a call that only waited (a sync, a blocking copy): then a
    /// synchronisation stands in for it. A launch or a red-zone scan is kept as it was.
    fn substitute_observer(&self) -> bool {
        !self.keep_observer
            && self.by_seq.get(&self.observed).is_some_and(|c| {
                c.call.launch().is_none()
                    && !matches!(c.call, Call::ScanRedzones | Call::LaunchGraph { .. })
            })
    }

    pub(super) fn build(&self, keep: &[u64]) -> Trace {
        let t = self.t;
        let substitute = self.substitute_observer();
        let mut keep = keep.to_vec();
        if !substitute {
            keep.push(self.observed);
        }
        let kept = self.closure(&keep);
        let mut calls: Vec<CallRecord> = kept
            .iter()
            .filter_map(|s| self.by_seq.get(s).map(|c| (*c).clone()))
            .collect();
        let obs = self.by_seq.get(&self.observed);
        if substitute {
            calls.push(CallRecord {
                seq: self.observed,
                thread: obs.map_or(0, |c| c.thread),
                site: obs.map_or(SiteId(0), |c| c.site),
                t_ns: obs.map_or(0, |c| c.t_ns),
                dur_ns: obs.and_then(|c| c.dur_ns),
                call: Call::Synchronize {
                    stream: StreamRef::Legacy,
                },
                ret: obs.and_then(|c| c.ret.clone()),
            });
        }
        let mut named = Named::of(&calls);
        let mut out = self.carried(&mut named);
        self.renumber(&mut calls, &mut named, &mut out);
        // A blob that cannot be read is left out: the candidate then fails to replay, which
        // the oracle reads as "does not reproduce".
        for id in &named.blobs {
            let _ = t.blobs.copy_to(id, &mut out.blobs);
        }
        out.sizes = t
            .sizes
            .iter()
            .filter(|(b, _)| named.bufs.contains(b))
            .map(|(b, s)| (*b, *s))
            .collect();
        out.calls = calls;
        out
    }

    /// The tables a candidate trace carries from the whole one, cut to what its calls name
    /// (the blobs those tables hold added to `named`).
    fn carried(&self, named: &mut Named) -> Trace {
        let t = self.t;
        let mut out = t.derived();
        out.initial = t
            .initial
            .iter()
            .filter(|i| named.bufs.contains(&i.buf))
            .cloned()
            .collect();
        named.blobs.extend(out.initial.iter().map(|i| i.data));
        out.adopted = t
            .adopted
            .iter()
            .filter(|a| match a {
                Adopted::Stream { id, is_default } => *is_default || named.streams.contains(id),
                Adopted::Event { id } => named.events.contains(id),
                Adopted::Graph { .. } => false,
                Adopted::Host { id, .. } => named.hosts.contains(id),
                // Kept: a kept collective needs its communicator joined.
                Adopted::Comm { .. } | Adopted::CommPairs { .. } => true,
            })
            .cloned()
            .collect();
        out.kernels = t
            .kernels
            .iter()
            .filter(|(k, _)| named.kernels.contains(k))
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let modules: HashSet<&str> = out.kernels.values().map(|k| k.module.as_str()).collect();
        out.modules = t
            .modules
            .iter()
            .filter(|m| modules.contains(m.name.as_str()))
            .cloned()
            .collect();
        out.module_images = t
            .module_images
            .iter()
            .filter(|(m, _)| modules.contains(m.as_str()))
            .map(|(m, b)| (m.clone(), *b))
            .collect();
        named.blobs.extend(out.module_images.values().copied());
        out.kernel_clusters = t
            .kernel_clusters
            .iter()
            .filter(|(k, _)| out.kernels.contains_key(k))
            .map(|(k, d)| (*k, *d))
            .collect();
        out.kernel_cooperative = t
            .kernel_cooperative
            .iter()
            .filter(|k| out.kernels.contains_key(k))
            .copied()
            .collect();
        out.addresses = t
            .addresses
            .iter()
            .filter(|(b, _)| named.bufs.contains(b))
            .map(|(b, a)| (*b, *a))
            .collect();
        out
    }

    /// The kept calls renumbered from 0, with what is keyed by a call's number (the observed
    /// call's recorded results are not carried: the oracle judges them afresh).
    fn renumber(&self, calls: &mut [CallRecord], named: &mut Named, out: &mut Trace) {
        let t = self.t;
        let renum: HashMap<u64, u64> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| (c.seq, i as u64))
            .collect();
        for (seq, blob) in &t.d2h_async {
            if let Some(n) = renum.get(seq).filter(|_| *seq != self.observed) {
                out.d2h_async.insert(*n, *blob);
                named.blobs.insert(*blob);
            }
        }
        for (seq, hashes) in &t.sync_hashes {
            if let Some(n) = renum.get(seq).filter(|_| *seq != self.observed) {
                let h: Vec<_> = hashes
                    .iter()
                    .filter(|(b, _)| named.bufs.contains(b))
                    .copied()
                    .collect();
                out.sync_hashes.insert(*n, h);
            }
        }
        for c in calls.iter_mut() {
            c.seq = renum[&c.seq];
        }
        // A dump's calls in flight keep their names in the new numbering (those not kept go).
        if let Some(d) = out.dump.as_mut() {
            d.in_flight = d
                .in_flight
                .iter()
                .filter_map(|(seq, thread)| Some((*renum.get(seq)?, *thread)))
                .collect();
        }
    }
}

/// What a candidate's calls name: the resources, blobs and kernels its tables are cut to.
#[derive(Default)]
struct Named {
    bufs: HashSet<BufferId>,
    streams: HashSet<StreamId>,
    events: HashSet<EventId>,
    hosts: HashSet<HostId>,
    blobs: HashSet<BlobId>,
    kernels: HashSet<KernelId>,
}

impl Named {
    fn of(calls: &[CallRecord]) -> Named {
        let mut n = Named::default();
        for c in calls {
            let r = refs(&c.call);
            n.bufs.extend(r.bufs);
            n.streams.extend(r.streams);
            n.events.extend(r.events);
            n.hosts.extend(r.hosts);
            n.blobs.extend(r.blobs);
            if let Some((k, _)) = c.call.launch() {
                n.kernels.insert(k);
            }
            if let Some(Ok(Value::Bytes(b))) = &c.ret {
                n.blobs.insert(*b);
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddmin_finds_the_one_item_that_matters() {
        let mut tries = 0;
        let kept = ddmin((0..40).collect(), &mut |s: &[u64]| {
            tries += 1;
            Ok(s.contains(&17))
        })
        .unwrap();
        assert_eq!(kept, vec![17]);
        assert!(tries < 40, "{tries} tries");
    }

    #[test]
    fn ddmin_keeps_a_pair_that_only_fails_together() {
        let kept = ddmin((0..16).collect(), &mut |s: &[u64]| {
            Ok(s.contains(&3) && s.contains(&12))
        })
        .unwrap();
        assert_eq!(kept, vec![3, 12]);
    }
}
