//! What a replay reports: its first divergence, the faults it met and where they were raised,
//! timings, and the one answer scripts want (`passed`).

use serde::{Deserialize, Serialize};

/// The first place a replay's results part from the recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The call at which the results first differ (its seq).
    pub seq: u64,
    /// Where the recorded program made the call (`file:line:col`).
    pub site: String,
    /// The call's kind (`copy_d2h`, ...).
    pub call: String,
    /// The buffer whose contents differ, when the call read one.
    pub buffer: Option<String>,
    /// The first byte that differs, counted from the start of the buffer.
    pub byte_offset: Option<u64>,
    /// The last kernel launched before this call with the buffer among its arguments.
    pub last_writer: Option<String>,
    /// What differs (the recorded and replayed byte, or how the call failed).
    pub detail: String,
}

/// A recorded failure and what the replay did at the same call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultReport {
    /// The call at which the recording saw the fault (its seq).
    pub seq: u64,
    /// Where the recorded program made the call (`file:line:col`).
    pub site: String,
    /// The call's kind (`launch`, `synchronize`, ...).
    pub call: String,
    /// The kernel the call launched (`module::name`), when it is a launch.
    pub kernel: Option<String>,
    /// What the call returned when recorded: the driver error's name and code, a message,
    /// `success`, or that it never returned.
    pub recorded: String,
    /// The driver error code recorded, when there was one.
    pub recorded_code: Option<u32>,
    /// `None`: the call succeeded on replay.
    pub replayed: Option<String>,
    /// The driver error code the replay got, when there was one.
    pub replayed_code: Option<u32>,
    /// Whether the replay raised the recorded fault.
    pub reproduced: bool,
    /// The replayed call that reported it, when that is not `seq` (an asynchronous fault
    /// shows at the first call that waits, which may differ between recording and replay).
    #[serde(default)]
    pub observed_at: Option<u64>,
    /// The calls that may have raised it: from the first call after the last host sync that
    /// succeeded before `seq`, to `seq`.
    #[serde(default)]
    pub window: Option<(u64, u64)>,
    /// The launch that raised it, found by synchronising after each launch of the window.
    #[serde(default)]
    pub raised_by: Option<Culprit>,
}

/// The launch a replay found raising a fault, and what it is known to have touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Culprit {
    /// The call that launched the kernel (its seq).
    pub seq: u64,
    /// The kernel launched (`module::name`).
    pub kernel: String,
    /// Where the recorded program launched it (`file:line:col`).
    pub site: String,
    /// For a node of a recorded graph: the graph and the call that launched it.
    pub graph: Option<String>,
    /// The buffer the fault was about, with its allocating site, when the backend says (the
    /// mock does for every out-of-bounds access or use after free).
    pub buffer: Option<String>,
    /// How far past the buffer's end the access ran, in bytes.
    pub past_end: Option<u64>,
    /// The buffers the kernel may write (when the backend cannot say which one it was).
    pub writes: Vec<String>,
    /// The faulting access in the backend's words ("a read of 0x..., which points into no
    /// allocation"), when it says.
    #[serde(default)]
    pub access: Option<String>,
}

impl Culprit {
    fn render(&self) -> String {
        let mut s = format!(
            "  raised by call #{} {} ({}){}\n",
            self.seq,
            self.kernel,
            self.site,
            self.graph
                .as_ref()
                .map(|g| format!(", a node of {g}"))
                .unwrap_or_default()
        );
        let what = self.access.as_deref().unwrap_or("the access");
        match (&self.buffer, self.past_end) {
            (Some(b), Some(n)) if n > 0 => {
                s.push_str(&format!("  {what} ran {n} bytes past the end of {b}\n"))
            }
            (Some(b), _) => s.push_str(&format!("  {what} was to {b}\n")),
            (None, _) if self.access.is_some() => s.push_str(&format!("  {what}\n")),
            (None, _) if !self.writes.is_empty() => s.push_str(&format!(
                "  the backend does not say which access faulted (a read or a write) or where; the buffers this launch may write: {}\n",
                self.writes.join(", ")
            )),
            _ => {}
        }
        s
    }
}

/// One replayed call's time. With a sync after each launch (`--sync-each`, or `--perfetto`)
/// a launch's span runs until its work finished, so it is the device's time plus the
/// launch and sync latency (a few microseconds on CUDA).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallTiming {
    /// The call (its seq in the trace).
    pub seq: u64,
    /// Microseconds from the first replayed call's start.
    pub start_us: f64,
    /// How long it took, to the end of the sync after it when there was one.
    pub us: f64,
}

/// What a replay did and how its results compared with the recording's.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReplayReport {
    /// What the replay made (buffers placed, streams, events) with the backend's handles, to
    /// name what a backend's own log says (`testing::replay_layout`). Not in the JSON.
    #[serde(skip)]
    pub seen: super::Seen,
    /// Calls issued in the replayed range, counted in the first loop only.
    pub calls: u64,
    /// How many times the trace was replayed.
    pub loops: usize,
    /// Device-to-host results compared with the recording, over all loops.
    pub d2h_checked: u64,
    /// How many of the checked device-to-host results matched the recording.
    pub d2h_matched: u64,
    /// The first call whose results differ from the recording's, if any.
    pub divergence: Option<Divergence>,
    /// Each recorded fault and what the replay did at it, and each fault the replay raised where
    /// the recording had none (first loop).
    pub faults: Vec<FaultReport>,
    /// Wall time of the replayed range, per loop, in milliseconds.
    pub loop_ms: Vec<f64>,
    /// Per loop, the time to put the initial state in place before it, in milliseconds: the
    /// first loop's allocates and uploads every recorded buffer, a later loop's writes the
    /// initial contents back.
    #[serde(default)]
    pub restore_ms: Vec<f64>,
    /// Each call's replay time when per-call timing was asked for (first loop).
    pub per_call_us: Vec<CallTiming>,
    /// Red-zone violations found by per-launch scans: (seq, count).
    pub redzone_hits: Vec<(u64, u64)>,
    /// The recording's own wall time for the same range, in milliseconds.
    pub recorded_ms: f64,
    /// The replay stopped here: a reproduced fault that leaves the context unusable.
    pub stopped_at: Option<u64>,
    /// A device error that surfaced only at the final synchronisation (an asynchronous fault
    /// no replayed call observed; `--sync-each` pins it to its launch).
    pub late_fault: Option<String>,
    /// Kernels the backend could not run (no CPU body on the mock): skipped (`module::name`).
    #[serde(default)]
    pub opaque_kernels: Vec<String>,
    /// Driver calls recorded by name only (`Call::Opaque`), skipped: "name xN (first #S)".
    #[serde(default)]
    pub opaque_calls: Vec<String>,
    /// Host functions the program queued on its streams (`Call::HostFunc`), not run: "func on
    /// sN xK (first #S)".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_funcs: Vec<String>,
    /// Uploads queued on a stream after a host function on it: (how many, the first call).
    /// Their bytes are those recorded when queued, which the function may have changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploads_after_host_funcs: Option<(u64, u64)>,
    /// Device-to-host results not compared because they depend on a skipped kernel (first
    /// loop): "call #N: bufK depends on module::name".
    #[serde(default)]
    pub unchecked: Vec<String>,
    /// Recorded failures of calls this replay could not run (a launch of a kernel without a
    /// body here): neither reproduced nor refuted, so the replay does not pass.
    #[serde(default)]
    pub not_checked: Vec<String>,
    /// Why the trace was dumped, when it is a flight recorder's dump.
    #[serde(default)]
    pub dump_reason: Option<String>,
    /// Calls `ReplayOptions::skip` left out, with why (the first 8).
    #[serde(default)]
    pub skipped: Vec<String>,
    /// How many calls it left out.
    #[serde(default)]
    pub skipped_count: usize,
    /// Where a rank set's replay began this trace, when not where it began: a later
    /// checkpoint of its dump (`replayer::ranks::aligned`).
    #[serde(default)]
    pub begun_at: Option<String>,
    /// Buffers that were another rank's memory in a joint replay (opened from its IPC
    /// handle), in words. Left out of JSON when none (every replay but a joint one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<String>,
}

impl ReplayReport {
    /// Whether the replay did what the recording did: no divergence, every recorded fault
    /// reproduced, no fault the recording did not have. What `gputape replay` exits 0 on.
    pub fn passed(&self) -> bool {
        self.divergence.is_none()
            && self.late_fault.is_none()
            && self.faults.iter().all(|f| f.reproduced)
            && self.not_checked.is_empty()
            && !self.checked_nothing()
    }

    /// Nothing was verified: no call was replayed (a trace cut before its first complete
    /// call, a range that selects none), or every device-to-host result depended on a kernel
    /// this backend skipped. Such a replay cannot pass.
    pub fn checked_nothing(&self) -> bool {
        self.calls == 0
            || (self.d2h_checked == 0 && !self.unchecked.is_empty() && self.faults.is_empty())
    }

    /// A short human summary (stable: no times), for snapshots and the CLI.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        if let Some(r) = &self.dump_reason {
            s.push_str(&format!("flight dump: {r}\n"));
        }
        s.push_str(&format!(
            "replayed {} calls x{}; device-to-host results (all loops): {} of {} match the recording\n",
            self.calls, self.loops, self.d2h_matched, self.d2h_checked
        ));
        match &self.divergence {
            None => s.push_str("no divergence\n"),
            Some(d) => s.push_str(&format!(
                "FIRST DIVERGENCE at call #{} {} ({}){}{}{}: {}\n",
                d.seq,
                d.call,
                d.site,
                d.buffer
                    .as_ref()
                    .map(|b| format!(", buffer {b}"))
                    .unwrap_or_default(),
                d.byte_offset
                    .map(|o| format!(" byte {o}"))
                    .unwrap_or_default(),
                d.last_writer
                    .as_ref()
                    .map(|k| format!(", last written by {k}"))
                    .unwrap_or_default(),
                d.detail
            )),
        }
        for f in &self.faults {
            s.push_str(&format!(
                "fault at call #{} {}{} ({}): recorded {}; replay {}{} -> {}\n",
                f.seq,
                f.call,
                f.kernel
                    .as_ref()
                    .map(|k| format!(" [{k}]"))
                    .unwrap_or_default(),
                f.site,
                f.recorded,
                f.replayed.as_deref().unwrap_or("succeeded"),
                f.observed_at
                    .filter(|o| *o != f.seq)
                    .map(|o| format!(" at call #{o}"))
                    .unwrap_or_default(),
                if f.reproduced {
                    "REPRODUCED"
                } else {
                    "not reproduced"
                }
            ));
            if let Some((a, b)) = f.window.filter(|(a, b)| a != b) {
                s.push_str(&format!(
                    "  window #{a}..=#{b}: the calls that may have raised it (since the last host sync, or red-zone scan, before it)\n"
                ));
            }
            if let Some(c) = &f.raised_by {
                s.push_str(&c.render());
            }
            if let (false, Some((_, n))) = (
                f.reproduced,
                self.redzone_hits.iter().find(|(seq, _)| *seq == f.seq),
            ) {
                s.push_str(&format!(
                    "  ...but the red-zone scan right after it found {n} guard band(s) written: this call writes past its buffer here too\n"
                ));
            }
        }
        if !self.opaque_kernels.is_empty() {
            s.push_str(&format!(
                "{} kernel(s) this backend cannot run were skipped: {}\n",
                self.opaque_kernels.len(),
                self.opaque_kernels.join(", ")
            ));
        }
        if !self.opaque_calls.is_empty() {
            s.push_str(&format!(
                "driver calls recorded by name only, not replayed (what they did is missing here): {}\n",
                self.opaque_calls.join(", ")
            ));
        }
        if !self.host_funcs.is_empty() {
            s.push_str(&format!(
                "host functions the program queued, not run (its own code; the stream order they held is kept): {}\n",
                self.host_funcs.join(", ")
            ));
        }
        if let Some((n, first)) = self.uploads_after_host_funcs {
            s.push_str(&format!(
                "{n} upload(s) queued after a host function on its stream (first #{first}) carry the bytes recorded when queued: had the function written their source, the device got other bytes\n"
            ));
        }
        if let Some(b) = &self.begun_at {
            s.push_str(&format!("{b}\n"));
        }
        for b in &self.shared {
            s.push_str(&format!("{b}\n"));
        }
        if self.skipped_count > 0 {
            s.push_str(&format!(
                "{} call(s) not replayed: {}{}\n",
                self.skipped_count,
                self.skipped.join("; "),
                if self.skipped_count > self.skipped.len() {
                    "; ..."
                } else {
                    ""
                }
            ));
        }
        if let Some(first) = self.unchecked.first() {
            s.push_str(&format!(
                "{} device-to-host result(s) not checked, as they depend on a skipped kernel (first: {first})\n",
                self.unchecked.len()
            ));
        }
        for n in &self.not_checked {
            s.push_str(&format!("NOT CHECKED: {n}\n"));
        }
        if self.calls == 0 {
            s.push_str("NOTHING CHECKED: no call was replayed\n");
        } else if self.checked_nothing() {
            s.push_str(
                "NOTHING CHECKED: every device-to-host result depends on a kernel this backend skipped\n",
            );
        }
        if let Some(e) = &self.late_fault {
            s.push_str(&format!(
                "the device reported an error at the final synchronisation: {e} (replay with --sync-each to pin it to its launch)\n"
            ));
        }
        if let Some(seq) = self.stopped_at {
            s.push_str(&format!(
                "stopped after call #{seq}: the fault leaves the CUDA context unusable\n"
            ));
        }
        for (seq, n) in &self.redzone_hits {
            s.push_str(&format!(
                "red-zone scan after call #{seq}: {n} guard band(s) written\n"
            ));
        }
        s
    }
}

/// The schema `replay --json` writes; bumped when a field changes meaning or goes away.
/// v2: one shape for every mode (v1 nested a different object per mode).
pub const REPLAY_SCHEMA: &str = "gputape.replay.v2";

/// `replay --json`'s document. The same keys whichever way the trace was replayed, so a
/// script reads `passed`, `divergence` and `faults` without asking how: what only one mode has
/// is `null` or empty in the other.
pub fn replay_json(
    eager: Option<&ReplayReport>,
    graph: Option<&super::GraphReport>,
) -> serde_json::Value {
    use serde_json::json;
    let none = ReplayReport::default();
    let e = eager.unwrap_or(&none);
    let (mode, passed, divergence, loop_ms) = match graph {
        Some(g) => ("graph", g.passed(), g.first_mismatch.as_ref(), &g.loop_ms),
        None => ("eager", e.passed(), e.divergence.as_ref(), &e.loop_ms),
    };
    let (calls, checked, matched) = match graph {
        Some(g) => (
            g.plan.segments.iter().map(|s| s.calls.len() as u64).sum(),
            g.d2h_checked,
            g.d2h_matched,
        ),
        None => (e.calls, e.d2h_checked, e.d2h_matched),
    };
    json!({
        "schema": REPLAY_SCHEMA,
        "passed": passed,
        "mode": mode,
        "calls": calls,
        "loops": loop_ms.len().max(e.loops),
        "d2h_checked": checked,
        "d2h_matched": matched,
        "divergence": divergence,
        "faults": e.faults,
        "late_fault": e.late_fault,
        "stopped_at": e.stopped_at,
        "redzone_hits": e.redzone_hits.iter().map(|(seq, n)| json!({"seq": seq, "hits": n})).collect::<Vec<_>>(),
        "opaque_kernels": e.opaque_kernels,
        "opaque_calls": e.opaque_calls,
        "unchecked": e.unchecked,
        "not_checked": e.not_checked,
        "dump_reason": e.dump_reason,
        "skipped": e.skipped,
        "skipped_count": e.skipped_count,
        "begun_at": e.begun_at,
        "checked_nothing": graph.is_none() && e.checked_nothing(),
        "timing_ms": {
            "loops": loop_ms,
            "recorded": (graph.is_none() && !loop_ms.is_empty()).then_some(e.recorded_ms),
            "eager_step": graph.map(|g| &g.eager_step_ms),
            "graphs_only": graph.map(|g| &g.graphs_only_ms),
            "captured_eager": graph.map(|g| &g.captured_eager_ms),
            "per_call_us": e.per_call_us,
        },
        "graph": graph.map(|g| json!({
            "graphs": g.plan.graph_count(),
            "segments": g.plan.segments.len(),
            "breakers": g.plan.breakers,
        })),
    })
}
