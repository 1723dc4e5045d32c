//! A replay in a child process, and what its end means. A fault that kills a CUDA context (an
//! illegal address) or a hang takes the process that replays with it, so such a replay runs
//! in a child the parent watches: the child writes its report to a file and, after each
//! call, the last call it finished (`PROGRESS_ENV`); the parent kills it past a deadline or,
//! for a hang's dump, once it has sat without progress where the recording hung for as long
//! as the recording had waited. A killed child is judged here (`HangVerdict`): a hang's dump
//! that blocks again inside its recorded window is the hang reproduced; any other trace, or
//! a replay blocked elsewhere, is not.
//!
//! Policy only: the command the child runs is the caller's (the CLI runs itself again).

use crate::analysis::window::{fault_windows, stuck_at};
use crate::trace::{render_call, Trace};
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The file a child replay writes its last finished call's seq into (8 bytes, overwritten).
pub const PROGRESS_ENV: &str = "GPUTAPE_REPLAY_PROGRESS_FILE";

/// How long a replay in a child may take before it counts as hung: ten times the recorded
/// wall time plus a minute (setup, restores and a cold start included); for a hang's dump,
/// which is expected to hang, twice the recorded time plus ten seconds; or
/// `GPUTAPE_REPLAY_DEADLINE_S`.
pub fn deadline(t: &Trace) -> Duration {
    if let Some(s) = std::env::var("GPUTAPE_REPLAY_DEADLINE_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
    {
        return Duration::from_secs_f64(s.min(1e9));
    }
    let (times, slack) = if t.is_hang_dump() { (2, 10) } else { (10, 60) };
    Duration::from_nanos(t.recorded_span_ns().saturating_mul(times)) + Duration::from_secs(slack)
}

/// For a hang's dump: how long the replay may sit without progress, once it is blocked where
/// the recording was, before it counts as the same hang: as long as the recording had waited
/// when it was dumped (at least a second), or two seconds where the dump does not say (one
/// taken by a signal, on request or at a peer's word, with a call in flight). `None` for
/// other traces: they run to the deadline.
pub fn stall_limit(t: &Trace) -> Option<Duration> {
    if !t.is_hang_dump() {
        return None;
    }
    let waited = t
        .dump
        .as_ref()
        .and_then(|d| d.hang_waited_s())
        .unwrap_or(2.0);
    Some(Duration::from_secs_f64(waited.clamp(1.0, 1e9)))
}

/// Where a hang's dump hung: the first call of the last fault window (the launches since the
/// last sync that returned, through the call that never did).
fn hang_window_start(t: &Trace) -> u64 {
    fault_windows(t).last().map_or(0, |w| w.start)
}

/// Whether a replay whose last finished call is `finished` waits inside the hang's window
/// or past the last call.
fn blocked_where_recorded(t: &Trace, finished: Option<u64>) -> bool {
    let from = hang_window_start(t);
    stuck_at(t, finished).0.is_none_or(|c| c.seq >= from)
}

/// Why a child replay was killed.
#[derive(Clone, Copy, Debug)]
pub enum Killed {
    /// It ran past the deadline.
    Deadline(Duration),
    /// A hang's dump: it made no progress for this long, blocked where the recording hung.
    Stalled(Duration),
}

/// A child replay that ended on its own.
#[derive(Debug)]
pub struct ChildRun {
    /// How the child exited.
    pub status: ExitStatus,
    /// What it wrote into its report file (`None`: it died first).
    pub report: Option<String>,
    /// CUDA's device-side assert lines on its stderr (one per failing thread), and the first.
    pub asserts: usize,
    /// The first of those lines.
    pub first_assert: Option<String>,
}

/// How a child replay ended.
#[derive(Debug)]
pub enum ChildOutcome {
    /// It exited on its own.
    Finished(ChildRun),
    /// Killed (and reaped) as hung, judged.
    Killed(HangVerdict),
}

/// Run `cmd` (a replay that writes its report to `report` and its progress to the file
/// `PROGRESS_ENV` names, both set here) under the deadline and stall limit of `t`. Its stderr
/// is passed on, with device-side assert lines past the third counted instead.
pub fn replay_in_child(mut cmd: Command, t: &Trace, dir: &Path) -> std::io::Result<ChildOutcome> {
    std::fs::create_dir_all(dir)?;
    let report = dir.join("report.json");
    let progress = dir.join("progress");
    std::fs::write(&progress, b"")?;
    let mut child = cmd
        .arg("--child-report")
        .arg(&report)
        .env(PROGRESS_ENV, &progress)
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let (mut asserts, mut first) = (0usize, None::<String>);
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(|l| l.ok())
        {
            if line.contains("Assertion") && line.contains("failed") {
                asserts += 1;
                first.get_or_insert_with(|| line.clone());
                if asserts > 3 {
                    continue;
                }
            }
            eprintln!("{line}");
        }
        (asserts, first)
    });
    let read_progress = || {
        std::fs::read(&progress)
            .ok()
            .and_then(|b| Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?)))
    };
    let (limit, stall) = (deadline(t), stall_limit(t));
    let t0 = Instant::now();
    let (mut seen, mut still_since) = (None, t0);
    let ended = loop {
        if let Some(s) = child.try_wait()? {
            break Ok(s);
        }
        let now = read_progress();
        if now != seen {
            (seen, still_since) = (now, Instant::now());
        }
        let stuck_as_recorded = stall.is_some_and(|s| {
            seen.is_some() && still_since.elapsed() >= s && blocked_where_recorded(t, seen)
        });
        let killed = match stall {
            Some(s) if stuck_as_recorded => Some(Killed::Stalled(s)),
            _ => (t0.elapsed() >= limit).then_some(Killed::Deadline(limit)),
        };
        if let Some(k) = killed {
            // Killed and reaped: no process, and so no CUDA context, is left behind.
            let _ = child.kill();
            let _ = child.wait();
            break Err(k);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (asserts, first_assert) = reader.join().unwrap_or((0, None));
    let text = std::fs::read_to_string(&report).ok();
    let finished = read_progress();
    std::fs::remove_dir_all(dir).ok();
    Ok(match ended {
        Ok(status) => ChildOutcome::Finished(ChildRun {
            status,
            report: text,
            asserts,
            first_assert,
        }),
        Err(killed) => ChildOutcome::Killed(HangVerdict::of(t, killed, finished)),
    })
}

/// A replay killed as hung, judged against what `t` recorded.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HangVerdict {
    /// Why it was killed.
    #[serde(skip)]
    pub killed: Killed,
    /// `t` is a hang's dump and the replay blocked inside its recorded window.
    pub reproduced: bool,
    /// The call the replay was blocked in (rendered).
    pub replay_blocked_in: Option<String>,
    /// The launches since the last completed wait: the hung kernel is among them.
    pub launches_not_known_complete: Vec<String>,
    /// Why the recording was dumped, for a hang's dump.
    pub recorded_reason: Option<String>,
    /// The calls that had not returned when it was dumped.
    pub recorded_in_flight: Vec<String>,
    /// A hang's dump whose replay blocked elsewhere than where it hung.
    pub blocked_elsewhere: bool,
}

impl HangVerdict {
    /// The verdict on a replay of `t` killed for `killed`, whose last finished call was
    /// `finished`.
    pub fn of(t: &Trace, killed: Killed, finished: Option<u64>) -> Self {
        let (blocked, launches) = stuck_at(t, finished);
        let hang = t.is_hang_dump();
        let inside = blocked_where_recorded(t, finished);
        let recorded = t.dump.as_ref().filter(|_| hang);
        // Inside a fault's window the replay syncs after each launch: stopped right after a
        // launch there, it waits in that sync, not in the call after it.
        let window = fault_windows(t).last().map_or(u64::MAX, |w| w.start);
        let after_launch = finished
            .and_then(|f| t.calls.iter().find(|c| c.seq == f))
            .filter(|c| c.seq >= window && c.call.launch().is_some());
        HangVerdict {
            killed,
            reproduced: hang && inside,
            replay_blocked_in: match after_launch {
                Some(c) => Some(format!(
                    "the sync after {} (the replay syncs after each launch of the hang's window)",
                    render_call(t, c)
                )),
                None => blocked.map(|c| render_call(t, c)),
            },
            launches_not_known_complete: launches.iter().map(|c| render_call(t, c)).collect(),
            recorded_reason: recorded.map(|d| d.reason.clone()),
            recorded_in_flight: recorded
                .map(|d| {
                    d.in_flight
                        .iter()
                        .filter_map(|(seq, _)| t.calls.iter().find(|c| c.seq == *seq))
                        .map(|c| render_call(t, c))
                        .collect()
                })
                .unwrap_or_default(),
            blocked_elsewhere: hang && !inside,
        }
    }

    /// The verdict as `replay --json` prints it.
    pub fn json(&self) -> serde_json::Value {
        let (deadline_s, stalled_s) = match self.killed {
            Killed::Deadline(d) => (Some(d.as_secs_f64()), None),
            Killed::Stalled(d) => (None, Some(d.as_secs_f64())),
        };
        let mut hang = serde_json::to_value(self).unwrap_or_default();
        hang["deadline_s"] = serde_json::json!(deadline_s);
        hang["stalled_s"] = serde_json::json!(stalled_s);
        serde_json::json!({
            "schema": super::REPLAY_SCHEMA,
            "passed": self.reproduced,
            "hang": hang,
        })
    }

    /// The verdict as `replay` prints it.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = match self.killed {
            Killed::Deadline(d) => writeln!(
                s,
                "HANG: the replay did not finish within {:.0} s and was killed",
                d.as_secs_f64()
            ),
            Killed::Stalled(d) => writeln!(
                s,
                "HANG: the replay made no progress for {:.1} s where the recording hung and was killed",
                d.as_secs_f64()
            ),
        };
        if let Some(b) = &self.replay_blocked_in {
            let _ = writeln!(s, "  the replay was blocked in: {b}");
        }
        if !self.launches_not_known_complete.is_empty() {
            let _ = writeln!(
                s,
                "  launches not known to have completed (the hung kernel is among them): {}",
                self.launches_not_known_complete.len()
            );
            for l in &self.launches_not_known_complete {
                let _ = writeln!(s, "    {l}");
            }
        }
        if let Some(r) = &self.recorded_reason {
            let _ = writeln!(s, "recorded: {r}");
            for c in &self.recorded_in_flight {
                let _ = writeln!(s, "  in flight when dumped: {c}");
            }
        }
        let _ = writeln!(
            s,
            "{}",
            if self.reproduced {
                "-> hang REPRODUCED"
            } else if self.blocked_elsewhere {
                "-> the replay blocked before the recorded hang's window: not reproduced"
            } else {
                "-> the recording did not hang here: not reproduced"
            }
        );
        s
    }
}

/// What a hang's dump whose replay ran to its end says: not reproduced, and why it could not
/// be where the launches of the recorded hang's window did not run (`opaque`: the kernels the
/// backend skipped, `module::name`, as the report lists them).
pub fn finished_hang(t: &Trace, opaque: &[String]) -> String {
    let start = hang_window_start(t);
    let skipped: Vec<String> = t
        .calls
        .iter()
        .filter(|c| c.seq >= start)
        .filter_map(|c| c.call.launch().map(|(k, _)| t.kernel_name(k)))
        .filter(|k| opaque.contains(k))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let hung = t
        .dump
        .as_ref()
        .and_then(|d| d.in_flight.first())
        .and_then(|(seq, _)| t.calls.iter().find(|c| c.seq == *seq))
        .map_or_else(|| "its last call".to_string(), |c| render_call(t, c));
    if skipped.is_empty() {
        format!(
            "the recording hung in {hung}; this replay ran to its end: the hang is NOT reproduced\n"
        )
    } else {
        format!(
            "the recording hung in {hung}; the launches of its window did not run on this backend ({} skipped: no CPU body here), so the hang cannot show: replay it --on cuda\n",
            skipped.join(", ")
        )
    }
}

/// In a child replay: after each call, the last call finished, into the file the parent
/// named (`PROGRESS_ENV`); `None` outside a child.
pub fn progress_writer() -> Option<impl Fn(u64)> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(std::env::var_os(PROGRESS_ENV)?)
        .ok()?;
    Some(move |seq: u64| {
        use std::os::unix::fs::FileExt;
        let _ = f.write_all_at(&seq.to_le_bytes(), 0);
    })
}
