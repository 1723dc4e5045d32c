//! The capture of a stream the trace gives no work, judged for the whole process in every
//! mode (`analyze --capture --stream S` where S has no work).

use super::*;

/// A capture of a stream the trace gives no work (an engine's capture stream whose captured
/// step was not recorded, the default stream while the work runs elsewhere), imagined in
/// progress over the whole range and judged in every mode: which of the process's calls, on
/// any stream or none, fail while it captures and so break it. On the driver, `alloc` during
/// a global capture fails from any thread (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), during a
/// thread-local one from the capturing thread, and in relaxed mode not at all: the rule table
/// says so, and this asks it.
#[derive(Clone, Debug, Serialize)]
pub struct IdleCapture {
    pub stream: String,
    pub stream_kind: &'static str,
    /// One entry per capture mode, global first.
    pub modes: Vec<IdleVerdicts>,
}

/// What breaks an idle stream's capture in one mode.
#[derive(Clone, Debug, Serialize)]
pub struct IdleVerdicts {
    pub mode: &'static str,
    /// The calls that fail while the stream captures (thread-local: each as if its thread
    /// began the capture; another thread's call is tolerated).
    pub breakers: Vec<CaptureVerdict>,
}

/// The capture `q` asks about, if its stream is one the trace does no work on in the range:
/// judged in every mode (see `IdleCapture`). `None` for a stream with work, or none named.
pub fn idle_capture(t: &Trace, q: CaptureQuery) -> Option<IdleCapture> {
    let stream = q.stream?;
    if has_work(t, stream, q.range) {
        return None;
    }
    let modes = CaptureMode::ALL
        .iter()
        .map(|&mode| IdleVerdicts {
            mode: mode.name(),
            breakers: verdicts(t, CaptureQuery { mode, ..q }, CaptureThread::EachCall)
                .into_iter()
                .filter(|v| v.category == "fails")
                .collect(),
        })
        .collect();
    Some(IdleCapture {
        stream: stream.to_string(),
        stream_kind: q.kind.name(),
        modes,
    })
}

impl IdleCapture {
    /// Each mode's breakers, grouped by site as the single-mode report groups them.
    pub fn render(&self) -> String {
        let mut s = format!(
            "capture of {} ({} stream): the trace does no work on {}; while it captures, the process's calls that make it fail:\n",
            self.stream, self.stream_kind, self.stream
        );
        for m in &self.modes {
            let whose = if m.mode == "thread-local" {
                " (a capture begun on the calling thread; another thread's calls are tolerated)"
            } else {
                ""
            };
            if m.breakers.is_empty() {
                s.push_str(&format!("  {} mode{whose}: nothing\n", m.mode));
                continue;
            }
            s.push_str(&format!(
                "  {} mode{whose}: {} call(s)\n",
                m.mode,
                m.breakers.len()
            ));
            s.push_str(&grouped(m.breakers.iter(), "    "));
        }
        s
    }
}
