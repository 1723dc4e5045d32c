//! A replay under NVIDIA's cuda-gdb (`replay --debug`): the user lands in the failing kernel
//! of a small repro instead of a whole server. A recorded fault needs nothing of ours: cuda-gdb
//! stops by itself at the device exception, in the kernel, at the faulting instruction. A
//! launch the user names (`--break-at N`) has no device event to stop at, so the replay stops
//! itself just before issuing it (a `SIGTRAP`, which a debugger takes as a stop), after saying
//! what the launch's arguments are as the trace names them; the debugger is then told to stop
//! at the next kernel launched, which is that one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::state::State;
use crate::trace::{Call, CallRecord, Trace};

/// Set in the replay the debugger runs, so that replay does not start a debugger again.
pub const ENV_UNDER_DEBUGGER: &str = "GPUTAPE_UNDER_DEBUGGER";

/// cuda-gdb: `CUDA_GDB`, else on `PATH`, else beside the CUDA toolkit (`CUDA_HOME`,
/// `/usr/local/cuda`). `None` when there is none.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUDA_GDB").map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let toolkit = [
        std::env::var_os("CUDA_HOME").map(PathBuf::from),
        Some(PathBuf::from("/usr/local/cuda")),
    ];
    on_path
        .into_iter()
        .chain(toolkit.into_iter().flatten().map(|d| d.join("bin")))
        .map(|d| d.join("cuda-gdb"))
        .find(|p| p.is_file())
}

/// The debugger's arguments before `--args COMMAND...`: run the replay, and when it stops
/// (a device exception, or our stop before `--break-at`'s launch: then on into that kernel)
/// show where. `batch`: print and exit (stdin is no terminal: a script or a log); otherwise
/// the user gets the prompt there.
pub fn args(break_at: Option<u64>, batch: bool) -> Vec<OsString> {
    let mut ex: Vec<&str> = vec![
        "set pagination off",
        "set confirm off",
        // Replays ask the driver things it answers with errors on purpose (each kernel's
        // parameter layout is probed until it says there is no more).
        "set cuda api_failures ignore",
        "run",
    ];
    if break_at.is_some() {
        ex.extend(["set cuda break_on_launch application", "continue"]);
    }
    ex.extend(["info cuda kernels", "bt 8", "x/4i $pc"]);
    let mut v: Vec<OsString> = vec!["-q".into()];
    if batch {
        v.push("-batch".into());
    }
    for e in ex {
        v.push("-ex".into());
        v.push(e.into());
    }
    v.push("--args".into());
    v
}

/// Just before call `c` (the launch `--break-at` names): says what it launches with, as the
/// trace names each argument and where the replay put it, then stops this process for the
/// debugger that runs it.
pub(crate) fn stop_before(t: &Trace, st: &State, c: &CallRecord) {
    eprintln!(
        "gputape: stopping before call #{} for the debugger: {}",
        c.seq,
        crate::trace::render_call(t, c)
    );
    if let Some((k, _)) = c.call.launch() {
        eprintln!("  kernel {}", t.kernel_name(k));
    }
    for b in buffers_of(&c.call) {
        if let Some((p, n)) = st.bufs.get(&b) {
            eprintln!("  {b} is at {:#x} here ({n} bytes)", p.0);
        }
    }
    eprintln!(
        "gputape: continuing stops in that kernel (cuda-gdb: set cuda break_on_launch application)"
    );
    // SAFETY: raise only sends this process a signal; a debugger running it stops there.
    unsafe { libc::raise(libc::SIGTRAP) };
}

/// The buffers a launch's arguments point into.
fn buffers_of(call: &Call) -> Vec<crate::trace::BufferId> {
    let mut v = Vec::new();
    if let Some((_, args)) = call.launch() {
        for a in args {
            for d in a.device_addrs() {
                if let crate::trace::DevAddr::Buf { buf, .. } = d {
                    if !v.contains(buf) {
                        v.push(*buf);
                    }
                }
            }
        }
    }
    v
}

/// Whether `path`'s trace can be debugged at `break_at`: that call is a launch.
pub fn check_break_at(t: &Trace, path: &Path, break_at: u64) -> anyhow::Result<()> {
    match t.calls.iter().find(|c| c.seq == break_at) {
        Some(c) if c.call.launch().is_some() => Ok(()),
        Some(c) => anyhow::bail!(
            "{}: call #{break_at} is {}, not a launch (--break-at names a launch to stop in)",
            path.display(),
            c.call.kind().name()
        ),
        None => anyhow::bail!(
            "{}: the trace has no call #{break_at} (its calls are #0..#{})",
            path.display(),
            t.calls.len()
        ),
    }
}
