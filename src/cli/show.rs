//! `gputape show`: a trace as text (or JSON), the first thing to look at, so its filters
//! (`--calls`, `--steps`, `--kernel`, `--kind`) are the ones every other verb's output points
//! back to.

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::common::{check_range, open_trace, parse_range, step_range};
use super::{Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// The trace to print.
    trace: PathBuf,
    /// Only the summary.
    #[arg(long)]
    summary: bool,
    /// Only calls A..B.
    #[arg(long, value_parser = parse_range, conflicts_with = "steps")]
    calls: Option<(u64, u64)>,
    /// Only steps A..B, as the engine marked them (`step_boundary`).
    #[arg(long, value_parser = parse_range)]
    steps: Option<(u64, u64)>,
    /// Only launches of this kernel (`module::name`, or the name alone).
    #[arg(long)]
    kernel: Option<String>,
    /// Only calls of this kind (a trait method name: `launch_typed`, `copy_d2h`, ...).
    #[arg(long)]
    kind: Option<String>,
    /// Print as JSON (schema gputape.show.v1): the header and the calls shown.
    #[arg(long)]
    json: bool,
    /// Under each call, the Python stack it was made from (a `gputape run` recording of a
    /// Python program), innermost first; `>` marks the program's own line, the call's site.
    #[arg(long)]
    stacks: bool,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    show(
        ctx,
        &a.trace,
        a.summary,
        ShowFilter {
            calls: a.calls,
            steps: a.steps,
            kernel: a.kernel.as_deref(),
            kind: a.kind.as_deref(),
        },
        a.json,
        a.stacks,
    )?;
    Ok(Exit::Pass)
}

/// Which calls `show` prints.
struct ShowFilter<'a> {
    calls: Option<(u64, u64)>,
    /// Steps A..B: resolved to calls once the trace is open.
    steps: Option<(u64, u64)>,
    kernel: Option<&'a str>,
    kind: Option<&'a str>,
}

impl ShowFilter<'_> {
    fn any(&self) -> bool {
        self.calls.is_some() || self.kernel.is_some() || self.kind.is_some()
    }

    fn keeps(&self, t: &crate::trace::Trace, c: &crate::trace::CallRecord) -> bool {
        let (a, b) = self.calls.unwrap_or((0, u64::MAX));
        if c.seq < a || c.seq >= b || self.kind.is_some_and(|k| c.call.kind().name() != k) {
            return false;
        }
        match self.kernel {
            None => true,
            Some(k) => c.call.launch().is_some_and(|(id, _)| {
                let name = t.kernel_name(id);
                name == k || name.rsplit("::").next() == Some(k)
            }),
        }
    }
}

fn show(
    ctx: &Ctx,
    path: &Path,
    summary_only: bool,
    mut filter: ShowFilter<'_>,
    json: bool,
    stacks: bool,
) -> Result<()> {
    let t = open_trace(ctx, path)?;
    if let Some(s) = filter.steps.take() {
        filter.calls = Some(step_range(&t, s)?);
    }
    check_range(&t, filter.calls)?;
    if let Some(k) = filter.kind {
        let present: std::collections::BTreeSet<&str> =
            t.calls.iter().map(|c| c.call.kind().name()).collect();
        anyhow::ensure!(
            present.contains(k),
            "--kind {k}: no call of that kind in this trace (kinds present: {})",
            present.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    if json {
        let shown: Vec<serde_json::Value> = t
            .calls
            .iter()
            .filter(|c| filter.keeps(&t, c))
            .map(|c| {
                serde_json::json!({
                    "seq": c.seq,
                    "thread": c.thread,
                    "kind": c.call.kind().name(),
                    "kernel": c.call.launch().map(|(k, _)| t.kernel_name(k)),
                    "stream": named_stream(&c.call).map(|s| s.to_string()),
                    "call": crate::trace::call_text(&t, &c.call),
                    "ok": c.ret.as_ref().map(|r| r.is_ok()),
                    "error": c.ret.as_ref().and_then(|r| r.as_ref().err()).map(|e| serde_json::json!({"code": e.code, "message": e.message})),
                    "site": t.site(c.site),
                    "stack": t.stacks.get(&c.site).map(|s| serde_json::json!({
                        "frames": s.frames.iter().map(|f| serde_json::json!({"file": f.file, "function": f.function, "line": f.line, "col": f.col})).collect::<Vec<_>>(),
                        "user": s.user,
                        "script": s.script,
                    })),
                })
            })
            .collect();
        let h = t.header.as_ref();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gputape.show.v1",
                "header": {
                    "backend": h.map(|h| &h.backend),
                    "device": h.and_then(|h| h.device_name.as_ref()),
                    "driver_version": h.and_then(|h| h.driver_version),
                    "gputape": h.map(|h| &h.gputape),
                    "format": h.map(|h| h.format),
                    "recorded_at_unix_ms": t.provenance.as_ref().map(|p| p.unix_ms),
                    "recorded_at": t.provenance.as_ref().map(|p| p.recorded_at()),
                    "command_line": t.provenance.as_ref().map(|p| &p.command_line),
                    "pid": t.provenance.as_ref().map(|p| p.pid),
                    "host": t.provenance.as_ref().and_then(|p| p.host.as_ref()),
                },
                "dump": t.dump.as_ref().map(|d| serde_json::json!({"reason": d.reason, "in_flight": d.in_flight.iter().map(|(seq, thread)| serde_json::json!({"seq": seq, "thread": thread})).collect::<Vec<_>>()})),
                "later_checkpoints": t.restarts.iter().map(|r| serde_json::json!({"step": r.step, "first_seq": r.first_seq, "buffers": r.initial.len()})).collect::<Vec<_>>(),
                "calls_in_trace": t.calls.len(),
                "initial_buffers": t.initial.len(),
                "cut": t.cut.as_ref().map(|c| serde_json::json!({"offset": c.offset, "frames": c.frames, "reason": c.reason})),
                "calls": shown,
            }))?
        );
        return Ok(());
    }
    if let Some(h) = &t.header {
        println!(
            "recorded on {} {}{}, gputape {}, trace format {}",
            h.backend,
            h.device_name.as_deref().unwrap_or("(no device name)"),
            h.driver_version
                .map(|v| format!(", driver API {}.{}", v / 1000, (v % 1000) / 10))
                .unwrap_or_default(),
            h.gputape,
            h.format
        );
        match &t.provenance {
            Some(p) => println!(
                "recorded at {} by `{}` (pid {}{})",
                p.recorded_at(),
                p.command(),
                p.pid,
                p.host
                    .as_deref()
                    .map(|h| format!(" on {h}"))
                    .unwrap_or_default()
            ),
            None => println!(
                "recorded at: not stored (recorded in trace format {}, before it had provenance)",
                h.format
            ),
        }
        if let Some(d) = &t.dump {
            println!("flight dump: {}", d.reason);
            for (seq, thread) in &d.in_flight {
                println!("  in flight when dumped: call #{seq} on thread t{thread}");
            }
        }
        for r in &t.restarts {
            println!(
                "later checkpoint: step {}, before call #{} ({} buffers): a rank set's replay may begin there",
                r.step,
                r.first_seq,
                r.initial.len()
            );
        }
        println!(
            "columns: #seq, t<thread> (recording thread, in order of first call), call -> result, @ site"
        );
    }
    if !summary_only && !filter.any() && !stacks {
        print!("{}", crate::trace::render(&t));
        println!();
    } else if !summary_only {
        let mut n = 0;
        for c in t.calls.iter().filter(|c| filter.keeps(&t, c)) {
            println!("{}", crate::trace::render_call(&t, c));
            if stacks {
                print_stack(&t, c.site);
            }
            n += 1;
        }
        println!("({n} call(s) shown)\n");
    }
    print!("{}", crate::trace::summary(&t));
    if let Some(c) = t.unfinished() {
        println!(
            "the trace ends inside call #{} ({}) at {}",
            c.seq,
            c.call.kind().name(),
            t.site(c.site)
        );
    }
    Ok(())
}

/// A site's Python stack under its call, innermost first, `>` on the frame the site names.
fn print_stack(t: &crate::trace::Trace, site: crate::trace::SiteId) {
    let Some(s) = t.stacks.get(&site) else {
        return;
    };
    if s.frames.is_empty() {
        println!("        (a Python thread with no Python frame)");
    }
    let named = s.user.or(s.script).unwrap_or(0);
    for (i, f) in s.frames.iter().enumerate() {
        let mark = if i == usize::from(named) { '>' } else { ' ' };
        println!("      {mark} {f}");
    }
}

/// The stream a call queues work on, or else the one it names (a sync, a capture's ends).
fn named_stream(c: &crate::trace::Call) -> Option<crate::trace::StreamRef> {
    let mut named = None;
    c.operands(&mut |o| {
        if let crate::trace::Operand::Stream(s, _) = o {
            named = named.or(Some(*s));
        }
    });
    c.work_stream().or(named)
}
