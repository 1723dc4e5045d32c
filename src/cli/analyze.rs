//! `gputape analyze`: the offline analyses of `analysis`, with the capture in question named
//! on the command line and `--fail-on` turning findings into an exit status a CI job can gate
//! on.

use anyhow::Result;
use std::path::PathBuf;

use super::common::{check_range, open_trace, parse_range, parse_stream};
use super::{pass_if, Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// The trace to analyse.
    trace: PathBuf,
    /// The capture-legality section (for the capture described by --mode, --stream-kind,
    /// --stream, --range).
    #[arg(long)]
    capture: bool,
    /// The stream-capture mode to judge the capture in.
    #[arg(long, value_enum, default_value_t = Mode::Global)]
    mode: Mode,
    /// Whether the engine's streams are blocking (they synchronise with the legacy
    /// stream) or non-blocking.
    #[arg(long, value_enum, default_value_t = Kind::Blocking)]
    stream_kind: Kind,
    /// The stream that would begin the capture (`s1` or `1`); default: the stream with the
    /// most device work. A stream the trace does no work on is judged in every mode: which of
    /// the process's calls would break a capture of it in progress.
    #[arg(long, value_parser = parse_stream)]
    stream: Option<u32>,
    /// Calls A..B (default: all).
    #[arg(long, value_parser = parse_range)]
    range: Option<(u64, u64)>,
    /// The cross-stream race section.
    #[arg(long)]
    races: bool,
    /// The leak and use-after-free section.
    #[arg(long)]
    leaks: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Exit with 1 when any of these is found (comma-separated), for CI: `capture` (a call
    /// that fails or breaks the capture), `hazard` (a capture hazard), `race`, `leak`
    /// (leaks and use-after-free).
    #[arg(long, value_enum, value_delimiter = ',')]
    fail_on: Vec<FailOn>,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    let Args {
        trace,
        capture,
        mode,
        stream_kind,
        stream,
        range,
        races,
        leaks,
        json,
        fail_on,
    } = a;
    let t = open_trace(ctx, &trace)?;
    check_range(&t, range)?;
    if let Some(s) = stream {
        // A stream the trace does no work on is a fair question (what in the process would
        // break a capture of it: `analysis::idle_capture`); one it never names is a typo.
        let named = streams_named(&t);
        anyhow::ensure!(
            named.contains(&crate::trace::StreamId(s)),
            "--stream s{s}: the trace names no stream s{s} (its streams: {}; with work: {})",
            named
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            streams_with_work(&t)
        );
    }
    let q = capture_query(mode, stream_kind, stream, range);
    let all = !(capture || races || leaks);
    let sections = crate::analysis::Sections {
        capture: capture || all,
        races: races || all,
        leaks: leaks || all,
    };
    let r = crate::analysis::analyze(&t, q, sections);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gputape.analyze.v1",
                "report": r,
            }))?
        );
    } else {
        print!("{}", r.render());
    }
    let found: Vec<&str> = fail_on
        .iter()
        .filter(|f| f.found_in(&r))
        .map(|f| f.name())
        .collect();
    if !found.is_empty() {
        eprintln!("analyze --fail-on: found {}", found.join(", "));
    }
    Ok(pass_if(found.is_empty()))
}

/// What `analyze --fail-on` fails on.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FailOn {
    Capture,
    Hazard,
    Race,
    Leak,
}

impl FailOn {
    fn name(self) -> &'static str {
        match self {
            FailOn::Capture => "capture breakers",
            FailOn::Hazard => "capture hazards",
            FailOn::Race => "races",
            FailOn::Leak => "leaks or use-after-free",
        }
    }

    fn found_in(self, r: &crate::analysis::Report) -> bool {
        match self {
            FailOn::Capture => r.verdicts.iter().any(|v| v.category == "fails"),
            FailOn::Hazard => r.verdicts.iter().any(|v| v.category == "hazard"),
            FailOn::Race => !r.races.is_empty(),
            FailOn::Leak => r.lifetimes.iter().any(|l| l.is_problem()),
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Mode {
    Global,
    ThreadLocal,
    Relaxed,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Kind {
    Blocking,
    NonBlocking,
}

/// Every stream the trace names: adopted, returned by a call, or named by one.
fn streams_named(t: &crate::trace::Trace) -> std::collections::BTreeSet<crate::trace::StreamId> {
    use crate::trace::{Adopted, StreamRef, Value};
    let mut out = std::collections::BTreeSet::new();
    for a in &t.adopted {
        if let Adopted::Stream { id, .. } = a {
            out.insert(*id);
        }
    }
    for c in &t.calls {
        if let Some(Ok(Value::Stream(StreamRef::Id(id)))) = &c.ret {
            out.insert(*id);
        }
        if let (_, Some(StreamRef::Id(id))) = c.call.capture_op(&|_| false) {
            out.insert(id);
        }
    }
    out
}

fn streams_with_work(t: &crate::trace::Trace) -> String {
    let s: std::collections::BTreeSet<String> = t
        .calls
        .iter()
        .filter_map(|c| match c.call.work_stream() {
            Some(crate::trace::StreamRef::Id(id)) => Some(id.to_string()),
            _ => None,
        })
        .collect();
    s.into_iter().collect::<Vec<_>>().join(", ")
}

fn capture_query(
    mode: Mode,
    kind: Kind,
    stream: Option<u32>,
    range: Option<(u64, u64)>,
) -> crate::analysis::CaptureQuery {
    use crate::backend::{CaptureMode, StreamKind};
    crate::analysis::CaptureQuery {
        range: range.unwrap_or((0, u64::MAX)),
        stream: stream.map(|s| crate::trace::StreamRef::Id(crate::trace::StreamId(s))),
        mode: match mode {
            Mode::Global => CaptureMode::Global,
            Mode::ThreadLocal => CaptureMode::ThreadLocal,
            Mode::Relaxed => CaptureMode::Relaxed,
        },
        kind: match kind {
            Kind::Blocking => StreamKind::Blocking,
            Kind::NonBlocking => StreamKind::NonBlocking,
        },
    }
}
