//! Stream-capture emulation, in a room of its own because it is the mock's model of the
//! driver's capture rules: every call judged against the active captures through the same rule
//! table the offline analysis uses (`decide`), forks and joins tracked per stream, and a
//! capture ended into a graph of the work it collected.

use super::exec::Work;
use super::state::State;
use super::{MockError, MockGpuBackend, R};
use crate::backend::{
    decide, CallKind, CaptureContext, CaptureMode, CaptureOp, GraphHandle, Relation, Site,
    StreamKind, Verdict, LEGACY_STREAM,
};
use std::collections::BTreeSet;
use std::thread::ThreadId;

pub(crate) struct Capture {
    pub origin: u64,
    pub streams: BTreeSet<u64>,
    /// Streams that forked into the capture and have not been joined back into the origin.
    pub unjoined: BTreeSet<u64>,
    pub mode: CaptureMode,
    pub kind: StreamKind,
    pub thread: ThreadId,
    pub work: Vec<Work>,
    pub invalidated: Option<(u32, &'static str)>,
}

#[derive(Default, Clone, Copy)]
pub(crate) struct EventState {
    /// The capture (by origin stream) and stream it was last recorded in, if recorded in one.
    pub in_capture: Option<(u64, u64, usize)>,
    /// Under chaos, where it was last recorded outside a capture: (stream, items queued there
    /// before it), what a wait on it waits for.
    pub chaos_at: Option<(u64, u64)>,
}

impl MockGpuBackend {
    /// Judge `op` on `stream` (or on no stream) against every active capture. Returns the
    /// index of the capture the call belongs to when it is captured or joins one.
    pub(super) fn judge(
        st: &mut State,
        op: CaptureOp,
        stream: Option<u64>,
        name: &'static str,
        site: Site,
    ) -> R<Option<usize>> {
        let me = std::thread::current().id();
        let mut into = None;
        for i in 0..st.captures.len() {
            let c = &st.captures[i];
            let relation = match stream {
                None => Relation::NoStream,
                Some(s) if c.streams.contains(&s) => Relation::Capturing,
                Some(LEGACY_STREAM) => Relation::Legacy,
                Some(_) => Relation::Other,
            };
            if relation == Relation::Capturing {
                if let Some((_, _)) = c.invalidated {
                    return Err(MockError::Capture {
                        op: name,
                        site,
                        code: crate::backend::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                        rule: "capture-invalidated",
                        why: "an earlier call invalidated this capture",
                    });
                }
            }
            let ctx = CaptureContext {
                relation,
                kind: c.kind,
                mode: c.mode,
                same_thread: c.thread == me,
            };
            let rule = decide(op, ctx);
            match rule.verdict {
                Verdict::Captured | Verdict::Joins => into = Some(i),
                Verdict::Eager | Verdict::Host => {}
                Verdict::Fails { code, invalidates } => {
                    Self::note_beside(st, name, site);
                    if invalidates {
                        st.captures[i].invalidated = Some((code, rule.id));
                    }
                    return Err(MockError::Capture {
                        op: name,
                        site,
                        code,
                        rule: rule.id,
                        why: rule.why,
                    });
                }
            }
        }
        if into.is_none() && !st.captures.is_empty() {
            Self::note_beside(st, name, site);
        }
        Ok(into)
    }

    /// A call made while a capture runs, not captured into it (`calls_beside_captures`).
    fn note_beside(st: &mut State, name: &'static str, site: Site) {
        if st.beside_captures.len() < 4096 {
            st.beside_captures.push((name, site));
        }
    }

    pub(super) fn note_capture_op(st: &mut State, ci: usize, stream: u64) {
        *st.stream_ops.entry(stream).or_insert(0) += 1;
        let c = &mut st.captures[ci];
        if stream != c.origin {
            c.unjoined.insert(stream);
        }
    }

    pub(super) fn end_capture_inner(&self, stream: u64, site: Site) -> R<GraphHandle> {
        let mut st = self.state.lock();
        Self::tick(&mut st, CallKind::EndCapture, site)?;
        Self::check_stream(&st, stream, "end_capture", site)?;
        let Some(ci) = st.captures.iter().position(|c| c.origin == stream) else {
            if !st.captures.iter().any(|c| c.streams.contains(&stream)) {
                // Not a capturing stream: judged against the running captures first (the
                // legacy stream kills a blocking one), then refused on its own account.
                Self::judge(
                    &mut st,
                    CaptureOp::EndCapture,
                    Some(stream),
                    "end_capture",
                    site,
                )?;
            }
            if st.captures.iter().any(|c| c.streams.contains(&stream)) {
                return Err(MockError::Capture {
                    op: "end_capture",
                    site,
                    code: 903,
                    rule: "end-on-forked-stream",
                    why: "a capture must end on the stream that began it",
                });
            }
            let relation = if stream == LEGACY_STREAM {
                Relation::Legacy
            } else {
                Relation::Other
            };
            let rule = decide(
                CaptureOp::EndCapture,
                CaptureContext {
                    relation,
                    kind: self.cfg.stream_kind,
                    mode: self.cfg.capture_mode,
                    same_thread: true,
                },
            );
            return Err(capture_err("end_capture", site, rule));
        };
        let c = st.captures.remove(ci);
        for e in st.events.values_mut() {
            if e.in_capture.is_some_and(|(o, _, _)| o == c.origin) {
                e.in_capture = None;
            }
        }
        if let Some((code, rule)) = c.invalidated {
            return Err(MockError::Capture {
                op: "end_capture",
                site,
                code: crate::backend::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                rule,
                why: if code == crate::backend::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED {
                    "the capture was invalidated"
                } else {
                    "an earlier call inside the capture failed and invalidated it"
                },
            });
        }
        if !c.unjoined.is_empty() {
            return Err(MockError::Capture {
                op: "end_capture",
                site,
                code: crate::backend::CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
                rule: "end-unjoined",
                why:
                    "a stream forked into the capture was never joined back into the origin stream",
            });
        }
        let g = st.next_graph;
        st.next_graph += 1;
        st.graphs.insert(g, c.work);
        Ok(GraphHandle(g))
    }
}

pub(super) fn capture_err(
    op: &'static str,
    site: Site,
    rule: &'static crate::backend::CaptureRule,
) -> MockError {
    match rule.verdict {
        Verdict::Fails { code, .. } => MockError::Capture {
            op,
            site,
            code,
            rule: rule.id,
            why: rule.why,
        },
        _ => MockError::Invalid {
            op,
            site,
            detail: format!("rule {} does not fail", rule.id),
        },
    }
}
