//! What several verbs read and write the same way: ranges and streams on the command line,
//! traces opened with their blob store, files written whole or not at all, and the built-in
//! model's backend. Kept in one place so that `--range 10..` or a half-written output means
//! the same thing to every verb.

use anyhow::Result;
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::Ctx;

/// The model size `demo` and `record` use unless told.
pub const DEFAULT_CONFIG: &str = "default";

/// `A..B`, `A..` or `..B` (B exclusive).
pub fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("{s:?} is not a range like 10..200"))?;
    let a = if a.is_empty() {
        0
    } else {
        a.parse().map_err(|e| format!("{a:?}: {e}"))?
    };
    let b = if b.is_empty() {
        u64::MAX
    } else {
        b.parse().map_err(|e| format!("{b:?}: {e}"))?
    };
    if a >= b {
        return Err(format!("empty range {s}"));
    }
    Ok((a, b))
}

/// `s1` or `1`.
pub fn parse_stream(s: &str) -> Result<u32, String> {
    s.strip_prefix('s')
        .unwrap_or(s)
        .parse()
        .map_err(|_| format!("{s:?} is not a stream (try `s1` or `1`)"))
}

/// Open a trace, looking for its stored blobs where `--blobs` says.
pub fn open_trace(ctx: &Ctx, path: &Path) -> Result<crate::trace::Trace> {
    if is_shim_log(path) {
        return open_shim_log(path);
    }
    Ok(crate::trace::Trace::open_with(path, ctx.blob_dir())?)
}

/// Whether `path` is a raw call log or flight dump of the driver shim (`.gtshm`, by its
/// magic, whatever its name): what `gputape run` converts, and what it leaves when it is
/// killed before converting.
fn is_shim_log(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|_| magic == gputape_shimlog::MAGIC)
}

/// A raw shim log converted in memory, as `gputape run` would have (a log cut short converts
/// up to the cut, as a trace does).
fn open_shim_log(path: &Path) -> Result<crate::trace::Trace> {
    let bytes = crate::shimtrace::read_log(path)?;
    let (trace, summary) =
        crate::shimtrace::convert(&path.display().to_string(), &bytes, Vec::new())?;
    tracing::info!("{} is a raw shim log: {}", path.display(), summary.text());
    Ok(trace)
}

/// Write `bytes` to `p`, or to stdout for `-`. True when a file was written (through a
/// temporary name, renamed when complete).
pub fn write_out(p: &Path, bytes: &[u8]) -> Result<bool> {
    if p == Path::new("-") {
        use std::io::Write;
        std::io::stdout().write_all(bytes)?;
        return Ok(false);
    }
    let tmp = temp_beside(p);
    std::fs::write(&tmp, bytes)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, p).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("cannot rename {} to {}: {e}", tmp.display(), p.display())
    })?;
    Ok(true)
}

/// Write `t` to `out` through a temporary name in the same directory, renamed when complete,
/// so a failure never leaves half a trace (or destroys the trace that was there).
pub fn write_trace_atomically(t: &crate::trace::Trace, out: &Path) -> Result<u64> {
    let bytes = t.to_bytes()?;
    write_out(out, &bytes)?;
    Ok(bytes.len() as u64)
}

/// Print a verb's `--json` document on stdout, pretty, as every verb prints its own.
pub fn print_json<T: serde::Serialize>(doc: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(doc)?);
    Ok(())
}

/// `--json` prints its document on stdout: an output sent there too (`-`) would mix with it.
pub fn stdout_free_for_json(json: bool, outputs: &[(&str, Option<&Path>)]) -> Result<()> {
    for (flag, p) in outputs {
        anyhow::ensure!(
            !(json && *p == Some(Path::new("-"))),
            "{flag} - and --json both write to stdout: give {flag} a file"
        );
    }
    Ok(())
}

/// `dir/name.TAG.ext` for `dir/name.ext`: one of several files made for one output (a
/// process's trace, a rank's).
pub fn with_tag(p: &Path, tag: &str) -> PathBuf {
    let mut name = p.file_stem().unwrap_or_default().to_os_string();
    name.push(format!(".{tag}"));
    if let Some(ext) = p.extension() {
        name.push(".");
        name.push(ext);
    }
    p.with_file_name(name)
}

/// A file removed when this is dropped, however the function that made it returns (a scratch
/// file an error must not leave in the user's directory).
pub struct Scratch(pub PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `dir/.name.partial-PID`, beside `out`.
pub fn temp_beside(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    out.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// The calls of steps `a..b` (as the engine marked them): from step a's boundary to step b's,
/// or to the end.
pub fn step_range(t: &crate::trace::Trace, (a, b): (u64, u64)) -> Result<(u64, u64)> {
    let marks: Vec<(u64, u64)> = t
        .calls
        .iter()
        .filter_map(|c| match c.call {
            crate::trace::Call::StepBoundary { step } => Some((step, c.seq)),
            _ => None,
        })
        .collect();
    anyhow::ensure!(
        !marks.is_empty(),
        "the trace marks no steps (its engine never called step_boundary): select calls instead (--range A..B for replay, --calls A..B for show)"
    );
    let start = marks.iter().find(|(s, _)| *s == a).map(|(_, q)| *q);
    let start = start.ok_or_else(|| {
        anyhow::anyhow!(
            "step {a} is not in the trace: it holds steps {}..={}",
            marks[0].0,
            marks[marks.len() - 1].0
        )
    })?;
    let end = marks
        .iter()
        .find(|(s, _)| *s >= b)
        .map_or(u64::MAX, |(_, q)| *q);
    Ok((start, end))
}

/// A `--range` that starts past the trace's last call is a usage error, not an empty answer.
pub fn check_range(t: &crate::trace::Trace, range: Option<(u64, u64)>) -> Result<()> {
    let (Some((a, _)), Some(last)) = (range, t.calls.last()) else {
        return Ok(());
    };
    anyhow::ensure!(
        a <= last.seq,
        "--range starts at #{a}, past the trace's last call #{}: the calls are #{}..#{}",
        last.seq,
        t.calls[0].seq,
        last.seq
    );
    Ok(())
}

/// `what: median ... over N run(s) (min, max)`, for replay timings.
pub fn timing_line(what: &str, ms: &[f64]) -> String {
    let mut v = ms.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    format!(
        "{what}: median {:.3} ms over {} run(s) (min {:.3}, max {:.3})\n",
        v[v.len() / 2],
        v.len(),
        v[0],
        v[v.len() - 1]
    )
}

/// The built-in model's size, by name.
pub fn model_config(name: &str) -> Result<crate::model::ModelConfig> {
    crate::model::ModelConfig::by_name(name)
        .ok_or_else(|| anyhow::anyhow!("unknown model config {name:?} (try `default` or `tiny`)"))
}

/// The fault `demo` and `record` can plant in the built-in model.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct FaultArgs {
    /// Plant the fault: at this step `silu_mul` writes past the end of its output.
    #[arg(long)]
    pub fault_step: Option<usize>,
    /// How far past the end, in floats: the default lands in a red zone; a large value
    /// (say 268435456) runs into unmapped memory and faults with an illegal address.
    #[arg(long, default_value_t = 16)]
    pub fault_overrun: u32,
}

impl FaultArgs {
    /// The plan, if a step was given.
    pub fn plan(self) -> Option<crate::model::FaultPlan> {
        self.fault_step.map(|step| crate::model::FaultPlan {
            step,
            overrun: self.fault_overrun,
        })
    }
}

/// The backend with the model's kernels. With a planted fault, red zones are switched on
/// where the backend has them (unless configured) so the overrun is caught at its write.
pub fn model_backend(ctx: &Ctx, b: Backend, fault: bool) -> Result<backends::Opened> {
    backends::open(
        ctx,
        b,
        Want {
            model: true,
            redzones: fault.then_some(256),
            ..Want::default()
        },
    )
}
