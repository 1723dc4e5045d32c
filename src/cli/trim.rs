//! `gputape trim`: a long recording cut to the calls that matter, starting from the device
//! state the calls before them left, so the cut replays on its own. That state comes from a
//! replay, which on the mock needs every kernel's CPU body: an engine's own kernels have one
//! only in a tool built with its modules (`cli::main_with`).

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::common::{open_trace, parse_range, print_json, write_trace_atomically};
use super::{Ctx, Exit};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// The trace to cut.
    trace: PathBuf,
    /// The calls to keep, A..B (B exclusive; `A..` to the end).
    #[arg(long, value_parser = parse_range, required_unless_present = "checkpoint", conflicts_with = "checkpoint")]
    range: Option<(u64, u64)>,
    /// Begin instead at a flight dump's later checkpoint K (0 for the first `gputape show`
    /// lists): the dump holds its state, so nothing is replayed and no backend is needed;
    /// the captures of graphs launched after it are kept.
    #[arg(long, value_name = "K")]
    checkpoint: Option<usize>,
    /// Where to write the cut trace.
    #[arg(short, long)]
    output: PathBuf,
    /// The backend that replays the calls before A.
    #[arg(long, value_enum, default_value_t = Backend::Mock)]
    on: Backend,
    /// Print a summary as JSON (schema gputape.trim.v1).
    #[arg(long)]
    json: bool,
    /// Leave the module images out of the cut (names, parameter layouts and calls kept): a
    /// trace to share without the vendors' kernels it ran (cuBLAS's, PyTorch's). Every verb
    /// but a replay of those kernels reads it.
    #[arg(long)]
    drop_images: bool,
}

/// `trim --json`: what was kept, and the state it starts from.
#[derive(Serialize)]
struct Summary<'a> {
    schema: &'static str,
    trace: &'a Path,
    output: &'a Path,
    backend: &'static str,
    /// The calls kept, `[from, to)` of the original's numbering (`to` at most its end).
    from: u64,
    to: u64,
    /// Calls in the original, and in the cut (numbered from 0).
    calls: usize,
    kept: usize,
    /// The state at `from`: the cut's initial buffers and their bytes.
    initial_buffers: usize,
    initial_bytes: u64,
    /// The cut trace's size.
    bytes: u64,
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    match (a.checkpoint, a.range) {
        (Some(k), _) => at_checkpoint(ctx, &a.trace, k, (&a.output, a.drop_images), a.json)?,
        (None, Some(range)) => trim(
            ctx,
            &a.trace,
            range,
            (&a.output, a.drop_images),
            a.on,
            a.json,
        )?,
        (None, None) => anyhow::bail!("say where to cut: --range A..B or --checkpoint K"),
    }
    Ok(Exit::Pass)
}

/// `trim --checkpoint K`: the dump begun at its later checkpoint `k` (`Trace::rebased`).
fn at_checkpoint(ctx: &Ctx, path: &Path, k: usize, out: (&Path, bool), json: bool) -> Result<()> {
    let t = open_trace(ctx, path)?;
    let cut = t
        .rebased(k)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let from = t.restarts[k].first_seq;
    let to = t.calls.last().map_or(0, |c| c.seq + 1);
    let how = "none (the dump's own checkpoint)";
    write_cut((&t, path), cut, out, (how, from, to), json)
}

fn trim(
    ctx: &Ctx,
    path: &Path,
    range: (u64, u64),
    out: (&Path, bool),
    on: Backend,
    json: bool,
) -> Result<()> {
    let t = open_trace(ctx, path)?;
    let to = range.1.min(t.calls.last().map_or(0, |c| c.seq + 1));
    if range.0 == 0 {
        // Nothing before the cut to replay: the trace itself, its calls from B on left out
        // (no backend needed, so a trace of kernels the mock cannot run cuts too).
        let mut cut = t.clone();
        if cut.calls.iter().any(|c| c.seq >= range.1) {
            cut.calls.retain(|c| c.seq < range.1);
            cut.stopped = true;
        }
        return write_cut(
            (&t, path),
            cut,
            out,
            ("none (nothing before the cut)", 0, to),
            json,
        );
    }
    let o = backends::open(ctx, on, Want::replay())?;
    let load = |m: &crate::backend::ModuleCode| o.load_trace_code(m);
    let cut = crate::replayer::Replayer::new(&t).trim(o.gpu.as_ref(), range, Some(&load))?;
    write_cut((&t, path), cut, out, (on.name(), range.0, to), json)
}

/// Write `cut` of trace `t` (from `path`) to `out` (its module images left out when
/// `drop_images`), and say what it holds: `how` its state was had, and the calls `from..to`
/// of the original it keeps.
fn write_cut(
    (t, path): (&crate::trace::Trace, &Path),
    mut cut: crate::trace::Trace,
    (out, drop_images): (&Path, bool),
    (how, from, to): (&'static str, u64, u64),
    json: bool,
) -> Result<()> {
    if drop_images {
        cut.drop_module_images()?;
    }
    let bytes = write_trace_atomically(&cut, out)?;
    let s = Summary {
        schema: "gputape.trim.v1",
        trace: path,
        output: out,
        backend: how,
        from,
        to,
        calls: t.calls.len(),
        kept: cut.calls.len(),
        initial_buffers: cut.initial.len(),
        initial_bytes: cut.initial.iter().map(|i| i.bytes).sum::<u64>(),
        bytes,
    };
    report(&s, out, json)
}

/// What `trim` prints: the summary as JSON, or a line.
fn report(s: &Summary, out: &Path, json: bool) -> Result<()> {
    if json {
        return print_json(s);
    }
    println!(
        "kept calls {}..{} of {} as {} calls, starting from the state at #{} ({} buffers, {} bytes); wrote {} ({} bytes)",
        s.from,
        s.to,
        s.calls,
        s.kept,
        s.from,
        s.initial_buffers,
        s.initial_bytes,
        out.display(),
        s.bytes
    );
    Ok(())
}
