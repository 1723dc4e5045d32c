//! `Replayer::run`: the trace replayed on a backend, in phases with names. A pass is one loop
//! over the calls; each call goes through the same steps in order: its fault window looked at
//! (`enter_window`), issued (`issue_or_expand`: a graph launch inside a window runs its nodes
//! one by one), synced after when it is a launch that must show its own fault
//! (`sync_after_launch`), verified, and its outcome settled into the report (`settle_outcome`, then
//! `on_ok`, `on_failed` or `on_missing_error`).

use super::fault::Bands;
use super::shared::{Ended, Turn};
use super::state::{resolve_stream, sync_all, Guard, State};
use super::*;
use std::ops::ControlFlow;

/// What one pass over the trace carries from call to call.
struct Pass<'p> {
    gpu: &'p dyn GpuBackend,
    opts: &'p ReplayOptions,
    /// The first call of the replayed range (calls before it set state up, unjudged).
    first: u64,
    /// Which loop this is (0: the one that reports).
    lp: usize,
    /// When the first call of the range was issued.
    t0: Option<Instant>,
    /// The last kernel each buffer was passed to, for a divergence's suspect.
    last_writer: HashMap<BufferId, KernelId>,
    /// Red-zone bands per-launch scans found since the last recorded scan.
    scanned_since: Bands,
    /// Inside a fault window every launch is followed by a sync of every stream (and a
    /// red-zone scan), so the fault shows at its launch.
    pinning: bool,
    /// Captures open at this call: nothing may sync while one is (it would invalidate the
    /// capture), so pinning waits for the graph's launch.
    open_captures: usize,
}

/// One call on its way through a pass.
struct Step<'c> {
    c: &'c CallRecord,
    /// Inside the replayed range.
    live: bool,
    /// The recorded fault window holding the call.
    window: Option<FaultWindow>,
    /// Inside a window and outside a capture: the call is synced and scanned after.
    pin: bool,
    /// The launch that raised a failure, and the graph launch whose node it was.
    culprit: Option<(u64, Option<String>)>,
}

impl Replayer<'_> {
    /// Run the trace. `loader` gets each embedded module first (for backends that compile).
    pub fn run(
        &self,
        gpu: &dyn GpuBackend,
        opts: &ReplayOptions,
        loader: Option<ModuleLoader<'_>>,
        mut progress: impl FnMut(u64),
    ) -> Result<ReplayReport, ReplayError> {
        // However the replay ends (its setup too), the ranks sharing memory with it stop
        // waiting for it.
        let _ended = opts.share.as_ref().map(Ended::new);
        // A sharing rank's place in the joint replay at a call of pass `p` (`shared.rs`).
        let turn = |p: &Pass<'_>| {
            let capturing = p.open_captures > 0;
            (opts.share.as_ref()).map(|share| Turn {
                share,
                gpu,
                capturing,
            })
        };
        let kernels = self.kernels_with(gpu, loader, self.opaque_ok || opts.opaque_kernels)?;
        let (first, last) = opts.range.unwrap_or((0, u64::MAX));
        let stop = opts
            .stop_at
            .map_or(u64::MAX, |s| s.saturating_add(1))
            .min(last);
        let mut report = self.new_report(&kernels.1, opts, first, stop);
        // One state for all loops: the first sets it up, each later one puts the initial
        // contents back into the same buffers (`restore`). A fresh allocation per loop would
        // measure cold device memory mappings and caches every time, which a running engine,
        // stepping over long-lived buffers, does not see.
        let mut guard = Guard {
            r: self,
            gpu,
            st: State::new(&kernels),
        };
        guard.st.comm_ids = opts.comms.iter().map(|(k, v)| (*k, *v)).collect();
        for lp in 0..report.loops {
            let tr = Instant::now();
            if lp == 0 {
                self.setup(gpu, &mut guard.st)?;
            } else {
                self.restore(gpu, &mut guard.st)?;
            }
            report.restore_ms.push(tr.elapsed().as_secs_f64() * 1e3);
            let mut pass = Pass {
                gpu,
                opts,
                first,
                lp,
                t0: None,
                last_writer: HashMap::default(),
                scanned_since: Bands::default(),
                pinning: false,
                open_captures: 0,
            };
            for c in self.trace.calls.iter().take_while(|c| c.seq < stop) {
                if opts.skip.contains_key(&c.seq) {
                    continue;
                }
                if let Some(at) = turn(&pass) {
                    if self.share_step(at, &mut guard.st, c, &mut report)? {
                        continue;
                    }
                }
                let flow =
                    self.replay_call(&mut pass, &mut guard.st, c, &mut report, &mut progress);
                if let Some(sh) = &opts.share {
                    sh.returned();
                }
                if flow?.is_break() {
                    break;
                }
            }
            if let Some(at) = turn(&pass) {
                let last = self.trace.calls.last().map_or(0, |c| c.seq);
                for (what, slot) in at.share.exports_after(last) {
                    self.hand_over(at, &guard.st, what, slot, None)?;
                }
            }
            self.end_pass(&pass, &mut guard.st, &mut report);
            if report.stopped_at.is_some() {
                // The context is dead: nothing more can run in this process.
                break;
            }
        }
        report.seen = std::mem::take(&mut guard.st.seen);
        drop(guard);
        Ok(report)
    }

    /// The report before anything ran: what the range holds that no replay can check.
    fn new_report(
        &self,
        opaque: &rustc_hash::FxHashSet<KernelId>,
        opts: &ReplayOptions,
        first: u64,
        stop: u64,
    ) -> ReplayReport {
        let mut opaque_kernels: Vec<String> =
            opaque.iter().map(|k| self.trace.kernel_name(*k)).collect();
        opaque_kernels.sort();
        let (host_funcs, uploads_after_host_funcs) = host_funcs(self.trace, first, stop);
        let mut report = ReplayReport {
            loops: opts.loops.max(1),
            dump_reason: self.trace.dump.as_ref().map(|d| d.reason.clone()),
            opaque_kernels,
            opaque_calls: opaque_calls(self.trace, first, stop),
            host_funcs,
            uploads_after_host_funcs,
            skipped: opts.skip.values().take(8).cloned().collect(),
            skipped_count: opts.skip.len(),
            ..Default::default()
        };
        let mut in_range = self
            .trace
            .calls
            .iter()
            .filter(|c| c.seq >= first && c.seq < stop);
        if let Some(a) = in_range.next() {
            let z = in_range.next_back().unwrap_or(a);
            report.recorded_ms =
                (z.t_ns + z.dur_ns.unwrap_or(0)).saturating_sub(a.t_ns) as f64 / 1e6;
        }
        report
    }

    /// One call of a pass, from its window to its outcome in the report. `Break` ends the
    /// pass (the context died, or the replay diverged).
    fn replay_call(
        &self,
        p: &mut Pass<'_>,
        st: &mut State,
        c: &CallRecord,
        report: &mut ReplayReport,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ControlFlow<()>, ReplayError> {
        let capturing = p.track_captures(c);
        let live = p.live(c);
        if live && p.t0.is_none() {
            p.t0 = Some(Instant::now());
        }
        let timed = live && p.lp == 0 && p.opts.per_call_timing;
        let tc = timed.then(Instant::now);
        let window = self.windows.iter().find(|w| w.contains(c.seq)).copied();
        let mut s = Step {
            c,
            live,
            window,
            pin: live && window.is_some() && !capturing,
            culprit: None,
        };
        let mut outcome = self.enter_window(p, st, &s);
        if p.opts.break_before == Some(c.seq) && p.lp == 0 {
            debugger::stop_before(self.trace, st, c);
        }
        if matches!(outcome, Outcome::Ok { .. }) {
            outcome = self.issue_or_expand(p, st, &mut s, report)?;
        }
        // Said as soon as the call is issued, before any sync after it: a replay that then
        // blocks is known to be blocked behind this call (`child`'s hang verdict).
        if live && p.lp == 0 {
            report.calls += 1;
            progress(c.seq);
        }
        if let Some((kid, args)) = c.call.launch() {
            for d in args.iter().flat_map(Arg::device_addrs) {
                if let DevAddr::Buf { buf, .. } = d {
                    p.last_writer.insert(*buf, kid);
                }
            }
        }
        let outcome = self.sync_after_launch(p, st, &mut s, outcome, report)?;
        // With a sync after each launch, a launch's time runs to its completion.
        if let (Some(tc), Some(t0)) = (tc, p.t0) {
            report.per_call_us.push(CallTiming {
                seq: c.seq,
                start_us: tc.duration_since(t0).as_secs_f64() * 1e6,
                us: tc.elapsed().as_secs_f64() * 1e6,
            });
        }
        let outcome = match outcome {
            Outcome::Ok {
                checked,
                mismatch: None,
            } if live && p.opts.verify => Outcome::Ok {
                checked,
                mismatch: self.check_sync_hashes(p.gpu, st, c),
            },
            other => other,
        };
        Ok(self.settle_outcome(p, st, &s, outcome, report))
    }

    /// Entering a fault window: a fault raised before it would otherwise be blamed on its
    /// first launch, so everything before it must have finished cleanly.
    fn enter_window(&self, p: &mut Pass<'_>, st: &mut State, s: &Step<'_>) -> Outcome {
        let mut outcome = Outcome::Ok {
            checked: false,
            mismatch: None,
        };
        if s.pin && !p.pinning {
            if let Err(e) = sync_all(p.gpu, st) {
                outcome = Outcome::Failed(e.context(format!(
                    "the device had already faulted before call #{} (the window of the recorded fault starts there)",
                    s.c.seq
                )));
            }
        }
        p.pinning = s.pin;
        outcome
    }

    /// The call issued; a graph launch inside a window instead runs the graph's recorded work
    /// eagerly, a sync after each launch, so a fault names its node.
    fn issue_or_expand(
        &self,
        p: &mut Pass<'_>,
        st: &mut State,
        s: &mut Step<'_>,
        report: &mut ReplayReport,
    ) -> Result<Outcome, ReplayError> {
        let c = s.c;
        let nodes = match (&c.call, s.pin) {
            (Call::LaunchGraph { graph, .. }, true) => self.captured.get(graph),
            _ => None,
        };
        let Some(nodes) = nodes else {
            return self.issue(p.gpu, st, c, s.live && p.opts.verify);
        };
        let mut o = Outcome::Ok {
            checked: false,
            mismatch: None,
        };
        for seq in nodes {
            let Some(n) = self.by_seq.get(seq) else {
                continue;
            };
            let r = match self.issue(p.gpu, st, n, false)? {
                Outcome::Failed(e) => Err(e),
                _ if n.call.launch().is_some() => sync_all(p.gpu, st),
                _ => Ok(()),
            };
            if let Err(e) = r {
                s.culprit = Some((*seq, Some(c.call.kind().name().into())));
                o = Outcome::Failed(e);
                break;
            }
            if s.pin && n.call.launch().is_some() {
                self.scan_after(p.gpu, n.seq, p.lp, &mut p.scanned_since, report);
            }
        }
        Ok(match (o, c.ret.as_ref()) {
            (Outcome::Ok { .. }, Some(Err(_))) => Outcome::SucceededButRecordedError,
            (o, _) => o,
        })
    }

    /// After a launch that went through, synchronise (and scan red zones) when asked or inside
    /// a fault window: an asynchronous fault then surfaces at its own launch and is that
    /// call's outcome.
    fn sync_after_launch(
        &self,
        p: &mut Pass<'_>,
        st: &mut State,
        s: &mut Step<'_>,
        outcome: Outcome,
        report: &mut ReplayReport,
    ) -> Result<Outcome, ReplayError> {
        let c = s.c;
        let wanted = s.live
            && (p.opts.sync_each || p.opts.scan_redzones_each || s.pin)
            && c.call.launch().is_some();
        let o = match outcome {
            o @ (Outcome::Ok { .. } | Outcome::SucceededButRecordedError) if wanted => o,
            other => return Ok(other),
        };
        let synced = match (s.pin, c.call.work_stream()) {
            (true, _) => sync_all(p.gpu, st),
            (false, Some(stream)) => p.gpu.synchronize(resolve_stream(st, stream, c)?),
            (false, None) => Ok(()),
        };
        Ok(match synced {
            Err(e) => {
                s.culprit = Some((c.seq, None));
                Outcome::Failed(e)
            }
            Ok(()) => {
                if p.opts.scan_redzones_each || s.pin {
                    self.scan_after(p.gpu, c.seq, p.lp, &mut p.scanned_since, report);
                }
                o
            }
        })
    }

    /// The call's outcome into the report.
    fn settle_outcome(
        &self,
        p: &mut Pass<'_>,
        st: &mut State,
        s: &Step<'_>,
        outcome: Outcome,
        report: &mut ReplayReport,
    ) -> ControlFlow<()> {
        match outcome {
            Outcome::Ok { checked, mismatch } => {
                self.on_ok(p, st, s, checked, mismatch, report);
                ControlFlow::Continue(())
            }
            Outcome::Failed(e) => self.on_failed(p, st, s, e, report),
            Outcome::SucceededButRecordedError => {
                if p.lp == 0 {
                    self.on_missing_error(p, st, s, report);
                }
                ControlFlow::Continue(())
            }
        }
    }

    /// A call that went as recorded: its readback counted, a recorded red-zone scan compared
    /// with what this replay's scans found, a mismatch kept as the divergence.
    fn on_ok(
        &self,
        p: &mut Pass<'_>,
        st: &mut State,
        s: &Step<'_>,
        checked: bool,
        mismatch: Option<(Option<BufferId>, Option<u64>, String)>,
        report: &mut ReplayReport,
    ) {
        let c = s.c;
        if s.live {
            report.d2h_checked += checked as u64;
            if checked && mismatch.is_none() {
                report.d2h_matched += 1;
            }
        }
        if let (Call::ScanRedzones, Some(Ok(Value::Count(n))), Some(m)) =
            (&c.call, &c.ret, st.last_scan.take())
        {
            // Per-launch scans since the last recorded scan already found (and refilled) some
            // zones: they count towards this one.
            p.scanned_since.add(m, &p.gpu.redzone_hits());
            let bands = std::mem::take(&mut p.scanned_since);
            let m = bands.len();
            if (*n > 0 || m > 0) && p.lp == 0 {
                let w = s.window.filter(|w| w.kind == WindowKind::Redzone);
                let raised_by = self.band_culprit(st, &bands);
                report.faults.push(FaultReport {
                    seq: c.seq,
                    site: self.trace.site(c.site),
                    call: "scan_redzones".into(),
                    kernel: None,
                    recorded: format!("{n} red zone(s) written"),
                    recorded_code: None,
                    replayed: Some(format!("{m} red zone(s) written")),
                    replayed_code: None,
                    reproduced: *n == m as u64,
                    observed_at: None,
                    window: w.map(|w| (w.start, w.observed)),
                    raised_by,
                });
            }
        }
        if let Some((buf, off, detail)) = mismatch {
            if report.divergence.is_none() {
                report.divergence = Some(Divergence {
                    seq: c.seq,
                    site: self.trace.site(c.site),
                    call: c.call.kind().name().to_string(),
                    buffer: buf.map(|b| b.to_string()),
                    byte_offset: off,
                    last_writer: buf
                        .and_then(|b| p.last_writer.get(&b))
                        .map(|k| self.trace.kernel_name(*k)),
                    detail,
                });
            }
        }
    }

    /// A call that failed: the recorded fault met again (at its own call, or inside its
    /// window), or a divergence. A sticky error ends the pass, as does a failure the
    /// recording did not have.
    fn on_failed(
        &self,
        p: &mut Pass<'_>,
        st: &mut State,
        s: &Step<'_>,
        e: anyhow::Error,
        report: &mut ReplayReport,
    ) -> ControlFlow<()> {
        let c = s.c;
        let replayed_code = err_code(&e);
        let recorded_window = self.window_met(s.window, &e, replayed_code);
        let met = recorded_window.and_then(|w| self.by_seq.get(&w.observed));
        let (rc, window) = match met {
            Some(rc) => (*rc, recorded_window),
            None => (c, s.window.filter(|w| w.observed == c.seq)),
        };
        let recorded = rc.ret.as_ref().and_then(|r| r.as_ref().err());
        let mut f = self.fault(rc, recorded, Some(&e));
        if met.is_some() {
            // The recorded fault, seen where this replay first waited.
            if let (Call::ScanRedzones, Some(Ok(Value::Count(n)))) = (&rc.call, &rc.ret) {
                f.recorded = format!("{n} red zone(s) written");
            }
            f.reproduced = true;
            f.observed_at = Some(c.seq);
        }
        f.window = window.map(|w| (w.start, w.observed));
        f.raised_by = s
            .culprit
            .as_ref()
            .and_then(|(seq, graph)| self.culprit(st, *seq, graph.as_ref().map(|_| c), Some(&e)));
        let dead = replayed_code.is_some_and(crate::backend::is_sticky);
        let recorded_here = matches!(c.ret, Some(Err(_))) || recorded_window.is_some();
        if p.lp == 0 {
            report.faults.push(f);
        }
        if dead {
            // The context is gone: nothing after this call can be replayed in this process.
            if p.lp == 0 {
                report.stopped_at = Some(c.seq);
                if !recorded_here && report.divergence.is_none() {
                    report.divergence = Some(self.failed_divergence(st, c, &e));
                }
            }
            return ControlFlow::Break(());
        }
        if !recorded_here {
            // Diverged: the state is no longer the recording's.
            if report.divergence.is_none() {
                report.divergence = Some(self.failed_divergence(st, c, &e));
            }
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// The recorded window `window` when the failure `e` is its fault: an asynchronous error
    /// of the same code, or a recorded red-zone hit that a backend with exact bounds (the
    /// mock) catches as the out-of-bounds access itself.
    fn window_met(
        &self,
        window: Option<FaultWindow>,
        e: &anyhow::Error,
        replayed_code: Option<u32>,
    ) -> Option<FaultWindow> {
        let out_of_bounds = crate::backend::device_error(e)
            .and_then(|d| d.alloc.as_ref())
            .is_some_and(|a| a.past_end > 0);
        window.filter(|w| match w.kind {
            WindowKind::Error => match (w.code, replayed_code) {
                (None, _) => true,
                (Some(a), Some(b)) => crate::backend::same_fault(a, b),
                (Some(_), None) => false,
            },
            WindowKind::Redzone => out_of_bounds,
        })
    }

    /// A call that succeeded where the recording failed: not reproduced, unless the window's
    /// scans found a guard band written (the recorded overrun, stopped short of unmapped
    /// memory by the red zone), or a kernel this backend skips may have raised it.
    fn on_missing_error(
        &self,
        p: &mut Pass<'_>,
        st: &mut State,
        s: &Step<'_>,
        report: &mut ReplayReport,
    ) {
        let c = s.c;
        let recorded = c.ret.as_ref().and_then(|r| r.as_ref().err());
        let mut f = self.fault(c, recorded, None);
        let w = s.window.filter(|w| w.observed == c.seq);
        f.window = w
            .filter(|w| w.start != w.observed)
            .map(|w| (w.start, w.observed));
        if w.is_some_and(|w| w.kind == WindowKind::Error) && !p.scanned_since.is_empty() {
            let bands = std::mem::take(&mut p.scanned_since);
            f.replayed = Some(format!("no error, but {} red zone(s) written", bands.len()));
            f.reproduced = true;
            f.observed_at = bands.first.map(|(s, _)| s);
            f.raised_by = self.band_culprit(st, &bands);
        }
        if !f.reproduced {
            if let Some(k) = w.and_then(|w| self.skipped_in(st, w)) {
                f.replayed = Some(format!(
                    "not checked: a launch that may have raised it ({k}) cannot run on this backend"
                ));
            }
        }
        report.faults.push(f);
    }

    /// The end of a pass: what could not be checked, named (first loop), a fault the device
    /// raised after the last call that looked, and the pass's time.
    fn end_pass(&self, p: &Pass<'_>, st: &mut State, report: &mut ReplayReport) {
        let unchecked = std::mem::take(&mut st.unchecked);
        let failed_unrun = std::mem::take(&mut st.failed_unrun);
        let unrecorded = std::mem::take(&mut st.unrecorded_args);
        if p.lp == 0 {
            report.not_checked = unrecorded
                .into_iter()
                .map(|(seq, k, n)| {
                    format!(
                        "call #{seq}: launch of {} not run: its {n} argument(s) were not recorded (the recording backend gave no parameter layout; implement GpuBackend::kernel_params)",
                        self.trace.kernel_name(k)
                    )
                })
                .collect();
            report
                .not_checked
                .extend(failed_unrun.into_iter().map(|(seq, k)| {
                    let err = self
                        .by_seq
                        .get(&seq)
                        .map_or_else(|| "an error".into(), |c| crate::trace::ret_text(&c.ret));
                    format!(
                        "call #{seq}: launch of {} recorded {err}, but this backend cannot run it",
                        self.trace.kernel_name(k)
                    )
                }));
            report.unchecked = unchecked
                .into_iter()
                .map(|(seq, b, k)| {
                    format!("call #{seq}: {b} depends on {}", self.trace.kernel_name(k))
                })
                .collect();
        }
        if let Some(t0) = p.t0 {
            // A fault the device raised asynchronously, after the last call that looked, must
            // not go unnoticed.
            if let Err(e) = p.gpu.synchronize(p.gpu.default_stream()) {
                if p.lp == 0 && report.stopped_at.is_none() {
                    report.late_fault = Some(format!("{e:#}"));
                }
            }
            report.loop_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
}

impl Pass<'_> {
    /// Inside the replayed range.
    fn live(&self, c: &CallRecord) -> bool {
        c.seq >= self.first
    }

    /// Follows captures opening and closing; whether `c` is inside one (an `EndCapture`
    /// still is).
    fn track_captures(&mut self, c: &CallRecord) -> bool {
        match (&c.call, &c.ret) {
            (Call::BeginCapture { .. }, Some(Ok(_))) => self.open_captures += 1,
            (Call::EndCapture { .. }, _) => {
                self.open_captures = self.open_captures.saturating_sub(1)
            }
            _ => {}
        }
        self.open_captures > 0 || matches!(c.call, Call::EndCapture { .. })
    }
}
